// Package worker runs agent jobs: it pulls them from its pools, takes each
// job's lease, materializes the workspace at the base commit plus the
// patches the node depends on, runs one fresh agent process in the sandbox
// (the CLI invocation its adapter in shared/agentcli builds, or an old
// job's command), parses the CLI's output as it streams into log lines and
// live lines, and reports the patch it produced with what the CLI said
// about the run (AgentResult.Run).
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// DefaultResources are the default limits of an agent container (the
// worker's --sandbox-memory, --sandbox-cpus, --sandbox-pids).
var DefaultResources = sandbox.Resources{MemoryBytes: 4 << 30, CPUs: 2, Pids: 256}

// defaultPool is the pool of a worker without GPUs and without --pools.
const defaultPool = protocol.DefaultPool

// Config is a worker's own configuration.
type Config struct {
	// Pools the worker consumes agent jobs from, as given explicitly
	// (--pools); nil means the default: ["default"], or the GPU pools on a
	// worker with GPUs. See ResolvePools.
	Pools []string
	// GPUPools are the pools of tasks that need a GPU (default ["gpu"]): a
	// worker with GPUs (deps.Labels gpus=N) consumes them, one without
	// refuses to.
	GPUPools []string
	// Concurrency is how many agents run at once (default 1).
	Concurrency int
	// DrainTimeout bounds how long running agents may finish after a stop
	// signal before they are interrupted and their jobs handed back.
	DrainTimeout time.Duration
	// Credentials lists, per adapter, the variables holding its CLI's
	// provider keys that its agents get (nil: each adapter's own, see
	// agentcli.Credentials; an empty list: none). Their values come from
	// SecretsFile, else from the worker's environment.
	Credentials map[string][]string
	// SecretsFile, if set, is a KEY=VALUE file (mode 0600 or stricter)
	// of provider keys.
	SecretsFile string
}

// Worker pulls and runs agent jobs.
type Worker struct {
	deps    jobrun.Deps
	cfg     Config
	cancels jobrun.Cancels
	// creds hands agents their keys; credErr is why they could not be
	// loaded (Run fails with it).
	creds   *agentcli.Keys
	credErr error
}

// New creates a worker.
func New(deps jobrun.Deps, cfg Config) *Worker {
	if cfg.GPUPools == nil {
		cfg.GPUPools = []string{DefaultGPUPool}
	}
	w := &Worker{deps: deps, cfg: cfg}
	w.creds, w.credErr = agentcli.NewKeys(cfg.Credentials, cfg.SecretsFile)
	return w
}

// Run pulls jobs until ctx ends, then drains: running agents get up to
// DrainTimeout to finish, after which they are stopped and their jobs
// handed back to the queue. It returns once nothing is in flight. It
// fails at once if the worker's pools do not suit its GPUs (ResolvePools).
func (w *Worker) Run(ctx context.Context) error {
	if w.credErr != nil {
		return w.credErr
	}
	gpus, err := GPUCount(w.deps.Labels)
	if err != nil {
		return err
	}
	pools, err := ResolvePools(w.cfg.Pools, gpus, w.cfg.GPUPools)
	if err != nil {
		return err
	}
	if gpus > 0 {
		w.deps.Log.Info("worker has GPUs: taking jobs from the GPU pools", "gpus", gpus, "gpu", w.deps.Labels[LabelGPU],
			"pools", strings.Join(pools, ","))
	}
	if w.deps.Sandbox.Name() != "process" && len(w.deps.Network) == 0 {
		w.deps.Log.Warn("agents get no network: no egress allow-list (model APIs are unreachable)")
	}
	return jobrun.Serve(ctx, w.deps, &w.cancels, bus.PullOptions{
		Kind: protocol.KindAgent, Pools: pools, Concurrency: w.cfg.Concurrency, DrainTimeout: w.cfg.DrainTimeout,
	}, w.handle)
}

