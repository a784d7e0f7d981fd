package statemachine_test

import (
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

const traceWorkflow = `name: traced
defaults:
  agent:
    command: [true]
tasks:
  - id: a
    prompt: x
`

// The submission's traceparent goes into workflow.submitted, comes back
// out of the log's encoding, and is the workflow's after the fold; a
// workflow.submitted written before the field existed (no trace_parent)
// still folds, into a workflow without a trace.
func TestTraceParentFolds(t *testing.T) {
	spec, err := workflow.Parse("wf.yaml", []byte(traceWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	repo := protocol.RepoRef{ID: "r", BaseCommit: strings.Repeat("b", 40), Bundle: "r/b.bundle"}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ev := statemachine.Submit("wf-traced", statemachine.Submission{Spec: spec, Repo: repo, TraceParent: tp}, t0).Event
	data, err := eventlog.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"trace_parent":"`+tp+`"`) {
		t.Fatalf("encoded event lacks its trace_parent: %s", data)
	}
	back, err := eventlog.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	back.Seq = 1
	st := statemachine.New()
	if err := st.Apply(back); err != nil {
		t.Fatal(err)
	}
	if w, _ := st.Workflow("wf-traced"); w.TraceParent != tp {
		t.Errorf("TraceParent = %q, want %q", w.TraceParent, tp)
	}

	old := strings.Replace(string(data), `,"trace_parent":"`+tp+`"`, "", 1)
	if old == string(data) {
		t.Fatalf("could not drop trace_parent from %s", data)
	}
	oev, err := eventlog.Decode([]byte(strings.ReplaceAll(old, "wf-traced", "wf-old")))
	if err != nil {
		t.Fatalf("an event without trace_parent does not decode: %v", err)
	}
	oev.Seq = 2
	if err := st.Apply(oev); err != nil {
		t.Fatalf("an event without trace_parent does not fold: %v", err)
	}
	w, ok := st.Workflow("wf-old")
	if !ok {
		t.Fatal("the old workflow was not folded")
	}
	if w.TraceParent != "" {
		t.Errorf("old workflow: TraceParent %q; want it untraced", w.TraceParent)
	}
}
