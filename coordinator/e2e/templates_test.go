package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// projectRole is a project overlay that keeps a built-in role but runs the
// scripted test agent in place of Claude Code.
const projectRole = `extends: %s
agent:
  adapter: command
  command: ` + agentCommand + `
`

// TestTemplateSubmit submits a feature description with the mvp template
// (TPL-02, TPL-07): the project's trusted role overlays (ROLE-08) make
// every step run the test agent, the front matter gives each step its
// directives, the coordinator parses the expanded workflow with the same
// roles, the planner's plan adds its component as a node, the
// implementer's prompt is built by its role, each round's result block
// matches its role's output schema, and the built-in Go gates judge the
// change.
func TestTemplateSubmit(t *testing.T) {
	t.Parallel()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	configs := filepath.Join(root, "configs")
	sources := []string{"--builtin-gates", filepath.Join(configs, "gates"), "--user-gates", "",
		"--builtin-context", filepath.Join(configs, "context"), "--user-context", "",
		"--builtin-roles", filepath.Join(configs, "roles"), "--user-roles", "",
		"--builtin-templates", filepath.Join(configs, "templates"), "--user-templates", ""}
	f := newFleet(t, 10*time.Second)
	f.coordArgs = sources
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "2")
	f.gaterunner("gate-1", "--concurrency", "2")

	files := map[string]string{
		"go.mod":         "module example.com/greet\n\ngo 1.22\n",
		"greet/greet.go": "package greet\n\n// Hello greets name.\nfunc Hello(name string) string { return \"hello \" + name }\n",
		"README.md":      "greet\n",
	}
	for _, role := range []string{"planner", "implementer", "reviewer"} {
		files[".supervisor/roles/"+role+".yaml"] = strings.ReplaceAll(projectRole, "%s", role)
	}
	repo, _ := testkit.Repo(t, files)
	// The planner's plan has one component, which an implementer builds
	// (writes greet/bye.go); the implement step adds its test; each agent ends with its result block.
	block := func(json string) string {
		return "      @print ```json\n      @print " + json + "\n      @print ```\n"
	}
	feature := writeFile(t, t.TempDir(), "goodbye.md", `---
steps:
  plan:
    prompt: |
`+block(`{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"one","components":[{"id":"bye","description":"@write greet/bye.go\npackage greet\n\n// Bye says goodbye to name.\nfunc Bye(name string) string { return \"bye \" + name }\n@end"}]}]}`)+`    expand:
      role: implementer
      prompt: |
        @print-prompt
  `+strings.ReplaceAll(block(`{"status":"SUCCESS","files_created":["greet/bye.go"],"files_modified":[],"tests_written":[]}`), "\n      ", "\n        ")+`  implement:
    prompt: |
      @print-prompt
      @write greet/bye_test.go
      package greet

      import "testing"

      func TestBye(t *testing.T) {
      	if Bye("x") != "bye x" {
      		t.Fatal(Bye("x"))
      	}
      }
      @end
`+block(`{"status":"SUCCESS","files_created":["greet/bye_test.go"],"files_modified":[],"tests_written":["TestBye"]}`)+`  quick_review:
    prompt: |
`+block(`{"status":"APPROVED","issues":[],"suggestions":[]}`)+`---
# Goodbye

Add a Bye function to package greet, with a test.
`)

	plan := f.cli(time.Minute, append([]string{"plan", "--template", "mvp", feature, "--repo", repo, "--trust-project-gates"}, sources...)...)
	if plan.code != 0 || !strings.Contains(plan.stdout, "name: goodbye") || !strings.Contains(plan.stdout, "role: implementer") {
		t.Fatalf("plan:\n%s", plan)
	}

	r := f.cli(5*time.Minute, append([]string{"submit", "--template", "mvp", feature, "--repo", repo, "--trust-project-gates", "--wait"}, sources...)...)
	if r.code != 0 {
		t.Fatalf("submit --template --wait did not succeed:\n%s", r)
	}
	wf := wfID(t, r)
	st := f.detail(wf)
	if st.Name != "goodbye" {
		t.Errorf("workflow name %q", st.Name)
	}
	for _, id := range []string{"plan", "plan--bye", "implement", "quick_review"} {
		if n := st.node(t, id); n.Status != "succeeded" {
			t.Errorf("node %s: %s", id, n.Status)
		}
	}
	// The component was built by an implementer (the expand's role, as
	// _base's plan step sets it): its prompt is built by that role.
	if logs := f.cli(30*time.Second, "logs", wf, "plan--bye"); logs.code != 0 || !strings.Contains(logs.stdout, "prompt| You are an implementer") {
		t.Errorf("the component's prompt was not built by the implementer role:\n%s", logs)
	}
	impl := st.node(t, "implement")
	for _, g := range []string{"go-build", "go-vet", "go-test"} {
		if gs := impl.gate(t, g); gs.Status != "passed" {
			t.Errorf("implement gate %s: %s", g, gs.Status)
		}
	}
	logs := f.cli(30*time.Second, "logs", wf, "implement")
	if logs.code != 0 || !strings.Contains(logs.stdout, "prompt| You are an implementer") || !strings.Contains(logs.stdout, "prompt| Task implement:") {
		t.Errorf("the implementer's prompt was not built by its role:\n%s", logs)
	}

}
