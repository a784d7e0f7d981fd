package statemachine_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// job returns the agent job Decide would publish for node now, as a
// restarted engine that has published nothing sees it.
func (w *world) job(node string) *protocol.AgentJob {
	w.t.Helper()
	for _, e := range statemachine.Decide(w.wf(), w.now, nil).Effects {
		if p, ok := e.(statemachine.Publish); ok && p.Agent != nil && p.Agent.NodeID == node {
			return p.Agent
		}
	}
	w.t.Fatalf("no agent job of %s to publish", node)
	return nil
}

// feedbackOf decodes a feedback document.
func feedbackOf(t *testing.T, doc json.RawMessage) feedback.Feedback {
	t.Helper()
	var f feedback.Feedback
	if err := json.Unmarshal(doc, &f); err != nil {
		t.Fatalf("feedback %s: %v", doc, err)
	}
	return f
}

// retryDelay is the default policy's delay before attempt 2 of node a.
var retryDelay = protocol.TaskSpec{}.RetryPolicy().Delay(2, testWF+"/a")

// The loop (RETRY-08, RETRY-09, RETRY-15, HITL-04, S-7): a failed round is
// retried after the retry policy's delay with the failure as feedback,
// starting from the previous attempt's work, until the gates pass or the
// attempts or a gate's retries run out; then the node escalates to a
// human, who approves, rejects or grants more attempts with a note.
func TestLoop(t *testing.T) {
	const gates = "gates:\n  - {name: test, command: [go, test, ./...]}\n"
	failTest := gateStep("test fails", "a", "test", 1, protocol.GateFailed,
		"gate.finished a/test failed", "node.retry_scheduled a")
	runScenarios(t, []scenario{{
		name:   "a failed round is retried with feedback, from its own work, and then passes",
		yaml:   "name: l\n" + agent + gates + "tasks:\n  - {id: a, prompt: add Shout, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1 makes a change", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			failTest,
			{"the delay is not over: nothing, and a wake-up when it is", func(w *world) []string {
				if n := w.node("a"); n.Status != protocol.NodeRetrying || !n.RetryAt().Equal(t0.Add(retryDelay)) {
					t.Fatalf("a is %s until %s; want retrying until %s", n.Status, n.RetryAt(), t0.Add(retryDelay))
				}
				d := statemachine.Decide(w.wf(), w.now, nil)
				return append(w.settle(), d.Wake.Sub(w.now).String())
			}, lines(retryDelay.String())},
			{"the delay is over: attempt 2", func(w *world) []string { return w.later(retryDelay) },
				lines("node.ready a", "publish agent a a2")},
			{"attempt 2's job starts from attempt 1's patch, with the feedback", func(w *world) []string {
				job := w.job("a")
				f := feedbackOf(t, job.Feedback)
				var out []string
				if job.StartFrom == nil || job.StartFrom.Object != testWF+"/a/a1.patch" {
					out = append(out, "no start from attempt 1's patch")
				}
				if f.Attempt != 1 || f.NextAttempt != 2 || f.MaxAttempts != 3 || len(f.Gates) != 1 || f.Gates[0].Name != "test" {
					out = append(out, "feedback: "+string(job.Feedback))
				}
				if !strings.HasPrefix(job.Prompt, "add Shout\n\n") || !strings.Contains(job.Prompt, feedback.UntrustedNotice) {
					out = append(out, "prompt: "+job.Prompt)
				}
				return out
			}, nil},
			agentStep("attempt 2 succeeds", "a", 2, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test passes: integrated", "a", "test", 2, protocol.GatePassed,
				"gate.finished a/test passed", "integrate a", "node.integrated a", "node.finished a succeeded",
				"finish succeeded deliver"),
		},
		after: func(t *testing.T, w *world) {
			n := w.node("a")
			if n.Attempt != 2 || len(n.History()) != 1 || n.History()[0].Outcome != "node.retry_scheduled" ||
				n.History()[0].Reason != "gates did not pass: test failed" || n.GateFailures()["test"] != 1 {
				t.Errorf("a: attempt %d, history %+v, failures %v", n.Attempt, n.History(), n.GateFailures())
			}
		},
	}, {
		name: "attempts run out: escalated, the workflow needs attention, others go on; a retry with a note fixes it",
		yaml: "name: l\n" + agent + "  max_attempts: 2\n" + gates +
			"tasks:\n  - {id: a, prompt: a, gates: [test]}\n  - {id: b, prompt: b, depends_on: [a], gates: []}\n" +
			"  - {id: x, prompt: x, gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready x", "publish agent x a1"),
		steps: []step{
			agentStep("a's attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			failTest,
			{"attempt 2", func(w *world) []string { return w.later(time.Minute) }, lines("node.ready a", "publish agent a a2")},
			agentStep("a's attempt 2", "a", 2, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test fails again: 2 of 2 attempts, escalated", "a", "test", 2, protocol.GateFailed,
				"gate.finished a/test failed", "node.escalated a"),
			{"the workflow needs attention; b waits", func(w *world) []string {
				return []string{string(w.wf().Status), string(w.node("b").Status)}
			}, lines("needs_attention", "pending")},
			agentStep("x, independent, still runs and succeeds", "x", 1, protocol.AgentSucceeded, false,
				"node.agent_done x succeeded", "integrate x", "node.integrated x", "node.finished x succeeded"),
			{"retry with a note", func(w *world) []string {
				return w.command(statemachine.Retry(w.wf(), "a", "ada", "use strings.ToUpper", 1, w.now))
			}, lines("node.retry_granted a", "node.ready a", "publish agent a a3")},
			{"the note reaches attempt 3, marked as the operator's", func(w *world) []string {
				job := w.job("a")
				f := feedbackOf(t, job.Feedback)
				var out []string
				if f.Note == nil || f.Note.From != "ada" || f.Note.Text != "use strings.ToUpper" || f.NextAttempt != 3 || f.MaxAttempts != 3 {
					out = append(out, "feedback: "+string(job.Feedback))
				}
				if !strings.Contains(job.Prompt, "use strings.ToUpper") {
					out = append(out, "the prompt lacks the note")
				}
				return append(out, string(w.wf().Status))
			}, lines("running")},
			agentStep("attempt 3", "a", 3, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("passes: a integrated, b runs", "a", "test", 3, protocol.GatePassed,
				"gate.finished a/test passed", "integrate a", "node.integrated a", "node.finished a succeeded",
				"node.ready b", "publish agent b a1"),
		},
		after: func(t *testing.T, w *world) {
			if n := w.node("a"); n.Budget != 3 || len(n.History()) != 2 || n.History()[1].Outcome != "node.escalated" ||
				n.History()[1].Reason != "2 of 2 attempts used (gates did not pass: test failed)" {
				t.Errorf("a: budget %d, history %+v", n.Budget, n.History())
			}
		},
	}, {
		name: "a gate that fails more rounds than its max_retries escalates with attempts left",
		yaml: "name: l\n" + agent + "gates:\n  - {name: test, command: [t], max_retries: 1}\n" +
			"tasks:\n  - {id: a, prompt: a, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			failTest,
			{"attempt 2", func(w *world) []string { return w.later(time.Minute) }, lines("node.ready a", "publish agent a a2")},
			agentStep("attempt 2", "a", 2, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test fails a second round", "a", "test", 2, protocol.GateFailed,
				"gate.finished a/test failed", "node.escalated a"),
		},
		after: func(t *testing.T, w *world) {
			n := w.node("a")
			if !strings.HasPrefix(n.Reason, "gate test failed 2 rounds; its max_retries is 1") {
				t.Errorf("reason %q", n.Reason)
			}
			if f := feedbackOf(t, n.Feedback()); len(f.Gates) != 1 || !f.Gates[0].Escalated || f.Gates[0].RoundsFailed != 2 {
				t.Errorf("feedback %s", n.Feedback())
			}
		},
	}, {
		name: "on_fail block escalates at once; approve integrates the patch and the workflow goes on",
		yaml: "name: l\n" + agent + gates +
			"tasks:\n  - id: a\n    prompt: a\n    gates: {required: [test], on_fail: {test: block}}\n" +
			"  - {id: b, prompt: b, depends_on: [a], gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test fails: escalated, no retry", "a", "test", 1, protocol.GateFailed,
				"gate.finished a/test failed", "node.escalated a"),
			{"reject needs a reason", func(w *world) []string {
				return w.command(statemachine.Reject(w.wf(), "a", "ops", " ", w.now))
			}, lines("refused conflict: a rejection needs a reason (--reason)")},
			{"approve", func(w *world) []string {
				return w.command(statemachine.Approve(w.wf(), "a", "ada", "known flake", w.now))
			}, lines("node.approved a", "integrate a", "node.integrated a", "node.finished a succeeded",
				"node.ready b", "publish agent b a1")},
			{"an approved node takes no other decision", func(w *world) []string {
				return w.command(statemachine.Retry(w.wf(), "a", "ada", "", 0, w.now))
			}, lines("refused conflict: node a is succeeded: only an escalated node, or one awaiting approval, waits for a human")},
		},
		after: func(t *testing.T, w *world) {
			if n := w.node("a"); n.Reason != "approved by ada" || !n.Integrated() || w.wf().Status != protocol.WorkflowRunning {
				t.Errorf("a: %s %q integrated %v; workflow %s", n.Status, n.Reason, n.Integrated(), w.wf().Status)
			}
		},
	}, {
		name:   "retry_from base: the next attempt starts afresh, and the feedback says so",
		yaml:   "name: l\n" + agent + "  retry_from: base\n" + gates + "tasks:\n  - {id: a, prompt: a, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			failTest,
			{"attempt 2 has no start-from patch", func(w *world) []string {
				w.later(time.Minute)
				job := w.job("a")
				var out []string
				if job.StartFrom != nil {
					out = append(out, "start from "+job.StartFrom.Object)
				}
				if !feedbackOf(t, job.Feedback).WorkReset {
					out = append(out, "the feedback does not say the work was reset")
				}
				return out
			}, nil},
		},
	}, {
		name:   "an agent failure is retried with the agent's output as feedback",
		yaml:   "name: l\n" + agent + "tasks:\n  - {id: a, prompt: a, gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("the agent fails", "a", 1, protocol.AgentFailed, false, "node.agent_done a failed", "node.retry_scheduled a"),
			{"attempt 2 gets it", func(w *world) []string {
				w.later(time.Minute)
				f := feedbackOf(t, w.job("a").Feedback)
				if len(f.Gates) != 1 || f.Gates[0].Name != "agent" || f.Gates[0].Error != "boom" {
					return []string{"feedback: " + string(w.job("a").Feedback)}
				}
				return nil
			}, nil},
		},
	}, {
		name:   "the same patch as an earlier attempt escalates at once, without running the gates (RETRY-12)",
		yaml:   "name: l\n" + agent + gates + "tasks:\n  - {id: a, prompt: a, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"attempt 1", func(w *world) []string {
				w.samePatch = true
				return w.agentDone("a", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1")},
			failTest,
			{"attempt 2", func(w *world) []string { return w.later(time.Minute) }, lines("node.ready a", "publish agent a a2")},
			agentStep("attempt 2 makes the same patch", "a", 2, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "node.escalated a"),
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; r != "the agent is going round in circles (attempt 2 made the same patch as attempt 1)" {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		name:   "the same failure three rounds in a row escalates with attempts left (S-7.3)",
		yaml:   "name: l\n" + agent + "  max_attempts: 5\n" + gates + "tasks:\n  - {id: a, prompt: a, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			failTest,
			{"attempt 2", func(w *world) []string { return w.later(time.Minute) }, lines("node.ready a", "publish agent a a2")},
			agentStep("attempt 2", "a", 2, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test fails alike", "a", "test", 2, protocol.GateFailed, "gate.finished a/test failed", "node.retry_scheduled a"),
			{"attempt 3", func(w *world) []string { return w.later(time.Minute) }, lines("node.ready a", "publish agent a a3")},
			agentStep("attempt 3", "a", 3, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("a third time alike: escalated", "a", "test", 3, protocol.GateFailed, "gate.finished a/test failed", "node.escalated a"),
		},
		after: func(t *testing.T, w *world) {
			n := w.node("a")
			if !strings.HasPrefix(n.Reason, "the last 3 rounds failed alike") || n.History()[0].Signature == "" ||
				n.History()[0].Signature != n.History()[2].Signature {
				t.Errorf("reason %q, signatures %q %q", n.Reason, n.History()[0].Signature, n.History()[2].Signature)
			}
		},
	}, {
		name:   "a round that changes nothing is a no_changes failure, retried with feedback, unless allowed",
		yaml:   "name: l\ndefaults:\n  agent: {command: [fake-agent]}\n" + gates + "tasks:\n  - {id: a, prompt: a, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("the agent succeeds with no change: no gate runs", "a", 1, protocol.AgentSucceeded, false,
				"node.agent_done a succeeded", "node.retry_scheduled a"),
			{"the feedback says so", func(w *world) []string {
				w.later(time.Minute)
				f := feedbackOf(t, w.job("a").Feedback)
				if len(f.Gates) != 1 || f.Gates[0].Name != "agent" || !strings.HasPrefix(f.Gates[0].Error, "no_changes: ") {
					return []string{"feedback: " + string(w.job("a").Feedback)}
				}
				return []string{w.node("a").History()[0].Reason}
			}, lines("no_changes: the agent changed nothing")},
		},
	}, {
		name:   "a failed agent's attempt has nothing to approve",
		yaml:   "name: l\n" + agent + once + "tasks:\n  - {id: a, prompt: a, gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("the agent fails: escalated", "a", 1, protocol.AgentFailed, false, "node.agent_done a failed", "node.escalated a"),
			{"approve", func(w *world) []string { return w.command(statemachine.Approve(w.wf(), "a", "ops", "", w.now)) },
				lines("refused conflict: node a: attempt 1's agent did not succeed, so there is no work to approve (reject it, or retry)")},
		},
	}, {
		name:   "decisions on a node that does not wait for a human are refused",
		yaml:   "name: l\n" + agent + "tasks:\n  - {id: a, prompt: a}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"approve a ready node", func(w *world) []string {
				return w.command(statemachine.Approve(w.wf(), "a", "ops", "", w.now))
			}, lines("refused conflict: node a is ready: only an escalated node, or one awaiting approval, waits for a human")},
			{"retry an unknown node", func(w *world) []string {
				return w.command(statemachine.Retry(w.wf(), "zz", "ops", "", 0, w.now))
			}, lines(`refused not found: workflow wf-test has no node "zz"`)},
		},
	}})
}