func (w *Worker) handle(ctx context.Context, d *bus.Delivery) bus.Disposition {
	var job protocol.AgentJob
	if err := protocol.Decode(d.Msg.Data(), &job); err != nil {
		w.deps.Log.ErrorContext(ctx, "dropping malformed agent job", "seq", d.StreamSeq, "err", err)
		return bus.Term("malformed agent job: " + err.Error())
	}
	meta := jobrun.Meta{Kind: protocol.KindAgent, JobID: job.JobID, WorkflowID: job.WorkflowID,
		NodeID: job.NodeID, Attempt: job.Attempt, PublishedAt: job.PublishedAt, Pool: job.Pool,
		Scopes:    jobrun.JobScopes{Work: agentScope(&job), Repo: protocol.RepoScope(job.Repo.ID)},
		FileLocks: job.FileLocks}
	return jobrun.Run(ctx, w.deps, &w.cancels, d, meta,
		func(ctx context.Context, token uint64) jobrun.Outcome { return w.run(ctx, &job, token) },
		func(token uint64, err error) *protocol.Report {
			return &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
				JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID, Attempt: job.Attempt,
				LeaseToken: token, Host: w.deps.Host, Status: protocol.AgentError, ExitCode: -1,
				Error: err.Error(), FinishedAt: time.Now().UTC(),
			}}
		})
}

// EnvFeedbackFile names the variable that carries, on a retry, the path of
// the failed round's feedback document (JSON) the agent may read.
const EnvFeedbackFile = "SUPERVISOR_FEEDBACK_FILE"

// run materializes the workspace, runs the agent and uploads its patch and
// log. For the breakers, a workspace that cannot be materialized (the
// bundle, a patch, git) is the repository's failure, but for dependencies
// whose patches do not apply together (dependenciesConflict); once it is, the
// repository worked, and the agent's verdict is its own (see finish).
func (w *Worker) run(ctx context.Context, job *protocol.AgentJob, token uint64) (out jobrun.Outcome) {
	logw := &jobrun.LogWriter{}
	logw.Printf("agent job %s on %s (lease %d)", job.JobID, w.deps.Host, token)
	pctx, span := telemetry.Start(ctx, jobrun.SpanWorkspace)
	ws, err := w.deps.Workspaces.Prepare(pctx, job.Repo, job.Patches, job.JobID)
	var conflict *workspace.PatchConflictError
	if errors.As(err, &conflict) {
		telemetry.End(span, err)
		return w.dependenciesConflict(ctx, job, token, conflict)
	}
	if err != nil {
		telemetry.End(span, err)
		return jobrun.Outcome{Err: fmt.Errorf("prepare workspace: %w", err), Repo: jobrun.Broke}
	}
	// Emptied once the result is reported.
	defer func() { out.After = jobrun.CloseAfter(ws, w.deps.Log) }()
	if job.StartFrom != nil {
		// A retry continues the previous attempt's work.
		if err := ws.ApplyWork(pctx, *job.StartFrom); err != nil {
			telemetry.End(span, err)
			return jobrun.Outcome{Err: fmt.Errorf("prepare workspace: %w", err), Repo: jobrun.Broke}
		}
		logw.Printf("starting from the previous attempt's patch %s", job.StartFrom.Object)
	}
	span.End()
	job, contextArtifact, stop := w.packContext(ctx, job, token, ws, logw)
	if stop != nil {
		return *stop
	}
	out = withContext(w.runAgent(ctx, job, token, ws, logw), contextArtifact)
	out.Repo = jobrun.Worked
	return out
}

// dependenciesConflict reports an agent job whose dependencies' patches do
// not apply together: the work it builds on cannot exist, whoever runs
// it, so it is not handed back to fail again until dead-lettered. The
// agent never ran: an error the coordinator escalates at once, naming the
// patch that did not apply, the nodes before it and git's account.
func (w *Worker) dependenciesConflict(ctx context.Context, job *protocol.AgentJob, token uint64, c *workspace.PatchConflictError) jobrun.Outcome {
	msg := "the dependencies' work does not apply together: " + c.Clash()
	w.deps.Log.WarnContext(ctx, "agent job's dependencies conflict", "job", job.JobID, "err", c)
	return jobrun.Outcome{Repo: jobrun.Worked, Report: &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID, Attempt: job.Attempt,
		LeaseToken: token, Host: w.deps.Host, Status: protocol.AgentError, ExitCode: -1,
		Error: msg, Stderr: c.Detail, FinishedAt: time.Now().UTC(),
	}}}
}

