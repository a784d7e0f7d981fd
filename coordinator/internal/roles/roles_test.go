package roles

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
)

// builtinDir is the repository's configs/roles.
var builtinDir = filepath.Join("..", "..", "..", "configs", "roles")

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func project(files map[string]string) []overlay.File {
	var out []overlay.File
	for name, content := range files {
		out = append(out, overlay.File{Layer: overlay.Project, Name: strings.TrimSuffix(name, ".yaml"),
			Path: filepath.Join(".supervisor", "roles", name), Data: []byte(content)})
	}
	return out
}

func TestConfigsRolesLoad(t *testing.T) {
	c, err := Load(Options{BuiltinDir: builtinDir})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"documenter", "implementer", "planner", "reviewer", "security_reviewer", "tester"}
	if got := c.Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("roles %v, want %v", got, want)
	}
	tester, _ := c.Get("tester")
	if tester.Output != "implementation" || tester.Agent.Adapter != "claude-code" || tester.Context != (Context{Strategy: "implementer_targeted", Budget: 20000}) {
		t.Errorf("tester = %+v", tester)
	}
	if !strings.Contains(tester.PromptAdditions, "implementer on a team") || !strings.Contains(tester.PromptAdditions, "test engineer") ||
		strings.Index(tester.PromptAdditions, "implementer on a team") > strings.Index(tester.PromptAdditions, "test engineer") {
		t.Errorf("tester additions are not the implementer's then its own:\n%s", tester.PromptAdditions)
	}
	if tester.Config["tdd"] != false || tester.Config["unit_test_coverage"] != 80 {
		t.Errorf("tester config %v: want tdd overridden, coverage inherited", tester.Config)
	}
	sec, _ := c.Get("security_reviewer")
	if sec.Output != "review" || !sec.AllowEmpty || !sec.GatesSet || len(sec.Gates) != 0 || sec.Context.Strategy != "security_audit" {
		t.Errorf("security_reviewer = %+v", sec)
	}
	if !reflect.DeepEqual(sec.Files, []string{filepath.Join(builtinDir, "security_reviewer.yaml"), filepath.Join(builtinDir, "reviewer.yaml")}) {
		t.Errorf("files %v", sec.Files)
	}
	for _, name := range want {
		r, _ := c.Get(name)
		p, err := r.RenderPrompt(PromptData{Prompt: "Add a /healthz endpoint.", ID: "api", Targets: []string{"cmd/server/main.go"}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(p, "Add a /healthz endpoint.") {
			t.Errorf("%s prompt lacks the task's prompt:\n%s", name, p)
		}
	}
}

func TestMerge(t *testing.T) {
	base := `description: base
agent: {adapter: claude-code, model: m1, args: [--a]}
prompt_additions: first
output: generic
gates: [vet]
allowed_tools: [Read]
timeout: 10m
max_cost_usd: 1
config: {a: 1, nested: {x: 1, list: [p]}, keep: k}
`
	tests := []struct {
		name  string
		child string
		check func(t *testing.T, r *Role)
	}{
		{"scalars override", "extends: base\ndescription: child\nagent: {model: m2}\noutput: review\ntimeout: 1h\n", func(t *testing.T, r *Role) {
			if r.Description != "child" || r.Agent.Model != "m2" || r.Agent.Adapter != "claude-code" || r.Output != "review" || r.TimeoutSeconds != 3600 {
				t.Errorf("got %+v", r)
			}
		}},
		{"lists append", "extends: base\nagent: {args: [--b]}\ngates: [test, vet]\nallowed_tools: [Edit]\n", func(t *testing.T, r *Role) {
			if !reflect.DeepEqual(r.Agent.Args, []string{"--a", "--b"}) || !reflect.DeepEqual(r.Gates, []string{"vet", "test"}) ||
				!reflect.DeepEqual(r.AllowedTools, []string{"Read", "Edit"}) {
				t.Errorf("args %v gates %v tools %v", r.Agent.Args, r.Gates, r.AllowedTools)
			}
		}},
		{"maps merge deeply", "extends: base\nconfig: {a: 2, nested: {y: 2, list: [q]}}\n", func(t *testing.T, r *Role) {
			want := map[string]any{"a": 2, "keep": "k", "nested": map[string]any{"x": 1, "y": 2, "list": []any{"p", "q"}}}
			if !reflect.DeepEqual(r.Config, want) {
				t.Errorf("config %v, want %v", r.Config, want)
			}
		}},
		{"prompt additions concatenate", "extends: base\nprompt_additions: second\n", func(t *testing.T, r *Role) {
			if r.PromptAdditions != "first\n\nsecond" {
				t.Errorf("additions %q", r.PromptAdditions)
			}
		}},
		{"a budget overrides", "extends: base\nmax_cost_usd: 2.5\n", func(t *testing.T, r *Role) {
			if r.MaxCostUSD != 2.5 {
				t.Errorf("max_cost_usd %v, want 2.5", r.MaxCostUSD)
			}
		}},
		{"a budget of 0 clears the parent's", "extends: base\nmax_cost_usd: 0\n", func(t *testing.T, r *Role) {
			if r.MaxCostUSD != 0 {
				t.Errorf("max_cost_usd %v, want 0", r.MaxCostUSD)
			}
		}},
		{"nothing set inherits all", "extends: base\n", func(t *testing.T, r *Role) {
			if r.Description != "base" || r.PromptAdditions != "first" || r.TimeoutSeconds != 600 || !r.GatesSet || r.MaxCostUSD != 1 {
				t.Errorf("got %+v", r)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeDir(t, map[string]string{"base.yaml": base, "child.yaml": tc.child})
			c, err := Load(Options{BuiltinDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			r, ok := c.Get("child")
			if !ok {
				t.Fatal("no child role")
			}
			tc.check(t, r)
		})
	}
}

func TestPrecedence(t *testing.T) {
	builtin := writeDir(t, map[string]string{
		"implementer.yaml": "description: built-in\nprompt_additions: builtin\n",
		"reviewer.yaml":    "description: built-in reviewer\n",
		"planner.yaml":     "description: built-in planner\n",
	})
	user := writeDir(t, map[string]string{
		"reviewer.yaml": "description: user reviewer\n",
		"planner.yaml":  "description: user planner\n",
	})
	c, err := Load(Options{BuiltinDir: builtin, UserDir: user, Project: project(map[string]string{
		// An overlay: extends its own name, the next lower layer's file.
		"implementer.yaml": "extends: implementer\nprompt_additions: project\n",
		"planner.yaml":     "description: project planner\n",
	})})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"implementer": "built-in", "reviewer": "user reviewer", "planner": "project planner"} {
		r, _ := c.Get(name)
		if r.Description != want {
			t.Errorf("%s: description %q, want %q", name, r.Description, want)
		}
	}
	impl, _ := c.Get("implementer")
	if impl.PromptAdditions != "builtin\n\nproject" || impl.Layer != overlay.Project {
		t.Errorf("overlay: additions %q layer %v", impl.PromptAdditions, impl.Layer)
	}
}

func TestLoadProblems(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error, in order
	}{
		{"unknown key", map[string]string{"a.yaml": "description: x\npromt: y\n"},
			[]string{`a.yaml:2:1: unknown field "promt" in role; did you mean "prompt"?`}},
		{"unknown agent key", map[string]string{"a.yaml": "description: x\nagent:\n  adapter: codex\n  modle: y\n"},
			[]string{`a.yaml:4:3: unknown field "modle" in agent`}},
		{"type error", map[string]string{"a.yaml": "description: x\ngates: vet\n"},
			[]string{`a.yaml:2:8: gates must be a list of names, e.g. [vet]`}},
		{"cycle", map[string]string{"a.yaml": "description: x\nextends: b\n", "b.yaml": "description: y\nextends: c\n", "c.yaml": "description: z\nextends: a\n"},
			[]string{"role extends cycle: a (built-in) -> b (built-in) -> c (built-in) -> a (built-in)"}},
		{"self extends at the lowest layer", map[string]string{"a.yaml": "description: x\nextends: a\n"},
			[]string{`a.yaml:2:10: role "a" extends "a", its own name, but no lower layer than built-in defines it`}},
		{"unknown parent", map[string]string{"a.yaml": "description: x\nextends: nope\n"},
			[]string{`a.yaml:2:10: role "a" extends unknown role "nope"`}},
		{"unknown output schema after merge", map[string]string{"a.yaml": "description: x\noutput: plan\n", "b.yaml": "extends: a\noutput: essay\n"},
			[]string{`b.yaml:2:9: role "b": unknown output schema "essay" (known: generic, plan, implementation, review)`}},
		{"budget out of range", map[string]string{"a.yaml": "description: x\ncontext: {strategy: reviewer_diff, budget: 90000}\n"},
			[]string{`a.yaml:2:44: role "a": context budget 90000 is out of range: must be between 1000 and 50000 tokens`}},
		{"budget without strategy", map[string]string{"a.yaml": "description: x\ncontext: {budget: 9000}\n"},
			[]string{`role "a": context budget is set but no strategy`}},
		{"unknown adapter", map[string]string{"a.yaml": "description: x\nagent: {adapter: gpt}\n"},
			[]string{`a.yaml:2:18: role "a": unknown agent adapter "gpt"`}},
		{"bad permission", map[string]string{"a.yaml": "description: x\nagent: {adapter: claude-code, permission: yolo}\n"},
			[]string{`role "a": agent settings: claude-code: permission mode "yolo"`}},
		{"tools on codex", map[string]string{"a.yaml": "description: x\nagent: {adapter: codex}\nallowed_tools: [Read]\n"},
			[]string{`a.yaml:3:16: role "a": adapter codex has no flag for allowed tools`}},
		{"missing description", map[string]string{"a.yaml": "output: plan\n"},
			[]string{`role "a": description is missing`}},
		{"template syntax", map[string]string{"a.yaml": "description: x\nprompt: \"{{.Prompt\"\n"},
			[]string{`a.yaml:2:9: role "a": prompt template:`}},
		{"template field", map[string]string{"a.yaml": "description: x\nprompt: \"{{.Nope}}\"\n"},
			[]string{`a.yaml:2:9: role "a": prompt template:`, "Nope"}},
		{"negative budget", map[string]string{"a.yaml": "description: x\nmax_cost_usd: -1\n"},
			[]string{`a.yaml:2:15: max_cost_usd -1 is out of range: must be at least 0 (no budget) and at most 1000000`}},
		{"budget not a number", map[string]string{"a.yaml": "description: x\nmax_cost_usd: five\n"},
			[]string{`a.yaml:2:15: max_cost_usd must be a number of US dollars`}},
		{"budget too large", map[string]string{"a.yaml": "description: x\nmax_cost_usd: 2e6\n"},
			[]string{`a.yaml:2:15: max_cost_usd 2e6 is out of range`}},
		{"unknown feedback template", map[string]string{"a.yaml": "description: x\nfeedback: poetry\n"},
			[]string{`role "a": unknown feedback template "poetry"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(Options{BuiltinDir: writeDir(t, tc.files)})
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			at := 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error lacks %q:\n%s", w, msg)
				}
				at += i
			}
		})
	}
}

func TestAgentSpecAllowedTools(t *testing.T) {
	dir := writeDir(t, map[string]string{
		"c.yaml": "description: x\nagent: {adapter: claude-code, args: [--verbose]}\nallowed_tools: [Read, Edit]\n",
		"g.yaml": "description: x\nagent: {adapter: gemini}\nallowed_tools: [read_file, replace]\n",
	})
	c, err := Load(Options{BuiltinDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cr, _ := c.Get("c")
	if got := cr.AgentSpec().Args; !reflect.DeepEqual(got, []string{"--verbose", "--allowedTools", "Read,Edit"}) {
		t.Errorf("claude args %v", got)
	}
	if len(cr.Agent.Args) != 1 {
		t.Errorf("AgentSpec changed the role: %v", cr.Agent.Args)
	}
	gr, _ := c.Get("g")
	if got := gr.AgentSpec().Args; !reflect.DeepEqual(got, []string{"--allowed-tools=read_file", "--allowed-tools=replace"}) {
		t.Errorf("gemini args %v", got)
	}
}

func TestRenderPrompt(t *testing.T) {
	c, err := Load(Options{BuiltinDir: writeDir(t, map[string]string{
		"a.yaml": "description: x\nprompt_additions: You are careful.\nconfig: {n: 3}\nprompt: |\n  {{.ID}} ({{.Role}}): {{.Prompt}}\n  {{range .Targets}}- {{.}}\n  {{end}}n={{.Config.n}}\n",
	})})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := c.Get("a")
	got, err := r.RenderPrompt(PromptData{Prompt: "do it", ID: "t1", Targets: []string{"x.go", "y.go"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "You are careful.\n\nt1 (a): do it\n- x.go\n- y.go\nn=3\n"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// The example domain overlays (configs/examples/roles) load as a project's
// roles on top of the built-in ones.
func TestExampleRolesLoad(t *testing.T) {
	project, err := overlay.ReadDir(filepath.Join("..", "..", "..", "configs", "examples", "roles"), overlay.Project, true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(Options{BuiltinDir: builtinDir, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, parent, output string }{
		{"trader", "implementer", "implementation"}, {"risk_manager", "reviewer", "review"}, {"quant_dev", "implementer", "implementation"},
		{"ui_designer", "implementer", "implementation"}, {"state_architect", "reviewer", "review"}, {"cli_ux_dev", "implementer", "implementation"},
		{"schema_guard", "reviewer", "review"}, {"etl_architect", "planner", "plan"}, {"api_dev", "implementer", "implementation"},
		{"infra_reviewer", "reviewer", "review"},
	} {
		r, ok := c.Get(tc.name)
		if !ok {
			t.Errorf("%s missing", tc.name)
			continue
		}
		if r.Layer != overlay.Project || r.Output != tc.output || len(r.Files) < 2 || !strings.HasSuffix(r.Files[1], tc.parent+".yaml") {
			t.Errorf("%s: layer %v output %q files %v", tc.name, r.Layer, r.Output, r.Files)
		}
	}
	trader, _ := c.Get("trader")
	if !reflect.DeepEqual(trader.Gates, []string{"risk-check"}) || !strings.Contains(trader.PromptAdditions, "Stop-loss checks stay") {
		t.Errorf("trader: %+v", trader)
	}
}
