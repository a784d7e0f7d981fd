package statemachine_test

import (
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Jobs held back by an open circuit breaker (CB-01, RETRY-11): the
// runner's waiting report becomes node.waiting or gate.waiting while the
// job is still out, and shows on the node or gate until the job starts;
// nothing is published again (the runner keeps the job) and no attempt is
// used. Reports about a job that has moved on cause nothing.
func TestBreakerWaits(t *testing.T) {
	const agentScope, gateScope = "agent:fake-agent", "gate:vet:1a2b3c4d"
	runScenarios(t, []scenario{{
		name:   "an agent job waits, then starts",
		yaml:   "name: b\n" + agent + "gates:\n  - {name: vet, command: [vet]}\ntasks:\n  - {id: a, prompt: a, gates: [vet]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"held back on its agent's breaker", func(w *world) []string { return w.waiting("a", "", 0, agentScope) },
				lines("node.waiting a " + agentScope)},
			{"the node shows it; nothing else happens", func(w *world) []string {
				n := w.node("a")
				if n.Status != protocol.NodeReady || n.Waiting() == nil || n.Waiting().Scope != agentScope ||
					!n.Waiting().Until.Equal(w.now.Add(time.Minute)) || n.Waiting().Host != "h" || n.Attempt != 1 || n.Budget != 3 {
					w.t.Errorf("node a: status %s attempt %d budget %d waiting %+v", n.Status, n.Attempt, n.Budget, n.Waiting())
				}
				return w.later(time.Hour)
			}, nil},
			{"a restarted engine publishes the job again, as for any job out", func(w *world) []string {
				w.published = map[string]bool{}
				return w.settle()
			}, lines("publish agent a a1")},
			{"it starts: no longer waiting", func(w *world) []string {
				out := w.started("a", 1)
				if n := w.node("a"); n.Waiting() != nil {
					w.t.Errorf("node a still waiting after its start: %+v", n.Waiting())
				}
				return out
			}, lines("node.started a")},
			{"a redelivery after a crash waits again", func(w *world) []string { return w.waiting("a", "", 0, "repo:r-test") },
				lines("node.waiting a repo:r-test")},
			agentStep("the agent's result ends the wait", "a", 2, protocol.AgentSucceeded, false,
				"node.agent_done a succeeded", "gate.dispatched a/vet r1", "publish gate a/vet r1"),
			{"a late wait of the agent's job changes nothing", func(w *world) []string {
				return w.waiting("a", "", 0, agentScope)
			}, nil},
			{"the gate's job waits on its gate's breaker", func(w *world) []string { return w.waiting("a", "vet", 1, gateScope) },
				lines("gate.waiting a/vet r1 " + gateScope)},
			{"another round's wait is stale", func(w *world) []string { return w.waiting("a", "vet", 2, gateScope) }, nil},
			{"the gate shows it until it starts", func(w *world) []string {
				if g := w.node("a").Gates["vet"]; g.Waiting() == nil || g.Waiting().Scope != gateScope {
					w.t.Errorf("gate vet: waiting %+v", g.Waiting())
				}
				if n := w.node("a"); n.Waiting() != nil {
					w.t.Errorf("node a waiting %+v though its agent finished", n.Waiting())
				}
				return w.report(&protocol.Report{Type: protocol.ReportStarted, Started: &protocol.Started{Kind: protocol.KindGate,
					WorkflowID: testWF, NodeID: "a", Gate: "vet", Attempt: 1, LeaseToken: 3}})
			}, lines("gate.started a/vet")},
			{"started, the gate waits no more", func(w *world) []string {
				if g := w.node("a").Gates["vet"]; g.Waiting() != nil {
					w.t.Errorf("gate vet still waiting: %+v", g.Waiting())
				}
				return nil
			}, nil},
			gateStep("it passes", "a", "vet", 3, protocol.GatePassed,
				"gate.finished a/vet passed", "integrate a", "node.integrated a", "node.finished a succeeded", "finish succeeded deliver"),
			{"after the end, a wait changes nothing", func(w *world) []string { return w.waiting("a", "", 0, agentScope) }, nil},
		},
	}, {
		name:   "another attempt's wait is ignored; a new attempt starts without one",
		yaml:   "name: b\n" + agent + "tasks:\n  - {id: a, prompt: a}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"waiting", func(w *world) []string { return w.waiting("a", "", 0, agentScope) }, lines("node.waiting a " + agentScope)},
			{"the agent fails: a retry is scheduled", func(w *world) []string { return w.agentFails("a", 1, "boom") },
				lines("node.agent_done a failed", "node.retry_scheduled a")},
			{"attempt 1's wait, late, changes nothing", func(w *world) []string {
				return w.waiting("a", "", 0, agentScope)
			}, nil},
			{"attempt 2 starts without a wait", func(w *world) []string {
				out := w.later(time.Hour)
				if n := w.node("a"); n.Attempt != 2 || n.Waiting() != nil {
					w.t.Errorf("attempt %d waiting %+v", n.Attempt, n.Waiting())
				}
				return out
			}, lines("node.ready a", "publish agent a a2")},
		},
	}})
}

// The waiting events survive the log's encoding.
func TestBreakerWaitsRoundTrip(t *testing.T) {
	w, _ := newWorld(t, "name: b\n"+agent+"tasks:\n  - {id: a, prompt: a, gates: [vet]}\ngates:\n  - {name: vet, command: [vet]}\n", true)
	check(t, "node", w.waiting("a", "", 0, "agent:x:y"), lines("node.waiting a agent:x:y"))
	w.started("a", 1)
	w.agentDone("a", 1, protocol.AgentSucceeded, false)
	check(t, "gate", w.waiting("a", "vet", 1, "gate:vet:00"), lines("gate.waiting a/vet r1 gate:vet:00"))
	if g := w.node("a").Gates["vet"]; g.Waiting() == nil || g.Waiting().Scope != "gate:vet:00" || g.Waiting().Host != "h" {
		t.Errorf("gate vet waiting %+v", g.Waiting())
	}
}
