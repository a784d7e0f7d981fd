package statemachine_test

import (
	"bytes"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// shareWF has three tasks with the workflow's gates (a, b, c: one gate
// plan for the three), one with a gate list of its own (d), one with a
// gate definition of its own (e, given after parsing, as a task file's
// front matter gives it), all with the defaults' agent.
const shareWF = "name: share\n" + agent + `gates:
  - {name: vet, command: [vet]}
  - {name: test, command: [test]}
tasks:
  - {id: a, prompt: a}
  - {id: b, prompt: b}
  - {id: c, prompt: c, depends_on: [a]}
  - {id: d, prompt: d, gates: [vet]}
  - {id: e, prompt: e, gates: []}
`

// nodeView is a deep copy of what a node's task and gate plan say.
type nodeView struct {
	Task      protocol.TaskSpec
	Agent     protocol.AgentSpec
	GateOrder []string
	GateSpecs map[string]protocol.GateSpec
	OnFail    map[string]gates.FailAction
	Failures  map[string]int
}

func viewOf(n *statemachine.Node) nodeView {
	v := nodeView{Task: *n.Task, GateOrder: slices.Clone(n.GateOrder()), GateSpecs: maps.Clone(n.GateSpecs()),
		OnFail: maps.Clone(n.OnFail()), Failures: maps.Clone(n.GateFailures())}
	v.Task.Gates, v.Task.DependsOn = slices.Clone(v.Task.Gates), slices.Clone(v.Task.DependsOn)
	v.Task.Required, v.Task.Optional = slices.Clone(v.Task.Required), slices.Clone(v.Task.Optional)
	v.Task.OnFail, v.Task.GateDefs = maps.Clone(v.Task.OnFail), slices.Clone(v.Task.GateDefs)
	if n.Task.Agent != nil {
		v.Agent = *n.Task.Agent
	}
	return v
}

func sameMap(a, b any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// specTask is the index of node id's entry in the workflow's spec.
func specTask(t *testing.T, w *statemachine.Workflow, id string) *protocol.TaskSpec {
	t.Helper()
	for i := range w.Spec.Tasks {
		if w.Spec.Tasks[i].ID == id {
			return &w.Spec.Tasks[i]
		}
	}
	t.Fatalf("no task %s in the spec", id)
	return nil
}

// checkShared checks that the nodes point at their entries in the spec
// unless owning their task, and that a, b and c (and only they) share
// one gate plan when none of them owns its task.
func checkShared(t *testing.T, step string, w *statemachine.Workflow, own ...string) {
	t.Helper()
	for id, n := range w.Nodes {
		if at := specTask(t, w, id); (n.Task == at) == slices.Contains(own, id) {
			t.Errorf("%s: node %s's task is the spec's entry: %v, wanted %v", step, id, n.Task == at, !slices.Contains(own, id))
		}
	}
	shared := []string{}
	for _, id := range []string{"a", "b", "c"} {
		if !slices.Contains(own, id) {
			shared = append(shared, id)
		}
	}
	for _, id := range shared[1:] {
		x, y := w.Nodes[shared[0]], w.Nodes[id]
		if !sameMap(x.GateSpecs(), y.GateSpecs()) || !sameMap(x.OnFail(), y.OnFail()) || &x.GateOrder()[0] != &y.GateOrder()[0] {
			t.Errorf("%s: nodes %s and %s do not share their gate plan", step, shared[0], id)
		}
		if x.Task.Agent != y.Task.Agent {
			t.Errorf("%s: nodes %s and %s do not share their agent definition", step, shared[0], id)
		}
		// PERF-39: their equal gate lists are one.
		if len(x.Task.Gates) == 0 || len(y.Task.Gates) == 0 || &x.Task.Gates[0] != &y.Task.Gates[0] {
			t.Errorf("%s: nodes %s and %s do not share their gate list %v", step, shared[0], id, x.Task.Gates)
		}
	}
	for _, id := range []string{"d", "e"} {
		if sameMap(w.Nodes[id].GateSpecs(), w.Nodes["b"].GateSpecs()) {
			t.Errorf("%s: node %s, with gates of its own, shares b's plan", step, id)
		}
	}
}

func foldAll(t *testing.T, st *statemachine.State, evs ...eventlog.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := st.Apply(ev); err != nil {
			t.Fatalf("fold %s: %v", ev.Type(), err)
		}
	}
}

// Nodes share their task with the spec and their gate plan with the nodes
// of the same gates (PERF-38), and what changes one node — a change of
// its gates, its gate failures, a human's retry, a plan's new nodes —
// leaves the others, the spec and what they share as they were; a
// snapshot read back shares them again, and keeps the node's own task.
func TestSharingLeaksNoChange(t *testing.T) {
	spec, err := workflow.Parse("wf.yaml", []byte(shareWF))
	if err != nil {
		t.Fatal(err)
	}
	e := &spec.Tasks[4]
	e.Gates, e.GateDefs = []string{"own"}, []protocol.GateSpec{{Name: "own", Command: []string{"own"}}}
	st := statemachine.New()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	ev := func(node string, body eventlog.Body) eventlog.Event {
		at = at.Add(time.Second)
		return eventlog.Event{WorkflowID: testWF, NodeID: node, Time: at, Body: body}
	}
	foldAll(t, st, statemachine.Submit(testWF, statemachine.Submission{Spec: spec, Source: "wf.yaml"}, at).Event)
	w, _ := st.Workflow(testWF)
	checkShared(t, "submitted", w)
	views := func() map[string]nodeView {
		out := map[string]nodeView{}
		for id, n := range w.Nodes {
			out[id] = viewOf(n)
		}
		return out
	}
	specCopy := func() []nodeView {
		var out []nodeView
		for i := range w.Spec.Tasks {
			out = append(out, viewOf(&statemachine.Node{Task: &w.Spec.Tasks[i]}))
		}
		return out
	}
	before, specBefore := views(), specCopy()
	unchanged := func(step string, changed ...string) {
		t.Helper()
		after := views()
		for id, v := range before {
			if !slices.Contains(changed, id) && !reflect.DeepEqual(after[id], v) {
				t.Errorf("%s: node %s changed:\n%+v\nwas\n%+v", step, id, after[id], v)
			}
		}
		if got := specCopy(); !reflect.DeepEqual(got[:len(specBefore)], specBefore) {
			t.Errorf("%s: the spec's tasks changed", step)
		}
		before = after
	}

	// a's gates change: a new optional gate whose failure only warns, then one
	// removed. a has its own task and plan; b, c and the spec do not move.
	foldAll(t, st,
		ev("a", eventlog.NodeGatesChanged{Change: eventlog.GateChange{
			Definition: &protocol.GateSpec{Name: "late", Command: []string{"late"}}, Optional: true, OnFail: "warn"}}),
		ev("a", eventlog.NodeGatesChanged{Change: eventlog.GateChange{Remove: "vet"}}))
	a := w.Nodes["a"]
	if !slices.Equal(a.GateOrder(), []string{"late", "test"}) || a.OnFail()["late"] != gates.Warn || a.Task.OnFail["late"] != "warn" {
		t.Fatalf("a's plan after its changes: %v %v", a.GateOrder(), a.OnFail())
	}
	unchanged("a's gates changed", "a")
	checkShared(t, "a's gates changed", w, "a")

	// b's gate failures and a human's retry are b's alone.
	foldAll(t, st,
		ev("b", eventlog.NodeReady{Attempt: 1}),
		ev("b", eventlog.NodeEscalated{Attempt: 1, Reason: "vet failed", FailedGates: []string{"vet"}}))
	if w.Nodes["b"].GateFailures()["vet"] != 1 || w.Nodes["c"].GateFailures() != nil {
		t.Fatalf("gate failures: b %v, c %v", w.Nodes["b"].GateFailures(), w.Nodes["c"].GateFailures())
	}
	unchanged("b escalated", "b")
	foldAll(t, st, ev("b", eventlog.NodeRetryGranted{Attempt: 1, Attempts: 2, By: "ann"}))
	unchanged("b's retry granted", "b")
	checkShared(t, "b retried", w, "a")

	// a plan of b's adds x, which c (whose task is the spec's) and a
	// (whose task is its own) now wait for too.
	foldAll(t, st, ev("b", eventlog.NodesAdded{Tasks: []protocol.TaskSpec{{ID: "x", Prompt: "x", Pool: "default",
		Agent: &protocol.AgentSpec{Command: []string{"fake-agent"}}}}, Dependents: []string{"a", "c"}}))
	for _, id := range []string{"a", "c"} {
		if n := w.Nodes[id]; !slices.Contains(n.Task.DependsOn, "x") {
			t.Errorf("%s does not wait for the added node: %v", id, n.Task.DependsOn)
		}
	}
	if a := w.Nodes["a"]; !slices.Equal(a.GateOrder(), []string{"late", "test"}) || a.Task.OnFail["late"] != "warn" ||
		slices.Contains(specTask(t, w, "a").Gates, "late") {
		t.Errorf("a lost its own gates, or the spec got them: %v, spec %v", a.GateOrder(), specTask(t, w, "a").Gates)
	}
	if x := w.Nodes["x"]; x == nil || x.Task != specTask(t, w, "x") {
		t.Errorf("the added node does not point at its task in the spec")
	}
	// The spec's entries of a and c gained x in depends_on, nothing else.
	for i, v := range specCopy()[:len(specBefore)] {
		want := specBefore[i]
		if id := want.Task.ID; id == "a" || id == "c" {
			want.Task.DependsOn = append(want.Task.DependsOn, "x")
		}
		if !reflect.DeepEqual(v, want) {
			t.Errorf("x added: the spec's task %s is\n%+v\nwanted\n%+v", want.Task.ID, v, want)
		}
	}
	specBefore = specCopy()
	before["a"], before["c"] = views()["a"], views()["c"]
	unchanged("x added", "x")
	checkShared(t, "x added", w, "a")

	// A snapshot read back shares again what the fold shared.
	var buf bytes.Buffer
	enc := statemachine.NewSnapshotEncoder(&buf)
	if err := enc.Fleet(st.Fleet()); err != nil {
		t.Fatal(err)
	}
	if err := enc.Workflow(w); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	back, err := statemachine.DecodeSnapshot(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	rw, _ := back.Workflow(testWF)
	if d := firstDiff(w, rw); d != "" {
		t.Fatalf("the snapshot read back differs: %s", d)
	}
	checkShared(t, "read back", rw, "a")
}

// TestWorkflowsShareGatePlans (PERF-39): two workflows submitted with the
// same gates, in one state or in two, point their nodes at one gate plan;
// a workflow with other gates does not.
func TestWorkflowsShareGatePlans(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	submit := func(st *statemachine.State, id, yaml string) *statemachine.Workflow {
		t.Helper()
		spec, err := workflow.Parse("wf.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		foldAll(t, st, statemachine.Submit(id, statemachine.Submission{Spec: spec, Source: "wf.yaml"}, at).Event)
		w, _ := st.Workflow(id)
		return w
	}
	one, two := statemachine.New(), statemachine.New()
	w1 := submit(one, "wf-one", shareWF)
	// The table of plans in use holds them weakly: the nodes pointing at
	// a plan keep it there through collections.
	runtime.GC()
	runtime.GC()
	w2 := submit(one, "wf-two", shareWF)
	w3 := submit(two, "wf-three", shareWF)
	other := submit(two, "wf-other", strings.Replace(shareWF, "command: [test]", "command: [test, -race]", 1))
	for _, w := range []*statemachine.Workflow{w2, w3} {
		if a, b := w1.Nodes["a"], w.Nodes["a"]; !sameMap(a.GateSpecs(), b.GateSpecs()) || !sameMap(a.OnFail(), b.OnFail()) {
			t.Errorf("node a of %s and of %s do not share their gate plan", w1.ID, w.ID)
		}
	}
	if sameMap(w1.Nodes["a"].GateSpecs(), other.Nodes["a"].GateSpecs()) {
		t.Errorf("node a of %s shares the plan of a workflow with other gates", other.ID)
	}
	if got := other.Nodes["a"].GateSpecs()["test"].Command; !slices.Equal(got, []string{"test", "-race"}) {
		t.Errorf("%s's gate test runs %v", other.ID, got)
	}
}
