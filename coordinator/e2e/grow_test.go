package e2e

import (
	"encoding/json"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// growTemplate is the test's own workflow template: a planner whose plan's
// components become implementer nodes, every one of them judged by the
// workflow's gate, the project's review gate.
const growTemplate = `description: A plan whose components are built in parallel, each reviewed
gates: [review]
steps:
  plan:
    role: planner
    prompt: |
      {{.Feature}}
    expand:
      role: implementer
`

// growGates is the project's review gate: its reviewer (the Claude Code
// stand-in) approves, unless beta.txt greets NAME without handling empty
// names: then it requests changes.
const growGates = "gates:\n" +
	"  - name: review\n" +
	"    type: review\n" +
	"    agent: {adapter: claude-code}\n" +
	"    timeout: 2m\n" +
	"    prompt: |\n" +
	"      Review the change.\n" +
	"      @reply\n" +
	"      " + "```json" + "\n" +
	`      {"status": "APPROVED", "issues": [], "suggestions": []}` + "\n" +
	"      " + "```" + "\n" +
	"      @end\n" +
	"      @if-file beta.txt NAME\n" +
	"      @if-no-file beta.txt empty names\n" +
	"      @reply\n" +
	"      " + "```json" + "\n" +
	`      {"status": "CHANGES_REQUESTED", "issues": [{"severity": "major", "file": "beta.txt", "line": 1, "description": "The greeting ignores empty names.", "suggestion": "Greet the world when the name is empty."}], "suggestions": []}` + "\n" +
	"      " + "```" + "\n" +
	"      @end\n" +
	"      @endif\n" +
	"      @endif\n"

// growPlan is the planner's plan: three components of one phase. alpha and
// beta meet (each signals, then waits for the other: they finish only if
// they run at once); gamma's files overlap alpha's (shared.txt), so it
// waits for alpha and appends to alpha's work. beta's first greeting is
// what the reviewer rejects; told so in its feedback, it fixes it. Each
// ends with its implementation block. meet is the meeting directory.
func growPlan(meet string) string {
	done := func(created, modified string) string {
		return "@reply\n```json\n" + `{"status":"SUCCESS","files_created":[` + created + `],"files_modified":[` + modified +
			`],"tests_written":[]}` + "\n```\n@end\n"
	}
	plan := map[string]any{
		"status": "COMPLETE", "estimated_components": 3,
		"phases": []any{map[string]any{"id": "build", "title": "Greetings", "components": []any{
			map[string]any{"id": "alpha", "files": []string{"alpha.txt", "shared.txt"}, "description": "The alpha greeting.\n" +
				"@signal " + meet + "/alpha\n@await " + meet + "/beta\n@write alpha.txt\nalpha\n@end\n@append shared.txt\nalpha\n@end\n" +
				done(`"alpha.txt"`, `"shared.txt"`)},
			map[string]any{"id": "beta", "files": []string{"beta.txt"}, "description": "The beta greeting.\n" +
				"@signal " + meet + "/beta\n@await " + meet + "/alpha\n" +
				"@if-no-feedback\n@write beta.txt\nhello, NAME\n@end\n@endif\n" +
				"@if-feedback The greeting ignores empty names.\n@write beta.txt\nhello, NAME (the world for empty names)\n@end\n@endif\n" +
				done(`"beta.txt"`, "")},
			map[string]any{"id": "gamma", "files": []string{"shared.txt"}, "description": "The gamma greeting.\n" +
				"@append shared.txt\ngamma\n@end\n" + done("", `"shared.txt"`)},
		}}},
	}
	data, err := json.Marshal(plan)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// TestTemplateGrowsReviewedWorkflow is issue 10's end-to-end test, on a
// fleet of separate processes: `submit --template` turns a feature
// description into a workflow (TPL-07); its planner, the Claude Code
// stand-in directed by the feature, emits a plan whose three components
// become implementer nodes (HIER-01, ROLE-01); two of them run at once; the
// two whose files overlap never do, the later building on the earlier's
// work (DAG-07); the review gate first requests changes of one, whose next
// round acts on the reviewer's issue, then approves it (EXE-009, OUT-05);
// and status -o json sums every run's usage and cost (META-04).
func TestTemplateGrowsReviewedWorkflow(t *testing.T) {
	t.Parallel()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	configs := filepath.Join(root, "configs")
	userTemplates := t.TempDir()
	writeFile(t, userTemplates, "grow.yaml", growTemplate)
	sources := []string{"--builtin-gates", filepath.Join(configs, "gates"), "--user-gates", "",
		"--builtin-context", filepath.Join(configs, "context"), "--user-context", "",
		"--builtin-roles", filepath.Join(configs, "roles"), "--user-roles", "",
		"--builtin-templates", filepath.Join(configs, "templates"), "--user-templates", userTemplates}
	f := newFleet(t, 10*time.Second)
	f.coordArgs = sources
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "3")
	f.gaterunner("gate-1", "--concurrency", "3")

	repo, base := testkit.Repo(t, map[string]string{"README.md": "greetings\n", ".supervisor/gates.yaml": growGates})
	meet := t.TempDir()
	feature := writeFile(t, t.TempDir(), "greetings.md", "---\nsteps:\n  plan:\n    prompt: |\n"+
		"      Plan the greetings.\n      @reply\n      ```json\n      "+growPlan(meet)+"\n      ```\n      @end\n---\n"+
		"# Greetings\n\nThree greetings, each in its own file, reviewed.\n")

	r := f.cli(4*time.Minute, append([]string{"submit", "--template", "grow", feature, "--repo", repo, "--trust-project-gates", "--wait"}, sources...)...)
	if r.code != 0 {
		t.Fatalf("submit --template --wait did not succeed:\n%s", r)
	}
	wf := wfID(t, r)

	// The plan grew the workflow by three implementer nodes.
	s, _ := f.status(wf)
	if s.Name != "greetings" || s.Status != "succeeded" || len(s.Nodes) != 4 {
		t.Fatalf("workflow %q %s with %d nodes", s.Name, s.Status, len(s.Nodes))
	}
	if p := s.node(t, "plan"); p.Expanded != 3 || p.Output == nil || p.Output.Status != "COMPLETE" {
		t.Errorf("planner: expanded %d, output %+v", p.Expanded, p.Output)
	}
	for _, id := range []string{"plan--alpha", "plan--beta", "plan--gamma"} {
		n := s.node(t, id)
		if n.Planner != "plan" || n.Status != "succeeded" || n.gate(t, "review").Status != "passed" {
			t.Errorf("%s: planner %q, %s, review %s", id, n.Planner, n.Status, n.gate(t, "review").Status)
		}
	}
	// The review requested changes of beta once; its second round passed.
	if n := s.node(t, "plan--beta"); n.Attempt != 2 {
		t.Errorf("beta took %d rounds, want 2", n.Attempt)
	}
	if n := s.node(t, "plan--alpha"); n.Attempt != 1 {
		t.Errorf("alpha took %d rounds, want 1", n.Attempt)
	}
	show := f.cli(30*time.Second, "show", wf, "plan--beta")
	for _, want := range []string{"The greeting ignores empty names.", "Greet the world when the name is empty."} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("show plan--beta lacks %q:\n%s", want, show.stdout)
		}
	}
	// The implementers' prompts were built by their role, around their
	// component.
	logs := f.cli(30*time.Second, "logs", wf, "plan--gamma")
	if !strings.Contains(logs.stdout, "You are an implementer") || !strings.Contains(logs.stdout, "Task plan--gamma:") ||
		!strings.Contains(logs.stdout, "at least 80% unit-test coverage") {
		t.Errorf("gamma's prompt was not its role's:\n%s", logs.stdout)
	}

	// The event log: alpha and beta ran at once (each started before the
	// other's agent was done); gamma became ready only after alpha, whose
	// files overlap its own, had finished.
	w := f.cli(time.Minute, "watch", wf)
	if w.code != 0 {
		t.Fatalf("watch: want exit 0\n%s", w)
	}
	at := func(node, what string) int {
		t.Helper()
		loc := regexp.MustCompile(`(?m)^.*node ` + node + `\s+` + what).FindStringIndex(w.stdout)
		if loc == nil {
			t.Fatalf("watch printed no %q for %s:\n%s", what, node, w.stdout)
		}
		return loc[0]
	}
	if at("plan--alpha", "running on") > at("plan--beta", "agent succeeded") || at("plan--beta", "running on") > at("plan--alpha", "agent succeeded") {
		t.Errorf("alpha and beta did not run at once:\n%s", w.stdout)
	}
	if at("plan--gamma", "ready") < at("plan--alpha", "succeeded") {
		t.Errorf("gamma became ready before alpha finished:\n%s", w.stdout)
	}

	// Usage and cost: every run's, per node and summed for the workflow.
	var spend agentsStatus
	if err := json.Unmarshal([]byte(f.cli(30*time.Second, "status", wf, "-o", "json").stdout), &spend); err != nil {
		t.Fatal(err)
	}
	var sum usage
	var cost float64
	runs, reviewRuns := 0, 0
	for _, n := range spend.Nodes {
		if n.ReviewSpend != nil {
			reviewRuns += n.ReviewSpend.Runs
		}
		if n.Runs == 0 || n.Usage.Input == 0 || n.CostUSD <= 0 || n.LastRun == nil || n.LastRun.Adapter != "claude-code" {
			t.Errorf("node %s: runs %d usage %+v cost %v last run %+v", n.ID, n.Runs, n.Usage, n.CostUSD, n.LastRun)
		}
		runs += n.Runs
		sum.Input, sum.Cached, sum.Output = sum.Input+n.Usage.Input, sum.Cached+n.Usage.Cached, sum.Output+n.Usage.Output
		cost += n.CostUSD
	}
	// Five agent runs (the planner, three components, beta's second
	// round) and four reviews (beta's twice), the reviewers' part apart.
	if spend.Runs != 9 || runs != 9 || spend.Usage != sum || math.Abs(spend.CostUSD-cost) > 1e-9 || spend.CostUSD <= 0 {
		t.Errorf("workflow: %d runs usage %+v cost %v; nodes: %d runs usage %+v cost %v", spend.Runs, spend.Usage, spend.CostUSD, runs, sum, cost)
	}
	if spend.ReviewSpend == nil || spend.ReviewSpend.Runs != 4 || reviewRuns != 4 {
		t.Errorf("reviewers' part: workflow %+v, nodes' %d runs; want 4", spend.ReviewSpend, reviewRuns)
	}
	// The review's verdicts, as status reports them.
	var raw struct {
		Nodes []struct {
			ID    string `json:"id"`
			Gates []struct {
				Name   string                 `json:"name"`
				Review *protocol.ReviewResult `json:"review"`
			} `json:"gates"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(f.cli(30*time.Second, "status", wf, "-o", "json").stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, n := range raw.Nodes {
		for _, g := range n.Gates {
			if g.Name == "review" && (g.Review == nil || g.Review.Approvals != 1 || g.Review.Reviewers[0].Verdict != "APPROVED") {
				t.Errorf("%s's review: %+v", n.ID, g.Review)
			}
		}
	}

	// The result branch: every component's work, gamma's on alpha's, and
	// beta's as the review asked.
	branch := "supervisor/" + wf
	if got, want := branchChanges(t, repo, base, branch), []string{"A\talpha.txt", "A\tbeta.txt", "A\tshared.txt"}; !equalStrings(got, want) {
		t.Errorf("changes on %s = %q, want %q", branch, got, want)
	}
	if got := fileAt(t, repo, branch, "shared.txt"); got != "alpha\ngamma\n" {
		t.Errorf("shared.txt = %q: gamma did not build on alpha's work", got)
	}
	if got := fileAt(t, repo, branch, "beta.txt"); got != "hello, NAME (the world for empty names)\n" {
		t.Errorf("beta.txt = %q", got)
	}
}
