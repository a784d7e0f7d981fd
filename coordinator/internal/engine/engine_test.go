package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/patchstat"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// These tests run the engine against a real embedded NATS server, the
// JetStream-KV state store and real git repositories. The test plays the
// runners: it takes jobs from SUP_JOBS through the same durable consumers
// workers and gate runners use, and answers with protocol.Reports published
// on SUP_RESULTS — the real wire protocol, nothing mocked.

var quiet = func() *slog.Logger {
	if os.Getenv("ENGINE_TEST_LOG") != "" { // debugging aid
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// env is one test's world: NATS, bus, state store, a user repository whose
// bundle is uploaded, and a coordinator data dir shared by successive
// engines.
type env struct {
	t       *testing.T
	b       *bus.Bus
	store   *kvstate.Store
	dataDir string
	repoDir string
	repo    protocol.RepoRef
	client  *api.Client
	ws      *workspace.Manager
	eng     *Engine
	stopEng func()
}

func newEnv(t *testing.T, cfg bus.Config) *env {
	t.Helper()
	// A real repository, bundled and uploaded as the CLI does before submit.
	f := jobruntest.OpenFleet(t, t.Name(), cfg)
	f.UploadRepo(map[string]string{"README.md": "base\n"})
	e := &env{t: t, b: f.Bus, store: f.Store, dataDir: t.TempDir(), repoDir: f.RepoDir, repo: f.Repo,
		client: &api.Client{NC: f.Bus.NC}}
	var err error
	if e.ws, err = workspace.NewManager(filepath.Join(t.TempDir(), "runner"), f.Bus.Bundles, f.Bus.Patches, quiet); err != nil {
		t.Fatal(err)
	}
	return e
}

// startOptions change what env.start starts.
type startOptions struct {
	now   func() time.Time // the engine's clock (default time.Now)
	gates *gates.Set       // the coordinator's own gate sources
	tick  time.Duration
	// notify receives the engine's notifications (nil: none).
	notify Notifier
	// log is the engine's logger (nil: quiet).
	log *slog.Logger
	// store is the engine's state store (nil: the env's).
	store state.Store
	// lostJobAfter is Options.LostJobAfter (0: its default).
	lostJobAfter time.Duration
	// roots are the engine's repo roots (nil: the temporary directory,
	// where the tests' repositories are).
	roots *reporoots.Roots
	// limits are the API's limits (the zero value: none).
	limits service.Limits
	// snapshotInterval and retainFinished are the Options' (0: their
	// defaults).
	snapshotInterval, retainFinished time.Duration
}

// samePatch reports whether a and b name the same patch object with the
// same content (their summaries are pointers, equal only in value).
func samePatch(a, b protocol.PatchRef) bool {
	return a.NodeID == b.NodeID && a.Object == b.Object && a.SHA256 == b.SHA256 && a.Size == b.Size
}

// tempRoots are repo roots that allow the tests' repositories, which are
// temporary directories.
func tempRoots(t testing.TB) reporoots.Roots {
	t.Helper()
	r, err := reporoots.New([]string{os.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs a new engine, serving the API, on the env's bus, store and
// data dir and waits until it is ready. Stopping it (env.stopEng, or the
// test's end) fails the test if Run returns an error or does not return.
func (e *env) start(opts ...startOptions) *Engine {
	e.t.Helper()
	var o startOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.tick == 0 {
		o.tick = 100 * time.Millisecond
	}
	if o.log == nil {
		o.log = quiet
	}
	var store state.Store = e.store
	if o.store != nil {
		store = o.store
	}
	if o.roots == nil {
		r := tempRoots(e.t)
		o.roots = &r
	}
	eng, err := New(e.b, store, Options{DataDir: e.dataDir, Tick: o.tick, LeaderTTL: 10 * time.Second, Log: o.log, Now: o.now,
		Notify: o.notify, LostJobAfter: o.lostJobAfter, RepoRoots: *o.roots,
		SnapshotInterval: o.snapshotInterval, RetainFinished: o.retainFinished})
	if err != nil {
		e.t.Fatal(err)
	}
	stop := runEngine(e.t, "engine", eng, service.New(eng, e.b, service.Options{Gates: o.gates, Log: o.log, RepoRoots: *o.roots, Limits: o.limits}))
	e.eng, e.stopEng = eng, stop
	return eng
}

// runEngine runs eng, serving the API through svc, and waits until it is
// ready. The returned stop, which the test's end runs too, cancels Run and
// fails the test if Run returns an error or does not return.
func runEngine(t *testing.T, name string, eng *Engine, svc *service.Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx, svc.Serve) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s Run: %v", name, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("%s Run did not return after cancel", name)
		}
	}
	t.Cleanup(stop)
	select {
	case <-eng.Ready():
	case err := <-done:
		done <- err // for stop
		t.Fatalf("%s Run returned before ready: %v", name, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s not ready", name)
	}
	return stop
}

func (e *env) submit(yaml string) string {
	e.t.Helper()
	res, err := e.client.Submit(testkit.Context(e.t, 20*time.Second), api.SubmitRequest{
		Filename: "wf.yaml", YAML: yaml, Repo: e.repo, RepoPath: e.repoDir})
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	return res.WorkflowID
}

// taken is a job the test runner took off the queue.
type taken struct {
	msg   jetstream.Msg
	agent *protocol.AgentJob
	gate  *protocol.GateJob
}

func (e *env) consumer(kind protocol.JobKind, pool string) jetstream.Consumer {
	e.t.Helper()
	c, err := e.b.JobConsumer(testkit.Context(e.t, 10*time.Second), kind, pool)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// next takes the next job of kind from pool, failing after timeout.
func (e *env) next(kind protocol.JobKind, pool string, timeout time.Duration) *taken {
	e.t.Helper()
	j := e.tryNext(kind, pool, timeout)
	if j == nil {
		e.t.Fatalf("no %s job on pool %s within %s", kind, pool, timeout)
	}
	return j
}

func (e *env) tryNext(kind protocol.JobKind, pool string, timeout time.Duration) *taken {
	e.t.Helper()
	msg, err := e.consumer(kind, pool).Next(jetstream.FetchMaxWait(timeout))
	if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("next %s job: %v", kind, err)
	}
	j := &taken{msg: msg}
	if kind == protocol.KindAgent {
		j.agent = &protocol.AgentJob{}
		err = protocol.Decode(msg.Data(), j.agent)
	} else {
		j.gate = &protocol.GateJob{}
		err = protocol.Decode(msg.Data(), j.gate)
	}
	if err != nil {
		e.t.Fatalf("decode %s job: %v", kind, err)
	}
	return j
}

// nextN takes the next n jobs of kind from the default pool, keyed by
// node (agent jobs) or by node/gate (gate jobs).
func (e *env) nextN(kind protocol.JobKind, n int) map[string]*taken {
	e.t.Helper()
	jobs := map[string]*taken{}
	for range n {
		j := e.next(kind, "default", 5*time.Second)
		if j.agent != nil {
			jobs[j.agent.NodeID] = j
		} else {
			jobs[j.gate.NodeID+"/"+j.gate.Gate] = j
		}
	}
	return jobs
}

// noJob fails if a job of kind is published on pool within wait.
func (e *env) noJob(kind protocol.JobKind, pool string, wait time.Duration, why string) {
	e.t.Helper()
	if j := e.tryNext(kind, pool, wait); j != nil {
		e.t.Fatalf("%s: unexpected %s job %s", why, kind, j.id())
	}
}

func (j *taken) id() string {
	if j.agent != nil {
		return j.agent.JobID
	}
	return j.gate.JobID
}

func (e *env) report(r *protocol.Report, msgID string) {
	e.t.Helper()
	if err := e.b.PublishReport(testkit.Context(e.t, 10*time.Second), r, msgID); err != nil {
		e.t.Fatalf("publish report: %v", err)
	}
}

// started reports that the runner took the job under lease token.
func (e *env) started(j *taken, token uint64) {
	e.t.Helper()
	s := &protocol.Started{JobID: j.id(), LeaseToken: token, Host: "test-runner", Delivery: 1, StartedAt: time.Now().UTC()}
	if j.agent != nil {
		s.Kind, s.WorkflowID, s.NodeID, s.Attempt, s.PublishedAt = protocol.KindAgent, j.agent.WorkflowID, j.agent.NodeID, j.agent.Attempt, j.agent.PublishedAt
	} else {
		s.Kind, s.WorkflowID, s.NodeID, s.Attempt, s.Gate, s.PublishedAt = protocol.KindGate, j.gate.WorkflowID, j.gate.NodeID, j.gate.Attempt, j.gate.Gate, j.gate.PublishedAt
	}
	e.report(&protocol.Report{Type: protocol.ReportStarted, Started: s}, fmt.Sprintf("%s.started.%d", j.id(), token))
}

// agentDone reports the agent's result and acks the job, as a worker does.
func (e *env) agentDone(j *taken, token uint64, st protocol.AgentStatus, patch *protocol.PatchRef) {
	e.t.Helper()
	a := j.agent
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: a.JobID, WorkflowID: a.WorkflowID, NodeID: a.NodeID, Attempt: a.Attempt, LeaseToken: token,
		Host: "test-runner", Status: st, Patch: patch, StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(),
	}}, fmt.Sprintf("%s.result.%d.1", a.JobID, token))
	if err := j.msg.Ack(); err != nil {
		e.t.Fatal(err)
	}
}

