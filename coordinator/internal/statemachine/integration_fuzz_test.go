package statemachine_test

import (
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// queueFuzzWorkflow is three siblings and a dependent in a workflow with
// two layered integration gates.
const queueFuzzWorkflow = "name: qf\n" + agent +
	"gates:\n  - {name: own, command: [own]}\n  - {name: build, command: [b]}\n" +
	"  - {name: combined, command: [c], depends_on: [build]}\n" +
	"integration_gates: [combined]\n" +
	"tasks:\n  - {id: a, prompt: a, gates: [own]}\n  - {id: b, prompt: b, gates: [own]}\n" +
	"  - {id: c, prompt: c, gates: [own], approval: required}\n  - {id: d, prompt: d, depends_on: [a], gates: [own]}\n"

// FuzzIntegrationQueue (GIT-08) drives the integration queue through
// results in any order — current and stale, passing and failing — agents,
// time and humans, then checks that replaying the log gives the same state
// and decision, that no node landed twice, and that every node that landed
// through the queue did so on exactly the base its passing run assumed.
func FuzzIntegrationQueue(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 0, 0, 1, 1, 1, 2, 0, 2, 1, 2, 0, 2, 1},
		{0, 0, 0, 1, 1, 1, 2, 1, 2, 2, 3, 0, 4, 9, 0, 0, 1, 2, 2, 2},
		{0, 1, 1, 0, 2, 3, 2, 0, 6, 5, 2, 3, 4, 30, 0, 0, 1, 1, 2},
	} {
		f.Add(seed)
	}
	f.Fuzz(queueScript)
}

// queueScript is FuzzIntegrationQueue's run of one script.
func queueScript(t *testing.T, script []byte) {
	{
		if len(script) > 300 {
			script = script[:300]
		}
		w, _ := newWorld(t, queueFuzzWorkflow, true)
		driveQueue(w, script)

		// Replay, checking each landing through the queue as it comes: the
		// node lands on exactly what its passing run assumed (the branch as
		// it was when the speculation began, then the nodes ahead), and
		// every integration gate of that run passed.
		st := statemachine.New()
		for _, ev := range w.events {
			if _, ok := ev.Body.(eventlog.NodeIntegrated); ok {
				r, _ := st.Workflow(testWF)
				if n := r.Nodes[ev.NodeID]; n.Status == protocol.NodeIntegrating {
					s := n.Speculation()
					want := append(append([]string(nil), r.Integrated[:s.Integrated]...), s.Ahead...)
					if !slices.Equal(r.Integrated, want) {
						t.Fatalf("%s landed on %v; its run assumed %v", n.ID, r.Integrated, want)
					}
					for _, g := range r.IntegrationOrder {
						if run := s.Gates[g]; run == nil || run.Status != protocol.GatePassed {
							t.Fatalf("%s landed though its integration gate %s did not pass", n.ID, g)
						}
					}
				}
			}
			if err := st.Apply(ev); err != nil {
				t.Fatalf("replay %s: %v", describeEvent(ev), err)
			}
		}
		if !reflect.DeepEqual(w.st, st) {
			t.Fatal("replaying the log gave another state than the live fold")
		}
		live, _ := w.st.Workflow(testWF)
		again, _ := st.Workflow(testWF)
		if d1, d2 := statemachine.Decide(live, w.now, nil), statemachine.Decide(again, w.now, nil); !reflect.DeepEqual(d1, d2) {
			t.Fatalf("the replayed state decides otherwise:\n%v\n%v", d1, d2)
		}
		seen := map[string]int{}
		for i, id := range live.Integrated {
			if _, dup := seen[id]; dup {
				t.Fatalf("%s landed twice: %v", id, live.Integrated)
			}
			seen[id] = i
		}
		for _, ev := range w.events {
			if b, ok := ev.Body.(eventlog.NodeIntegrated); ok && b.Commit == "" {
				t.Fatalf("node.integrated of %s without a commit", ev.NodeID)
			}
		}
	}
}

// driveQueue drives the queue fuzz workflow through a script: agents and
// gates report (current and stale results, passing and failing), time
// passes and humans decide, then the workflow settles.
func driveQueue(w *world, script []byte) {
	for i := 0; i < len(script); i++ {
		arg := func() int {
			if i+1 < len(script) {
				i++
				return int(script[i])
			}
			return 0
		}
		wf := w.wf()
		var running, gating, queued []string
		for _, id := range wf.Order {
			switch wf.Nodes[id].Status {
			case protocol.NodeReady, protocol.NodeRunning:
				running = append(running, id)
			case protocol.NodeGating:
				gating = append(gating, id)
			case protocol.NodeIntegrating:
				queued = append(queued, id)
			}
		}
		pick := func(list []string) string {
			if len(list) == 0 {
				return ""
			}
			return list[arg()%len(list)]
		}
		statuses := []protocol.GateStatus{protocol.GatePassed, protocol.GatePassed, protocol.GateFailed, protocol.GateError}
		switch script[i] % 7 {
		case 0:
			if n := pick(running); n != "" {
				w.agentDone(n, uint64(i+1), protocol.AgentSucceeded, true)
			}
		case 1:
			if n := pick(gating); n != "" && w.node(n).Gates["own"] != nil && w.node(n).Gates["own"].Dispatched {
				w.gateDone(n, "own", uint64(i+1), statuses[arg()%2])
			}
		case 2, 3:
			n := pick(queued)
			if n == "" || w.node(n).Speculation() == nil {
				continue
			}
			s := w.node(n).Speculation()
			var names []string
			for g, r := range s.Gates {
				if r.Dispatched && !r.Terminal() {
					names = append(names, g)
				}
			}
			sort.Strings(names)
			if len(names) == 0 {
				continue
			}
			g := names[arg()%len(names)]
			round := s.Gates[g].Round
			if script[i]%7 == 3 && round > 1 {
				round = 1 + arg()%(round-1) // an earlier round's: stale
			}
			w.integRound(n, g, round, uint64(i+1), statuses[arg()%4])
		case 4:
			w.later(time.Duration(arg()) * time.Second)
		case 5:
			for _, id := range wf.Order {
				if st := wf.Nodes[id].Status; st == protocol.NodeAwaitingApproval || st == protocol.NodeEscalated {
					switch arg() % 3 {
					case 0:
						w.command(statemachine.Approve(wf, id, "ada", "", w.now))
					case 1:
						w.command(statemachine.Retry(wf, id, "ada", "", 1, w.now))
					}
					break
				}
			}
		case 6:
			w.settle()
		}
	}
	w.settle()
}
