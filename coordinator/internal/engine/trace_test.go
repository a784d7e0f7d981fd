package engine

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/notify"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// One trace per workflow, across a restart: a submission that carries a
// span context (the CLI's) stores it in workflow.submitted; the jobs the
// coordinator publishes carry that trace in their traceparent header, and
// so do the jobs a new coordinator publishes after the first one stopped,
// rebuilt from the log alone. status names the trace, and so does the
// inbox item and the notification of an escalation, and the engine's log
// line about the escalation carries the trace's id (the engine logs JSON
// through telemetry.Handler, as the binary does). No exporter is
// installed: the context is handed on all the same.
func TestTraceSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := telemetry.WithTraceParent(testkit.Context(t, 20*time.Second), "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := e.client.Submit(ctx, api.SubmitRequest{Filename: "wf.yaml", Repo: e.repo, RepoPath: e.repoDir,
		YAML: "name: traced\ndefaults:\n  " + agentCmd + "tasks:\n  - {id: a, prompt: a}\n  - {id: b, prompt: b, depends_on: [a]}\n"})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if res.TraceID != traceID {
		t.Errorf("submit answered trace %q, want %s", res.TraceID, traceID)
	}
	jobTrace := func(j *taken) string {
		return telemetry.TraceID(j.msg.Headers().Get("traceparent"))
	}

	a := e.next(protocol.KindAgent, "default", 5*time.Second)
	if got := jobTrace(a); got != traceID {
		t.Errorf("a's job carries trace %q, want %s", got, traceID)
	}
	e.stopEng()

	sent := &notifications{}
	var logBuf testkit.Buffer
	e.start(startOptions{notify: sent, log: slog.New(telemetry.NewHandler(slog.NewJSONHandler(&logBuf, nil)))})
	e.started(a, 1)
	e.agentDone(a, 1, protocol.AgentSucceeded, e.makePatch(a, "a.txt", "from a\n"))
	b := e.next(protocol.KindAgent, "default", 5*time.Second)
	if got := jobTrace(b); got != traceID {
		t.Errorf("b's job, published after the restart, carries trace %q, want %s", got, traceID)
	}
	s, err := e.client.Status(context.Background(), res.WorkflowID)
	if err != nil {
		t.Fatal(err)
	}
	if s.TraceID != traceID {
		t.Errorf("status trace_id = %q, want %s", s.TraceID, traceID)
	}

	// An escalation's inbox item names its workflow's trace.
	const escTrace = "0af7651916cd43dd8448eb211c80319c"
	ctx = telemetry.WithTraceParent(testkit.Context(t, 20*time.Second), "00-"+escTrace+"-b7ad6b7169203331-01")
	esc, err := e.client.Submit(ctx, api.SubmitRequest{Filename: "wf.yaml", Repo: e.repo, RepoPath: e.repoDir,
		YAML: "name: escalates\ndefaults:\n  " + agentCmd + "  max_attempts: 1\ntasks:\n  - {id: c, prompt: c, pool: esc}\n"})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	c := e.next(protocol.KindAgent, "esc", 5*time.Second)
	e.started(c, 1)
	e.agentDone(c, 1, protocol.AgentFailed, nil)
	e.waitEscalated(esc.WorkflowID, "c")
	items, err := e.client.Inbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range items {
		if it.WorkflowID == esc.WorkflowID {
			found = true
			if it.TraceID != escTrace {
				t.Errorf("inbox item's trace_id = %q, want %s", it.TraceID, escTrace)
			}
		}
	}
	if !found {
		t.Errorf("no inbox item for %s: %+v", esc.WorkflowID, items)
	}
	// So does its notification.
	var n notify.Notification
	testkit.WaitFor(t, 10*time.Second, 20*time.Millisecond, "the escalation's notification", func() bool {
		var ok bool
		n, ok = sent.find(esc.WorkflowID, "node.escalated")
		return ok
	})
	if n.TraceID != escTrace {
		t.Errorf("notification's trace_id = %q, want %s", n.TraceID, escTrace)
	}
	// So does the engine's log line about it, though the report that
	// caused it came without a trace context.
	r := testkit.LogRecord(t, logBuf.String(), "node escalated; it waits for a human", "workflow", esc.WorkflowID)
	if r["trace_id"] != escTrace || r["node"] != "c" {
		t.Errorf("the escalation's log record %v: want node c in trace %s", r, escTrace)
	}
	// A human's decision on it is logged in the workflow's trace too, not
	// the request's (TR-05).
	if _, err := e.client.Reject(ctx, api.DecisionRequest{WorkflowID: esc.WorkflowID, NodeID: "c", By: "ada", Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	r = testkit.LogRecord(t, logBuf.String(), "human decision", "workflow", esc.WorkflowID)
	if r["trace_id"] != escTrace || r["by"] != "ada" {
		t.Errorf("the decision's log record %v: want ada in trace %s", r, escTrace)
	}
}

// notifications records what the engine sends its notifier.
type notifications struct {
	mu   sync.Mutex
	sent []notify.Notification
}

func (r *notifications) Send(n notify.Notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, n)
}

func (r *notifications) find(wf, typ string) (notify.Notification, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.sent {
		if n.WorkflowID == wf && n.Type == typ {
			return n, true
		}
	}
	return notify.Notification{}, false
}
