package statemachine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// agent is the defaults of most scenarios: their agents often succeed
// without a change, which is beside their point, so they allow it.
const agent = "defaults:\n  agent: {command: [fake-agent]}\n  allow_empty: true\n"

// once gives every task a single attempt (after agent): a failure
// escalates at once, and a human decides.
const once = "  max_attempts: 1\n"

// rejectStep is a step in which a human rejects the escalated node.
func rejectStep(name, node string, want ...string) step {
	return step{name, func(w *world) []string {
		return w.command(statemachine.Reject(w.wf(), node, "ops", "not fixable", w.now))
	}, want}
}

// step is one thing that happens to a workflow, and every effect the
// coordinator carries out in answer, in order.
type step struct {
	name string
	do   func(w *world) []string
	want []string
}

// scenario is a workflow and what happens to it.
type scenario struct {
	name   string
	yaml   string
	submit []string // effects of the submission
	steps  []step
	// after checks the final state.
	after func(t *testing.T, w *world)
}

// agentStep is a step in which node's agent reports st under token, with
// a patch if patch is set (see world.agentDone).
func agentStep(name, node string, token uint64, st protocol.AgentStatus, patch bool, want ...string) step {
	return step{name, func(w *world) []string { return w.agentDone(node, token, st, patch) }, want}
}

// gateStep is a step in which gate of node reports st under token (see
// world.gateDone).
func gateStep(name, node, gate string, token uint64, st protocol.GateStatus, want ...string) step {
	return step{name, func(w *world) []string { return w.gateDone(node, gate, token, st) }, want}
}

func runScenarios(t *testing.T, scenarios []scenario) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			w, got := newWorld(t, sc.yaml)
			check(t, "submit", got, sc.submit)
			for _, s := range sc.steps {
				check(t, s.name, s.do(w), s.want)
			}
			if sc.after != nil {
				sc.after(t, w)
			}
		})
	}
}