// gateDone reports a gate's result and acks the job, as a gate runner does.
func (e *env) gateDone(j *taken, token uint64, st protocol.GateStatus) {
	e.t.Helper()
	g := j.gate
	exit := 0
	if st != protocol.GatePassed {
		exit = 1
	}
	e.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: g.JobID, WorkflowID: g.WorkflowID, NodeID: g.NodeID, Gate: g.Gate, Attempt: g.Attempt,
		LeaseToken: token, Host: "test-runner", Status: st, ExitCode: &exit,
		StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(),
	}}, fmt.Sprintf("%s.result.%d.1.%s", g.JobID, token, st))
	if err := j.msg.Ack(); err != nil {
		e.t.Fatal(err)
	}
}

// makePatch does an agent's work for real: see work; it writes one file.
func (e *env) makePatch(j *taken, file, content string) *protocol.PatchRef {
	e.t.Helper()
	return e.work(j, map[string]string{file: content})
}

// work does an agent's work for real, as a worker does: it prepares the
// job's workspace (base commit plus dependency patches), applies the
// previous attempt's patch uncommitted when the job starts from one (a
// retry), writes files and uploads the diff, which then holds the previous
// attempt's work and this one's.
func (e *env) work(j *taken, files map[string]string) *protocol.PatchRef {
	e.t.Helper()
	ctx := testkit.Context(e.t, 30*time.Second)
	w, err := e.ws.Prepare(ctx, j.agent.Repo, j.agent.Patches, j.agent.JobID)
	if err != nil {
		e.t.Fatalf("prepare workspace for %s: %v", j.agent.JobID, err)
	}
	defer w.Close()
	if j.agent.StartFrom != nil {
		if err := w.ApplyWork(ctx, *j.agent.StartFrom); err != nil {
			e.t.Fatalf("start %s from %s: %v", j.agent.JobID, j.agent.StartFrom.Object, err)
		}
	}
	for file, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(w.Dir, file)), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.Dir, file), []byte(content), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	patch, err := w.Diff(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	name := fmt.Sprintf("%s/%s/a%d.patch", j.agent.WorkflowID, j.agent.NodeID, j.agent.Attempt)
	if _, err := e.b.Patches.PutBytes(ctx, name, patch); err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256(patch)
	// Summarized as the runners do (jobrun), which the coordinator's
	// trusted-configuration check reads.
	return &protocol.PatchRef{NodeID: j.agent.NodeID, Object: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(patch)),
		Stat: patchstat.Parse(patch).Summary()}
}

