package workflow

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// realSources loads the repository's built-in gates and roles.
func realSources(t *testing.T, project ...overlay.File) Options {
	t.Helper()
	res, err := gates.Load(gates.Options{BuiltinDir: filepath.Join("..", "..", "..", "configs", "gates")})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := roles.Load(roles.Options{BuiltinDir: filepath.Join("..", "..", "..", "configs", "roles"), Project: project})
	if err != nil {
		t.Fatal(err)
	}
	strategies, err := contextpack.Load(filepath.Join("..", "..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	return Options{BuiltinGates: res.Set, Roles: cat, Strategies: strategies}
}

func TestParseRoles(t *testing.T) {
	src := `name: roles
defaults:
  role: implementer
gates: [go-build, go-test]
tasks:
  - id: plan
    role: planner
    prompt: Split the health-check feature.
  - id: api
    depends_on: [plan]
    files: ["cmd/server/**"]
    prompt: Add GET /healthz.
  - id: review
    role: reviewer
    depends_on: [api]
    timeout: 5m
    prompt: Check the endpoint.
  - id: own-agent
    role: implementer
    agent: {adapter: codex}
    gates: [go-build]
    allow_empty: false
    prompt: Something else.
  - id: sign-off
    type: human
    depends_on: [review]
    prompt: Approve the release.
`
	spec, err := ParseWithOptions("roles.yaml", []byte(src), realSources(t))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]protocol.TaskSpec{}
	for _, task := range spec.Tasks {
		byID[task.ID] = task
	}
	plan := byID["plan"]
	if plan.Role() != "planner" || plan.Output != "plan" || !plan.AllowEmpty || len(plan.Gates) != 0 ||
		plan.Context == nil || plan.Context.Strategy != "planner_docset" || plan.Context.Budget != 30000 || plan.Context.Definition.Name != "planner_docset" {
		t.Errorf("plan = %+v", plan)
	}
	if plan.Agent == nil || plan.Agent.Adapter != "claude-code" {
		t.Errorf("plan agent %+v command %v", plan.Agent, plan.Command())
	}
	if !strings.Contains(plan.Prompt, "You are the planner") || !strings.Contains(plan.Prompt, "Task plan: plan the following work.\n\nSplit the health-check feature.") {
		t.Errorf("plan prompt:\n%s", plan.Prompt)
	}
	api := byID["api"]
	if api.Role() != "implementer" || api.Output != "implementation" || api.FeedbackTemplate() != "implementer" || api.AllowEmpty ||
		!reflect.DeepEqual(api.Gates, []string{"go-build", "go-test"}) {
		t.Errorf("api (defaults.role) = %+v", api)
	}
	if !strings.Contains(api.Prompt, "Work test first") || !strings.Contains(api.Prompt, "80%") ||
		!strings.Contains(api.Prompt, "Files in scope:\n- cmd/server/**") {
		t.Errorf("api prompt lacks the role's config:\n%s", api.Prompt)
	}
	if r := byID["review"]; r.Role() != "reviewer" || r.TimeoutSeconds != 300 || r.Output != "review" || len(r.Gates) != 0 {
		t.Errorf("review = %+v", r)
	}
	own := byID["own-agent"]
	if own.Agent == nil || own.Agent.Adapter != "codex" || own.AllowEmpty || !reflect.DeepEqual(own.Gates, []string{"go-build"}) || own.Role() != "implementer" {
		t.Errorf("own-agent: the task's settings must win: %+v", own)
	}
	if h := byID["sign-off"]; h.Role() != "" || h.Agent != nil {
		t.Errorf("a human task takes no role: %+v", h)
	}
}

func TestParseRoleGatesFromSources(t *testing.T) {
	// A project overlay gives the implementer default gates: a task with
	// no gates section runs them, and the built-in definitions come along.
	opts := realSources(t, overlay.File{Layer: overlay.Project, Name: "implementer", Path: ".supervisor/roles/implementer.yaml",
		Data: []byte("extends: implementer\ngates: [go-vet, go-test]\n")})
	src := "name: g\ntasks:\n  - id: a\n    role: implementer\n    prompt: x\n"
	spec, err := ParseWithOptions("g.yaml", []byte(src), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Tasks[0].Gates; !reflect.DeepEqual(got, []string{"go-vet", "go-test"}) {
		t.Errorf("gates %v", got)
	}
	if got := gateNames(spec.Gates); !reflect.DeepEqual(got, []string{"go-build", "go-test", "go-vet"}) {
		t.Errorf("workflow gates %v", got)
	}
}

func TestParseRoleProblems(t *testing.T) {
	opts := realSources(t, overlay.File{Layer: overlay.Project, Name: "gated", Path: "gated.yaml",
		Data: []byte("extends: implementer\ndescription: gated\ngates: [nope]\n")})
	tests := []struct {
		name string
		src  string
		want []want
	}{
		{"unknown role", "name: a\ntasks:\n  - id: t\n    role: wizard\n    prompt: x\n",
			[]want{`4:11: unknown task "t" role "wizard" (known: documenter, gated, implementer, planner, reviewer, security_reviewer, tester)`}},
		{"unknown defaults role", "name: a\ndefaults: {role: wizard}\ntasks:\n  - id: t\n    prompt: x\n",
			[]want{`2:18: unknown defaults role "wizard"`}},
		{"role on a human task", "name: a\ntasks:\n  - id: t\n    type: human\n    role: planner\n    prompt: x\n",
			[]want{`5:5: task "t" is a human task: it runs no agent, so it takes no role`}},
		{"role's gate unknown", "name: a\ntasks:\n  - id: t\n    role: gated\n    prompt: x\n",
			[]want{`4:11: task "t" uses unknown gate "nope" (a default gate of role "gated")`}},
		{"no agent anywhere", "name: a\ntasks:\n  - id: t\n    prompt: x\n",
			[]want{`3:5: task "t" has no agent: set agent on the task, its role or in defaults`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseWithOptions("a.yaml", []byte(tc.src), opts)
			checkProblems(t, "a.yaml", tc.src, err, tc.want)
		})
	}
}

// What the workflow's defaults write wins over the role; what they leave
// out, the role fills (ROLE-06).
func TestParseRoleUnderDefaults(t *testing.T) {
	opts := realSources(t, overlay.File{Layer: overlay.Project, Name: "slow", Path: "slow.yaml",
		Data: []byte("extends: implementer\ndescription: slow implementer\ntimeout: 2h\nallow_empty: true\n")})
	src := `name: d
defaults:
  agent: {adapter: codex}
  timeout: 10m
  allow_empty: false
tasks:
  - id: r
    role: slow
    prompt: x
`
	spec, err := ParseWithOptions("d.yaml", []byte(src), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := spec.Tasks[0]
	if r.Agent == nil || r.Agent.Adapter != "codex" || r.TimeoutSeconds != 600 || r.AllowEmpty || r.Output != "implementation" {
		t.Errorf("defaults must win where written: %+v", r)
	}
	spec, err = ParseWithOptions("d.yaml", []byte("name: d\ntasks:\n  - id: r\n    role: slow\n    prompt: x\n"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if r := spec.Tasks[0]; r.TimeoutSeconds != 7200 || !r.AllowEmpty || r.Agent == nil || r.Agent.Adapter != "claude-code" {
		t.Errorf("the role fills what the workflow leaves out: %+v", r)
	}
}

// A role's max_cost_usd is the budget of its tasks that set none; a task's
// own wins, and a role without one leaves the task without a budget.
func TestParseRoleBudget(t *testing.T) {
	opts := realSources(t, overlay.File{Layer: overlay.Project, Name: "thrifty", Path: "thrifty.yaml",
		Data: []byte("extends: implementer\ndescription: thrifty implementer\nmax_cost_usd: 0.75\n")})
	src := `name: b
tasks:
  - {id: a, role: thrifty, prompt: x}
  - {id: b, role: thrifty, prompt: x, max_cost_usd: 3}
  - {id: c, role: implementer, prompt: x}
`
	spec, err := ParseWithOptions("b.yaml", []byte(src), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{0.75, 3, 0} {
		if got := spec.Tasks[i].MaxCostUSD(); got != want {
			t.Errorf("task %s: max_cost_usd %v, want %v", spec.Tasks[i].ID, got, want)
		}
	}
	// A planner's expand template takes its role's budget the same way,
	// and each node its plan adds carries it.
	spec, err = ParseWithOptions("b.yaml", []byte(`name: b
tasks:
  - {id: plan, role: planner, prompt: x, expand: {role: thrifty}}
  - {id: own, role: planner, prompt: x, expand: {role: thrifty, max_cost_usd: 2}}
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := spec.Tasks[0].Expand().MaxCostUSD, spec.Tasks[1].Expand().MaxCostUSD; a != 0.75 || b != 2 {
		t.Errorf("expand max_cost_usd %v and %v, want 0.75 (the role's) and 2 (its own)", a, b)
	}
	x, err := Expand(spec, "plan", mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[`+
		`{"id":"bye","description":"Add Bye.","files":["bye.go"]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := x.Tasks[0]; n.MaxCostUSD() != 0.75 {
		t.Errorf("added node %s: max_cost_usd %v, want 0.75", n.ID, n.MaxCostUSD())
	}
}