// Scheduling: a node becomes ready when every dependency succeeded, its
// agent job is published right after the event (and once), a node whose
// dependency ended otherwise is skipped transitively, and the workflow
// finishes when every node has.
func TestScheduling(t *testing.T) {
	runScenarios(t, []scenario{{
		name: "diamond",
		yaml: "name: d\n" + agent + "tasks:\n  - {id: a, prompt: a}\n  - {id: b, prompt: b}\n" +
			"  - {id: c, prompt: c, depends_on: [a, b]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: []step{
			{"a starts", func(w *world) []string { return w.started("a", 1) }, lines("node.started a")},
			agentStep("a succeeds with a change; c still waits on b", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "integrate a", "node.integrated a", "node.finished a succeeded"),
			agentStep("b succeeds without one: c becomes ready on both", "b", 1, protocol.AgentSucceeded, false,
				"node.agent_done b succeeded", "integrate b", "node.integrated b", "node.finished b succeeded",
				"node.ready c", "publish agent c a1"),
			{"nothing more to do until c reports", func(w *world) []string { return w.later(time.Minute) }, nil},
			agentStep("c succeeds: the workflow succeeds and its branch is delivered", "c", 1, protocol.AgentSucceeded, true,
				"node.agent_done c succeeded", "integrate c", "node.integrated c", "node.finished c succeeded",
				"finish succeeded deliver"),
			{"a finished workflow decides nothing", func(w *world) []string { return w.later(time.Hour) }, nil},
		},
		after: func(t *testing.T, w *world) {
			c := w.node("c")
			job := statemachine.Decide(w.wf(), w.now, nil)
			if len(job.Effects) != 0 {
				t.Errorf("finished workflow decided %v", job.Effects)
			}
			if w.wf().Head != strings.Repeat("0", 39)+"2" || c.Commit() != w.wf().Head || !c.Integrated() {
				t.Errorf("head %s, c's commit %s", w.wf().Head, c.Commit())
			}
			if got := w.wf().Integrated; strings.Join(got, ",") != "a,b,c" {
				t.Errorf("integrated %v", got)
			}
		},
	}, {
		name: "an agent failure escalates; rejected, it skips dependents transitively",
		yaml: "name: f\n" + agent + once + "tasks:\n  - {id: a, prompt: a}\n  - {id: b, prompt: b, depends_on: [a]}\n" +
			"  - {id: c, prompt: c, depends_on: [b]}\n  - {id: x, prompt: x}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready x", "publish agent x a1"),
		steps: []step{
			agentStep("a's agent fails: its only attempt, a escalates", "a", 1, protocol.AgentFailed, false,
				"node.agent_done a failed", "node.escalated a"),
			rejectStep("a human rejects a: b and c skipped", "a",
				"node.rejected a", "node.finished b skipped", "node.finished c skipped"),
			agentStep("x succeeds: the workflow fails, nothing to deliver", "x", 1, protocol.AgentSucceeded, false,
				"node.agent_done x succeeded", "integrate x", "node.integrated x", "node.finished x succeeded",
				// x's integration set the branch, at the base: it is delivered.
				"finish failed deliver"),
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").History()[0].Reason; r != "1 of 1 attempts used (agent failed (exit 3): boom)" {
				t.Errorf("a's escalation %q", r)
			}
			if r := w.node("a").Reason; r != "rejected by ops: not fixable" {
				t.Errorf("a's reason %q", r)
			}
			if r := w.node("c").Reason; r != "dependency b skipped" {
				t.Errorf("c's reason %q", r)
			}
			if r := w.wf().Reason; r != "nodes did not succeed: a failed, b skipped, c skipped" {
				t.Errorf("workflow reason %q", r)
			}
		},
	}, {
		name:   "a failed workflow with accepted work delivers it",
		yaml:   "name: p\n" + agent + once + "tasks:\n  - {id: a, prompt: a}\n  - {id: b, prompt: b}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: []step{
			agentStep("a lands a change", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "integrate a", "node.integrated a", "node.finished a succeeded"),
			agentStep("b times out: escalated", "b", 1, protocol.AgentTimeout, false,
				"node.agent_done b timeout", "node.escalated b"),
			rejectStep("b rejected: the workflow fails", "b", "node.rejected b", "finish failed deliver"),
		},
	}, {
		name:   "unpublished jobs are published again, published ones are not",
		yaml:   "name: r\n" + agent + "tasks:\n  - {id: a, prompt: a}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"published: nothing to do", func(w *world) []string { return w.settle() }, nil},
			{"a restarted engine has published nothing", func(w *world) []string {
				w.published = map[string]bool{}
				return w.settle()
			}, lines("publish agent a a1")},
		},
	}})
}

