package workflow

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/contextpack"
)

func strategies(t *testing.T) *contextpack.Catalogue {
	t.Helper()
	cat, err := contextpack.Load(filepath.Join("..", "..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// CTX-01, CTX-09: a task's context names a strategy, resolved at parse time
// into its whole definition, with the task's budget and targets.
func TestParseContext(t *testing.T) {
	opts := Options{Strategies: strategies(t)}
	spec, err := ParseWithOptions("c.yaml", []byte(head+`tasks:
  - {id: a, prompt: p, context: {strategy: implementer_targeted, budget: 30000, targets: [internal/store/*.go, web/], interfaces: [api/*.go]}}
  - {id: b, prompt: p, context: reviewer_diff, depends_on: [a]}
  - {id: c, prompt: p}
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := spec.Tasks[0].Context, spec.Tasks[1].Context, spec.Tasks[2].Context
	if a == nil || a.Strategy != "implementer_targeted" || a.Definition.Name != "implementer_targeted" || a.Budget != 30000 ||
		strings.Join(a.Targets, " ") != "internal/store/*.go web/**" || len(a.Interfaces) != 1 || len(a.Definition.Parts) == 0 {
		t.Errorf("a: %+v", a)
	}
	if b == nil || b.Strategy != "reviewer_diff" || b.Budget != 15000 || len(b.Definition.PriorityOrder) == 0 {
		t.Errorf("b: %+v (want the strategy's own budget)", b)
	}
	if c != nil {
		t.Errorf("c: %+v, want no context", c)
	}

	src := head + `tasks:
  - {id: a, prompt: p, context: {strategy: wide}}
  - {id: b, prompt: p, context: {strategy: reviewer_diff, budget: 90000}}
  - {id: c, prompt: p, context: {strategy: reviewer_diff, targets: [../etc/passwd, $TARGET]}}
  - {id: d, prompt: p, context: {budget: 2000}}
  - {id: e, prompt: p, context: {strategy: reviewer_diff, tokens: 1}}
  - {id: f, prompt: Sign., type: human, context: reviewer_diff}
  - {id: g, prompt: p, context: [reviewer_diff]}
`
	_, err = ParseWithOptions("c.yaml", []byte(src), opts)
	checkProblems(t, "c.yaml", src, err, []want{
		`4:44: task "a" context: unknown context strategy "wide" (known: implementer_targeted, investigator_wide, planner_docset, reviewer_diff, security_audit)`,
		`5:67: task "b" context budget 90000 is out of range: must be between 1000 and 50000`,
		`6:69: task "c" context targets: glob "../etc/passwd" leaves the repository (..)`,
		`6:84: task "c" context targets: glob "$TARGET": placeholders belong in strategies, not in targets`,
		`7:33: task "d" context is missing required field "strategy"`,
		`8:59: unknown field "tokens" in task "e" context`,
		`9:41: task "f" is a human task: it runs no agent to give a context to`,
		`10:33: task "g" context must be a mapping, got a list`,
	})
	// Without strategies loaded, naming one is an error too.
	src = head + "tasks:\n  - {id: a, prompt: p, context: reviewer_diff}\n"
	_, err = Parse("c.yaml", []byte(src))
	checkProblems(t, "c.yaml", src, err, []want{`4:33: task "a" context: unknown context strategy "reviewer_diff" (none are loaded)`})
}