// The retry delay is kept in the log: a coordinator that replays it
// waits out what is left of the delay, no more and no less.
func TestRetryDelaySurvivesReplay(t *testing.T) {
	w, _ := newWorld(t, "name: l\n"+agent+"gates:\n  - {name: test, command: [t]}\ntasks:\n  - {id: a, prompt: a, gates: [test]}\n")
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	w.gateDone("a", "test", 1, protocol.GateFailed)
	w.now = w.now.Add(retryDelay / 2)
	replayed := statemachine.New()
	for _, ev := range w.events {
		if err := replayed.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	wf, _ := replayed.Workflow(testWF)
	d := statemachine.Decide(wf, w.now, nil)
	if len(d.Effects) != 0 || d.Wake.Sub(w.now) != retryDelay-retryDelay/2 {
		t.Fatalf("half-way through the delay, a replayed state decides %v, wakes in %s; want nothing, in %s",
			d.Effects, d.Wake.Sub(w.now), retryDelay-retryDelay/2)
	}
	if d := statemachine.Decide(wf, t0.Add(retryDelay), nil); len(d.Effects) != 2 {
		t.Fatalf("at the end of the delay: %v", d.Effects)
	}
}

// Retry policies: the built-in ones, the delay's growth and cap, and a
// jitter that every coordinator computes alike.
func TestRetryPolicyDelay(t *testing.T) {
	def, _ := protocol.BuiltinRetryPolicy("default")
	for _, tc := range []struct {
		policy string
		next   int
		lo, hi time.Duration
	}{
		{"default", 2, 1800 * time.Millisecond, 2200 * time.Millisecond},
		{"default", 3, 3600 * time.Millisecond, 4400 * time.Millisecond},
		{"default", 10, 27 * time.Second, 33 * time.Second}, // capped at 30 s
		{"aggressive", 2, time.Second, time.Second},
		{"aggressive", 4, 2250 * time.Millisecond, 2250 * time.Millisecond},
		{"conservative", 3, 15 * time.Second, 15 * time.Second},
	} {
		p, ok := protocol.BuiltinRetryPolicy(tc.policy)
		if !ok {
			t.Fatalf("no policy %s", tc.policy)
		}
		if d := p.Delay(tc.next, "wf/node"); d < tc.lo || d > tc.hi {
			t.Errorf("%s before attempt %d: %s, want %s–%s", tc.policy, tc.next, d, tc.lo, tc.hi)
		}
	}
	if first, again := def.Delay(2, "x"), def.Delay(2, "x"); first != again || first == def.Delay(2, "y") {
		t.Error("the jitter is not a function of the seed")
	}
	if got := (protocol.TaskSpec{}).Attempts(); got != 3 {
		t.Errorf("default attempts %d", got)
	}
	if got := (protocol.TaskSpec{Retry: &protocol.RetryPolicy{MaxAttempts: 5}}).Attempts(); got != 5 {
		t.Errorf("a policy's attempts: %d", got)
	}
}

// Error classes (RETRY-02…07): what an agent printed says whether its
// failure is transient (re-run after a back-off, no attempt used, a
// reported retry-after honoured), fatal (a human at once) or fixable (a
// retry with feedback); patterns match whatever the case.
func TestAgentErrorClasses(t *testing.T) {
	const yaml = "name: c\n" + agent + "tasks:\n  - {id: a, prompt: a, gates: []}\n"
	runScenarios(t, []scenario{{
		name:   "transient errors use no attempt, and honour a retry-after; five in a row escalate",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"rate limited, retry after 40 s", func(w *world) []string {
				return w.agentFails("a", 1, "API Error: 429 Rate Limit exceeded. Retry-After: 40")
			}, lines("node.agent_done a failed", "node.retry_scheduled a")},
			{"the next round waits 40 s, and its budget grew by one", func(w *world) []string {
				n := w.node("a")
				return []string{n.RetryAt().Sub(w.now).String(), fmt.Sprint(n.Budget), n.Reason}
			}, lines("40s", "4", "transient: rate limit (agent failed (exit 1))")},
			{"overloaded five more times: after five re-runs, the sixth failure escalates", func(w *world) []string {
				var out []string
				for i := 2; i <= 6; i++ {
					w.later(time.Hour)
					out = append(out, w.agentFails("a", uint64(i), "Overloaded, please try again")...)
				}
				return out
			}, lines("node.agent_done a failed", "node.retry_scheduled a", "node.agent_done a failed", "node.retry_scheduled a",
				"node.agent_done a failed", "node.retry_scheduled a", "node.agent_done a failed", "node.retry_scheduled a",
				"node.agent_done a failed", "node.escalated a")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; !strings.HasPrefix(r, "transient agent errors 6 rounds in a row (overloaded)") {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		name:   "a fatal error escalates at once, whatever its case",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"the agent says it is blocked", func(w *world) []string {
				return w.agentFails("a", 1, "BLOCKED: the API key is missing")
			}, lines("node.agent_done a failed", "node.escalated a")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; !strings.HasPrefix(r, "a fatal agent error (blocked:)") {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		name:   "a malformed answer is fixable: retried with feedback, using an attempt",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"no JSON found", func(w *world) []string { return w.agentFails("a", 1, "error: No JSON found in the output") },
				lines("node.agent_done a failed", "node.retry_scheduled a")},
			{"its budget is unchanged", func(w *world) []string { return []string{fmt.Sprint(w.node("a").Budget)} }, lines("3")},
		},
	}})
}

// A gate killed for running out of memory is a resource error, not a
// failure of the code: it runs once more; killed again, the node escalates
// saying so.
func TestGateOutOfMemory(t *testing.T) {
	runScenarios(t, []scenario{{
		name:   "one more run, then a human",
		yaml:   "name: m\n" + agent + "gates:\n  - {name: test, command: [t]}\ntasks:\n  - {id: a, prompt: a, gates: [test]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			{"killed for memory: run again", func(w *world) []string { return w.gateOOM("a", "test", 1) },
				lines("gate.finished a/test error", "gate.dispatched a/test r2", "publish gate a/test r2")},
			{"killed again: escalated", func(w *world) []string { return w.gateOOM("a", "test", 2) },
				lines("gate.finished a/test error", "node.escalated a")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; !strings.HasPrefix(r, "gate test could not run: resource limit: out of memory") {
				t.Errorf("reason %q", r)
			}
		},
	}})
}

