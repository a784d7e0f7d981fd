package statemachine_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// queueYAML is two sibling tasks, each with its own gate, in a workflow
// whose integration gate tests their work together.
const queueYAML = "name: q\n" + agent +
	"gates:\n  - {name: own, command: [check-own]}\n  - {name: combined, command: [check-combined]}\n" +
	"integration_gates: [combined]\n" +
	"tasks:\n  - {id: a, prompt: A, gates: [own]}\n  - {id: b, prompt: B, gates: [own]}\n"

// integDone reports the result of node's integration gate for its
// current speculation's round.
func (w *world) integDone(node, gate string, token uint64, st protocol.GateStatus) []string {
	w.t.Helper()
	n := w.node(node)
	if n.Speculation() == nil || n.Speculation().Gates[gate] == nil {
		w.t.Fatalf("%s runs no integration gate %s", node, gate)
	}
	return w.integRound(node, gate, n.Speculation().Gates[gate].Round, token, st)
}

// integRound reports the result of round round of node's integration
// gate, which may be a superseded speculation's.
func (w *world) integRound(node, gate string, round int, token uint64, st protocol.GateStatus) []string {
	n := w.node(node)
	exit := 0
	if st != protocol.GatePassed {
		exit = 1
	}
	r := &protocol.GateResult{JobID: statemachine.IntegrationJobID(w.id, node, n.Attempt, gate, round), WorkflowID: w.id,
		NodeID: node, Gate: gate, Attempt: n.Attempt, LeaseToken: token, Host: "g", Status: st, ExitCode: &exit, Round: round,
		Stdout: "combined check on " + node}
	return w.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: r})
}

// integrationJob is the integration gate job Decide would publish for
// node now, as a restarted engine that has published nothing sees it.
func (w *world) integrationJob(node string) *protocol.GateJob {
	w.t.Helper()
	for _, e := range statemachine.Decide(w.wf(), w.now, nil).Effects {
		if p, ok := e.(statemachine.Publish); ok && p.Gate != nil && p.Gate.NodeID == node &&
			strings.Contains(p.Gate.JobID, ".i.") {
			return p.Gate
		}
	}
	w.t.Fatalf("no integration job of %s to publish", node)
	return nil
}

// patchNames lists a job's patches as node/attempt.
func patchNames(job *protocol.GateJob) string {
	var out []string
	for _, p := range job.Patches {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(p.Object, testWF+"/"), ".patch"))
	}
	return strings.Join(out, " ")
}

// bothQueued are the steps that bring a and b into the integration queue,
// a ahead of b, each having passed its own gate.
var bothQueued = []step{
	agentStep("a's agent makes a change", "a", 1, protocol.AgentSucceeded, true,
		"node.agent_done a succeeded", "gate.dispatched a/own r1", "publish gate a/own r1"),
	agentStep("b's agent makes a change", "b", 1, protocol.AgentSucceeded, true,
		"node.agent_done b succeeded", "gate.dispatched b/own r1", "publish gate b/own r1"),
	gateStep("a passes its own gate: it joins the queue, its integration gate runs on the branch", "a", "own", 1,
		protocol.GatePassed, "gate.finished a/own passed", "node.integration_queued a",
		"integration.dispatched a/combined r1 on []", "publish integration a/combined r1"),
	gateStep("b passes its own gate: it joins the queue behind a, tested on top of a", "b", "own", 1,
		protocol.GatePassed, "gate.finished b/own passed", "node.integration_queued b",
		"integration.dispatched b/combined r1 on [a]", "publish integration b/combined r1"),
	{"a's run applies a's patch on the base; b's applies a's, then b's", func(w *world) []string {
		return lines(patchNames(w.integrationJob("a")), patchNames(w.integrationJob("b")),
			strings.Join(w.wf().IntegrationQueue(), " "))
	}, lines("a/a1", "a/a1 b/a1", "a b")},
}