// Gates: dispatched in dependency layers once the agent succeeded; a
// blocking failure skips its dependents while independent gates still
// run; the node is decided when every gate has reported.
func TestGateFanOutAndFold(t *testing.T) {
	const gates = "gates:\n  - {name: vet, command: [vet]}\n  - {name: test, command: [test], depends_on: [vet]}\n" +
		"  - {name: lint, command: [lint], pool: lint}\n"
	// A deeper plan: test needs build and vet, race needs test, e2e needs
	// build; task a runs race, lint and e2e, so all six.
	const deep = "name: g\n" + agent + once + "gates:\n  - {name: vet, command: [vet]}\n  - {name: build, command: [build]}\n" +
		"  - {name: test, command: [test], depends_on: [build, vet]}\n  - {name: race, command: [race], depends_on: [test]}\n" +
		"  - {name: lint, command: [lint]}\n  - {name: e2e, command: [e2e], depends_on: [build]}\n" +
		"tasks:\n  - {id: a, prompt: a, gates: [race, lint, e2e]}\n"
	deepLayer0 := agentStep("agent succeeds: layer 0 dispatched", "a", 1, protocol.AgentSucceeded, false,
		"node.agent_done a succeeded", "gate.dispatched a/build r1", "publish gate a/build r1",
		"gate.dispatched a/lint r1", "publish gate a/lint r1", "gate.dispatched a/vet r1", "publish gate a/vet r1")
	runScenarios(t, []scenario{{
		name:   "layers, then integrate",
		yaml:   "name: g\n" + agent + gates + "tasks:\n  - {id: a, prompt: a, gates: [test, lint]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("agent succeeds: layer 0 dispatched", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/lint r1", "publish gate a/lint r1",
				"gate.dispatched a/vet r1", "publish gate a/vet r1"),
			gateStep("vet passes: test follows", "a", "vet", 1, protocol.GatePassed,
				"gate.finished a/vet passed", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test passes, lint still out", "a", "test", 1, protocol.GatePassed, "gate.finished a/test passed"),
			gateStep("lint passes: integrate, succeed, finish", "a", "lint", 1, protocol.GatePassed,
				"gate.finished a/lint passed", "integrate a", "node.integrated a", "node.finished a succeeded",
				"finish succeeded deliver"),
		},
		after: func(t *testing.T, w *world) {
			in := statemachine.Integrate{}
			for _, ev := range w.events {
				if b, ok := ev.Body.(eventlog.NodeIntegrated); ok {
					in.CommitTime = b.CommitTime
				}
			}
			// The commit is dated when the agent finished, to the second.
			if want := t0.Add(time.Second); !in.CommitTime.Equal(want) {
				t.Errorf("commit time %s, want the agent's finish %s", in.CommitTime, want)
			}
		},
	}, {
		name:   "a failure skips dependents, independent gates finish, the node escalates",
		yaml:   "name: g\n" + agent + once + gates + "tasks:\n  - {id: a, prompt: a, gates: [test, lint]}\n  - {id: d, prompt: d, depends_on: [a]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("agent succeeds", "a", 1, protocol.AgentSucceeded, false,
				"node.agent_done a succeeded", "gate.dispatched a/lint r1", "publish gate a/lint r1",
				"gate.dispatched a/vet r1", "publish gate a/vet r1"),
			gateStep("vet fails: test skipped, lint still running", "a", "vet", 1, protocol.GateFailed,
				"gate.finished a/vet failed", "gate.finished a/test skipped"),
			gateStep("lint passes: a escalates, d waits", "a", "lint", 1, protocol.GatePassed,
				"gate.finished a/lint passed", "node.escalated a"),
			rejectStep("a rejected: d skipped, workflow fails", "a", "node.rejected a", "node.finished d skipped", "finish failed"),
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").History()[0].Reason; r != "1 of 1 attempts used (gates did not pass: vet failed)" {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		// DP-07/DP-08 in the deeper plan.
		name:   "a gate waits for every dependency; a timeout skips its dependents transitively",
		yaml:   deep,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			deepLayer0,
			gateStep("build passes: e2e follows, test still waits for vet", "a", "build", 1, protocol.GatePassed,
				"gate.finished a/build passed", "gate.dispatched a/e2e r1", "publish gate a/e2e r1"),
			gateStep("vet times out: test and race skipped", "a", "vet", 1, protocol.GateTimeout,
				"gate.finished a/vet timeout", "gate.finished a/test skipped", "gate.finished a/race skipped"),
			gateStep("e2e passes", "a", "e2e", 1, protocol.GatePassed, "gate.finished a/e2e passed"),
			gateStep("lint passes: the node escalates on vet", "a", "lint", 1, protocol.GatePassed,
				"gate.finished a/lint passed", "node.escalated a"),
			rejectStep("rejected: the workflow fails", "a", "node.rejected a", "finish failed"),
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").History()[0].Reason; r != "1 of 1 attempts used (gates did not pass: vet timeout)" {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		name:   "an error skips its dependents at once, though another dependency still runs",
		yaml:   deep,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			deepLayer0,
			gateStep("build errs while vet runs: e2e, test and race skipped", "a", "build", 1, protocol.GateError,
				"gate.finished a/build error", "gate.finished a/e2e skipped", "gate.finished a/test skipped",
				"gate.finished a/race skipped"),
			gateStep("vet passes", "a", "vet", 1, protocol.GatePassed, "gate.finished a/vet passed"),
			gateStep("lint passes: build could not run, the node escalates", "a", "lint", 1, protocol.GatePassed,
				"gate.finished a/lint passed", "node.escalated a"),
			rejectStep("rejected: the workflow fails", "a", "node.rejected a", "finish failed"),
		},
	}, {
		name: "failed outranks pending",
		yaml: "name: g\n" + agent + once + "gates:\n  - {name: ci, command: [ci]}\n  - {name: vet, command: [vet]}\n" +
			"tasks:\n  - {id: a, prompt: a, gates: [ci, vet]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("agent succeeds", "a", 1, protocol.AgentSucceeded, false,
				"node.agent_done a succeeded", "gate.dispatched a/ci r1", "publish gate a/ci r1",
				"gate.dispatched a/vet r1", "publish gate a/vet r1"),
			gateStep("ci pending", "a", "ci", 1, protocol.GatePending, "gate.finished a/ci pending"),
			gateStep("vet fails: the node escalates with ci still pending", "a", "vet", 1, protocol.GateFailed,
				"gate.finished a/vet failed", "node.escalated a"),
			rejectStep("rejected: the workflow fails", "a", "node.rejected a", "finish failed"),
		},
	}, {
		name: "warnings do not block; integrity violations always do",
		yaml: "name: g\n" + agent + "gates:\n  - {name: style, command: [style], severity: warning}\n" +
			"  - {name: audit, command: [audit], severity: warning}\n" +
			"tasks:\n  - id: w\n    prompt: w\n    gates: {required: [], optional: [style]}\n" +
			"  - id: v\n    prompt: v\n    gates: {required: [], optional: [audit]}\n",
		submit: lines("workflow.submitted", "node.ready w", "publish agent w a1", "node.ready v", "publish agent v a1"),
		steps: []step{
			{"both agents succeed", func(w *world) []string {
				return append(w.agentDone("w", 1, protocol.AgentSucceeded, false), w.agentDone("v", 2, protocol.AgentSucceeded, false)...)
			}, lines("node.agent_done w succeeded", "gate.dispatched w/style r1", "publish gate w/style r1",
				"node.agent_done v succeeded", "gate.dispatched v/audit r1", "publish gate v/audit r1")},
			gateStep("an optional warning fails: reported, not blocking", "w", "style", 1, protocol.GateFailed,
				"gate.finished w/style failed", "integrate w", "node.integrated w", "node.finished w succeeded"),
			{"an optional warning breaks integrity: blocking", func(w *world) []string {
				// The gate runner reports a violation as a failure.
				return w.gateDone("v", "audit", 1, protocol.GateFailed, "modified README.md")
			}, lines("gate.finished v/audit failed", "node.escalated v")},
			{"it cannot be approved", func(w *world) []string {
				return w.command(statemachine.Approve(w.wf(), "v", "ops", "", w.now))
			}, lines("refused conflict: node v: gate audit found an integrity violation in attempt 1; it cannot be approved (reject it, or retry)")},
			rejectStep("rejected: the workflow fails", "v", "node.rejected v", "finish failed deliver"),
		},
		after: func(t *testing.T, w *world) {
			// Escalated at once, though the node had attempts left.
			want := "gate audit changed the workspace outside its allowed_writes (integrity violation: modified README.md) (gates did not pass: audit failed)"
			if r := w.node("v").History()[0].Reason; r != want {
				t.Errorf("reason %q", r)
			}
		},
	}})
}