// What no retry of the agent can fix escalates at once: an agent its
// runner could not run (an infrastructure error on the job's last
// delivery), and a patch that passed its gates but no longer applies to
// the workflow's branch (S-11).
func TestEscalatesAtOnce(t *testing.T) {
	runScenarios(t, []scenario{{
		name:   "the agent could not run",
		yaml:   "name: e\n" + agent + "tasks:\n  - {id: a, prompt: a}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("an infrastructure error", "a", 1, protocol.AgentError, false, "node.agent_done a error", "node.escalated a"),
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; !strings.HasPrefix(r, "the agent could not run (agent error") {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		name:   "an integration conflict",
		yaml:   "name: e\n" + agent + "tasks:\n  - {id: a, prompt: a}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"the patch does not apply", func(w *world) []string {
				return w.command([]statemachine.Effect{statemachine.IntegrationConflictEvent(w.wf(), "a", "conflict in README.md", w.now)}, nil)
			}, lines("node.escalated a")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; r != "the patch does not apply to the workflow's branch: conflict in README.md" ||
				w.wf().Status != protocol.WorkflowNeedsAttention {
				t.Errorf("reason %q, workflow %s", r, w.wf().Status)
			}
		},
	}})
}

// Approval steps and human tasks (HITL-02, HITL-03): a task with an
// approval waits in awaiting_approval once its gates pass, until a human
// (one of its approvers, if it names them) approves or rejects it, or its
// timeout's on_timeout decides; a human task runs no agent and waits for
// approval once its dependencies succeeded. Who approved reaches the
// dependents' jobs.
func TestApprovalSteps(t *testing.T) {
	const gates = "gates:\n  - {name: test, command: [t]}\n"
	approved := func(w *world, node, by string) []string {
		return w.command(statemachine.Approve(w.wf(), node, by, "", w.now))
	}
	runScenarios(t, []scenario{{
		name: "an approval step waits after the gates; only an approver decides; dependents learn who",
		yaml: "name: a\n" + agent + gates + "tasks:\n  - id: a\n    prompt: a\n    gates: [test]\n" +
			"    approval: {approvers: [ada, bob]}\n  - {id: b, prompt: b, depends_on: [a], gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("test passes: a awaits approval, nothing is integrated", "a", "test", 1, protocol.GatePassed,
				"gate.finished a/test passed", "node.awaiting_approval a"),
			{"the workflow needs attention; no deadline, no wake-up", func(w *world) []string {
				d := statemachine.Decide(w.wf(), w.now, nil)
				return []string{string(w.wf().Status), fmt.Sprint(d.Wake.IsZero())}
			}, lines("needs_attention", "true")},
			{"eve is not an approver", func(w *world) []string { return approved(w, "a", "eve") },
				lines("refused conflict: node a may be decided by ada, bob only, not eve")},
			{"ada approves: integrated, b runs", func(w *world) []string { return approved(w, "a", "ada") },
				lines("node.approved a", "integrate a", "node.integrated a", "node.finished a succeeded", "node.ready b", "publish agent b a1")},
			{"b's job says who approved a", func(w *world) []string {
				return []string{fmt.Sprint(w.job("b").Approvals)}
			}, lines("map[a:ada]")},
		},
	}, {
		name: "a timeout decides as on_timeout says: reject",
		yaml: "name: a\n" + agent + gates + "tasks:\n  - id: a\n    prompt: a\n    gates: [test]\n" +
			"    approval: {timeout: 1h, on_timeout: reject}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("attempt 1", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"),
			gateStep("passes: awaiting", "a", "test", 1, protocol.GatePassed, "gate.finished a/test passed", "node.awaiting_approval a"),
			{"a wake-up at the deadline", func(w *world) []string {
				return []string{statemachine.Decide(w.wf(), w.now, nil).Wake.Sub(w.now).String()}
			}, lines("1h0m0s")},
			{"not yet", func(w *world) []string { return w.later(59 * time.Minute) }, nil},
			{"the hour is up: rejected", func(w *world) []string { return w.later(time.Minute) },
				lines("node.rejected a", "finish failed")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("a").Reason; r != "rejected by timeout: nobody approved it in time" {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		name: "a timeout that approves, and one that escalates",
		yaml: "name: a\n" + agent + gates + "tasks:\n  - id: a\n    prompt: a\n    gates: [test]\n" +
			"    approval: {timeout: 10m, on_timeout: approve}\n  - id: b\n    prompt: b\n    gates: [test]\n" +
			"    approval: {timeout: 10m}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: []step{
			{"both pass their gates", func(w *world) []string {
				w.agentDone("a", 1, protocol.AgentSucceeded, true)
				w.agentDone("b", 2, protocol.AgentSucceeded, true)
				w.gateDone("a", "test", 1, protocol.GatePassed)
				return w.gateDone("b", "test", 2, protocol.GatePassed)
			}, lines("gate.finished b/test passed", "node.awaiting_approval b")},
			{"ten minutes on", func(w *world) []string { return w.later(10 * time.Minute) },
				lines("node.approved a", "node.escalated b", "integrate a", "node.integrated a", "node.finished a succeeded")},
		},
		after: func(t *testing.T, w *world) {
			if n := w.node("a"); n.Reason != "approved by timeout" {
				t.Errorf("a: %q", n.Reason)
			}
			if n := w.node("b"); n.Reason != "nobody approved it in time" || w.wf().Status != protocol.WorkflowNeedsAttention {
				t.Errorf("b: %q, workflow %s", n.Reason, w.wf().Status)
			}
		},
	}, {
		name: "a human task runs no agent; approved, its dependents run; it cannot be retried",
		yaml: "name: h\n" + agent + "tasks:\n  - {id: a, prompt: a, gates: []}\n" +
			"  - {id: review, type: human, prompt: Read the design and approve it., depends_on: [a]}\n" +
			"  - {id: c, prompt: c, depends_on: [review], gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("a succeeds: the human task waits, no job", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "integrate a", "node.integrated a", "node.finished a succeeded",
				"node.awaiting_approval review"),
			{"retry is refused", func(w *world) []string {
				return w.command(statemachine.Retry(w.wf(), "review", "ada", "", 0, w.now))
			}, lines("refused conflict: node review is a human task: there is no agent to retry (approve or reject it)")},
			{"approved: c runs", func(w *world) []string { return approved(w, "review", "ada") },
				lines("node.approved review", "integrate review", "node.integrated review", "node.finished review succeeded",
					"node.ready c", "publish agent c a1")},
		},
	}})
}

