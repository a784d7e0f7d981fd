package workflow

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// The demo workflow `coordinator demo` submits stays valid.
func TestDemoWorkflowValid(t *testing.T) {
	for _, f := range []string{"../cli/demo/workflow.yaml", "../../../configs/workflows/greet-demo.yaml", "../../../configs/workflows/go-feature.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			t.Fatal(err)
		}
		if _, err := Parse(f, data); err != nil {
			t.Errorf("%s:\n%v", f, err)
		}
	}
}

// lowerSets returns built-in, user and project sets for ParseWithOptions.
func lowerSets(t *testing.T) Options {
	t.Helper()
	parse := func(file, src string, origin gates.Origin) *gates.Set {
		gs, _, err := gates.ParseFile(file, []byte(src), origin)
		if err != nil {
			t.Fatal(err)
		}
		return gates.NewSet(gs...)
	}
	return Options{
		BuiltinGates: parse("builtin.yaml", `gates:
  go-build: {command: [go, build, ./...]}
  go-test: {command: [go, test, ./...], depends_on: [go-build]}
  go-vet: {command: [go, vet, ./...]}
  lint: {command: [builtin-lint]}
`, gates.OriginBuiltin),
		UserGates:    parse("user.yaml", "gates:\n  lint: {command: [user-lint]}\n", gates.OriginUser),
		ProjectGates: parse("project.toml", "[[gate]]\nname = \"e2e\"\ncommand = [\"make\", \"e2e\"]\n", gates.OriginProject),
	}
}

func gateNames(specs []protocol.GateSpec) []string {
	var out []string
	for _, g := range specs {
		out = append(out, g.Name)
	}
	return out
}