// runAgent runs the agent in the prepared workspace and uploads its patch
// and log.
func (w *Worker) runAgent(ctx context.Context, job *protocol.AgentJob, token uint64, ws *workspace.Workspace,
	logw *jobrun.LogWriter) jobrun.Outcome {

	env := jobrun.Env(w.jobEnv(job, logw), job.WorkflowID, job.NodeID, job.Attempt)
	env["SUPERVISOR_JOB_ID"] = job.JobID
	if len(job.Approvals) > 0 {
		// Who approved the work this job builds on, node by node.
		pairs := make([]string, 0, len(job.Approvals))
		for node, by := range job.Approvals {
			pairs = append(pairs, node+"="+by)
		}
		sort.Strings(pairs)
		env["SUPERVISOR_APPROVALS"] = strings.Join(pairs, ",")
	}
	var files []sandbox.File
	if len(job.Feedback) > 0 {
		// The failed round's feedback, beside the workspace (never in it, so
		// never in the patch), readable and not writable by the agent.
		path := ws.Dir + ".feedback.json"
		if err := os.WriteFile(path, job.Feedback, 0o444); err != nil {
			return jobrun.Outcome{Err: fmt.Errorf("write feedback: %w", err)}
		}
		defer os.Remove(path)
		files = append(files, sandbox.File{HostPath: path, Env: EnvFeedbackFile})
	}

	ar, err := invocation(job)
	if err != nil {
		// The spec asks for what the adapter cannot do: a fault of the
		// task's definition, which no redelivery fixes.
		logw.Printf("cannot build the agent's command: %v", err)
		adapter := ""
		if job.Agent != nil {
			adapter = job.Agent.Adapter
		}
		return w.finish(ctx, job, token, logw, protocol.AgentFailed, -1, sandbox.Result{}, nil, err.Error(), failedRun(adapter, err, w.creds.Scrub))
	}
	logw.Printf("running: %s", shownArgv(ar.argv, job.Prompt))
	var stdout io.Writer = logw
	var ev *eventLog
	if job.Agent != nil {
		w.addCredentials(env, job.Agent.Adapter, logw)
		ev = &eventLog{logw: logw, events: ar.adapter.Name() != "command", publish: w.liveLog(job), scrub: w.creds.Scrub}
		ar.stream = agentcli.NewStream(ar.adapter.NewParser(settings(job.Agent)), ev.emit)
		stdout = ar.stream
	}

	// The agent's CLI joins the trace as a child of the sandbox run.
	sctx, span := telemetry.Start(ctx, jobrun.SpanSandboxRun)
	for k, v := range agentTraceEnv(sctx, job) {
		env[k] = v
	}
	// Network: the egress proxy's allow-list (empty: no network at all).
	res, err := w.deps.Sandbox.Run(sctx, sandbox.Spec{
		Argv: ar.argv, Workspace: ws.Dir, Env: env, Files: files, Stdin: ar.stdin,
		Timeout: time.Duration(job.TimeoutSeconds) * time.Second, Stdout: stdout, Stderr: logw,
		Network: w.deps.Network,
		Labels: map[string]string{"job": job.JobID, "workflow": job.WorkflowID, "node": job.NodeID,
			"attempt": strconv.Itoa(job.Attempt)},
	})
	span.SetAttributes(attribute.Int("supervisor.exit_code", res.ExitCode), attribute.Bool("supervisor.timed_out", res.TimedOut))
	telemetry.End(span, err)
	if err != nil {
		if errors.Is(err, sandbox.ErrStart) || errors.Is(err, sandbox.ErrInvalidSpec) {
			// The command cannot run here at all: a real failure of the
			// task's definition, not something a redelivery fixes.
			logw.Printf("cannot start the agent: %v", err)
			var run *protocol.AgentRun
			if job.Agent != nil {
				run = failedRun(job.Agent.Adapter, err, w.creds.Scrub)
			}
			return w.finish(ctx, job, token, logw, protocol.AgentFailed, -1, sandbox.Result{}, nil, err.Error(), run)
		}
		return jobrun.Outcome{Err: fmt.Errorf("run agent: %w", err)}
	}
	var run *protocol.AgentRun
	var parsed agentcli.Result
	if ar.stream != nil {
		// The adapter's verdict: a CLI may exit 0 after a failed turn.
		parsed = ar.stream.Finish(res.ExitCode, res.Stderr)
		run = agentRunOf(parsed, w.creds.Scrub)
	}
	logw.Printf("agent exited %d after %s (timed out: %v)", res.ExitCode, res.Duration.Round(time.Millisecond), res.TimedOut)
	errText := ""
	if run != nil {
		sum := w.creds.Scrub(runSummary(parsed))
		logw.Printf("%s", sum)
		if ev.publish != nil {
			ev.publish(agentcli.Event{Kind: "summary", Text: sum})
		}
		if !parsed.Success && parsed.Adapter != "command" {
			// The CLI's account of the failure (the command adapter reads
			// none: its output tails say it).
			errText = run.Error
		}
	}
	status := protocol.AgentSucceeded
	switch {
	case res.TimedOut:
		status = protocol.AgentTimeout
	case res.ExitCode != 0 || (run != nil && !run.Success):
		status = protocol.AgentFailed
	}
	var patch *protocol.PatchRef
	if status == protocol.AgentSucceeded {
		// Bounded: git is stopped past the limit, so a huge change is
		// never held in memory.
		diff, err := ws.DiffLimit(ctx, protocol.MaxPatchBytes)
		if err != nil && !errors.Is(err, workspace.ErrDiffTooLarge) {
			return jobrun.Outcome{Err: fmt.Errorf("diff workspace: %w", err)}
		}
		switch {
		case err != nil:
			// Never uploaded: the round fails, and the agent hears why.
			errText = protocol.PatchTooLarge(-1)
			status = protocol.AgentFailed
			logw.Printf("%s", errText)
		case len(diff) > 0:
			name := fmt.Sprintf("%s/%s/a%d/%d.patch", job.WorkflowID, job.NodeID, job.Attempt, token)
			uctx, span := telemetry.Start(ctx, jobrun.SpanUpload, attribute.String("supervisor.object", name))
			patch, err = jobrun.UploadPatch(uctx, w.deps.Bus, job.NodeID, name, diff)
			telemetry.End(span, err)
			if err != nil {
				return jobrun.Outcome{Err: err}
			}
			logw.Printf("patch %s: %d bytes", name, len(diff))
		default:
			logw.Printf("the agent changed nothing")
		}
	}
	return w.finish(ctx, job, token, logw, status, res.ExitCode, res, patch, errText, run)
}

