package statemachine_test

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// fuzzWorkflow has what makes folds interesting: a diamond, layered gates,
// a warning, a pending-capable gate, an optional one.
const fuzzWorkflow = "name: fuzz\n" + agent +
	"gates:\n  - {name: vet, command: [vet]}\n  - {name: test, command: [test], depends_on: [vet]}\n" +
	"  - {name: ci, command: [ci], poll_interval: 10s, max_pending: 2m}\n  - {name: style, command: [style], severity: warning}\n" +
	"tasks:\n  - {id: a, prompt: a, gates: [test, ci]}\n  - id: b\n    prompt: b\n    gates: {required: [vet], optional: [style]}\n" +
	"  - {id: c, prompt: c, depends_on: [a, b], gates: [vet]}\n  - {id: d, prompt: d, depends_on: [c], gates: []}\n" +
	"  - {id: e, prompt: e, depends_on: [b], gates: [vet], approval: {timeout: 10m, on_timeout: reject}}\n" +
	"  - {id: f, type: human, prompt: sign off, depends_on: [e]}\n"

// FuzzReplayIsDeterministic drives a workflow through a sequence of
// reports, commands and time passing chosen by the input — every event
// the state machine makes is thus a valid one — then replays the log it
// wrote, twice, from its encoding: both replays give the state the live
// fold reached, and the same next decision.
func FuzzReplayIsDeterministic(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 1, 2, 3, 3, 3, 0, 4, 0},
		{2, 0, 2, 1, 3, 1, 3, 2, 3, 0, 3, 4, 3, 4, 0},
		{2, 0, 3, 0, 3, 1, 6, 0, 3, 0, 3, 0, 2, 1, 2, 2, 3, 0},
		{2, 0, 3, 2, 4, 20, 3, 2, 4, 200, 0, 7, 0},
		{2, 0, 9, 1, 3, 0, 9, 2, 3, 3, 5, 1, 8, 0, 6, 3},
		{1, 0, 1, 1, 8, 2, 2, 0, 2, 1, 5, 0, 5, 2},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 400 {
			script = script[:400]
		}
		w, _ := newWorld(t, fuzzWorkflow, true)
		drive(w, script)

		replay := func() *statemachine.State {
			st := statemachine.New()
			for _, ev := range w.events {
				data, err := eventlog.Encode(ev)
				if err != nil {
					t.Fatalf("encode %s: %v", describeEvent(ev), err)
				}
				back, err := eventlog.Decode(data)
				if err != nil {
					t.Fatalf("decode %s: %v", describeEvent(ev), err)
				}
				back.Seq = ev.Seq
				if err := st.Apply(back); err != nil {
					t.Fatalf("replay %s: %v", describeEvent(ev), err)
				}
				checkStatus(t, st, describeEvent(ev))
			}
			return st
		}
		first, second := replay(), replay()
		if !reflect.DeepEqual(w.st, first) {
			t.Fatal("replaying the log gave another state than the live fold")
		}
		if !reflect.DeepEqual(first, second) {
			t.Fatal("replaying the log twice gave two states")
		}
		live, _ := w.st.Workflow(testWF)
		again, _ := first.Workflow(testWF)
		if d1, d2 := statemachine.Decide(live, w.now, nil), statemachine.Decide(again, w.now, nil); !reflect.DeepEqual(d1, d2) {
			t.Fatalf("the replayed state decides otherwise:\n%v\n%v", d1, d2)
		}
	})
}