// Pending gates: polled poll_interval after the last pending result, never
// while a poll is out, and timed out max_pending after the first; the
// decision says when to look again.
func TestPendingGates(t *testing.T) {
	yaml := "name: p\n" + agent + once + "gates:\n  - {name: ci, command: [ci], poll_interval: 10s, max_pending: 1m}\n" +
		"tasks:\n  - {id: a, prompt: a, gates: [ci]}\n"
	// Both scenarios start alike: the agent succeeds, ci reports pending.
	ciOut := agentStep("agent succeeds", "a", 1, protocol.AgentSucceeded, false,
		"node.agent_done a succeeded", "gate.dispatched a/ci r1", "publish gate a/ci r1")
	ciPending := gateStep("pending", "a", "ci", 1, protocol.GatePending, "gate.finished a/ci pending")
	runScenarios(t, []scenario{{
		name:   "polled, then passing",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			ciOut,
			ciPending,
			{"9 s later: not yet", func(w *world) []string { return w.later(9 * time.Second) }, nil},
			{"10 s: polled as round 2", func(w *world) []string { return w.later(time.Second) },
				lines("gate.dispatched a/ci r2 poll", "publish gate a/ci r2")},
			{"while the poll is out, no other", func(w *world) []string { return w.later(30 * time.Second) }, nil},
			{"a round-1 result now is stale", func(w *world) []string {
				return w.gateRound("a", "ci", 1, 5, protocol.GatePassed)
			}, lines("stale: round 1, current round 2")},
			gateStep("round 2 passes", "a", "ci", 1, protocol.GatePassed,
				"gate.finished a/ci passed", "integrate a", "node.integrated a", "node.finished a succeeded", "finish succeeded deliver"),
		},
	}, {
		name:   "timed out past max_pending, even with a poll out",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			ciOut,
			ciPending,
			{"wake-up at the next poll", func(w *world) []string {
				d := statemachine.Decide(w.wf(), w.now, func(string) bool { return true })
				return []string{d.Wake.Sub(w.now).String()}
			}, lines("10s")},
			{"polled", func(w *world) []string { return w.later(10 * time.Second) },
				lines("gate.dispatched a/ci r2 poll", "publish gate a/ci r2")},
			{"wake-up at the deadline while the poll is out", func(w *world) []string {
				d := statemachine.Decide(w.wf(), w.now, func(string) bool { return true })
				return []string{d.Wake.Sub(w.now).String()}
			}, lines("50.001s")},
			{"a minute after the first pending result: timeout", func(w *world) []string { return w.later(51 * time.Second) },
				lines("gate.finished a/ci timeout", "node.escalated a")},
			gateStep("the late poll result changes nothing", "a", "ci", 1, protocol.GatePassed),
		},
		after: func(t *testing.T, w *world) {
			if g := w.node("a").Gates["ci"]; g.Status != protocol.GateTimeout || !strings.Contains(g.Result.Error, "longer than max_pending 1m0s") {
				t.Errorf("ci = %+v", g.Result)
			}
		},
	}})
}

