package statemachine_test

import (
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// runningJob returns the one job RunningJobs lists.
func runningJob(t *testing.T, w *world) statemachine.RunningJob {
	t.Helper()
	jobs := statemachine.RunningJobs(w.wf())
	if len(jobs) != 1 {
		t.Fatalf("running jobs = %+v, want one", jobs)
	}
	return jobs[0]
}

// A lost agent job is run again in a round that uses no attempt; one that
// moved on (a newer lease) is left alone; a node whose jobs keep getting
// lost escalates after as many rounds as transient errors may take.
func TestJobLost(t *testing.T) {
	w, _ := newWorld(t, "name: l\n"+agent+"tasks:\n  - {id: a, prompt: a, gates: []}\n")
	if jobs := statemachine.RunningJobs(w.wf()); len(jobs) != 0 {
		t.Fatalf("a ready node's job is listed as running: %+v", jobs)
	}
	w.started("a", 5)
	old := runningJob(t, w)
	if old.JobID != protocol.AgentJobID(testWF, "a", 1) || old.LeaseToken != 5 || old.Gate != "" {
		t.Fatalf("running job = %+v", old)
	}
	w.started("a", 6) // another runner took the job over
	if eff := statemachine.JobLost(w.wf(), old, "gone", w.now); len(eff) != 0 {
		t.Fatalf("a job taken over under a newer lease was run again: %v", eff)
	}
	budget := w.node("a").Budget
	for round := 1; ; round++ {
		j := runningJob(t, w)
		got := w.command(statemachine.JobLost(w.wf(), j, "no lease", w.now), nil)
		n := w.node("a")
		if n.Status == protocol.NodeEscalated {
			if round != 6 || !strings.Contains(n.Reason, "job lost: no lease") {
				t.Fatalf("escalated in round %d for %q; want round 6, for lost jobs", round, n.Reason)
			}
			break
		}
		if n.Status != protocol.NodeReady || n.Attempt != round+1 || n.Budget != budget+round {
			t.Fatalf("round %d: node %s attempt %d budget %d (%v); want ready, attempt %d, budget %d",
				round, n.Status, n.Attempt, n.Budget, got, round+1, budget+round)
		}
		w.started("a", uint64(10+round))
	}
}

// A started gate's lost job gets another round; a cancelled workflow has no
// running jobs.
func TestGateJobLost(t *testing.T) {
	w, _ := newWorld(t, "name: g\n"+agent+"gates:\n  - {name: test, command: [t]}\ntasks:\n  - {id: a, prompt: a, gates: [test]}\n")
	w.started("a", 1)
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	if jobs := statemachine.RunningJobs(w.wf()); len(jobs) != 0 {
		t.Fatalf("a dispatched gate no runner started is listed as running: %+v", jobs)
	}
	w.report(&protocol.Report{Type: protocol.ReportStarted, Started: &protocol.Started{Kind: protocol.KindGate,
		JobID: protocol.GateJobID(testWF, "a", 1, "test", 1), WorkflowID: testWF, NodeID: "a", Gate: "test",
		Attempt: 1, LeaseToken: 3, Host: "h", StartedAt: w.now}})
	j := runningJob(t, w)
	if j.Gate != "test" || j.Round != 1 || j.LeaseToken != 3 {
		t.Fatalf("running job = %+v", j)
	}
	w.command(statemachine.JobLost(w.wf(), j, "no lease", w.now), nil)
	g := w.wf().Nodes["a"].Gates["test"]
	if g.Round != 2 || g.LeaseToken != 0 || !g.Awaiting {
		t.Fatalf("gate after the loss: round %d token %d awaiting %v; want round 2 awaiting a runner", g.Round, g.LeaseToken, g.Awaiting)
	}
	if !w.published[protocol.GateJobID(testWF, "a", 1, "test", 2)] {
		t.Fatal("the gate's round 2 job was not published")
	}
	w.command(statemachine.Cancel(w.wf(), w.now))
	if jobs := statemachine.RunningJobs(w.wf()); len(jobs) != 0 {
		t.Fatalf("a cancelled workflow lists running jobs: %+v", jobs)
	}
}
