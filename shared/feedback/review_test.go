package feedback

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// reviewResult is a failed review gate: one reviewer approved, one asked
// for changes with two issues, one gave no block; two approvals needed.
func reviewResult() protocol.GateResult {
	return protocol.GateResult{Gate: "review", Attempt: 1, Status: protocol.GateFailed,
		Error: "1 of 3 reviewers approved; 2 needed", Output: "1 of 3 reviewers approved (2 needed)\nreviewer 1 …",
		Review: &protocol.ReviewResult{Approvals: 1, Required: 2, Reviewers: []protocol.ReviewVerdict{
			{Reviewer: 1, Adapter: "claude-code", Verdict: "APPROVED", Approved: true,
				Issues: []protocol.ReviewIssue{{Severity: "info", Description: "fine"}}},
			{Reviewer: 2, Adapter: "codex", Model: "gpt", Verdict: "CHANGES_REQUESTED",
				Issues: []protocol.ReviewIssue{
					{Severity: "minor", File: "greet.go", Description: "Name the constant."},
					{Severity: "major", File: "greet.go", Line: 12, Description: "Goodbye ignores an empty name.\x1b[31m",
						Suggestion: "Return an error for an empty name."}},
				SecurityConcerns: []string{"none really"}},
			{Reviewer: 3, Adapter: "gemini", Problem: "no review block: the final message has no JSON block"},
		}}}
}

// A failed review gate's issues become the feedback: the most severe
// first among the priority fixes and in the gate's section, approving
// reviewers' issues left out, every text sanitized, and the rendering
// quotes them after the untrusted notice (EXE-009, OUT-05).
func TestReviewFeedback(t *testing.T) {
	f := Build(Input{WorkflowID: "wf", NodeID: "n", Attempt: 1, MaxAttempts: 3,
		Gates: []GateInput{{Result: reviewResult(), Spec: protocol.GateSpec{Name: "review", Type: protocol.GateTypeReview}, RoundsFailed: 1}}})
	if len(f.Gates) != 1 || f.Gates[0].Kind != KindReview || f.Gates[0].Review == nil {
		t.Fatalf("gates = %+v", f.Gates)
	}
	if f.Gates[0].StdoutTail != "" || f.Gates[0].StderrTail != "" {
		t.Errorf("a review gate's output repeated as its tails: %+v", f.Gates[0])
	}
	r := f.Gates[0].Review
	if r.Approvals != 1 || r.Required != 2 || r.Reviewers != 3 || len(r.Verdicts) != 3 || len(r.Issues) != 2 {
		t.Fatalf("review = %+v", r)
	}
	if r.Issues[0].Severity != "major" || r.Issues[0].Location() != "greet.go:12" || strings.Contains(r.Issues[0].Description, "\x1b") {
		t.Errorf("first issue = %+v", r.Issues[0])
	}
	if !strings.Contains(r.Verdicts[2], "no verdict, counted as a rejection") {
		t.Errorf("verdicts = %q", r.Verdicts)
	}
	if len(f.PriorityFixes) < 2 || !strings.HasPrefix(f.PriorityFixes[0], "Address review issue (major) at greet.go:12: Goodbye ignores an empty name.") ||
		!strings.Contains(f.PriorityFixes[0], "Suggested: Return an error for an empty name.") {
		t.Errorf("fixes = %q", f.PriorityFixes)
	}
	text, err := Render(f, "")
	if err != nil {
		t.Fatal(err)
	}
	notice := strings.Index(text, "Untrusted gate output begins")
	for _, want := range []string{"#### Review gate `review` did not approve the change", "1 of 3 reviewers approved; 2 must",
		"- [major] `greet.go:12`: Goodbye ignores an empty name.", "  Suggestion: Return an error for an empty name.",
		"reviewer 2 (codex gpt): CHANGES_REQUESTED", "Their security concerns:"} {
		if i := strings.Index(text, want); i < 0 || i < notice {
			t.Errorf("rendered feedback lacks %q after the untrusted notice:\n%s", want, text)
		}
	}
	if strings.Contains(text, "exit code") {
		t.Errorf("a review gate's feedback speaks of an exit code:\n%s", text)
	}
	if strings.Contains(text, "fine") {
		t.Errorf("an approving reviewer's issue is in the feedback:\n%s", text)
	}
}

// Many long issues are cut to fit the budget, least severe first.
func TestReviewFeedbackFitsBudget(t *testing.T) {
	res := reviewResult()
	v := &res.Review.Reviewers[1]
	for i := 0; i < 40; i++ {
		v.Issues = append(v.Issues, protocol.ReviewIssue{Severity: "info", File: "x.go", Line: i + 1,
			Description: strings.Repeat("long description ", 40), Suggestion: strings.Repeat("do this ", 60)})
	}
	f := Build(Input{WorkflowID: "wf", NodeID: "n", Attempt: 1, Budget: MinBudget,
		Gates: []GateInput{{Result: res, Spec: protocol.GateSpec{Name: "review"}, RoundsFailed: 1}}})
	data, _ := json.Marshal(f)
	if len(data) > MinBudget || !f.Truncated {
		t.Fatalf("%d bytes, truncated %v", len(data), f.Truncated)
	}
	if len(f.Gates) == 1 {
		r := f.Gates[0].Review
		if len(r.Issues) > 0 && r.Issues[0].Severity != "major" {
			t.Errorf("the most severe issue was cut first: %+v", r.Issues[0])
		}
		if r.IssuesOmitted == 0 {
			t.Errorf("no issue counted as omitted")
		}
	}
}