// Reports carry the runner's lease token: an older lease's, another
// attempt's, a gate that has moved on are ignored.
func TestStaleReports(t *testing.T) {
	runScenarios(t, []scenario{{
		name:   "fencing",
		yaml:   "name: s\n" + agent + "gates:\n  - {name: vet, command: [vet]}\ntasks:\n  - {id: n, prompt: n, gates: [vet]}\n",
		submit: lines("workflow.submitted", "node.ready n", "publish agent n a1"),
		steps: []step{
			{"started under lease 5", func(w *world) []string { return w.started("n", 5) }, lines("node.started n")},
			{"an older start", func(w *world) []string { return w.started("n", 4) }, lines("stale: older or same lease")},
			agentStep("a result under an older lease", "n", 3, protocol.AgentSucceeded, false,
				"stale: lease 5 is current"),
			{"another attempt's result", func(w *world) []string {
				return w.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
					WorkflowID: testWF, NodeID: "n", Attempt: 2, LeaseToken: 9, Status: protocol.AgentFailed}})
			}, nil},
			agentStep("the current lease's result", "n", 5, protocol.AgentSucceeded, false,
				"node.agent_done n succeeded", "gate.dispatched n/vet r1", "publish gate n/vet r1"),
			agentStep("a second result for the attempt", "n", 6, protocol.AgentFailed, false),
			{"gate started under 7", func(w *world) []string {
				return w.report(&protocol.Report{Type: protocol.ReportStarted, Started: &protocol.Started{Kind: protocol.KindGate,
					WorkflowID: testWF, NodeID: "n", Gate: "vet", Attempt: 1, LeaseToken: 7}})
			}, lines("gate.started n/vet")},
			gateStep("a gate result under 6", "n", "vet", 6, protocol.GateFailed, "stale: lease 7 is current"),
			gateStep("a newer lease's result", "n", "vet", 8, protocol.GatePassed,
				"gate.finished n/vet passed", "integrate n", "node.integrated n", "node.finished n succeeded", "finish succeeded deliver"),
			agentStep("after the end, nothing", "n", 99, protocol.AgentFailed, false),
		},
	}})
}

