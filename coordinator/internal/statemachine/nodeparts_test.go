package statemachine

import (
	"reflect"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// TestNodeParts (PERF-39): a node in flight that has not spent, retried,
// waited, been approved or queued carries none of its rarely set parts; a
// part set and then cleared again is dropped, so the node equals, field
// for field, one that never had it; and a node's dependencies are its
// task's depends_on.
func TestNodeParts(t *testing.T) {
	spec, err := workflow.Parse("wf.yaml", []byte("name: parts\ntasks:\n"+
		"  - id: a\n    prompt: do a\n    agent:\n      command: [\"true\"]\n"+
		"  - id: b\n    prompt: do b\n    depends_on: [a]\n    agent:\n      command: [\"true\"]\n"))
	if err != nil {
		t.Fatalf("workflow: %v", err)
	}
	t0 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	waiting := eventlog.NodeWaiting{Attempt: 1, Scope: "agent:true", Until: t0.Add(time.Minute), Host: "h"}
	started := eventlog.NodeStarted{Attempt: 1, LeaseToken: 1, Host: "h"}
	finished := eventlog.NodeFinished{Attempt: 1, Status: protocol.NodeFailed, Reason: "lost"}
	fold := func(t *testing.T, bodies ...eventlog.Body) *Workflow {
		t.Helper()
		st := New()
		// All at one time, so that the nodes' clocks agree.
		evs := []eventlog.Event{{WorkflowID: "wf-parts", Time: t0, Body: eventlog.WorkflowSubmitted{Workflow: spec}},
			{WorkflowID: "wf-parts", NodeID: "a", Time: t0, Body: eventlog.NodeReady{Attempt: 1}}}
		for _, b := range bodies {
			evs = append(evs, eventlog.Event{WorkflowID: "wf-parts", NodeID: "a", Time: t0, Body: b})
		}
		for _, ev := range evs {
			if err := st.Apply(ev); err != nil {
				t.Fatalf("apply %s: %v", ev.Type(), err)
			}
		}
		w, _ := st.Workflow("wf-parts")
		return w
	}
	cases := []struct {
		name      string
		with, not []eventlog.Body
	}{
		{"held back, then started", []eventlog.Body{waiting, started}, []eventlog.Body{started}},
		{"held back, then finished", []eventlog.Body{waiting, finished}, []eventlog.Body{finished}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, want := fold(t, c.with...).Nodes["a"], fold(t, c.not...).Nodes["a"]
			if got.rare != nil || got.retry != nil || got.spent != nil {
				t.Errorf("node a keeps parts: rare %+v, retry %+v, spent %+v", got.rare, got.retry, got.spent)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("node a after %s differs from one never held back:\n%+v\n%+v", c.name, got, want)
			}
		})
	}
	w := fold(t, waiting)
	if wt := w.Nodes["a"].Waiting(); wt == nil || wt.Scope != "agent:true" || w.Nodes["a"].rare == nil {
		t.Errorf("node a held back: waiting %+v", wt)
	}
	if b := w.Nodes["b"]; b.rare != nil || b.retry != nil || b.spent != nil {
		t.Errorf("node b, pending, has parts")
	}
	if d := w.dependsOn("b"); !reflect.DeepEqual(d, []string{"a"}) || w.dependsOn("a") != nil || w.dependsOn("x") != nil {
		t.Errorf("dependencies of b %v, of a %v", d, w.dependsOn("a"))
	}
}