// settle waits until the coordinator has folded (and acked) every report
// published so far: SUP_RESULTS is a work queue, so acked reports leave it.
func (e *env) settle() {
	e.t.Helper()
	ctx := testkit.Context(e.t, 10*time.Second)
	s, err := e.b.JS.Stream(ctx, protocol.StreamResults)
	if err != nil {
		e.t.Fatal(err)
	}
	for {
		info, err := s.Info(ctx)
		if err != nil {
			e.t.Fatalf("reports not folded: %v", err)
		}
		if info.State.Msgs == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// node returns a copy of a node's state, read under the engine's lock.
func (e *env) node(wf, id string) statemachine.Node {
	e.t.Helper()
	var n *statemachine.Node
	var copied statemachine.Node
	e.eng.Read(func(s *statemachine.State) {
		if w, ok := s.Workflow(wf); ok {
			if n = w.Nodes[id]; n != nil {
				copied = *n
			}
		}
	})
	if n == nil {
		e.t.Fatalf("workflow %s has no node %s", wf, id)
	}
	return copied
}

// gate returns a copy of a gate's state, read under the engine's lock.
func (e *env) gate(wf, node, name string) statemachine.GateRun {
	e.t.Helper()
	var g *statemachine.GateRun
	var copied statemachine.GateRun
	e.eng.Read(func(s *statemachine.State) {
		if w, ok := s.Workflow(wf); ok && w.Nodes[node] != nil {
			if g = w.Nodes[node].Gates[name]; g != nil {
				copied = *g
			}
		}
	})
	if g == nil {
		e.t.Fatalf("%s/%s has no gate %s", wf, node, name)
	}
	return copied
}

// deadLetter hands the engine a dead letter as its advisory consumer does.
func (e *env) deadLetter(d *protocol.DeadLetter) error {
	e.t.Helper()
	ctx := testkit.Context(e.t, 10*time.Second)
	r := &protocol.Report{V: protocol.Version, Type: protocol.ReportDeadLetter, DeadLetter: d}
	return e.eng.queues.Do(ctx, d.WorkflowID, func() error { return e.eng.handleReport(ctx, r) })
}

func (e *env) status(wf string) api.WorkflowSummary {
	e.t.Helper()
	s, err := e.client.Status(testkit.Context(e.t, 10*time.Second), wf)
	if err != nil {
		e.t.Fatalf("status %s: %v", wf, err)
	}
	return s
}

func nodeOf(s api.WorkflowSummary, id string) api.NodeSummary {
	for _, n := range s.Nodes {
		if n.ID == id {
			return n
		}
	}
	return api.NodeSummary{}
}

func gateOf(n api.NodeSummary, name string) api.GateSummary {
	for _, g := range n.Gates {
		if g.Name == name {
			return g
		}
	}
	return api.GateSummary{}
}

func (e *env) waitNode(wf, id string, want protocol.NodeStatus) api.NodeSummary {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := nodeOf(e.status(wf), id)
		if n.Status == want {
			return n
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %s is %q (%s), want %q", id, n.Status, n.Reason, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (e *env) waitWorkflow(wf string, want protocol.WorkflowStatus) api.WorkflowSummary {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := e.status(wf)
		if s.Status == want {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("workflow %s is %q (%s), want %q; nodes %+v", wf, s.Status, s.Reason, want, s.Nodes)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitEscalated waits until node id of wf escalates to a human (HITL-04)
// and checks what that means: escalated is not terminal, the workflow needs
// attention and has not finished.
func (e *env) waitEscalated(wf, id string) api.NodeSummary {
	e.t.Helper()
	n := e.waitNode(wf, id, protocol.NodeEscalated)
	if s := e.status(wf); s.Status != protocol.WorkflowNeedsAttention || s.FinishedAt != nil {
		e.t.Fatalf("workflow with %s escalated is %s (finished %v), want needs_attention", id, s.Status, s.FinishedAt)
	}
	return n
}

// reject has a human reject an escalated node through the API (HITL-01)
// and checks the node failed, naming who rejected it and why.
func (e *env) reject(wf, node, reason string) api.WorkflowSummary {
	e.t.Helper()
	s, err := e.client.Reject(testkit.Context(e.t, 20*time.Second),
		api.DecisionRequest{WorkflowID: wf, NodeID: node, By: "ops", Reason: reason})
	if err != nil {
		e.t.Fatalf("reject %s/%s: %v", wf, node, err)
	}
	if n := nodeOf(s, node); n.Status != protocol.NodeFailed || n.Reason != "rejected by ops: "+reason {
		e.t.Fatalf("%s after the rejection: %s (%q), want failed (%q)", node, n.Status, n.Reason, "rejected by ops: "+reason)
	}
	return s
}

// count returns the messages on subject in stream.
func (e *env) count(stream, subject string) uint64 {
	e.t.Helper()
	ctx := testkit.Context(e.t, 5*time.Second)
	s, err := e.b.JS.Stream(ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// events returns the workflow's event log, in order, each event with its
// message's sequence and its place in it.
func (e *env) events(wf string) []eventlog.Event {
	e.t.Helper()
	ctx := testkit.Context(e.t, 10*time.Second)
	cons, err := e.b.JS.OrderedConsumer(ctx, protocol.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{protocol.EventSubject(wf)}})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []eventlog.Event
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(300 * time.Millisecond))
		if err != nil {
			return out
		}
		evs, err := eventlog.DecodeAll(msg.Data())
		if err != nil {
			e.t.Fatal(err)
		}
		md, err := msg.Metadata()
		if err != nil {
			e.t.Fatal(err)
		}
		for i := range evs {
			evs[i].Seq, evs[i].Index = md.Sequence.Stream, i
		}
		out = append(out, evs...)
		if md.NumPending == 0 {
			return out
		}
	}
}

func countEvents(evs []eventlog.Event, typ eventlog.Type, node string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type() == typ && ev.NodeID == node {
			n++
		}
	}
	return n
}

// agentCmd is the defaults' agent, and allows a round without a change:
// most tests' fake agents make none, which is beside their point.
const agentCmd = "agent: {command: [fake-agent]}\n  allow_empty: true\n"

// DAG-05: a node becomes ready only when every dependency succeeded, so a
// diamond's join is published after both branches; gates are dispatched
// only once the agent succeeded, in dependency layers (test after vet).
// Accepted patches flow to dependents and onto the workflow branch.
func TestDiamondRunsInDependencyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: diamond
defaults:
  ` + agentCmd + `gates:
  - name: vet
    command: [go, vet, ./...]
  - name: test
    command: [go, test, ./...]
    depends_on: [vet]
tasks:
  - id: a
    prompt: write a
    gates: [test]
  - id: b
    prompt: write b
    gates: []
  - id: c
    prompt: write c
    depends_on: [a, b]
    gates: []
`)
	// a and b are ready at once; c is not.
	jobs := e.nextN(protocol.KindAgent, 2)
	if jobs["a"] == nil || jobs["b"] == nil {
		t.Fatalf("first agent jobs = %v, want a and b", jobs)
	}
	if j := jobs["a"].agent; j.JobID != protocol.AgentJobID(wf, "a", 1) || j.Attempt != 1 || j.Prompt != "write a" ||
		j.Repo != e.repo || len(j.Patches) != 0 || j.Agent == nil || j.Agent.Command[0] != "fake-agent" || j.PublishedAt.IsZero() {
		t.Errorf("agent job a = %+v", j)
	}
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "c before a and b")

	e.started(jobs["a"], 1)
	e.started(jobs["b"], 2)
	e.waitNode(wf, "a", protocol.NodeRunning)
	e.noJob(protocol.KindGate, "default", 200*time.Millisecond, "gates before the agent succeeded")

	// b has no gates: it succeeds on its agent's result; c still waits on a.
	e.agentDone(jobs["b"], 2, protocol.AgentSucceeded, e.makePatch(jobs["b"], "b.txt", "from b\n"))
	e.waitNode(wf, "b", protocol.NodeSucceeded)
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "c with a still running")

	// a's gates: vet first, test only after vet passed.
	e.agentDone(jobs["a"], 1, protocol.AgentSucceeded, e.makePatch(jobs["a"], "a.txt", "from a\n"))
	e.waitNode(wf, "a", protocol.NodeGating)
	vet := e.next(protocol.KindGate, "default", 5*time.Second)
	// The gate runs on a's ancestors' accepted patches (none) plus a's own;
	// b is not an ancestor of a.
	if vet.gate.Gate != "vet" || vet.gate.JobID != protocol.GateJobID(wf, "a", 1, "vet", 1) || len(vet.gate.Patches) != 1 ||
		vet.gate.Patches[0].NodeID != "a" {
		t.Fatalf("first gate job = %+v, want vet on a's patch", vet.gate)
	}
	e.noJob(protocol.KindGate, "default", 300*time.Millisecond, "test before vet passed")
	e.started(vet, 3)
	e.gateDone(vet, 3, protocol.GatePassed)
	test := e.next(protocol.KindGate, "default", 5*time.Second)
	if test.gate.Gate != "test" {
		t.Fatalf("second gate job = %s, want test", test.gate.Gate)
	}
	e.noJob(protocol.KindAgent, "default", 200*time.Millisecond, "c before a's gates passed")
	e.started(test, 4)
	e.gateDone(test, 4, protocol.GatePassed)
	e.waitNode(wf, "a", protocol.NodeSucceeded)

	// c now runs on top of both accepted patches, in integration order.
	c := e.next(protocol.KindAgent, "default", 5*time.Second)
	if c.agent.NodeID != "c" || len(c.agent.Patches) != 2 || c.agent.Patches[0].NodeID != "b" || c.agent.Patches[1].NodeID != "a" {
		t.Fatalf("third agent job = %+v, want c on b's and a's patches", c.agent)
	}
	e.started(c, 5)
	e.agentDone(c, 5, protocol.AgentSucceeded, e.makePatch(c, "c.txt", "from c\n"))
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if s.Head == "" || s.Head == e.repo.BaseCommit || s.ResultBundle == "" || s.Counts["succeeded"] != 3 {
		t.Errorf("finished workflow = %+v", s)
	}
	if g := gateOf(nodeOf(s, "a"), "test"); g.Status != protocol.GatePassed || g.Host != "test-runner" {
		t.Errorf("gate test of a = %+v", g)
	}
	if _, err := e.b.Bundles.GetInfo(testkit.Context(t, 5*time.Second), s.ResultBundle); err != nil {
		t.Errorf("result bundle: %v", err)
	}
	// The branch landed in the submitting repository with every node's work.
	if got := testkit.Git(t, e.repoDir, "rev-parse", "refs/heads/"+s.Branch); got != s.Head {
		t.Errorf("branch %s in the repository = %s, want %s", s.Branch, got, s.Head)
	}
	for f, want := range map[string]string{"a.txt": "from a", "b.txt": "from b", "c.txt": "from c", "README.md": "base"} {
		if got := testkit.Git(t, e.repoDir, "show", s.Head+":"+f); got != want {
			t.Errorf("%s on the branch = %q, want %q", f, got, want)
		}
	}
	if n := strings.Count(testkit.Git(t, e.repoDir, "log", "--format=%s", s.Branch), "\n") + 1; n != 4 {
		t.Errorf("branch has %d commits, want base + 3", n)
	}
}

// A failing gate ends its node's round: the gate that depends on it is
// skipped, an independent gate still runs. With no attempt left
// (max_attempts: 1, S-7) the node escalates at once (HITL-04) naming the
// failed gate, the workflow needs attention and the dependents wait; once a
// human rejects it (HITL-01) the node fails, its dependents are skipped and
// the workflow fails.
func TestFailingGateEscalatesNodeAndRejectSkipsDependents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: failing
defaults:
  ` + agentCmd + `  max_attempts: 1
gates:
  - name: vet
    command: [go, vet]
  - name: test
    command: [go, test]
    depends_on: [vet]
  - name: lint
    command: [lint]
    pool: lint
tasks:
  - id: a
    prompt: a
    gates: [test, lint]
  - id: d
    prompt: d
    depends_on: [a]
    gates: []
  - id: e
    prompt: e
    depends_on: [d]
    gates: []
`)
	a := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(a, 1)
	e.agentDone(a, 1, protocol.AgentSucceeded, nil)

	vet := e.next(protocol.KindGate, "default", 5*time.Second)
	lint := e.next(protocol.KindGate, "lint", 5*time.Second) // layer 0 alongside vet
	if vet.gate.Gate != "vet" || lint.gate.Gate != "lint" {
		t.Fatalf("layer-0 gates = %s, %s", vet.gate.Gate, lint.gate.Gate)
	}
	e.started(vet, 2)
	e.gateDone(vet, 2, protocol.GateFailed)
	e.settle()
	e.noJob(protocol.KindGate, "default", 300*time.Millisecond, "test after vet failed")
	n := e.waitNode(wf, "a", protocol.NodeGating) // lint still running
	if g := gateOf(n, "test"); g.Status != protocol.GateSkipped {
		t.Errorf("gate test = %+v, want skipped", g)
	}
	if g := gateOf(n, "lint"); g.Status != "" {
		t.Errorf("gate lint = %+v, want still running", g)
	}

	e.started(lint, 3)
	e.gateDone(lint, 3, protocol.GatePassed)
	n = e.waitEscalated(wf, "a")
	if n.Reason != "1 of 1 attempts used (gates did not pass: vet failed)" || n.Attempt != 1 || n.MaxAttempts != 1 {
		t.Errorf("escalated a = attempt %d of %d, reason %q", n.Attempt, n.MaxAttempts, n.Reason)
	}
	s := e.status(wf)
	for _, id := range []string{"d", "e"} {
		if x := nodeOf(s, id); x.Status != protocol.NodePending {
			t.Errorf("%s while a is escalated = %+v, want pending", id, x)
		}
	}
	e.noJob(protocol.KindAgent, "default", 200*time.Millisecond, "a retry or a dependent of an escalated node")

	e.reject(wf, "a", "vet keeps failing")
	s = e.waitWorkflow(wf, protocol.WorkflowFailed)
	if d := nodeOf(s, "d"); d.Status != protocol.NodeSkipped || !strings.Contains(d.Reason, "dependency a failed") {
		t.Errorf("d = %+v", d)
	}
	if x := nodeOf(s, "e"); x.Status != protocol.NodeSkipped {
		t.Errorf("e = %+v", x)
	}
	if !strings.Contains(s.Reason, "a failed") || s.ResultBundle != "" {
		t.Errorf("workflow = %+v", s)
	}
	e.noJob(protocol.KindAgent, "default", 200*time.Millisecond, "dependents of a failed node")
}

// Q-3 fold priority (failed > pending > passed): a node whose gates are
// failed and pending ends its round at once, without waiting for the
// pending gate to resolve — with no attempt left (max_attempts: 1) it
// escalates (HITL-04), and fails when a human rejects it; a node whose
// gates are passed and pending keeps gating until the pending gate passes.
func TestGateFoldPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: fold
defaults:
  ` + agentCmd + `  max_attempts: 1
gates:
  - name: ci
    command: [wait-for-ci]
  - name: vet
    command: [go, vet]
tasks:
  - id: bad
    prompt: bad
    gates: [ci, vet]
  - id: good
    prompt: good
    gates: [ci, vet]
`)
	agents := e.nextN(protocol.KindAgent, 2)
	e.agentDone(agents["bad"], 1, protocol.AgentSucceeded, nil)
	e.agentDone(agents["good"], 2, protocol.AgentSucceeded, nil)
	gates := e.nextN(protocol.KindGate, 4)
	// ci reports pending (exit 75): the runner polls it again later.
	e.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: gates["bad/ci"].id(), WorkflowID: wf, NodeID: "bad", Gate: "ci", Attempt: 1, LeaseToken: 10,
		Status: protocol.GatePending}}, "bad-ci-poll-1")
	e.gateDone(gates["bad/vet"], 11, protocol.GateFailed)
	e.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: gates["good/ci"].id(), WorkflowID: wf, NodeID: "good", Gate: "ci", Attempt: 1, LeaseToken: 12,
		Status: protocol.GatePending}}, "good-ci-poll-1")
	e.gateDone(gates["good/vet"], 13, protocol.GatePassed)

	n := e.waitEscalated(wf, "bad")
	if g := gateOf(n, "ci"); g.Status != protocol.GatePending {
		t.Errorf("bad's ci = %+v, want pending", g)
	}
	if n.Reason != "1 of 1 attempts used (gates did not pass: vet failed)" {
		t.Errorf("bad's reason = %q", n.Reason)
	}
	e.settle()
	if st := e.node(wf, "good").Status; st != protocol.NodeGating {
		t.Fatalf("good with a pending gate is %s, want gating", st)
	}
	e.gateDone(gates["good/ci"], 14, protocol.GatePassed)
	e.waitNode(wf, "good", protocol.NodeSucceeded)
	// bad still waits for a human: the workflow cannot finish without one.
	if s := e.status(wf); s.Status != protocol.WorkflowNeedsAttention || nodeOf(s, "bad").Status != protocol.NodeEscalated {
		t.Fatalf("with good done and bad escalated: workflow %s, bad %s", s.Status, nodeOf(s, "bad").Status)
	}
	e.reject(wf, "bad", "vet failed")
	e.waitWorkflow(wf, protocol.WorkflowFailed)
}

// Q-3 step 2: a node without gates succeeds right after its agent; an
// agent failure ends the round without dispatching anything — with no
// attempt left (max_attempts: 1, S-7) the node escalates (HITL-04) and its
// dependent waits; rejected by a human (HITL-01), it fails and the
// dependent is skipped.
func TestNoGatesSucceedsOnAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit("name: nogates\ndefaults:\n  " + agentCmd + "tasks:\n  - id: only\n    prompt: hi\n")
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(j, 1)
	e.agentDone(j, 1, protocol.AgentSucceeded, nil)
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if n := nodeOf(s, "only"); n.Status != protocol.NodeSucceeded || n.Commit != e.repo.BaseCommit || len(n.Gates) != 0 {
		t.Errorf("node = %+v", n)
	}
	if s.Head != e.repo.BaseCommit {
		t.Errorf("head = %s, want the base (no patch)", s.Head)
	}
	// Delivered into the submitting repository, which has the base
	// commit: set there without the bundle (PERF-67).
	if got := testkit.Git(t, e.repoDir, "rev-parse", "refs/heads/"+s.Branch); got != e.repo.BaseCommit {
		t.Errorf("delivered branch %s at %s, want the base %s", s.Branch, got, e.repo.BaseCommit)
	}
	e.noJob(protocol.KindGate, "default", 200*time.Millisecond, "a node without gates")

	wf2 := e.submit("name: agentfails\ndefaults:\n  " + agentCmd + "  max_attempts: 1\ngates:\n  - name: vet\n    command: [vet]\n" +
		"tasks:\n  - id: x\n    prompt: x\n    gates: [vet]\n  - id: y\n    prompt: y\n    depends_on: [x]\n    gates: []\n")
	x := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(x, 1)
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: x.id(), WorkflowID: wf2, NodeID: "x", Attempt: 1, LeaseToken: 1, Status: protocol.AgentFailed,
		ExitCode: 3, Error: "boom"}}, "x-result")
	_ = x.msg.Ack()
	n := e.waitEscalated(wf2, "x")
	if n.Reason != "1 of 1 attempts used (agent failed (exit 3): boom)" {
		t.Errorf("reason = %q", n.Reason)
	}
	if y := nodeOf(e.status(wf2), "y"); y.Status != protocol.NodePending {
		t.Errorf("y while x is escalated = %+v, want pending", y)
	}
	e.reject(wf2, "x", "the agent cannot do it")
	e.waitNode(wf2, "y", protocol.NodeSkipped)
	e.waitWorkflow(wf2, protocol.WorkflowFailed)
	e.noJob(protocol.KindGate, "default", 200*time.Millisecond, "a node whose agent failed")
}

// Fencing: reports carry the runner's lease token; one from
// an older lease than the node's current one is ignored, one at or above it
// is accepted. Likewise for gates, and for other attempts.
func TestStaleReportsAreIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit("name: stale\ndefaults:\n  " + agentCmd + "gates:\n  - name: vet\n    command: [vet]\n" +
		"tasks:\n  - id: n\n    prompt: n\n    gates: [vet]\n")
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(j, 5)
	e.settle()
	if n := e.node(wf, "n"); n.Status != protocol.NodeRunning || n.LeaseToken != 5 {
		t.Fatalf("after started(5): %s token %d", n.Status, n.LeaseToken)
	}

	// A result under an older lease (a runner that lost its lease) is ignored.
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: j.id(), WorkflowID: wf, NodeID: "n", Attempt: 1, LeaseToken: 3, Status: protocol.AgentSucceeded}}, "old-result")
	// So are an older start, and reports about another attempt.
	e.started(j, 4)
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: j.id(), WorkflowID: wf, NodeID: "n", Attempt: 2, LeaseToken: 9, Status: protocol.AgentFailed}}, "other-attempt")
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: "x", WorkflowID: "wf-unknown", NodeID: "n", Attempt: 1, LeaseToken: 9, Status: protocol.AgentFailed}}, "unknown-wf")
	e.settle()
	if n := e.node(wf, "n"); n.Status != protocol.NodeRunning || n.LeaseToken != 5 || n.Agent != nil {
		t.Fatalf("after stale reports: %s token %d agent %+v", n.Status, n.LeaseToken, n.Agent)
	}
	if c := countEvents(e.events(wf), eventlog.TypeNodeAgentDone, "n"); c != 0 {
		t.Fatalf("stale result reached the event log (%d agent_done events)", c)
	}

	// The current lease's result is accepted.
	e.agentDone(j, 5, protocol.AgentSucceeded, nil)
	vet := e.next(protocol.KindGate, "default", 5*time.Second)
	e.started(vet, 7)
	e.settle()
	e.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: vet.id(), WorkflowID: wf, NodeID: "n", Gate: "vet", Attempt: 1, LeaseToken: 6, Status: protocol.GateFailed}}, "old-gate")
	e.settle()
	if g := e.gate(wf, "n", "vet"); g.Status != "" || g.LeaseToken != 7 {
		t.Fatalf("stale gate result folded: %+v", g)
	}
	e.gateDone(vet, 8, protocol.GatePassed) // a newer lease than the last start: accepted
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)

	// After the workflow finished, late reports change nothing.
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: j.id(), WorkflowID: wf, NodeID: "n", Attempt: 1, LeaseToken: 99, Status: protocol.AgentFailed}}, "late")
	e.settle()
	if n := e.node(wf, "n"); n.Status != protocol.NodeSucceeded {
		t.Fatalf("late report changed the node to %s", n.Status)
	}
}

// A job that exhausts MaxDeliver (every delivery handed back) produces a
// real max-deliveries advisory; the coordinator reads the job back from
// SUP_JOBS and removes it. No retry of the agent would get the job run, so
// the node escalates at once, attempts left or not (HITL-04), and its
// dependent waits; rejected by a human (HITL-01), it fails and the
// dependent is skipped.
func TestDeadLetteredAgentJobEscalatesNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{MaxDeliver: 2, AckWait: time.Second})
	e.start()
	wf := e.submit("name: dead\ndefaults:\n  " + agentCmd + "tasks:\n  - id: n\n    prompt: n\n  - id: after\n    prompt: a\n    depends_on: [n]\n")
	for i := 1; i <= 2; i++ {
		j := e.next(protocol.KindAgent, "default", 5*time.Second)
		if md, _ := j.msg.Metadata(); md.NumDelivered != uint64(i) {
			t.Fatalf("delivery %d numbered %d", i, md.NumDelivered)
		}
		if i == 1 {
			e.started(j, 1)
		}
		if err := j.msg.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	// The server notices the exhausted job when it would deliver it again,
	// that is when a runner asks for work, as runners always do.
	e.noJob(protocol.KindAgent, "default", 500*time.Millisecond, "a job past MaxDeliver")
	n := e.waitEscalated(wf, "n")
	if !strings.Contains(n.Reason, "dead-lettered after 2 deliveries") || !strings.Contains(n.Reason, protocol.AgentJobID(wf, "n", 1)) {
		t.Errorf("reason = %q", n.Reason)
	}
	if n.Attempt != 1 || n.MaxAttempts != protocol.DefaultMaxAttempts {
		t.Errorf("escalated at attempt %d of %d, want 1 of %d: a dead letter is not retried", n.Attempt, n.MaxAttempts, protocol.DefaultMaxAttempts)
	}
	if a := nodeOf(e.status(wf), "after"); a.Status != protocol.NodePending {
		t.Errorf("after while n is escalated = %+v, want pending", a)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.count(protocol.StreamJobs, protocol.AgentJobSubject("default")) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("dead-lettered job was not removed from the jobs stream")
		}
		time.Sleep(25 * time.Millisecond)
	}
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "a retry of a dead-lettered job")
	e.reject(wf, "n", "no runner can take it")
	e.waitNode(wf, "after", protocol.NodeSkipped)
	e.waitWorkflow(wf, protocol.WorkflowFailed)
}

// A dead letter for a gate job makes the gate an infrastructure error: the
// gate could not run, which no retry of the agent fixes, so the node
// escalates at once with attempts left (HITL-04), naming the gate; rejected
// by a human (HITL-01), it fails.
func TestDeadLetteredGateJobEscalatesNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit("name: deadgate\ndefaults:\n  " + agentCmd + "gates:\n  - name: vet\n    command: [vet]\n" +
		"tasks:\n  - id: n\n    prompt: n\n    gates: [vet]\n")
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.agentDone(j, 1, protocol.AgentSucceeded, nil)
	vet := e.next(protocol.KindGate, "default", 5*time.Second)
	dl, err := bus.DeadLetterFromJob(vet.msg.Headers().Get(protocol.HeaderKind), vet.msg.Data(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.deadLetter(dl); err != nil {
		t.Fatal(err)
	}
	n := e.waitEscalated(wf, "n")
	if g := gateOf(n, "vet"); g.Status != protocol.GateError {
		t.Errorf("vet = %+v, want error", g)
	}
	if !strings.HasPrefix(n.Reason, "gate vet could not run: ") || !strings.Contains(n.Reason, "vet error") {
		t.Errorf("reason = %q", n.Reason)
	}
	if n.Attempt != 1 || n.MaxAttempts != protocol.DefaultMaxAttempts {
		t.Errorf("escalated at attempt %d of %d, want 1 of %d", n.Attempt, n.MaxAttempts, protocol.DefaultMaxAttempts)
	}
	if r := e.gate(wf, "n", "vet").Result; r == nil || !strings.Contains(r.Error, "dead-lettered after 5 deliveries") {
		t.Errorf("vet result = %+v", r)
	}
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "a retry of a node whose gate could not run")
	e.reject(wf, "n", "the vet runner is down")
	e.waitWorkflow(wf, protocol.WorkflowFailed)
}

// Durability: the coordinator's state is the event log. A
// new engine on the same bus, store and data dir rebuilds it by replay,
// folds the reports sent while no coordinator ran, and finishes the
// workflow; a ready node's job is republished under the same Nats-Msg-Id,
// so it is not duplicated.
func TestRestartReplaysAndResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: restart
defaults:
  ` + agentCmd + `gates:
  - name: vet
    command: [vet]
tasks:
  - id: x
    prompt: x
    gates: [vet]
  - id: y
    prompt: y
    pool: other
    gates: []
  - id: z
    prompt: z
    depends_on: [x, y]
    gates: []
`)
	x := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(x, 1)
	e.waitNode(wf, "x", protocol.NodeRunning)
	e.waitNode(wf, "y", protocol.NodeReady) // published, nobody took it yet
	if c := e.count(protocol.StreamJobs, protocol.AgentJobSubject("other")); c != 1 {
		t.Fatalf("y's job: %d messages, want 1", c)
	}
	before := e.events(wf)
	xBefore, yBefore := e.node(wf, "x"), e.node(wf, "y")
	first := e.eng
	e.stopEng()

	// While no coordinator runs, x's runner finishes: the report waits in
	// SUP_RESULTS.
	xPatch := e.makePatch(x, "x.txt", "x\n")
	e.agentDone(x, 1, protocol.AgentSucceeded, xPatch)

	second := e.start()
	if second == first {
		t.Fatal("same engine")
	}
	// The new engine's state is the fold of the log: times and leases
	// recorded by the first engine are back.
	xAfter, yAfter := e.node(wf, "x"), e.node(wf, "y")
	if !xAfter.StartedAt.Equal(xBefore.StartedAt) || xAfter.Host != "test-runner" || xAfter.LeaseToken != 1 {
		t.Errorf("x after replay: started %v host %q token %d; before: started %v", xAfter.StartedAt, xAfter.Host, xAfter.LeaseToken, xBefore.StartedAt)
	}
	if !yAfter.ReadyAt.Equal(yBefore.ReadyAt) || yAfter.Attempt != 1 {
		t.Errorf("y after replay: ready %v attempt %d; before: ready %v", yAfter.ReadyAt, yAfter.Attempt, yBefore.ReadyAt)
	}
	after := e.events(wf)
	if len(after) < len(before) {
		t.Fatalf("event log shrank: %d → %d", len(before), len(after))
	}
	for _, c := range []struct {
		typ  eventlog.Type
		node string
	}{{eventlog.TypeWorkflowSubmitted, ""}, {eventlog.TypeNodeReady, "x"}, {eventlog.TypeNodeReady, "y"}, {eventlog.TypeNodeStarted, "x"}} {
		if n := countEvents(after, c.typ, c.node); n != 1 {
			t.Errorf("%d %s events for %q after the restart, want 1", n, c.typ, c.node)
		}
	}
	time.Sleep(300 * time.Millisecond) // a few ticks: republishing is harmless
	if c := e.count(protocol.StreamJobs, protocol.AgentJobSubject("other")); c != 1 {
		t.Fatalf("y's job after the restart: %d messages, want 1 (de-duplicated)", c)
	}

	// x's result, sent while the coordinator was down, is folded: x gates.
	vet := e.next(protocol.KindGate, "default", 5*time.Second)
	if vet.gate.NodeID != "x" || len(vet.gate.Patches) != 1 || !samePatch(vet.gate.Patches[0], *xPatch) {
		t.Fatalf("gate job = %+v", vet.gate)
	}
	e.started(vet, 2)
	e.gateDone(vet, 2, protocol.GatePassed)
	e.waitNode(wf, "x", protocol.NodeSucceeded)

	y := e.next(protocol.KindAgent, "other", 5*time.Second)
	if y.agent.NodeID != "y" {
		t.Fatalf("job on pool other = %s", y.id())
	}
	e.noJob(protocol.KindAgent, "other", 200*time.Millisecond, "y's job was duplicated")
	e.started(y, 3)
	e.agentDone(y, 3, protocol.AgentSucceeded, nil)
	z := e.next(protocol.KindAgent, "default", 5*time.Second)
	if z.agent.NodeID != "z" || len(z.agent.Patches) != 1 {
		t.Fatalf("z job = %+v", z.agent)
	}
	e.started(z, 4)
	e.agentDone(z, 4, protocol.AgentSucceeded, nil)
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if got := testkit.Git(t, e.repoDir, "show", s.Head+":x.txt"); got != "x" {
		t.Errorf("x.txt on the branch = %q", got)
	}

	// A third engine replays a finished workflow and does nothing more.
	n := len(e.events(wf))
	e.stopEng()
	e.start()
	if s := e.status(wf); s.Status != protocol.WorkflowSucceeded || s.Counts["succeeded"] != 3 {
		t.Errorf("after the second restart: %+v", s)
	}
	time.Sleep(300 * time.Millisecond)
	if m := len(e.events(wf)); m != n {
		t.Errorf("replaying a finished workflow appended %d events", m-n)
	}
}