func steps(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// The integration queue (GIT-08): siblings whose own gates passed land in
// queue order once their integration gates passed on top of everything
// ahead of them; a failure is a failed round with feedback naming the
// nodes it broke the combination with, and those behind are tested again
// without it; results of a superseded speculation are ignored.
func TestIntegrationQueue(t *testing.T) {
	runScenarios(t, []scenario{{
		name:   "two siblings both pass: both integrate, in queue order",
		yaml:   queueYAML,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: steps(bothQueued, []step{
			{"b passes first: it waits for a, ahead of it, to land", func(w *world) []string {
				out := w.integDone("b", "combined", 1, protocol.GatePassed)
				return append(out, string(w.node("b").Status))
			}, lines("integration.finished b/combined passed", "integrating")},
			{"a passes: a lands, then b, whose run assumed exactly a", func(w *world) []string {
				return w.integDone("a", "combined", 1, protocol.GatePassed)
			}, lines("integration.finished a/combined passed", "integrate a", "node.integrated a",
				"node.finished a succeeded", "integrate b", "node.integrated b",
				"node.finished b succeeded", "finish succeeded deliver")},
		}),
		after: func(t *testing.T, w *world) {
			if got := w.wf().Integrated; !reflect.DeepEqual(got, []string{"a", "b"}) {
				t.Fatalf("integrated %v; want [a b]", got)
			}
		},
	}, {
		name:   "the second fails only on top of the first: it waits for the first to land, then retries with feedback naming it",
		yaml:   queueYAML,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: steps(bothQueued, []step{
			{"b fails on top of a while a is still under test: nothing yet", func(w *world) []string {
				return append(w.integDone("b", "combined", 1, protocol.GateFailed), string(w.node("b").Status))
			}, lines("integration.finished b/combined failed", "integrating")},
			{"a passes and lands; b's failure is now its own: a failed round", func(w *world) []string {
				return w.integDone("a", "combined", 1, protocol.GatePassed)
			}, lines("integration.finished a/combined passed", "integrate a", "node.integrated a",
				"node.finished a succeeded", "node.retry_scheduled b")},
			{"b's feedback says it broke the combination with a", func(w *world) []string {
				n := w.node("b")
				f := feedbackOf(t, n.Feedback())
				var out []string
				if f.Integration == nil || !reflect.DeepEqual(f.Integration.Ahead, []string{"a"}) ||
					!reflect.DeepEqual(f.Integration.Gates, []string{"combined"}) {
					out = append(out, "feedback: "+string(n.Feedback()))
				}
				if len(f.Gates) != 1 || f.Gates[0].Name != "combined" {
					out = append(out, "gates in the feedback: "+string(n.Feedback()))
				}
				return append(out, n.Reason)
			}, lines("integration gates did not pass on top of a: combined failed")},
			{"b's attempt 2 is told so in its prompt", func(w *world) []string {
				w.later(retryDelay + 60e9)
				job := w.job("b")
				return lines(boolText(strings.Contains(job.Prompt, "broke the combination") &&
					strings.Contains(job.Prompt, "the work of a")))
			}, lines("true")},
			agentStep("b's attempt 2", "b", 2, protocol.AgentSucceeded, true,
				"node.agent_done b succeeded", "gate.dispatched b/own r1", "publish gate b/own r1"),
			gateStep("b passes its own gate: queued again, tested on the branch (a is on it)", "b", "own", 2,
				protocol.GatePassed, "gate.finished b/own passed", "node.integration_queued b",
				"integration.dispatched b/combined r1 on []", "publish integration b/combined r1"),
			{"its run applies a's patch, then attempt 2's", func(w *world) []string {
				return lines(patchNames(w.integrationJob("b")))
			}, lines("a/a1 b/a2")},
			{"b passes: it lands", func(w *world) []string {
				return w.integDone("b", "combined", 3, protocol.GatePassed)
			}, lines("integration.finished b/combined passed", "integrate b", "node.integrated b",
				"node.finished b succeeded", "finish succeeded deliver")},
		}),
	}, {
		name:   "the first fails: the second is tested again without it and lands; its stale result is ignored",
		yaml:   queueYAML,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: steps(bothQueued, []step{
			{"a fails at the head: a retries, b is dispatched anew on the branch alone", func(w *world) []string {
				return w.integDone("a", "combined", 1, protocol.GateFailed)
			}, lines("integration.finished a/combined failed", "node.retry_scheduled a",
				"integration.dispatched b/combined r2 on []", "publish integration b/combined r2")},
			{"a's feedback names no node: it failed on the branch", func(w *world) []string {
				return lines(w.node("a").Reason)
			}, lines("integration gates did not pass on top of the branch: combined failed")},
			{"b's run on top of a reports late: stale, ignored", func(w *world) []string {
				return w.integRound("b", "combined", 1, 1, protocol.GatePassed)
			}, lines("stale: a superseded speculation's job (the node is now tested on speculation " +
				speculationOf(t, queueYAML, "b") + ")")},
			{"b's new run applies b's patch alone", func(w *world) []string {
				return lines(patchNames(w.integrationJob("b")))
			}, lines("b/a1")},
			{"b passes: it lands, though it was behind a", func(w *world) []string {
				return w.integDone("b", "combined", 2, protocol.GatePassed)
			}, lines("integration.finished b/combined passed", "integrate b", "node.integrated b",
				"node.finished b succeeded")},
		}),
		after: func(t *testing.T, w *world) {
			if got := w.wf().Integrated; !reflect.DeepEqual(got, []string{"b"}) {
				t.Fatalf("integrated %v; want [b]", got)
			}
		},
	}})
}

// speculationOf is the speculation b is tested on in the third scenario
// of TestIntegrationQueue once a has left: b's patch alone on the base.
func speculationOf(t *testing.T, yaml, node string) string {
	t.Helper()
	w, _ := newWorld(t, yaml)
	w.agentDone(node, 1, protocol.AgentSucceeded, true)
	w.gateDone(node, "own", 1, protocol.GatePassed)
	return w.node(node).Speculation().ID
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// A coordinator that restarts mid-queue (GIT-08) re-derives the queue and
// the speculative runs from the log: folding the same events gives the
// same queue and speculations, deciding appends nothing and only
// publishes again the jobs still out (the bus drops the duplicates by job
// id), and the results that then arrive land the nodes as before.
func TestIntegrationQueueReplay(t *testing.T) {
	w, _ := newWorld(t, queueYAML, true)
	for _, s := range bothQueued {
		s.do(w)
	}
	w.integDone("b", "combined", 1, protocol.GatePassed)

	replayed := statemachine.New()
	for _, ev := range w.events {
		if err := replayed.Apply(ev); err != nil {
			t.Fatalf("replay %s: %v", ev.Type(), err)
		}
	}
	r, _ := replayed.Workflow(testWF)
	if got, want := r.IntegrationQueue(), w.wf().IntegrationQueue(); !reflect.DeepEqual(got, want) {
		t.Fatalf("replayed queue %v; want %v", got, want)
	}
	for _, id := range []string{"a", "b"} {
		if got, want := r.Nodes[id].Speculation().ID, w.node(id).Speculation().ID; got != want {
			t.Fatalf("%s: replayed speculation %s; want %s", id, got, want)
		}
	}
	var got []string
	for _, e := range statemachine.Decide(r, w.now, nil).Effects {
		got = append(got, describe(e))
	}
	check(t, "a restarted coordinator decides", got, lines("publish integration a/combined r1"))

	// The restarted coordinator goes on from the replayed state.
	w.st = replayed
	check(t, "a passes after the restart", w.integDone("a", "combined", 1, protocol.GatePassed),
		lines("integration.finished a/combined passed", "integrate a", "node.integrated a",
			"node.finished a succeeded", "integrate b", "node.integrated b",
			"node.finished b succeeded", "finish succeeded deliver"))
	var queued int
	for _, ev := range w.events {
		if _, ok := ev.Body.(eventlog.NodeIntegrationQueued); ok {
			queued++
		}
	}
	if queued != 2 {
		t.Fatalf("%d node.integration_queued events; want 2", queued)
	}
}

// An approval step comes before the integration queue (GIT-08): the node
// waits for its approval once its own gates passed, and joins the queue
// once approved.
func TestIntegrationQueueAfterApproval(t *testing.T) {
	yaml := strings.Replace(queueYAML, "{id: a, prompt: A, gates: [own]}",
		"{id: a, prompt: A, gates: [own], approval: required}", 1)
	w, _ := newWorld(t, yaml)
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	check(t, "a's gate passes", w.gateDone("a", "own", 1, protocol.GatePassed),
		lines("gate.finished a/own passed", "node.awaiting_approval a"))
	check(t, "approved", w.command(statemachine.Approve(w.wf(), "a", "lead", "", w.now)),
		lines("node.approved a", "node.integration_queued a", "integration.dispatched a/combined r1 on []",
			"publish integration a/combined r1"))
}

// A node a human approves after an escalation lands directly, not
// through the queue (GIT-08): the human accepted its work as it is. The
// branch then holds more than the queued nodes were tested on, so they
// are tested again on it. A dead-lettered integration job is an
// integration gate that could not run: the node escalates.
func TestIntegrationQueueBranchMovesAndDeadLetters(t *testing.T) {
	yaml := strings.Replace(queueYAML, "{id: a, prompt: A, gates: [own]}", "{id: a, prompt: A, gates: [own], max_attempts: 1}", 1)
	runScenarios(t, []scenario{{
		name:   "an escalated node approved lands directly; the queue is tested again on the new branch",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: []step{
			agentStep("b's agent", "b", 1, protocol.AgentSucceeded, true,
				"node.agent_done b succeeded", "gate.dispatched b/own r1", "publish gate b/own r1"),
			gateStep("b queued, tested on the branch", "b", "own", 1, protocol.GatePassed,
				"gate.finished b/own passed", "node.integration_queued b",
				"integration.dispatched b/combined r1 on []", "publish integration b/combined r1"),
			agentStep("a's agent", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/own r1", "publish gate a/own r1"),
			gateStep("a's own gate fails its only attempt: escalated", "a", "own", 1, protocol.GateFailed,
				"gate.finished a/own failed", "node.escalated a"),
			{"approved: a lands, and b is tested again on top of it", func(w *world) []string {
				return w.command(statemachine.Approve(w.wf(), "a", "lead", "", w.now))
			}, lines("node.approved a", "integrate a", "node.integrated a", "node.finished a succeeded",
				"integration.dispatched b/combined r2 on []", "publish integration b/combined r2")},
			{"b's new run applies the branch's a, then b", func(w *world) []string {
				return lines(patchNames(w.integrationJob("b")), fmt.Sprint(w.node("b").Speculation().Integrated))
			}, lines("a/a1 b/a1", "1")},
			{"b's first run reports late: stale", func(w *world) []string {
				out := w.integRound("b", "combined", 1, 1, protocol.GatePassed)
				return []string{strings.SplitN(out[0], " (", 2)[0]}
			}, lines("stale: a superseded speculation's job")},
			{"b's integration job is dead-lettered: it could not run, b escalates", func(w *world) []string {
				n := w.node("b")
				return w.report(&protocol.Report{Type: protocol.ReportDeadLetter, DeadLetter: &protocol.DeadLetter{
					Kind: protocol.KindGate, JobID: statemachine.IntegrationJobID(w.id, "b", n.Attempt, "combined", 2),
					WorkflowID: w.id, NodeID: "b", Gate: "combined", Attempt: n.Attempt, Deliveries: 5, Reason: "prepare workspace"}})
			}, lines("integration.finished b/combined error", "node.escalated b")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("b").Reason; !strings.HasPrefix(r, "integration gate combined could not run: integration gate job ") {
				t.Fatalf("b's reason %q", r)
			}
		},
	}})
}