// drive interprets script: each byte picks an action, the next ones its
// arguments.
func drive(w *world, script []byte) {
	token := uint64(1)
	arg := func(i *int) int {
		if *i+1 < len(script) {
			*i++
			return int(script[*i])
		}
		return 0
	}
	pick := func(list []string, n int) string {
		if len(list) == 0 {
			return ""
		}
		return list[n%len(list)]
	}
	for i := 0; i < len(script); i++ {
		// The fleet pauses past two failed rounds within the hour.
		w.command(statemachine.DecideFleet(w.st, w.now, 2), nil)
		wf := w.wf()
		var running, gating []string
		var gates []string // node/gate, dispatched and not final
		for _, id := range wf.Order {
			n := wf.Nodes[id]
			switch n.Status {
			case protocol.NodeReady, protocol.NodeRunning:
				running = append(running, id)
			case protocol.NodeGating:
				gating = append(gating, id)
				for _, g := range n.GateOrder() {
					if r := n.Gates[g]; r != nil && r.Dispatched && !r.Terminal() {
						gates = append(gates, id+"/"+g)
					}
				}
			}
		}
		sort.Strings(gates)
		token++
		switch script[i] % 10 {
		case 0:
			// A runner holds a job back on a breaker (no argument used, so
			// older scripts keep their meaning).
			if n := pick(running, int(token)); n != "" {
				w.waiting(n, "", 0, "agent:fuzz")
			} else if ng := pick(gates, int(token)); ng != "" {
				node, gate := split(ng)
				w.waiting(node, gate, w.node(node).Gates[gate].Round, "gate:fuzz")
			}
			w.settle()
		case 1:
			if n := pick(running, arg(&i)); n != "" {
				w.started(n, token)
			}
		case 2:
			if n := pick(running, arg(&i)); n != "" {
				st := []protocol.AgentStatus{protocol.AgentSucceeded, protocol.AgentSucceeded, protocol.AgentFailed, protocol.AgentTimeout}[arg(&i)%4]
				w.agentDone(n, token, st, arg(&i)%2 == 0)
			}
		case 3:
			if ng := pick(gates, arg(&i)); ng != "" {
				node, gate := split(ng)
				st := []protocol.GateStatus{protocol.GatePassed, protocol.GatePassed, protocol.GateFailed, protocol.GatePending,
					protocol.GateTimeout, protocol.GateError}[arg(&i)%6]
				var violations []string
				if st == protocol.GateFailed && arg(&i)%3 == 0 {
					violations = []string{"modified go.sum"}
				}
				w.gateDone(node, gate, token, st, violations...)
			}
		case 4:
			w.later(time.Duration(arg(&i)) * time.Second)
		case 5:
			if n := pick(append(running, gating...), arg(&i)); n != "" {
				d := &protocol.DeadLetter{Kind: protocol.KindAgent, WorkflowID: testWF, NodeID: n,
					Attempt: w.node(n).Attempt, Deliveries: 5, Reason: "gone"}
				if w.node(n).Status == protocol.NodeGating && len(gates) > 0 {
					node, gate := split(pick(gates, arg(&i)))
					d.Kind, d.NodeID, d.Gate = protocol.KindGate, node, gate
				}
				w.report(&protocol.Report{Type: protocol.ReportDeadLetter, DeadLetter: d})
			}
		case 6:
			n := pick(wf.Order, arg(&i))
			gate := pick(append([]string{""}, w.node(n).GateOrder()...), arg(&i))
			w.command(statemachine.RerunGates(wf, n, gate, arg(&i)%2 == 0, w.now))
		case 7:
			// A human: cancels, or decides a node that waits for one, or
			// resumes a paused fleet.
			var waiting []string
			for _, id := range wf.Order {
				if st := wf.Nodes[id].Status; st == protocol.NodeEscalated || st == protocol.NodeAwaitingApproval {
					waiting = append(waiting, id)
				}
			}
			n := pick(waiting, arg(&i))
			switch a := arg(&i); {
			case a%8 == 0:
				w.command(statemachine.Cancel(wf, w.now))
			case a%8 == 1 && n != "":
				w.command(statemachine.Approve(wf, n, "ada", "", w.now))
			case a%8 == 2 && n != "":
				w.command(statemachine.Reject(wf, n, "ada", "no", w.now))
			case a%8 == 3 && n != "":
				w.command(statemachine.Retry(wf, n, "ada", "try this", 1+a%3, w.now))
			case a%8 == 4:
				eff, err := statemachine.Resume(w.st, "ada", w.now)
				w.command(eff, err)
			}
		case 8:
			if n := pick(running, arg(&i)); n != "" {
				w.agentDone(n, 0, protocol.AgentFailed, false) // a lease older than any
			}
		case 9:
			n := w.node(pick(wf.Order, arg(&i)))
			c := eventlog.GateChange{Remove: pick(n.GateOrder(), arg(&i))}
			if arg(&i)%2 == 0 || c.Remove == "" {
				c = eventlog.GateChange{Definition: &protocol.GateSpec{Name: "extra", Command: []string{"x"},
					DependsOn: []string{pick(n.GateOrder(), arg(&i))}}, Optional: arg(&i)%2 == 0}
				if c.Definition.DependsOn[0] == "" {
					c.Definition.DependsOn = nil
				}
			}
			ev, err := statemachine.ChangeGates(wf, n, c, w.now)
			w.command([]statemachine.Effect{ev}, err)
		}
	}
	w.settle()
}

func split(nodeGate string) (string, string) {
	for i := range nodeGate {
		if nodeGate[i] == '/' {
			return nodeGate[:i], nodeGate[i+1:]
		}
	}
	return nodeGate, ""
}

// checkStatus checks that the workflow's status, kept up to date event by
// event (in O(1) for most events), is what looking at every node says: it
// needs attention exactly while a node waits for a human.
func checkStatus(t *testing.T, st *statemachine.State, after string) {
	t.Helper()
	w, ok := st.Workflow(testWF)
	if !ok || w.Status.Terminal() {
		return
	}
	want := protocol.WorkflowRunning
	for _, n := range w.Nodes {
		if (n.Status == protocol.NodeEscalated || n.Status == protocol.NodeAwaitingApproval) && !n.Approved() {
			want = protocol.WorkflowNeedsAttention
		}
	}
	if w.Status != want {
		t.Fatalf("after %s the workflow is %s, but its nodes say %s", after, w.Status, want)
	}
}