// A coordinator whose event log was emptied (aged out by EventsMaxAge, or
// purged by an operator on a log made before purges were denied) after
// being used still starts. The test purges and deletes to empty it fast,
// so its log allows both (EventsMutable).
func TestReplayOfEmptiedLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{EventsMutable: true})
	e.start()
	wf := e.submit("name: gone\ndefaults:\n  " + agentCmd + "tasks:\n  - id: n\n    prompt: n\n")
	e.waitNode(wf, "n", protocol.NodeReady)
	e.stopEng()
	ctx := testkit.Context(t, 10*time.Second)
	s, err := e.b.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.start()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("start after a purge took %s", d)
	}
	if _, err := e.client.Status(ctx, wf); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("purged workflow: %v", err)
	}
	// And one whose last event was deleted: the log's last sequence is then
	// a deleted message.
	wf2 := e.submit("name: two\ndefaults:\n  " + agentCmd + "tasks:\n  - id: n\n    prompt: n\n")
	e.waitNode(wf2, "n", protocol.NodeReady)
	e.stopEng()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Append an event about an unknown workflow and delete it.
	seq, _, err := e.b.AppendEvent(ctx, eventlog.Event{WorkflowID: "wf-other", NodeID: "q", Body: eventlog.NodeReady{Attempt: 1}})
	if err != nil || seq <= info.State.LastSeq {
		t.Fatal(seq, err)
	}
	if err := s.DeleteMsg(ctx, seq); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	e.start()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("start with a deleted last event took %s", d)
	}
	if n := e.status(wf2); n.Status != protocol.WorkflowRunning {
		t.Errorf("workflow after replay: %+v", n)
	}
}

