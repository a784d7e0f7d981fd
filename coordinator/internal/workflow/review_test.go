package workflow

import (
	"strings"
	"testing"
)

// A workflow's review gate may name a context strategy: resolved at parse
// time, like a task's, into the gate's definition; an unknown one is
// reported at its line (CTX-06, EXE-009).
func TestParseReviewGateContext(t *testing.T) {
	opts := Options{Strategies: strategies(t)}
	spec, err := ParseWithOptions("r.yaml", []byte(head+`gates:
  - name: review
    type: review
    agent: {adapter: claude-code}
    context: {strategy: reviewer_diff, budget: 20000}
tasks:
  - {id: a, prompt: p, gates: [review]}
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	g := spec.Gates[0]
	if !g.IsReview() || g.Review == nil || g.Review.Context == nil || g.Review.Context.Strategy != "reviewer_diff" ||
		g.Review.Context.Budget != 20000 || len(g.Review.Context.Definition.Parts) == 0 {
		t.Fatalf("gate = %+v", g)
	}
	src := head + `gates:
  - name: review
    type: review
    agent: {adapter: claude-code}
    context: wide
tasks:
  - {id: a, prompt: p, gates: [review]}
`
	_, err = ParseWithOptions("r.yaml", []byte(src), opts)
	checkProblems(t, "r.yaml", src, err, []want{`7:14: gate "review" context: unknown context strategy "wide"`})
}

// A review gate may take its reviewers from a role (the built-in
// reviewer): the role's agent (run quorum.reviewers times), its prompt
// additions as the instructions and its context strategy, each unless the
// gate gives its own; a role answering with another schema, or an
// unknown one, is reported at its line.
func TestParseReviewGateRole(t *testing.T) {
	opts := realSources(t)
	spec, err := ParseWithOptions("r.yaml", []byte(head+`gates:
  - name: review
    type: review
    role: reviewer
    quorum: {reviewers: 2}
  - name: own-prompt
    type: review
    role: reviewer
    agent: {adapter: codex}
    prompt: Look at the tests only.
tasks:
  - {id: a, prompt: p, gates: [review, own-prompt]}
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := spec.Gates[0].Review
	if r == nil || len(r.Reviewers) != 2 || r.Reviewers[0].Adapter != "claude-code" || r.Approvals != 2 ||
		!strings.Contains(r.Prompt, "You are a code reviewer") || r.Context == nil || r.Context.Strategy != "reviewer_diff" {
		t.Fatalf("review from the role = %+v", r)
	}
	o := spec.Gates[1].Review
	if o == nil || len(o.Reviewers) != 1 || o.Reviewers[0].Adapter != "codex" || o.Prompt != "Look at the tests only." || o.Context == nil {
		t.Fatalf("review with its own agent and prompt = %+v", o)
	}
	src := head + `gates:
  - name: review
    type: review
    role: nosuch
  - name: impl
    type: review
    role: implementer
tasks:
  - {id: a, prompt: p, gates: [review, impl]}
`
	_, err = ParseWithOptions("r.yaml", []byte(src), opts)
	checkProblems(t, "r.yaml", src, err, []want{`6:11: unknown gate "review" role "nosuch"`,
		`9:11: gate "impl" role "implementer" answers with the implementation schema`})
}
