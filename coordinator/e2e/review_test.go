package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// reviewWorkflow: greet's implementer first writes a greeting that
// ignores empty names; the review gate's reviewer (the scripted agent
// through the command adapter) reads greet.txt and requests changes
// until it handles them, then approves. The implementer's second round
// acts only on the reviewer's issue, which reaches it as feedback.
const reviewWorkflow = `name: reviewed
defaults:
  agent:
    command: [supervisor-test-agent, -p, --output-format, text]
  timeout: 2m
gates:
  - name: review
    type: review
    agent: {adapter: command, command: [supervisor-test-agent, -p, --output-format, text]}
    timeout: 2m
    prompt: |
      Review the greeting.
      @if-no-file greet.txt empty names
      @reply
      ` + "```json" + `
      {"status": "CHANGES_REQUESTED", "issues": [{"severity": "major", "file": "greet.txt", "line": 1, "description": "The greeting ignores empty names.", "suggestion": "Greet the world when the name is empty."}], "suggestions": []}
      ` + "```" + `
      @end
      @endif
      @if-file greet.txt empty names
      @reply
      ` + "```json" + `
      {"status": "APPROVED", "issues": [], "suggestions": []}
      ` + "```" + `
      @end
      @endif
tasks:
  - id: greet
    gates: [review]
    prompt: |
      Write the greeting.
      @if-no-feedback
      @write greet.txt
      hello, NAME
      @end
      @endif
      @if-feedback The greeting ignores empty names.
      @write greet.txt
      hello, NAME (the world for empty names)
      @end
      @endif
`

// TestReviewGateRequestsChanges runs a review gate on a fleet of separate
// processes (EXE-009, OUT-05): the reviewer first requests changes, the
// implementer's second round acts on the reviewer's issue, which it got as
// feedback, the reviewer approves, and the node lands.
func TestReviewGateRequestsChanges(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1")
	f.gaterunner("gate-1")

	repo, base := testkit.Repo(t, map[string]string{"README.md": "greet\n"})
	wfFile := writeFile(t, t.TempDir(), "reviewed.yaml", reviewWorkflow)
	r := f.cli(4*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 0 {
		t.Fatalf("submit --wait: want exit 0 (succeeded)\n%s", r)
	}
	wf := wfID(t, r)
	s, code := f.status(wf)
	if code != 0 || s.Status != "succeeded" {
		t.Fatalf("status: exit %d, %s", code, s.Status)
	}
	if n := s.node(t, "greet"); n.Attempt != 2 || n.gate(t, "review").Status != "passed" {
		t.Errorf("greet: attempt %d, review %+v", n.Attempt, n.gate(t, "review"))
	}
	// The review's outcome, as status reports it.
	var raw struct {
		Nodes []struct {
			ID          string `json:"id"`
			Runs        int    `json:"runs"`
			ReviewSpend *struct {
				Runs int `json:"runs"`
			} `json:"review_spend"`
			Gates []struct {
				Name   string                 `json:"name"`
				Review *protocol.ReviewResult `json:"review"`
			} `json:"gates"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(f.cli(30*time.Second, "status", wf, "-o", "json").stdout), &raw); err != nil {
		t.Fatal(err)
	}
	var rev *protocol.ReviewResult
	for _, n := range raw.Nodes {
		// The reviewer's two runs count in the node's spend beside the
		// implementer's two, as its review part.
		if n.ID == "greet" && (n.Runs != 4 || n.ReviewSpend == nil || n.ReviewSpend.Runs != 2) {
			t.Errorf("greet's spend in status: %d runs, review part %+v; want 4 runs, 2 of them the reviewer's", n.Runs, n.ReviewSpend)
		}
		for _, g := range n.Gates {
			if n.ID == "greet" && g.Name == "review" {
				rev = g.Review
			}
		}
	}
	if rev == nil || rev.Approvals != 1 || rev.Required != 1 || len(rev.Reviewers) != 1 || rev.Reviewers[0].Verdict != "APPROVED" {
		t.Errorf("review in status = %+v", rev)
	}
	// Attempt 1's review and the feedback it gave, as show reports them.
	show := f.cli(30*time.Second, "show", wf, "greet")
	for _, want := range []string{"The greeting ignores empty names.", "Greet the world when the name is empty."} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, show.stdout)
		}
	}
	branch := "supervisor/" + wf
	if got := branchChanges(t, repo, base, branch); !equalStrings(got, []string{"A\tgreet.txt"}) {
		t.Errorf("changes on %s = %q", branch, got)
	}
	if got := fileAt(t, repo, branch, "greet.txt"); got != "hello, NAME (the world for empty names)\n" {
		t.Errorf("greet.txt on the branch = %q", got)
	}
}