// finish uploads the log and builds the result. An agent that did not
// succeed (failed, timed out, or could not start) is a failure for its
// breaker.
func (w *Worker) finish(ctx context.Context, job *protocol.AgentJob, token uint64, logw *jobrun.LogWriter,
	status protocol.AgentStatus, exit int, res sandbox.Result, patch *protocol.PatchRef, errText string,
	run *protocol.AgentRun) jobrun.Outcome {
	logName := fmt.Sprintf("%s/%s/a%d/agent-%d.log", job.WorkflowID, job.NodeID, job.Attempt, token)
	uctx, span := telemetry.Start(ctx, jobrun.SpanUpload, attribute.String("supervisor.object", logName))
	err := jobrun.UploadLog(uctx, w.deps.Bus, logName, []byte(w.creds.Scrub(string(logw.Bytes()))))
	telemetry.End(span, err)
	if err != nil {
		return jobrun.Outcome{Err: err}
	}
	observeAgent(job, status, res)
	return jobrun.Outcome{Report: &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID, Attempt: job.Attempt,
		LeaseToken: token, Host: w.deps.Host, Status: status, ExitCode: exit,
		Stdout: w.creds.Scrub(string(res.Stdout)), Stderr: w.creds.Scrub(string(res.Stderr)), Patch: patch, Log: logName,
		Error:     w.creds.Scrub(errText),
		StartedAt: res.StartedAt.UTC(), FinishedAt: time.Now().UTC(), Sandbox: res.Environment, Run: run,
	}}, Work: agentVerdict(status)}
}

// agentVerdict is how an agent's status counts for its breaker.
func agentVerdict(st protocol.AgentStatus) jobrun.Verdict {
	switch st {
	case protocol.AgentSucceeded:
		return jobrun.Worked
	case protocol.AgentFailed, protocol.AgentTimeout:
		return jobrun.Broke
	}
	return jobrun.Unjudged
}
