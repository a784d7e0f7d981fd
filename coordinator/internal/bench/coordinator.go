package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// The coordinator scenario's result rows: a burst of independent nodes, and
// a chain (one node in flight at a time) for the unloaded latency.
const (
	resultCoordinator      = ScenarioCoordinator
	resultCoordinatorChain = ScenarioCoordinator + "-chain"
)

// responderHost is the host name the coordinator scenario's responder
// reports under.
const responderHost = "bench-responder"

// responder stands in for the workers in the coordinator scenario: it
// takes every agent job of the default pool off the bus and answers at
// once, started and succeeded with no patch, without a lease, a workspace
// or a process. Only the coordinator's scheduling, event log and fold are
// left to measure (and the NATS server's part in them).
type responder struct {
	b        *bus.Bus
	cc       jetstream.ConsumeContext
	answered atomic.Int64

	mu  sync.Mutex
	err error
}

// startResponder consumes agent jobs of the default pool until stop.
func startResponder(ctx context.Context, b *bus.Bus) (*responder, error) {
	cons, err := b.JobConsumer(ctx, protocol.KindAgent, protocol.DefaultPool)
	if err != nil {
		return nil, fmt.Errorf("responder: %w", err)
	}
	r := &responder{b: b}
	r.cc, err = cons.Consume(r.handle, jetstream.PullMaxMessages(500))
	if err != nil {
		return nil, fmt.Errorf("responder: %w", err)
	}
	return r, nil
}

// responderJob is the part of an agent job the responder reads. A worker
// reads the whole job strictly; the responder stands in for workers on
// other hosts, whose reading is not the coordinator's cost, so it reads
// only the fields it answers with, with the JSON library the protocol
// package reads jobs with (goccy/go-json).
type responderJob struct {
	JobID       string    `json:"job_id"`
	WorkflowID  string    `json:"workflow_id"`
	NodeID      string    `json:"node_id"`
	Attempt     int       `json:"attempt"`
	PublishedAt time.Time `json:"published_at"`
}

// handle answers one agent job: the started report and the result are
// published asynchronously (in order, on the workflow's results subject),
// then the job is acked.
func (r *responder) handle(msg jetstream.Msg) {
	var job responderJob
	err := json.Unmarshal(msg.Data(), &job)
	if err == nil && job.JobID == "" {
		err = errors.New("no job_id")
	}
	if err != nil {
		r.fail(fmt.Errorf("responder: malformed agent job: %w", err))
		_ = msg.Term()
		return
	}
	md, err := msg.Metadata()
	if err != nil {
		r.fail(fmt.Errorf("responder: job %s: %w", job.JobID, err))
		return
	}
	// One fencing token per delivery, like a lease taken anew.
	token := md.NumDelivered
	now := time.Now().UTC()
	started := &protocol.Report{Type: protocol.ReportStarted, Started: &protocol.Started{
		Kind: protocol.KindAgent, JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID,
		Attempt: job.Attempt, LeaseToken: token, Host: responderHost, Delivery: md.NumDelivered,
		PublishedAt: job.PublishedAt, StartedAt: now,
	}}
	result := &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID, Attempt: job.Attempt,
		LeaseToken: token, Host: responderHost, Status: protocol.AgentSucceeded,
		StartedAt: now, FinishedAt: time.Now().UTC(),
	}}
	for _, rep := range []struct {
		r  *protocol.Report
		id string
	}{
		{started, fmt.Sprintf("%s.started.%d", job.JobID, token)},
		{result, fmt.Sprintf("%s.result.%d.%d", job.JobID, token, md.NumDelivered)},
	} {
		if err := r.publish(rep.r, rep.id); err != nil {
			r.fail(err)
			_ = msg.Nak()
			return
		}
	}
	if err := msg.Ack(); err != nil {
		r.fail(fmt.Errorf("responder: ack job %s: %w", job.JobID, err))
		return
	}
	r.answered.Add(1)
}

// publish sends a report without waiting for the stream's ack (the
// publisher bounds how many are outstanding).
func (r *responder) publish(rep *protocol.Report, msgID string) error {
	data, err := protocol.Encode(rep)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: protocol.ResultSubject(rep.WorkflowID()), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := r.b.JS.PublishMsgAsync(m); err != nil {
		return fmt.Errorf("responder: publish %s report %s: %w", rep.Type, msgID, err)
	}
	return nil
}