// The fleet-wide safeguard (S-7.4): more failed agent rounds within an
// hour than the limit pause every new agent round, in every workflow,
// until an operator resumes; rounds already out finish, transient re-runs
// do not count, and failures older than an hour no longer count.
func TestFleetPause(t *testing.T) {
	w, _ := newWorld(t, "name: p\n"+agent+"gates:\n  - {name: test, command: [t]}\ntasks:\n"+
		"  - {id: a, prompt: a, gates: [test]}\n  - {id: b, prompt: b, gates: [test]}\n  - {id: c, prompt: c, gates: [test]}\n"+
		"  - {id: d, prompt: d, depends_on: [c], gates: []}\n  - {id: e, prompt: e, gates: [test]}\n")
	fail := func(node string) {
		t.Helper()
		w.agentDone(node, 1, protocol.AgentSucceeded, true)
		w.gateDone(node, "test", 1, protocol.GateFailed)
	}
	pause := func() []string {
		t.Helper()
		var out []string
		for _, e := range statemachine.DecideFleet(w.st, w.now, 2) {
			out = append(out, w.carry(e)...)
		}
		return out
	}
	fail("a")
	fail("b")
	w.agentFails("c", 1, "rate limit exceeded") // transient: it does not count
	if got := pause(); len(got) != 0 || w.st.Fleet().FailuresWithin(w.now) != 2 {
		t.Fatalf("two failures (and a transient error) under a limit of 2: %v, %d counted", got, w.st.Fleet().FailuresWithin(w.now))
	}
	// The window slides: a failure counts for an hour, then no more.
	if in, out := w.st.Fleet().FailuresWithin(w.now.Add(59*time.Minute)), w.st.Fleet().FailuresWithin(w.now.Add(time.Hour+time.Second)); in != 2 || out != 0 {
		t.Errorf("failures counted 59 minutes on: %d (want 2); an hour on: %d (want 0)", in, out)
	}
	fail("e")
	check(t, "a third failure pauses the fleet", pause(), lines("fleet.paused"))
	f := w.st.Fleet()
	if !f.Paused || !strings.Contains(f.PauseReason, "3 agent rounds failed within an hour, more than the 2 allowed") {
		t.Fatalf("fleet %+v", f)
	}
	check(t, "while paused, no retry starts", w.later(time.Minute), nil)
	if n := w.node("a"); n.Status != protocol.NodeRetrying {
		t.Errorf("a is %s", n.Status)
	}
	check(t, "a second pause is not decided", pause(), nil)
	eff, err := statemachine.Resume(w.st, "ada", w.now)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "resumed: the retries start", append(w.carry(eff...), w.settle()...),
		lines("fleet.resumed", "node.ready a", "publish agent a a2", "node.ready b", "publish agent b a2", "node.ready c", "publish agent c a2",
			"node.ready e", "publish agent e a2"))
	if _, err := statemachine.Resume(w.st, "ada", w.now); err == nil {
		t.Error("resuming a fleet that is not paused")
	}
	if f := w.st.Fleet(); f.Paused || len(f.Failures) != 0 {
		t.Errorf("after the resume: %+v", f)
	}
	// Replaying the log gives the same fleet.
	replayed := statemachine.New()
	for _, ev := range w.events {
		if err := replayed.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(replayed.Fleet(), w.st.Fleet()) {
		t.Errorf("replayed fleet %+v, live %+v", replayed.Fleet(), w.st.Fleet())
	}
}
