package engine

import (
	"context"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// One trace per workflow, across a restart: a submission that carries a
// span context (the CLI's) stores it in workflow.submitted; the jobs the
// coordinator publishes carry that trace in their traceparent header, and
// so do the jobs a new coordinator publishes after the first one stopped,
// rebuilt from the log alone. status names the trace. No exporter is
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

	e.start()
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
}