func (r *responder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// stop stops consuming and returns the first error the responder met.
func (r *responder) stop() error {
	r.cc.Stop()
	select {
	case <-r.b.JS.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// runCoordinator measures the coordinator alone: a fleet of NATS and the
// coordinator, whose agent jobs the responder answers instantly. First
// --coordinator-nodes independent no-op tasks (no gates), split into
// workflows of at most MaxTasksPerWorkflow and submitted at once; then a
// chain of --chain tasks, one node in flight at a time, for the unloaded
// ready→started latency.
func (r *runner) runCoordinator(ctx context.Context) ([]Result, error) {
	fs, closeFleet, err := r.openFleetWith(ctx, "coordinator-fleet", "", true)
	if err != nil {
		return nil, err
	}
	defer closeFleet()
	resp, err := startResponder(ctx, fs.bus)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = resp.stop()
		}
	}()

	wctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	if _, err := fs.run(wctx, "bench-coordinator-warmup.yaml", workflowYAML("bench-coordinator-warmup", 1, false, false)); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	var files []workflowFile
	for i, size := range split(r.cfg.CoordinatorNodes) {
		name := fmt.Sprintf("bench-coordinator-%d", i+1)
		files = append(files, workflowFile{name + ".yaml", workflowYAML(name, size, false, false)})
	}
	burst, err := r.measureWorkflows(wctx, fs, resultCoordinator, r.cfg.CoordinatorNodes, files)
	if err != nil {
		return nil, err
	}
	burst.Description = fmt.Sprintf("independent no-op tasks, no gates; no worker: an in-process responder answers each agent job "+
		"at once (no lease, workspace or process); %d workflow(s)", len(files))
	chainFile := []workflowFile{{"bench-coordinator-chain.yaml", workflowYAML("bench-coordinator-chain", r.cfg.ChainNodes, true, false)}}
	chain, err := r.measureWorkflows(wctx, fs, resultCoordinatorChain, r.cfg.ChainNodes, chainFile)
	if err != nil {
		return nil, err
	}
	chain.Description = "the same responder; no-op tasks in a chain: one node in flight at a time"
	chain.Latency = "ready→started, unloaded"
	stopped = true
	if err := resp.stop(); err != nil {
		return nil, err
	}
	if n := resp.answered.Load(); n < int64(r.cfg.CoordinatorNodes+r.cfg.ChainNodes) {
		return nil, fmt.Errorf("the responder answered %d jobs, want at least %d", n, r.cfg.CoordinatorNodes+r.cfg.ChainNodes)
	}
	return []Result{burst, chain}, nil
}

// measureWorkflows validates files (count nodes in all) as the CLI does,
// submits them, and measures them from the first submit to the last
// workflow.finished; the full-path scenarios and the coordinator scenario
// share it.
func (r *runner) measureWorkflows(ctx context.Context, fs *fleetSession, name string, count int, files []workflowFile) (Result, error) {
	for _, f := range files {
		if _, err := workflow.Parse(f.name, f.yaml); err != nil {
			return Result{}, fmt.Errorf("generated workflow %s: %w", f.name, err)
		}
	}
	r.progress("%s: %d nodes in %d workflow(s)", name, count, len(files))
	mem := startMem()
	start := time.Now()
	ids := make([]string, 0, len(files))
	for _, f := range files {
		id, err := submit(ctx, fs.client, fs.repo, f.name, f.yaml)
		if err != nil {
			return Result{}, err
		}
		ids = append(ids, id)
	}
	end, err := fs.watcher.wait(ctx, ids)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	wall := end.Sub(start)
	memory := mem.stop(count, fs.watcher.settle)
	st, err := fs.watcher.collect(ids)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	if st.succeeded != count {
		return Result{}, fmt.Errorf("%s: %d of %d nodes succeeded", name, st.succeeded, count)
	}
	if wall <= 0 {
		return Result{}, errors.New(name + ": the workflows finished before they were submitted (clock)")
	}
	r.progress("%s: %d nodes in %.2fs", name, count, wall.Seconds())
	res := Result{
		Scenario: name, Unit: "node", Count: count, Workflows: len(ids),
		WallSeconds: wall.Seconds(), Throughput: float64(count) / wall.Seconds(),
		Latency: "ready→started", Memory: memory,
	}
	res.LatencyP50Micros, res.LatencyP99Micros = quantiles(st.nodeLatency)
	res.TurnaroundP50Micros, res.TurnaroundP99Micros = quantiles(st.turnaround)
	res.GateLatencyP50Micros, res.GateLatencyP99Micros = quantiles(st.gateLatency)
	res.RunP50Micros, res.RunP99Micros = quantiles(st.run)
	res.SettleP50Micros, res.SettleP99Micros = quantiles(st.settle)
	return res, nil
}
