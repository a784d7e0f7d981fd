package templates

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var configs = filepath.Join("..", "..", "..", "configs")

// parseOptions are the repository's built-in gates and roles.
func parseOptions(t *testing.T) workflow.Options {
	t.Helper()
	res, err := gates.Load(gates.Options{BuiltinDir: filepath.Join(configs, "gates")})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := roles.Load(roles.Options{BuiltinDir: filepath.Join(configs, "roles")})
	if err != nil {
		t.Fatal(err)
	}
	strategies, err := contextpack.Load(filepath.Join(configs, "context"))
	if err != nil {
		t.Fatal(err)
	}
	return workflow.Options{BuiltinGates: res.Set, Roles: cat, Strategies: strategies}
}

func loadBuiltin(t *testing.T) *Catalogue {
	t.Helper()
	c, err := Load(Options{BuiltinDir: filepath.Join(configs, "templates")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func feature(t *testing.T) *Feature {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "healthz.md"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFeature("healthz.md", data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func taskIDs(spec *protocol.WorkflowSpec) []string {
	var ids []string
	for _, task := range spec.Tasks {
		ids = append(ids, task.ID)
	}
	return ids
}

// TestConfigsTemplatesExpand expands every built-in template with a
// feature and parses the result with the real parser, gates and roles.
func TestConfigsTemplatesExpand(t *testing.T) {
	c := loadBuiltin(t)
	if got, want := c.Names(), []string{"_base", "enterprise", "mvp", "open_source", "security_critical", "standard"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("templates %v, want %v", got, want)
	}
	opts := parseOptions(t)
	tests := []struct {
		name      string
		tasks     []string
		gates     []string
		approvals []string
	}{
		{"_base", []string{"plan", "implement"}, []string{"go-build", "go-vet", "go-test"}, nil},
		{"mvp", []string{"plan", "implement", "quick_review"}, []string{"go-build", "go-vet", "go-test"}, nil},
		{"standard", []string{"plan", "implement", "tests", "review", "docs"}, []string{"go-build", "go-vet", "go-test", "go-fmt"}, nil},
		{"enterprise", []string{"plan", "implement", "plan_review", "interface_definition", "integration_tests", "security_review", "code_review"},
			[]string{"go-build", "go-vet", "go-test", "go-fmt", "go-coverage", "go-mod-tidy"}, []string{"plan_review", "interface_definition", "code_review"}},
		{"open_source", []string{"plan", "implement", "docs", "await_review"}, []string{"go-build", "go-vet", "go-test"}, nil},
		{"security_critical", []string{"plan", "implement", "plan_review", "interface_definition", "integration_tests", "security_review", "code_review",
			"threat_modeling", "penetration_test", "second_security_review"},
			[]string{"go-build", "go-vet", "go-test", "go-fmt", "go-coverage", "go-mod-tidy", "go-vuln"},
			[]string{"plan_review", "interface_definition", "code_review", "second_security_review"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, ok := c.Get(tc.name)
			if !ok {
				t.Fatal("missing")
			}
			doc, err := tpl.Expand(feature(t))
			if err != nil {
				t.Fatal(err)
			}
			spec, err := workflow.ParseWithOptions(tc.name+".yaml", doc, opts)
			if err != nil {
				t.Fatalf("%v\n%s", err, doc)
			}
			if spec.Name != "health-check-endpoint" {
				t.Errorf("name %q", spec.Name)
			}
			if got := taskIDs(spec); !reflect.DeepEqual(got, tc.tasks) {
				t.Errorf("tasks %v, want %v", got, tc.tasks)
			}
			var wfGates, approvals []string
			for _, g := range spec.Gates {
				wfGates = append(wfGates, g.Name)
			}
			for _, task := range spec.Tasks {
				if task.Approval() != nil {
					approvals = append(approvals, task.ID)
				}
				if task.Type != protocol.TaskHuman && (task.Role() == "" || !strings.Contains(task.Prompt, "GET /healthz")) {
					t.Errorf("task %s: role %q, prompt lacks the feature:\n%s", task.ID, task.Role(), task.Prompt)
				}
			}
			if !reflect.DeepEqual(wfGates, tc.gates) {
				t.Errorf("gates %v, want %v", wfGates, tc.gates)
			}
			if !reflect.DeepEqual(approvals, tc.approvals) {
				t.Errorf("approvals %v, want %v", approvals, tc.approvals)
			}
			// The plan's components are built by implementers: the
			// implementer's role, schema and prompt, not the planner's.
			plan := spec.Tasks[0]
			if x := plan.Expand(); plan.ID != "plan" || x == nil || x.Role != "implementer" || x.Output != "implementation" || x.RolePrompt == nil {
				t.Errorf("plan %s expand = %+v, want the implementer role", plan.ID, x)
			}
			// TPL-03: with sign-offs, the components wait for the last.
			var after []string
			if tc.approvals != nil {
				after = []string{"interface_definition"}
			}
			if x := plan.Expand(); x != nil && !reflect.DeepEqual(x.After, after) {
				t.Errorf("plan's components wait for %v, want %v", x.After, after)
			}
		})
	}
}

func TestSecurityCriticalOrder(t *testing.T) {
	tpl, _ := loadBuiltin(t).Get("security_critical")
	doc, err := tpl.Expand(feature(t))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workflow.ParseWithOptions("sc.yaml", doc, parseOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	deps := map[string][]string{}
	for _, task := range spec.Tasks {
		deps[task.ID] = task.DependsOn
	}
	want := map[string][]string{
		"interface_definition":   {"plan_review", "threat_modeling"},
		"threat_modeling":        {"plan_review"},
		"security_review":        {"integration_tests", "penetration_test"},
		"code_review":            {"security_review", "second_security_review"},
		"second_security_review": {"penetration_test"},
		"implement":              {"plan", "interface_definition"},
	}
	for id, w := range want {
		if !reflect.DeepEqual(deps[id], w) {
			t.Errorf("%s depends on %v, want %v", id, deps[id], w)
		}
	}
}

func TestExpandGolden(t *testing.T) {
	tpl, _ := loadBuiltin(t).Get("mvp")
	got, err := tpl.Expand(feature(t))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "mvp-healthz.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("expansion differs from %s (go test -update to rewrite):\n%s", golden, got)
	}
}

func TestFeatureFrontMatter(t *testing.T) {
	src := `---
name: healthz
pool: linux
gates: [go-build, go-test]
disable: [quick_review]
steps:
  plan:
    expand: {timeout: 20m}
  implement:
    role: tester
    timeout: 1h
  risk_check:
    role: security_reviewer
    depends_on: [implement]
---
# Health check

Add GET /healthz.
`
	f, err := ParseFeature("f.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if f.Title != "Health check" || !strings.HasPrefix(f.Body, "# Health check") {
		t.Errorf("title %q body %q", f.Title, f.Body)
	}
	tpl, _ := loadBuiltin(t).Get("mvp")
	doc, err := tpl.Expand(f)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workflow.ParseWithOptions("f.yaml", doc, parseOptions(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if spec.Name != "healthz" || !reflect.DeepEqual(taskIDs(spec), []string{"plan", "implement", "risk_check"}) {
		t.Errorf("name %q tasks %v", spec.Name, taskIDs(spec))
	}
	if x := spec.Tasks[0].Expand(); x == nil || x.TimeoutSeconds != 1200 {
		t.Errorf("plan expand = %+v", x)
	}
	impl := spec.Tasks[1]
	if impl.Role() != "tester" || impl.TimeoutSeconds != 3600 || impl.Pool != "linux" || !reflect.DeepEqual(impl.Gates, []string{"go-build", "go-test"}) {
		t.Errorf("implement = %+v", impl)
	}
}

func TestTemplateProblems(t *testing.T) {
	base := "description: b\nsteps:\n  plan: {role: planner}\n"
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"unknown key", map[string]string{"a.yaml": "description: x\nstepz: {}\n"}, []string{`a.yaml:2:1: unknown field "stepz" in template; did you mean "steps"?`}},
		{"unknown step key", map[string]string{"a.yaml": "description: x\nsteps:\n  s:\n    role: planner\n    needs: [x]\n"},
			[]string{`a.yaml:5:5: unknown field "needs" in step s`}},
		{"cycle", map[string]string{"a.yaml": "extends: b\ndescription: x\n", "b.yaml": "extends: a\ndescription: y\n"},
			[]string{"template extends cycle: a (built-in) -> b (built-in) -> a (built-in)"}},
		{"unknown dependency", map[string]string{"base.yaml": base, "a.yaml": "extends: base\ndescription: x\nsteps:\n  impl: {role: implementer, depends_on: [plna]}\n"},
			[]string{`a.yaml:4:42: step "impl" depends on unknown step "plna"`}},
		{"disable unknown", map[string]string{"base.yaml": base, "a.yaml": "extends: base\ndescription: x\ndisable: [nope]\n"},
			[]string{`a.yaml:3:11: disable names step "nope"`}},
		{"step without role", map[string]string{"a.yaml": "description: x\nsteps:\n  s: {prompt: hi}\n"},
			[]string{`a.yaml:3:3: step "s" has no role`}},
		{"expand after unknown", map[string]string{"a.yaml": "description: x\nsteps:\n  s: {role: planner, expand: {after: [nope]}}\n"},
			[]string{`a.yaml:3:39: step "s" expand after names unknown step "nope"`}},
		{"bad prompt field", map[string]string{"a.yaml": "description: x\nsteps:\n  s: {role: planner, prompt: \"{{.Nope}}\"}\n"},
			[]string{`a.yaml:3:30: step "s" prompt template:`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(Options{BuiltinDir: dir})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestDisableRewires(t *testing.T) {
	files := []overlay.File{
		{Layer: overlay.Builtin, Name: "t", Path: "t.yaml", Data: []byte("description: x\nsteps:\n  a: {role: planner}\n  b: {role: implementer, depends_on: [a]}\n  c: {role: reviewer, depends_on: [b]}\n")},
		{Layer: overlay.Project, Name: "t", Path: ".supervisor/templates/t.yaml", Data: []byte("extends: t\ndisable: [b]\n")},
	}
	c, err := FromFiles(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	tpl, _ := c.Get("t")
	doc, err := tpl.Expand(&Feature{File: "f.md", Name: "f", Body: "do"})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workflow.ParseWithOptions("t.yaml", doc, parseOptions(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if got := taskIDs(spec); !reflect.DeepEqual(got, []string{"a", "c"}) || !reflect.DeepEqual(spec.Tasks[1].DependsOn, []string{"a"}) {
		t.Errorf("tasks %v, c depends on %v", got, spec.Tasks[1].DependsOn)
	}
}

// A disabled step an expand template's after list names is replaced by
// the steps it depended on, as a dependency on it is; the template other
// templates extend is left as it was.
func TestDisableRewiresExpandAfter(t *testing.T) {
	c := loadBuiltin(t)
	for _, tc := range []struct {
		template string
		after    []string
	}{
		{"enterprise", []string{"plan_review"}},
		{"security_critical", []string{"plan_review", "threat_modeling"}},
	} {
		t.Run(tc.template, func(t *testing.T) {
			f, err := ParseFeature("f.md", []byte("---\ndisable: [interface_definition]\n---\n# Health\n\nAdd GET /healthz.\n"))
			if err != nil {
				t.Fatal(err)
			}
			tpl, _ := c.Get(tc.template)
			doc, err := tpl.Expand(f)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := workflow.ParseWithOptions("t.yaml", doc, parseOptions(t))
			if err != nil {
				t.Fatalf("%v\n%s", err, doc)
			}
			if got := spec.Tasks[0].Expand().After; !reflect.DeepEqual(got, tc.after) {
				t.Errorf("plan's components wait for %v, want %v", got, tc.after)
			}
		})
	}
	tpl, _ := c.Get("enterprise")
	doc, err := tpl.Expand(feature(t))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workflow.ParseWithOptions("t.yaml", doc, parseOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Tasks[0].Expand().After; !reflect.DeepEqual(got, []string{"interface_definition"}) {
		t.Errorf("disabling a step in one expansion changed the template: the components wait for %v", got)
	}
}

func TestFeatureProblems(t *testing.T) {
	tests := []struct{ src, want string }{
		{"---\nname: x\nstepz: {}\n---\nbody\n", `f.md:3:1: unknown field "stepz" in front matter`},
		{"---\nname: Bad Name\n---\nbody\n", `f.md:2:7: invalid name "Bad Name"`},
		{"---\nname: x\n", "not closed"},
		{"---\nname: x\n---\n\n", "the feature description is empty"},
	}
	for _, tc := range tests {
		_, err := ParseFeature("f.md", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}