// Cancelling through the API cancels every unfinished node, finishes the
// workflow as cancelled and announces it on the cancel subject so runners
// stop its jobs. Reports arriving afterwards change nothing.
func TestCancelThroughAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit("name: cancel\ndefaults:\n  " + agentCmd + "tasks:\n  - id: a\n    prompt: a\n  - id: b\n    prompt: b\n    depends_on: [a]\n  - id: c\n    prompt: c\n")
	jobs := e.nextN(protocol.KindAgent, 2)
	e.started(jobs["a"], 1)
	e.waitNode(wf, "a", protocol.NodeRunning)

	sub, err := e.b.NC.SubscribeSync(protocol.CancelSubject(wf))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.b.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 10*time.Second)
	s, err := e.client.Cancel(ctx, wf)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if s.Status != protocol.WorkflowCancelled {
		t.Errorf("cancel reply: workflow %s", s.Status)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no announcement on %s: %v", protocol.CancelSubject(wf), err)
	}
	s = e.waitWorkflow(wf, protocol.WorkflowCancelled)
	for _, id := range []string{"a", "b", "c"} {
		if n := nodeOf(s, id); n.Status != protocol.NodeCancelled || n.Reason != "workflow cancelled" {
			t.Errorf("node %s = %+v", id, n)
		}
	}
	if s.Reason != "cancelled by request" || s.FinishedAt == nil {
		t.Errorf("workflow = %+v", s)
	}

	// The running agent's late result is ignored.
	e.agentDone(jobs["a"], 1, protocol.AgentSucceeded, nil)
	e.settle()
	if st := e.node(wf, "a").Status; st != protocol.NodeCancelled {
		t.Errorf("a after a late result: %s", st)
	}
	// Cancelling again conflicts; cancelling an unknown workflow is not found.
	var ae *api.Error
	if _, err := e.client.Cancel(ctx, wf); !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		t.Errorf("second cancel: %v", err)
	}
	if _, err := e.client.Cancel(ctx, "wf-nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("cancel of an unknown workflow: %v", err)
	}
}