// Dead letters: a job that exhausted its deliveries fails its node, or
// makes its gate an infrastructure error.
func TestDeadLetters(t *testing.T) {
	dead := func(w *world, node, gate string) []string {
		d := &protocol.DeadLetter{Kind: protocol.KindAgent, JobID: protocol.AgentJobID(testWF, node, 1), WorkflowID: testWF,
			NodeID: node, Attempt: 1, Deliveries: 5, Reason: "no ack"}
		if gate != "" {
			d.Kind, d.Gate, d.JobID = protocol.KindGate, gate, protocol.GateJobID(testWF, node, 1, gate, 1)
		}
		return w.report(&protocol.Report{Type: protocol.ReportDeadLetter, DeadLetter: d})
	}
	runScenarios(t, []scenario{{
		name: "agent and gate jobs",
		yaml: "name: dl\n" + agent + "gates:\n  - {name: vet, command: [vet]}\n" +
			"tasks:\n  - {id: a, prompt: a}\n  - {id: g, prompt: g, gates: [vet]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready g", "publish agent g a1"),
		steps: []step{
			{"a's job dead-lettered: escalated", func(w *world) []string { return dead(w, "a", "") }, lines("node.escalated a")},
			agentStep("g gating", "g", 1, protocol.AgentSucceeded, false,
				"node.agent_done g succeeded", "gate.dispatched g/vet r1", "publish gate g/vet r1"),
			{"vet's job dead-lettered", func(w *world) []string { return dead(w, "g", "vet") },
				lines("gate.finished g/vet error", "node.escalated g")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; !strings.Contains(r, "dead-lettered after 5 deliveries: no ack") {
				t.Errorf("a's reason %q", r)
			}
			if r := w.node("g").Reason; !strings.HasPrefix(r, "gate vet could not run: ") || !strings.Contains(r, "dead-lettered") {
				t.Errorf("g's reason %q", r)
			}
			if w.wf().Status != protocol.WorkflowNeedsAttention {
				t.Errorf("workflow %s", w.wf().Status)
			}
		},
	}})
}