// LD-04: workflow gates replace lower sources' gates of
// the same name; bare names pick a lower source's gate; spec.Gates holds the
// workflow's gates then the lower gates some task needs (closure, DP-01).
func TestParseWithGateSources(t *testing.T) {
	src := head + `gates:
  - go-vet
  - {name: lint, command: [workflow-lint]}
tasks:
  - {id: a, prompt: p}
  - {id: b, prompt: p, gates: [go-test, e2e]}
`
	spec, err := ParseWithOptions("wf.yaml", []byte(src), lowerSets(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gateNames(spec.Gates), []string{"go-vet", "lint", "e2e", "go-build", "go-test"}; !reflect.DeepEqual(got, want) {
		t.Errorf("spec gates = %v, want %v", got, want)
	}
	if got := spec.Gates[1].Command; !reflect.DeepEqual(got, []string{"workflow-lint"}) {
		t.Errorf("lint = %v, want the workflow's definition", got)
	}
	// A bare name keeps the source of its definition.
	if spec.Gates[0].Source != "builtin.yaml:4" || spec.Gates[1].Source != "wf.yaml:5" || spec.Gates[2].Source != "project.toml:2" {
		t.Errorf("sources = %q, %q, %q", spec.Gates[0].Source, spec.Gates[1].Source, spec.Gates[2].Source)
	}
	if got := spec.Tasks[0].Gates; !reflect.DeepEqual(got, []string{"go-vet", "lint"}) {
		t.Errorf("task a gates = %v: a task without gates runs the workflow's", got)
	}
	for _, task := range spec.Tasks {
		if _, err := GateLayers(spec.GateDefinitions(task), task.Gates); err != nil {
			t.Errorf("task %s: %v", task.ID, err)
		}
	}
	// Without the sources, the names are unknown.
	_, err = Parse("wf.yaml", []byte(src))
	checkProblems(t, "wf.yaml", src, err, []want{
		`4:5: gates lists "go-vet", which no built-in, user or project gate defines`,
		`8:32: task "b" uses unknown gate "go-test"`,
		`8:41: task "b" uses unknown gate "e2e"`,
	})
}

// GY-03: the mapping form of a gates section; DP-05/DP-06 across sources.
func TestParseGatesMappingForm(t *testing.T) {
	src := head + `gates:
  vet: {command: [go, vet, ./...], severity: warning}
  test:
    command: [go, test, ./...]
    depends_on: [vet, go-build]
    allow_shell: false
tasks: [{id: a, prompt: p}]
`
	spec, err := ParseWithOptions("wf.yaml", []byte(src), lowerSets(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := gateNames(spec.Gates); !reflect.DeepEqual(got, []string{"vet", "test", "go-build"}) {
		t.Errorf("gates = %v", got)
	}
	if spec.Gates[0].Severity != "warning" {
		t.Errorf("severity = %q", spec.Gates[0].Severity)
	}
	bad := head + `gates:
  vet: {command: [go, vet], depends_on: [test]}
  test: {command: [go, test], depends_on: [vet, nope], name: test}
tasks: [{id: a, prompt: p}]
`
	_, err = Parse("wf.yaml", []byte(bad))
	checkProblems(t, "wf.yaml", bad, err, []want{
		`4:3: gate dependency cycle: vet -> test -> vet`,
		`5:49: gate "test" depends on unknown gate "nope"`,
		`5:56: "name" is not allowed in gate "test": the gate's name is its key`,
	})
}

// RC-01…RC-06 and OF-02: a task's gates as {required, optional, on_fail}.
func TestParseTaskGatesObject(t *testing.T) {
	src := head + `gates:
  - {name: vet, command: [go, vet]}
  - {name: test, command: [go, test]}
  - {name: lint, command: [lint], severity: warning}
tasks:
  - id: a
    prompt: p
    gates:
      required: [test]
      optional: [lint, vet]
      on_fail: {test: Retry_With_Feedback, lint: WARN}
  - {id: b, prompt: p, gates: [vet]}
`
	spec, err := Parse("wf.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a := spec.Tasks[0]
	if !reflect.DeepEqual(a.Gates, []string{"test", "lint", "vet"}) || !reflect.DeepEqual(a.Required, []string{"test"}) ||
		!reflect.DeepEqual(a.Optional, []string{"lint", "vet"}) ||
		!reflect.DeepEqual(a.OnFail, map[string]string{"test": "retry_with_feedback", "lint": "warn"}) {
		t.Errorf("task a = %+v", a)
	}
	if !a.GateRequired("test") || a.GateRequired("lint") || !spec.Tasks[1].GateRequired("vet") {
		t.Error("GateRequired wrong")
	}

	bad := head + `gates:
  - {name: vet, command: [go, vet]}
  - {name: test, command: [go, test]}
tasks:
  - id: a
    prompt: p
    gates:
      required: [test, vet]
      optional: [vet]
      on_fail: {test: warn, lint: block, vet: later}
      strict: true
  - {id: b, prompt: p, gates: vet}
  - {id: c, prompt: p, gates: {on_fail: [x]}}
`
	_, err = Parse("wf.yaml", []byte(bad))
	checkProblems(t, "wf.yaml", bad, err, []want{
		`11:18: task "a" gates lists "vet" as both required and optional`,
		`12:23: task "a" gates on_fail of test is warn, but test is required and a required gate never warns`,
		`12:29: task "a" gates on_fail names "lint", which is neither required nor optional`,
		`12:47: invalid task "a" gates on_fail "later" for vet`,
		`13:7: unknown field "strict" in task "a" gates`,
		`14:31: task "b" gates must be a list of gate names, e.g. [vet, test], or a mapping`,
		`15:41: task "c" gates on_fail must be a mapping`,
	})
}

// Task-level gates: YAML front matter in the prompt defines gates
// for that task, replacing workflow gates of the same name, positioned in
// the workflow file.
func TestParseFrontMatterGates(t *testing.T) {
	src := head + `gates:
  - {name: test, command: [go, test, ./...]}
  - {name: vet, command: [go, vet, ./...]}
tasks:
  - id: a
    prompt: |
      ---
      gates:
        - name: integration
          command: [make, integration]
          timeout_secs: 900
        - name: test
          command: [go, test, -race, ./...]
      ---
      Implement the cache.
  - id: b
    prompt: Plain.
`
	spec, err := Parse("wf.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a := spec.Tasks[0]
	if a.Prompt != "Implement the cache.\n" {
		t.Errorf("prompt = %q", a.Prompt)
	}
	if !reflect.DeepEqual(a.Gates, []string{"test", "vet", "integration"}) {
		t.Errorf("gates = %v", a.Gates)
	}
	if got := gateNames(a.GateDefs); !reflect.DeepEqual(got, []string{"integration", "test"}) {
		t.Errorf("gate defs = %v", got)
	}
	if a.GateDefs[0].TimeoutSeconds != 900 || a.GateDefs[0].Source != "wf.yaml:11" {
		t.Errorf("integration = %+v", a.GateDefs[0])
	}
	defs := spec.GateDefinitions(a)
	for _, g := range defs {
		if g.Name == "test" && !reflect.DeepEqual(g.Command, []string{"go", "test", "-race", "./..."}) {
			t.Errorf("task a runs the workflow's test, not its own: %v", g.Command)
		}
	}
	if got := gateNames(spec.Gates); !reflect.DeepEqual(got, []string{"test", "vet"}) {
		t.Errorf("workflow gates = %v", got)
	}
	if len(spec.Tasks[1].GateDefs) != 0 || !reflect.DeepEqual(spec.Tasks[1].Gates, []string{"test", "vet"}) {
		t.Errorf("task b = %+v", spec.Tasks[1])
	}

	bad := head + `gates:
  - {name: test, command: [go, test]}
tasks:
  - id: a
    prompt: |
      ---
      gates:
        - name: it
          command: make it
          env: {LD_PRELOAD: x}
        - {name: test, command: [go, test], depends_on: [ghost]}
      flavour: x
      ---
      Do it.
  - id: b
    prompt: "---\ngates: [{name: x}]\n---\nDo it."
  - id: c
    prompt: |
      ---
      gates: []
      Never closed.
`
	_, err = Parse("wf.yaml", []byte(bad))
	checkProblems(t, "wf.yaml", bad, err, []want{
		`11:20: gate "it" command must be an argv list, e.g. [make, it], not a string`,
		`12:17: gate "it" env may not set LD_PRELOAD`,
		`13:58: gate "test" depends on unknown gate "ghost"`,
		`14:7: unknown field "flavour" in front matter`,
		`18:13: gate "x" is missing required field "command"`,
		`21:7: front matter opened by '---' is not closed`,
	})
}

// GC-15 / CM-06 / CM-07: workflow gates may allow a shell; agents may not;
// a denylisted variable through env is rejected for both.
func TestParseShellAndEnvWrapper(t *testing.T) {
	src := head + `gates:
  - {name: ok, command: [bash, -c, "make check"], allow_shell: true}
  - {name: hidden, command: [timeout, -s, KILL, 30s, sh, -c, x]}
  - {name: preload, command: [env, -i, LD_PRELOAD=x.so, go, test], allow_shell: true}
tasks:
  - {id: a, prompt: p, agent: {command: [nice, -n, "5", env, PATH=/x, my-agent]}}
`
	_, err := Parse("wf.yaml", []byte(src))
	checkProblems(t, "wf.yaml", src, err, []want{
		`5:29: gate "hidden" command runs a shell (sh -c)`,
		`6:30: gate "preload" command sets LD_PRELOAD through an env wrapper`,
		`8:41: task "a" agent command sets PATH through an env wrapper`,
	})
}

// FromSpec(Spec()) keeps every field (the wire form is lossless).
func TestGateSpecRoundTrip(t *testing.T) {
	spec := parseValid(t, "demo.yaml")
	for _, g := range spec.Gates {
		if back := gates.FromSpec(g).Spec(); !reflect.DeepEqual(back, g) {
			t.Errorf("round trip of %s:\n%+v\n%+v", g.Name, back, g)
		}
	}
	if !strings.HasPrefix(spec.Gates[0].Source, "demo.yaml:") {
		t.Errorf("source = %q", spec.Gates[0].Source)
	}
}