// The API validates what it is given: an invalid workflow is a 422 with
// every problem positioned; an unknown workflow is a 404; a request naming
// a bundle that was not uploaded, or a short commit, is a 400.
func TestAPIValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	ctx := testkit.Context(t, 20*time.Second)

	_, err := e.client.Submit(ctx, api.SubmitRequest{Filename: "typos.yaml", Repo: e.repo, YAML: `name: typos
defaults: {agent: {command: [x]}}
tasks:
  - id: a
    prompt: Do the thing.
    dependson: [b]
  - id: b
    prompt: [not, a, string]
`})
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("invalid workflow: err = %v, want *api.Error", err)
	}
	if ae.Code != api.CodeInvalid || len(ae.Problems) < 2 {
		t.Fatalf("invalid workflow: code %d, problems %+v", ae.Code, ae.Problems)
	}
	lines := map[int]string{}
	for _, p := range ae.Problems {
		if p.File != "typos.yaml" || p.Line == 0 {
			t.Errorf("problem without a position: %+v", p)
		}
		lines[p.Line] = p.Message
	}
	if !strings.Contains(lines[6], "dependson") || lines[8] == "" {
		t.Errorf("problems by line = %v, want lines 6 (dependson) and 8 (prompt)", lines)
	}
	if !strings.Contains(err.Error(), "typos.yaml:6") {
		t.Errorf("error text %q lacks the position", err)
	}

	_, err = e.client.Submit(ctx, api.SubmitRequest{Filename: "bad.yaml", Repo: e.repo, YAML: "name: [unclosed\n"})
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalid || len(ae.Problems) == 0 || ae.Problems[0].Line == 0 {
		t.Errorf("YAML syntax error: %v (%+v)", err, ae)
	}

	good := "name: ok\ndefaults:\n  " + agentCmd + "tasks:\n  - id: a\n    prompt: a\n"
	missing := e.repo
	missing.Bundle = "r-none/none.bundle"
	if _, err := e.client.Submit(ctx, api.SubmitRequest{Filename: "ok.yaml", YAML: good, Repo: missing}); !errors.As(err, &ae) ||
		ae.Code != api.CodeBadRequest || !strings.Contains(ae.Description, "upload it") {
		t.Errorf("missing bundle: %v", err)
	}
	short := e.repo
	short.BaseCommit = short.BaseCommit[:12]
	if _, err := e.client.Submit(ctx, api.SubmitRequest{Filename: "ok.yaml", YAML: good, Repo: short}); !errors.As(err, &ae) ||
		ae.Code != api.CodeBadRequest {
		t.Errorf("short commit: %v", err)
	}

	_, err = e.client.Status(ctx, "wf-doesnotexist")
	if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("status of an unknown workflow: %v, want ErrNotFound", err)
	}
	if _, err := e.client.Logs(ctx, "wf-doesnotexist", "a"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("logs of an unknown workflow: %v", err)
	}

	wf := e.submit(good)
	resp, err := e.client.List(ctx)
	list := resp.Workflows
	if err != nil || len(list) != 1 || list[0].ID != wf || list[0].Nodes != nil || resp.Fleet.Paused {
		t.Errorf("list = %+v, %v", resp, err)
	}
	if _, err := e.client.Logs(ctx, wf, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("logs of an unknown node: %v", err)
	}
}
