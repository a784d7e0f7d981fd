package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Context packing end to end (CTX-01, CTX-06): a task names a strategy of
// configs/context, the coordinator resolves it, the worker packs the
// target file into the agent's prompt, and `logs` shows what the agent was
// given before its own log.
func TestContextPackedAndShown(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "configs", "context")
	cat, err := contextpack.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	run := cliFleet(t, fleet.Options{Strategies: cat})
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "context\n", "store/store.go": "package store\n\nconst Name = \"store\"\n"})
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	testkit.WriteFile(t, wf, `name: ctx
defaults:
  agent: {command: [cat]}
  allow_empty: true
tasks:
  - id: impl
    prompt: Rename the store.
    gates: []
    context: {strategy: implementer_targeted, targets: [store/*.go]}
  - {id: typo, prompt: p, gates: [], context: implementer_targetted}
`)
	wantCode(t, run("submit", wf, "--repo", repo, "--builtin-context="+dir, "--user-context="), ExitInvalid,
		`unknown context strategy "implementer_targetted"`)
	testkit.WriteFile(t, wf, strings.Replace(string(testkit.ReadFile(t, wf)), "  - {id: typo, prompt: p, gates: [], context: implementer_targetted}\n", "", 1))
	r := run("submit", wf, "--repo", repo, "--builtin-context="+dir, "--user-context=", "--wait")
	wantCode(t, r, 0)
	id := strings.Fields(r.stdout)[0]
	r = run("status", id, "-o", "json")
	wantCode(t, r, 0)
	var s api.WorkflowSummary
	decodeJSON(t, r, &s)
	if len(s.Nodes) != 1 || !strings.HasPrefix(s.Nodes[0].Context, id+"/impl/a1/context-") {
		t.Errorf("status nodes %+v: want the context artifact named", s.Nodes)
	}
	wantCode(t, run("logs", id, "impl"), 0,
		"==> context ("+id+"/impl/a1/context-",
		"# Context (strategy implementer_targeted)", "### store/store.go\n\n```go\npackage store",
		"# Task\n\nRename the store.",
		"==> agent (", "strategy implementer_targeted")
}
