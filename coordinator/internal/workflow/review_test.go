package workflow

import (
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
