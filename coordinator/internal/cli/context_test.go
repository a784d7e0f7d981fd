package cli

import (
	"bytes"
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

// The context command lists the strategies and packs one from a local
// repository, as a worker would (CTX-04, CTX-05).
func TestContextCommand(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "configs", "context")
	run := func(args ...string) cliResult {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--builtin-context=" + dir, "--user-context="}, args...), &out, &errOut)
		return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
	}
	wantCode(t, run("context", "list"), 0, "reviewer_diff", "15000", "diff, plan, changed, standards", "investigator_wide")

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "hi\n", "store/store.go": "package store\n\nconst Name = \"store\"\n"})
	testkit.WriteFile(t, filepath.Join(repo, "store/store.go"), "package store\n\nconst Name = \"shop\"\n")
	r := run("context", "pack", "reviewer_diff", "--repo", repo, "--task", "Review it.")
	wantCode(t, r, 0, "# Context (strategy reviewer_diff)", "-const Name = \"store\"\n+const Name = \"shop\"",
		"### store/store.go", "# Task\n\nReview it.", "reviewer_diff: ")
	r = run("context", "pack", "implementer_targeted", "--repo", repo, "--target", "store/", "-o", "json")
	wantCode(t, r, 0)
	var m contextpack.Manifest
	decodeJSON(t, r, &m)
	if m.Strategy != "implementer_targeted" || m.Budget != 25000 || len(m.Parts) == 0 || m.Parts[1].Name != "target" ||
		strings.Join(m.Parts[1].Files, ",") != "store/store.go" {
		t.Errorf("manifest %+v", m)
	}
	wantCode(t, run("context", "pack", "nope", "--repo", repo), ExitUsage, `unknown context strategy "nope"`)
	wantCode(t, run("context", "pack", "reviewer_diff", "--repo", repo, "--budget", "1000", "--task", strings.Repeat("word ", 2000)),
		ExitInvalid, "the budget is 1000")
}