// Operators' commands: cancel, gate reruns (reopening a failed node), gate
// changes on a running node — and what each refuses.
func TestCommands(t *testing.T) {
	gates := "gates:\n  - {name: flaky, command: [flaky]}\n  - {name: vet, command: [vet]}\n"
	runScenarios(t, []scenario{{
		name:   "cancel",
		yaml:   "name: c\n" + agent + "tasks:\n  - {id: a, prompt: a}\n  - {id: b, prompt: b, depends_on: [a]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("a lands a change", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "integrate a", "node.integrated a", "node.finished a succeeded",
				"node.ready b", "publish agent b a1"),
			{"cancel", func(w *world) []string { return w.command(statemachine.Cancel(w.wf(), w.now)) },
				lines("workflow.cancel_requested", "node.finished b cancelled", "finish cancelled deliver announce")},
			{"cancel again", func(w *world) []string { return w.command(statemachine.Cancel(w.wf(), w.now)) },
				lines("refused conflict: workflow wf-test already cancelled")},
			agentStep("a late result", "b", 1, protocol.AgentSucceeded, false),
			{"rerun in a cancelled workflow", func(w *world) []string {
				return w.command(statemachine.RerunGates(w.wf(), "a", "", false, w.now))
			}, lines("refused conflict: workflow wf-test was cancelled")},
		},
	}, {
		name: "gate rerun reopens an escalated node",
		yaml: "name: r\n" + agent + once + gates + "tasks:\n  - {id: a, prompt: a, gates: [flaky, vet]}\n" +
			"  - {id: b, prompt: b, depends_on: [a]}\n  - {id: c, prompt: c, depends_on: [b]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("agent succeeds", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/flaky r1", "publish gate a/flaky r1",
				"gate.dispatched a/vet r1", "publish gate a/vet r1"),
			{"flaky fails, vet passes", func(w *world) []string {
				return append(w.gateDone("a", "flaky", 1, protocol.GateFailed), w.gateDone("a", "vet", 1, protocol.GatePassed)...)
			}, lines("gate.finished a/flaky failed", "gate.finished a/vet passed", "node.escalated a")},
			{"rerun of an unknown gate", func(w *world) []string {
				return w.command(statemachine.RerunGates(w.wf(), "a", "nope", false, w.now))
			}, lines(`refused not found: node a has no gate "nope"`)},
			{"rerun of a skipped node", func(w *world) []string {
				return w.command(statemachine.RerunGates(w.wf(), "b", "", false, w.now))
			}, lines("refused conflict: node b is pending: only a node whose agent succeeded and that is gating, or failed or escalated on its gates, can rerun gates")},
			{"rerun of an unknown node", func(w *world) []string {
				return w.command(statemachine.RerunGates(w.wf(), "zz", "", false, w.now))
			}, lines(`refused not found: workflow wf-test has no node "zz"`)},
			{"rerun flaky without the cache", func(w *world) []string {
				return w.command(statemachine.RerunGates(w.wf(), "a", "flaky", true, w.now))
			}, lines("node.reopened a", "gate.rerun_requested a/flaky",
				"gate.dispatched a/flaky r2", "publish gate a/flaky r2 no-cache")},
			gateStep("it passes: a succeeds, b and c run", "a", "flaky", 1, protocol.GatePassed,
				"gate.finished a/flaky passed", "integrate a", "node.integrated a", "node.finished a succeeded",
				"node.ready b", "publish agent b a1"),
		},
		after: func(t *testing.T, w *world) {
			wf := w.wf()
			if wf.Status != protocol.WorkflowRunning || wf.Generation != 1 || w.node("c").Status != protocol.NodePending {
				t.Errorf("after the rerun: workflow %s generation %d, c %s", wf.Status, wf.Generation, w.node("c").Status)
			}
			// Transitions repeated after a reopening get de-duplication
			// ids of their own.
			var ids []string
			for _, e := range statemachine.Decide(wf, w.now, nil).Effects {
				if a, ok := e.(statemachine.Append); ok {
					ids = append(ids, a.MsgID)
				}
			}
			if len(ids) != 0 {
				t.Errorf("unexpected appends %v", ids)
			}
			eff, err := statemachine.Cancel(wf, w.now)
			if err != nil || len(eff) != 1 || eff[0].(statemachine.Append).MsgID != testWF+".cancel.g1" {
				t.Errorf("cancel after a reopening: %v, %v", eff, err)
			}
		},
	}, {
		name: "rerunning a gate reruns the gates it had skipped",
		yaml: "name: s\n" + agent + once + "gates:\n  - {name: vet, command: [vet]}\n  - {name: test, command: [test], depends_on: [vet]}\n" +
			"tasks:\n  - {id: a, prompt: a, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("agent succeeds", "a", 1, protocol.AgentSucceeded, false,
				"node.agent_done a succeeded", "gate.dispatched a/vet r1", "publish gate a/vet r1"),
			gateStep("vet fails, test skipped", "a", "vet", 1, protocol.GateFailed,
				"gate.finished a/vet failed", "gate.finished a/test skipped", "node.escalated a"),
			{"rerun vet: test waits for it", func(w *world) []string {
				return w.command(statemachine.RerunGates(w.wf(), "a", "vet", false, w.now))
			}, lines("node.reopened a", "gate.rerun_requested a/vet", "gate.rerun_requested a/test",
				"gate.dispatched a/vet r2", "publish gate a/vet r2")},
			gateStep("vet passes: test runs", "a", "vet", 1, protocol.GatePassed,
				"gate.finished a/vet passed", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test passes: a succeeds", "a", "test", 1, protocol.GatePassed,
				"gate.finished a/test passed", "integrate a", "node.integrated a", "node.finished a succeeded", "finish succeeded deliver"),
		},
	}, {
		name:   "gate changes on a node",
		yaml:   "name: ch\n" + agent + gates + "tasks:\n  - {id: a, prompt: a, gates: [vet]}\n  - {id: d, prompt: d, gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready d", "publish agent d a1"),
		steps: []step{
			agentStep("a gating", "a", 1, protocol.AgentSucceeded, false,
				"node.agent_done a succeeded", "gate.dispatched a/vet r1", "publish gate a/vet r1"),
			{"add a gate depending on vet: it waits for vet", func(w *world) []string {
				ev, err := statemachine.ChangeGates(w.wf(), w.node("a"), eventlog.GateChange{Definition: &protocol.GateSpec{
					Name: "late", Command: []string{"late"}, DependsOn: []string{"vet"}}}, w.now)
				return w.command([]statemachine.Effect{ev}, err)
			}, lines("node.gates_changed a +late")},
			{"remove vet while late needs it", func(w *world) []string {
				ev, err := statemachine.ChangeGates(w.wf(), w.node("a"), eventlog.GateChange{Remove: "vet"}, w.now)
				return w.command([]statemachine.Effect{ev}, err)
			}, lines(`refused conflict: gate "vet" of node a is needed by late (depends_on); remove those first`)},
			gateStep("vet passes: late runs", "a", "vet", 1, protocol.GatePassed,
				"gate.finished a/vet passed", "gate.dispatched a/late r1", "publish gate a/late r1"),
			{"remove late while it runs: a is decided on vet alone", func(w *world) []string {
				ev, err := statemachine.ChangeGates(w.wf(), w.node("a"), eventlog.GateChange{Remove: "late"}, w.now)
				return w.command([]statemachine.Effect{ev}, err)
			}, lines("node.gates_changed a -late", "integrate a", "node.integrated a", "node.finished a succeeded")},
			{"a finished node takes no changes", func(w *world) []string {
				ev, err := statemachine.ChangeGates(w.wf(), w.node("a"), eventlog.GateChange{Remove: "vet"}, w.now)
				return w.command([]statemachine.Effect{ev}, err)
			}, lines("refused conflict: node a already succeeded: gate changes apply to a node's next gate round, and a finished node has none")},
			{"a node before its agent: the gate runs once it succeeds", func(w *world) []string {
				ev, err := statemachine.ChangeGates(w.wf(), w.node("d"), eventlog.GateChange{Definition: &protocol.GateSpec{
					Name: "extra", Command: []string{"x"}}}, w.now)
				return append(w.command([]statemachine.Effect{ev}, err), w.agentDone("d", 1, protocol.AgentSucceeded, false)...)
			}, lines("node.gates_changed d +extra", "node.agent_done d succeeded", "gate.dispatched d/extra r1", "publish gate d/extra r1")},
		},
	}})
}
