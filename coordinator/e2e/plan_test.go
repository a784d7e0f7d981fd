package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// planWorkflow: a planner whose first answer has no result block and whose
// second, after the feedback says so, is a plan of two phases; the
// components' descriptions carry the scripted agent's directives, so each
// added node writes its own file; the expand template's prompt makes every
// added node end with an implementation block. docs depends on the planner
// and so runs after every added node. The agent prints text: the worker
// of this build reports no parsed run, so the block is read from the tail
// of its standard output, which a JSON envelope would end.
const planWorkflow = `name: grow
defaults:
  agent:
    command: [supervisor-test-agent, -p, --output-format, text]
  timeout: 2m
gates:
  - name: parts
    command: [test, -f, README.md]
tasks:
  - id: plan
    output: plan
    gates: []
    prompt: |
      Plan the feature.
      @if-no-feedback
      @print I would start with a model.
      @endif
      @if-feedback no_block
      @print ` + "```json" + `
      @print {"status":"COMPLETE","estimated_components":3,"phases":[{"id":"one","components":[{"id":"model","description":"@write model.txt\nmodel\n@end"},{"id":"hash","description":"@write hash.txt\nhash\n@end"}]},{"id":"two","components":[{"id":"login","description":"@write login.txt\nlogin\n@end","depends_on":["model"]}]}]}
      @print ` + "```" + `
      @endif
    expand:
      gates: [parts]
      prompt: |
        Build this component.
        @print ` + "```json" + `
        @print {"status":"SUCCESS","files_created":["x"],"files_modified":[],"tests_written":[]}
        @print ` + "```" + `
  - id: docs
    depends_on: [plan]
    gates: []
    prompt: |
      Document it.
      @write docs.txt
      docs
      @end
`

// TestPlanGrowsTheWorkflow runs a planner on a fleet of separate
// processes (HIER-01, OUT-06, DAG-03): its first round, without a result
// block, is retried with feedback saying so; its plan then adds three
// nodes, which the worker runs — phase one before phase two — with their
// gates, and the planner's dependent runs last on all their work.
func TestPlanGrowsTheWorkflow(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "2")
	f.gaterunner("gate-1", "--concurrency", "2")

	repo, base := testkit.Repo(t, map[string]string{"README.md": "grow\n"})
	wfFile := writeFile(t, t.TempDir(), "grow.yaml", planWorkflow)
	r := f.cli(4*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 0 {
		t.Fatalf("submit --wait: want exit 0 (succeeded)\n%s", r)
	}
	wf := wfID(t, r)
	for _, re := range []string{
		`node plan\s+agent succeeded \(exit 0\), no changes; plan result not accepted: no JSON block found`,
		`node plan\s+plan added 3 nodes: plan--model, plan--hash, plan--login; docs now wait for them`,
		`node plan--login\s+agent succeeded \(exit 0\); implementation result SUCCESS`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("submit --wait printed nothing matching %s:\n%s", re, r.stdout)
		}
	}
	s, code := f.status(wf)
	if code != 0 || s.Status != "succeeded" || s.Counts["succeeded"] != 5 || len(s.Nodes) != 5 {
		t.Fatalf("status: exit %d, %s, counts %v, %d nodes", code, s.Status, s.Counts, len(s.Nodes))
	}
	p := s.node(t, "plan")
	if p.Attempt != 2 || p.Expanded != 3 || p.Output == nil || p.Output.Status != "COMPLETE" {
		t.Errorf("planner: attempt %d, expanded %d, output %+v", p.Attempt, p.Expanded, p.Output)
	}
	login := s.node(t, "plan--login")
	if login.Planner != "plan" || strings.Join(login.DependsOn, " ") != "plan plan--model plan--hash" ||
		login.gate(t, "parts").Status != "passed" {
		t.Errorf("plan--login: %+v", login)
	}
	if docs := s.node(t, "docs"); strings.Join(docs.DependsOn, " ") != "plan plan--model plan--hash plan--login" {
		t.Errorf("docs depends on %v", docs.DependsOn)
	}
	// Every added node's work and the dependent's are on the branch, the
	// dependent's last.
	branch := "supervisor/" + wf
	got := branchChanges(t, repo, base, branch)
	want := []string{"A\tdocs.txt", "A\thash.txt", "A\tlogin.txt", "A\tmodel.txt"}
	if !equalStrings(got, want) {
		t.Errorf("changes on %s = %q, want %q", branch, got, want)
	}
	if fileAt(t, repo, branch, "login.txt") != "login\n" {
		t.Errorf("login.txt on the branch")
	}
}
