package feedback

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Review is what a review gate's reviewers found (EXE-009, OUT-05): the
// count against the quorum and the issues of every reviewer that did not
// approve, the most severe first. Everything in it quotes the reviewers'
// output, so it is untrusted like the rest of a gate's output.
type Review struct {
	// Approvals counts the reviewers that approved; Required is the quorum.
	Approvals int `json:"approvals"`
	Required  int `json:"required"`
	// Reviewers is how many reviewed.
	Reviewers int `json:"reviewers"`
	// Verdicts say, one line per reviewer, what each decided.
	Verdicts []string `json:"verdicts"`
	// Issues are the issues of the reviewers that did not approve, in
	// order of severity (critical, major, minor, info), then of reviewer.
	Issues []ReviewIssue `json:"issues"`
	// IssuesOmitted counts issues left out of Issues.
	IssuesOmitted int `json:"issues_omitted,omitempty"`
	// Suggestions and SecurityConcerns are theirs too.
	Suggestions      []string `json:"suggestions,omitempty"`
	SecurityConcerns []string `json:"security_concerns,omitempty"`
}

// ReviewIssue is one issue a reviewer raised.
type ReviewIssue struct {
	// Reviewer numbers the reviewer from 1.
	Reviewer    int    `json:"reviewer"`
	Severity    string `json:"severity"`
	File        string `json:"file,omitempty"`
	Line        int    `json:"line,omitempty"`
	Description string `json:"description"`
	Suggestion  string `json:"suggestion,omitempty"`
}

// Location is file:line, the file alone, or "".
func (i ReviewIssue) Location() string {
	if i.File != "" && i.Line > 0 {
		return fmt.Sprintf("%s:%d", i.File, i.Line)
	}
	return i.File
}

// Caps of a review section.
const (
	maxReviewIssues = 30
	maxReviewText   = 600
	maxReviewLists  = 10
)

// severityRank orders issue severities, the most severe first.
func severityRank(s string) int {
	switch strings.ToLower(s) {
	case "critical":
		return 0
	case "major":
		return 1
	case "minor":
		return 2
	case "info":
		return 3
	}
	return 4
}

// newReview turns a review gate's result into its feedback section
// (nil for a command gate), sanitized and capped.
func newReview(r *protocol.ReviewResult) *Review {
	if r == nil {
		return nil
	}
	out := &Review{Approvals: r.Approvals, Required: r.Required, Reviewers: len(r.Reviewers),
		Verdicts: []string{}, Issues: []ReviewIssue{}}
	text := func(s string) string { return keepHead(oneLine(Sanitize(s)), maxReviewText) }
	for _, v := range r.Reviewers {
		verdict := v.Verdict
		if verdict == "" {
			verdict = "no verdict, counted as a rejection: " + v.Problem
		}
		who := v.Adapter
		if v.Model != "" {
			who += " " + v.Model
		}
		out.Verdicts = append(out.Verdicts, text(fmt.Sprintf("reviewer %d (%s): %s", v.Reviewer, who, verdict)))
		if v.Approved {
			continue
		}
		for _, is := range v.Issues {
			out.Issues = append(out.Issues, ReviewIssue{Reviewer: v.Reviewer, Severity: text(is.Severity),
				File: keepHead(oneLine(Sanitize(is.File)), maxPathBytes), Line: is.Line,
				Description: text(is.Description), Suggestion: text(is.Suggestion)})
		}
		for _, s := range v.Suggestions {
			if len(out.Suggestions) < maxReviewLists {
				out.Suggestions = append(out.Suggestions, text(s))
			}
		}
		for _, s := range v.SecurityConcerns {
			if len(out.SecurityConcerns) < maxReviewLists {
				out.SecurityConcerns = append(out.SecurityConcerns, text(s))
			}
		}
	}
	slices.SortStableFunc(out.Issues, func(a, b ReviewIssue) int {
		return cmp.Or(cmp.Compare(severityRank(a.Severity), severityRank(b.Severity)), cmp.Compare(a.Reviewer, b.Reviewer))
	})
	if len(out.Issues) > maxReviewIssues {
		out.IssuesOmitted = len(out.Issues) - maxReviewIssues
		out.Issues = out.Issues[:maxReviewIssues]
	}
	return out
}

// reviewFixes are the priority fixes of a failed review gate: its issues,
// the most severe first, or, without any, a fix asking for what the
// reviewers want.
func reviewFixes(g *Gate) []string {
	r := g.Review
	var out []string
	for _, is := range r.Issues {
		at := ""
		if loc := is.Location(); loc != "" {
			at = " at " + loc
		}
		fix := fmt.Sprintf("Address review issue (%s)%s: %s", is.Severity, at, keepHead(is.Description, fixMessageSize))
		if is.Suggestion != "" {
			fix += " Suggested: " + keepHead(is.Suggestion, fixMessageSize)
		}
		out = append(out, fix)
	}
	if len(out) == 0 {
		out = append(out, fmt.Sprintf("Gate %q: %d of %d reviewers approved and %d must; see their verdicts below.",
			g.Name, r.Approvals, r.Reviewers, r.Required))
	}
	return out
}
