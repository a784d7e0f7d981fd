package statemachine_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// reviewGates is a workflow's review gate: two reviewers, both must approve.
const reviewGates = "gates:\n  - name: review\n    type: review\n    reviewers: [{adapter: claude-code}, {adapter: codex, model: gpt-5}]\n" +
	"    quorum: {approvals: 2}\n    prompt: Check the error handling.\n"

// gateJobOf returns the gate job Decide would publish for node's gate.
func (w *world) gateJobOf(node, gate string) *protocol.GateJob {
	w.t.Helper()
	for _, e := range statemachine.Decide(w.wf(), w.now, nil).Effects {
		if p, ok := e.(statemachine.Publish); ok && p.Gate != nil && p.Gate.NodeID == node && p.Gate.Gate == gate {
			return p.Gate
		}
	}
	w.t.Fatalf("no gate job %s/%s to publish", node, gate)
	return nil
}

// reviewDone reports node's review gate: the verdicts given, in order.
func (w *world) reviewDone(node string, token uint64, st protocol.GateStatus, verdicts ...protocol.ReviewVerdict) []string {
	n := w.node(node)
	g := n.Gates["review"]
	res := &protocol.ReviewResult{Required: 2, Reviewers: verdicts}
	for _, v := range verdicts {
		if v.Approved {
			res.Approvals++
		}
	}
	return w.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: protocol.GateJobID(w.id, node, n.Attempt, "review", g.Round), WorkflowID: w.id, NodeID: node, Gate: "review",
		Attempt: n.Attempt, LeaseToken: token, Host: "g", Status: st, Round: g.Round, Review: res,
		Error: "1 of 2 reviewers approved; 2 needed", Output: "1 of 2 reviewers approved (2 needed)"}})
}

// A review gate on the engine (EXE-009, OUT-05): its job carries the
// reviewers, the quorum and the node's task, never the cache; a failed
// review is retried, the reviewers' issues in the next round's feedback
// and prompt; once the reviewers approve, the node lands. With on_fail
// block, a rejection goes to a human at once.
func TestReviewGateLoop(t *testing.T) {
	w, _ := newWorld(t, "name: r\n"+agent+reviewGates+"tasks:\n  - {id: a, prompt: Add Goodbye., gates: [review]}\n")
	check(t, "attempt 1", w.agentDone("a", 1, protocol.AgentSucceeded, true),
		lines("node.agent_done a succeeded", "gate.dispatched a/review r1", "publish gate a/review r1"))
	job := w.gateJobOf("a", "review")
	d := job.Definition
	if d == nil || !d.IsReview() || d.UsesCache() || d.Review == nil || len(d.Review.Reviewers) != 2 || d.Review.Approvals != 2 ||
		!reflect.DeepEqual(d.Review.Reviewers[1], protocol.AgentSpec{Adapter: "codex", Model: "gpt-5"}) || d.Review.Prompt != "Check the error handling." {
		t.Fatalf("gate job definition = %+v", d)
	}
	if job.TaskPrompt != "Add Goodbye." || len(job.Command) != 0 {
		t.Errorf("gate job: task prompt %q, command %q", job.TaskPrompt, job.Command)
	}
	issue := protocol.ReviewIssue{Severity: "major", File: "greet.go", Line: 7, Description: "Goodbye ignores an empty name.",
		Suggestion: "Say goodbye to the world instead."}
	check(t, "the review requests changes", w.reviewDone("a", 1, protocol.GateFailed,
		protocol.ReviewVerdict{Reviewer: 1, Adapter: "claude-code", Verdict: "APPROVED", Approved: true},
		protocol.ReviewVerdict{Reviewer: 2, Adapter: "codex", Model: "gpt-5", Verdict: "CHANGES_REQUESTED", Issues: []protocol.ReviewIssue{issue}}),
		lines("gate.finished a/review failed", "node.retry_scheduled a"))
	check(t, "attempt 2", w.later(retryDelay), lines("node.ready a", "publish agent a a2"))
	next := w.job("a")
	f := feedbackOf(t, next.Feedback)
	if len(f.Gates) != 1 || f.Gates[0].Kind != "review" || f.Gates[0].Review == nil || len(f.Gates[0].Review.Issues) != 1 {
		t.Fatalf("feedback = %s", next.Feedback)
	}
	if got := f.Gates[0].Review.Issues[0]; got.File != "greet.go" || got.Line != 7 || got.Reviewer != 2 ||
		got.Description != issue.Description || got.Suggestion != issue.Suggestion {
		t.Errorf("issue = %+v", got)
	}
	for _, want := range []string{"Address review issue (major) at greet.go:7: Goodbye ignores an empty name.",
		"- [major] `greet.go:7`: Goodbye ignores an empty name.", "Suggestion: Say goodbye to the world instead."} {
		if !strings.Contains(next.Prompt, want) {
			t.Errorf("attempt 2's prompt lacks %q:\n%s", want, next.Prompt)
		}
	}
	check(t, "attempt 2", w.agentDone("a", 2, protocol.AgentSucceeded, true),
		lines("node.agent_done a succeeded", "gate.dispatched a/review r1", "publish gate a/review r1"))
	check(t, "both approve: the node lands", w.reviewDone("a", 2, protocol.GatePassed,
		protocol.ReviewVerdict{Reviewer: 1, Adapter: "claude-code", Verdict: "APPROVED", Approved: true},
		protocol.ReviewVerdict{Reviewer: 2, Adapter: "codex", Verdict: "APPROVED", Approved: true}),
		lines("gate.finished a/review passed", "integrate a", "node.integrated a", "node.finished a succeeded", "finish succeeded deliver"))

	// on_fail: block sends a rejection to a human at once.
	w, _ = newWorld(t, "name: r\n"+agent+reviewGates+
		"tasks:\n  - {id: a, prompt: x, gates: {required: [review], on_fail: {review: block}}}\n", true)
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	check(t, "rejected, blocking", w.reviewDone("a", 1, protocol.GateFailed,
		protocol.ReviewVerdict{Reviewer: 1, Adapter: "claude-code", Verdict: "REJECTED",
			Issues: []protocol.ReviewIssue{{Severity: "critical", Description: "wrong approach"}}},
		protocol.ReviewVerdict{Reviewer: 2, Adapter: "codex", Problem: "no review block"}),
		lines("gate.finished a/review failed", "node.escalated a"))
	if n := w.node("a"); !strings.Contains(n.Reason, "review failed and its on_fail is block") {
		t.Errorf("reason = %q", n.Reason)
	}
}
