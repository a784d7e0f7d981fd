// Package gaterunner runs gate jobs: it pulls them from its pools, takes
// each job's lease, materializes the base commit plus the node's patches in
// a fresh workspace, runs the gate command in the sandbox, and reports the
// gate's status (exit 0 passed, 75 pending, killed by the timeout timeout,
// anything else failed) with the tail of its output and the full log.
package gaterunner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
	"github.com/supervisorhq/supervisor/shared/sandbox"
)

// Config is a gate runner's own configuration.
type Config struct {
	// Pools the runner consumes gate jobs from (default ["default"]).
	Pools []string
	// Concurrency is how many gates run at once (default 1).
	Concurrency int
	// DrainTimeout bounds how long running gates may finish after a stop
	// signal before they are interrupted and their jobs handed back.
	DrainTimeout time.Duration
	// PollInterval is how long a pending gate (exit 75) waits before it is
	// run again (default 30 s, seed 004).
	PollInterval time.Duration
}

// Runner pulls and runs gate jobs.
type Runner struct {
	deps    jobrun.Deps
	cfg     Config
	cancels jobrun.Cancels
}

// New creates a gate runner.
func New(deps jobrun.Deps, cfg Config) *Runner {
	if len(cfg.Pools) == 0 {
		cfg.Pools = []string{protocol.DefaultPool}
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 30 * time.Second
	}
	return &Runner{deps: deps, cfg: cfg}
}

// Run pulls gate jobs until ctx ends, then drains like the worker does.
func (r *Runner) Run(ctx context.Context) error {
	return jobrun.Serve(ctx, r.deps, &r.cancels, bus.PullOptions{
		Kind: protocol.KindGate, Pools: r.cfg.Pools, Concurrency: r.cfg.Concurrency, DrainTimeout: r.cfg.DrainTimeout,
	}, r.handle)
}

func (r *Runner) handle(ctx context.Context, d *bus.Delivery) bus.Disposition {
	var job protocol.GateJob
	if err := protocol.Decode(d.Msg.Data(), &job); err != nil {
		r.deps.Log.Error("dropping malformed gate job", "seq", d.StreamSeq, "err", err)
		return bus.Term("malformed gate job: " + err.Error())
	}
	meta := jobrun.Meta{Kind: protocol.KindGate, JobID: job.JobID, WorkflowID: job.WorkflowID,
		NodeID: job.NodeID, Gate: job.Gate, Attempt: job.Attempt, PublishedAt: job.PublishedAt}
	return jobrun.Run(ctx, r.deps, &r.cancels, d, meta,
		func(ctx context.Context, token uint64) jobrun.Outcome { return r.run(ctx, &job, token) },
		func(token uint64, err error) *protocol.Report {
			return r.report(&job, token, protocol.GateError, nil, sandbox.Result{}, "", err.Error())
		})
}

func (r *Runner) report(job *protocol.GateJob, token uint64, st protocol.GateStatus, exit *int,
	res sandbox.Result, logName, errText string) *protocol.Report {
	return &protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID, Gate: job.Gate, Attempt: job.Attempt,
		LeaseToken: token, Host: r.deps.Host, Status: st, ExitCode: exit,
		Stdout: redact.String(string(res.Stdout)), Stderr: redact.String(string(res.Stderr)), Log: logName, Error: errText,
		StartedAt: res.StartedAt.UTC(), FinishedAt: time.Now().UTC(),
	}}
}

func (r *Runner) run(ctx context.Context, job *protocol.GateJob, token uint64) jobrun.Outcome {
	logw := &jobrun.LogWriter{}
	logw.Printf("gate %s for %s/%s attempt %d on %s (lease %d): %s", job.Gate, job.WorkflowID, job.NodeID,
		job.Attempt, r.deps.Host, token, strings.Join(job.Command, " "))
	ws, err := r.deps.Workspaces.Prepare(ctx, job.Repo, job.Patches, job.JobID)
	if err != nil {
		return jobrun.Outcome{Err: fmt.Errorf("prepare workspace: %w", err)}
	}
	defer ws.Close() //nolint:errcheck

	env := map[string]string{}
	for k, v := range job.Env {
		env[k] = v
	}
	env["SUPERVISOR_WORKFLOW_ID"] = job.WorkflowID
	env["SUPERVISOR_NODE_ID"] = job.NodeID
	env["SUPERVISOR_TASK_ID"] = job.NodeID
	env["SUPERVISOR_GATE_NAME"] = job.Gate
	env["SUPERVISOR_ATTEMPT"] = strconv.Itoa(job.Attempt)
	env["SUPERVISOR_REPO_ID"] = job.Repo.ID
	env["SUPERVISOR_REPO_PATH"] = ws.Dir

	logName := fmt.Sprintf("%s/%s/a%d/gate-%s-%d.log", job.WorkflowID, job.NodeID, job.Attempt, job.Gate, token)
	res, err := r.deps.Sandbox.Run(ctx, sandbox.Spec{
		Argv: job.Command, Workspace: ws.Dir, WorkingDir: job.WorkingDir, Env: env,
		Timeout: time.Duration(job.TimeoutSeconds) * time.Second, Stdout: logw, Stderr: logw,
		Labels: map[string]string{"workflow": job.WorkflowID, "node": job.NodeID, "gate": job.Gate, "attempt": strconv.Itoa(job.Attempt)},
	})
	var st protocol.GateStatus
	var exit *int
	errText := ""
	switch {
	case errors.Is(err, sandbox.ErrStart) || errors.Is(err, sandbox.ErrInvalidSpec):
		// A gate whose command cannot run fails: that is the gate's
		// definition, not an infrastructure fault a redelivery would fix.
		st, errText = protocol.GateFailed, err.Error()
		logw.Printf("cannot start the gate: %v", err)
	case err != nil:
		return jobrun.Outcome{Err: fmt.Errorf("run gate: %w", err)}
	default:
		st = protocol.GateStatusFromExit(res.ExitCode, res.TimedOut)
		if !res.TimedOut && res.Signal == "" {
			code := res.ExitCode
			exit = &code
		}
		logw.Printf("gate %s after %s: exit %d, status %s", job.Gate, res.Duration.Round(time.Millisecond), res.ExitCode, st)
	}
	if err := jobrun.UploadLog(ctx, r.deps.Bus, logName, logw.Bytes()); err != nil {
		return jobrun.Outcome{Err: err}
	}
	out := jobrun.Outcome{Report: r.report(job, token, st, exit, res, logName, errText)}
	if st == protocol.GatePending {
		out.Retry = r.cfg.PollInterval
	}
	return out
}
