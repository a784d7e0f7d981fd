package workflow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// want is an expected problem: "line:col: message substring", or
// ":: message substring" for a problem about the whole file.
type want = string

// checkProblems asserts that err is a *ValidationError whose problems match
// wants exactly (see testkit.CheckProblems).
func checkProblems(t *testing.T, file, src string, err error, wants []want) {
	t.Helper()
	testkit.CheckProblems(t, file, src, err, wants, func(ve *ValidationError) []Problem { return ve.Problems })
}

// head is a valid preamble used by cases that focus on later lines; it
// occupies lines 1-2.
const head = "name: demo\ndefaults: {agent: {adapter: codex}}\n"

func TestParseProblems(t *testing.T) {
	bigPrompt := strings.Repeat("x", MaxPromptSize+1)
	var manyTasks, manyGates strings.Builder
	manyTasks.WriteString(head + "tasks:\n")
	for i := range MaxTasks + 1 {
		fmt.Fprintf(&manyTasks, "  - {id: t%d, prompt: p}\n", i)
	}
	manyGates.WriteString(head + "gates:\n")
	for i := range MaxGates + 1 {
		fmt.Fprintf(&manyGates, "  - {name: g%d, command: [true]}\n", i)
	}
	manyGates.WriteString("tasks: [{id: a, prompt: p}]\n")

	tests := []struct {
		name  string
		src   string
		wants []want
	}{
		{"malformed YAML reports yaml's line", "name: demo\ntasks:\n  - id: a\n   prompt: [unclosed\n",
			[]want{"3: invalid YAML: did not find expected '-' indicator"}},
		{"bad indentation", "name: demo\ntasks:\n  - id: a\n    prompt: p\n  bad: x\n",
			[]want{"3: invalid YAML: did not find expected '-' indicator"}},
		{"scanner error", "name: demo\ntasks:\n  - id: a\n    prompt: \"unterminated\n", []want{"4: invalid YAML: found unexpected end of stream"}},
		{"structural error on a later line", "name: demo\ntasks: []\n\n- x\n", []want{"4: invalid YAML: did not find expected key"}},
		{"empty file", "", []want{":: file is empty"}},
		{"comments only", "# nothing\n", []want{":: file is empty"}},
		{"two documents", head + "tasks: [{id: a, prompt: p}]\n---\nname: x\n",
			[]want{"4:1: more than one YAML document"}},
		{"top level not a mapping", "- a\n- b\n", []want{"1:1: workflow must be a mapping, got a list"}},
		{"alias rejected", head + "x: &p hi\ntasks: [{id: a, prompt: *p}]\n",
			[]want{"4:25: YAML aliases (*p) are not supported"}},

		// Unknown fields at every level, with suggestions.
		{"unknown task field", head + `tasks:
  - id: a
    prompt: p
    dependson: [b]
`, []want{`6:5: unknown field "dependson" in task; did you mean "depends_on"?`}},
		{"unknown fields everywhere", `name: demo
defualts: {}
defaults: {pool: default, agnet: {adapter: codex}}
gates:
  - {name: vet, command: [go, vet], timout: 5}
tasks:
  - id: a
    agent: {adapter: codex, modle: x}
    prompt: p
colour: blue
`, []want{
			`2:1: unknown field "defualts" in workflow; did you mean "defaults"?`,
			`3:27: unknown field "agnet" in defaults; did you mean "agent"?`,
			`5:37: unknown field "timout" in gate; did you mean "timeout"?`,
			`8:29: unknown field "modle" in task "a" agent; did you mean "model"?`,
			`10:1: unknown field "colour" in workflow`,
		}},
		{"repeated field", head + "tasks:\n  - id: a\n    prompt: p\n    prompt: q\n",
			[]want{`6:5: field "prompt" appears twice in task (first at line 5)`}},

		// Wrong types and missing required fields.
		{"wrong types", `name: [demo]
defaults: {agent: {adapter: codex}}
gates: {vet: [go, vet]}
tasks:
  - id: a
    prompt: {text: p}
    depends_on: b
    env: [A, B]
`, []want{
			"1:7: workflow name must be a string, got a list",
			// A gates section may also be a mapping (name → definition).
			`3:14: gate "vet" must be a mapping, got a list`,
			`6:13: task "a" prompt must be a string, got a mapping`,
			`7:17: task "a" depends_on must be a list of names, e.g. [b], got a string`,
			`8:10: task "a" env must be a mapping of variable names to values, got a list`,
		}},
		{"task not a mapping", head + "tasks:\n  - a\n", []want{"4:5: task must be a mapping, got a string"}},
		{"missing required fields", `defaults: {agent: {adapter: codex}}
gates:
  - timeout: 5
tasks:
  - depends_on: []
`, []want{
			`1:1: workflow is missing required field "name"`,
			`3:5: gate is missing required field "name"`,
			`3:5: gate is missing required field "command"`,
			`5:5: task is missing required field "id"`,
			`5:5: task is missing required field "prompt"`,
		}},
		{"missing tasks", "name: demo\n", []want{`1:1: workflow is missing required field "tasks"`}},
		{"no tasks", "name: demo\ntasks: []\n", []want{"2:8: workflow has no tasks"}},
		{"no agent anywhere", "name: demo\ntasks:\n  - id: a\n    prompt: p\n",
			[]want{`3:5: task "a" has no agent`}},
		{"bad default agent is reported once", "name: demo\ndefaults: {agent: {adapter: aider}}\ntasks:\n  - {id: a, prompt: p}\n  - {id: b, prompt: p}\n",
			[]want{`2:29: unknown defaults agent adapter "aider" (known: claude-code, codex, command, gemini)`}},
		{"command with a CLI adapter", head + "tasks:\n  - {id: a, prompt: p, agent: {adapter: codex, command: [x]}}\n",
			[]want{`4:57: task "a" agent: command is the argv of the command adapter; the codex adapter builds its own`}},

		// Names.
		{"invalid names", `name: Demo
defaults: {pool: GPU, agent: {adapter: codex}}
gates:
  - {name: go vet, command: [go, vet]}
tasks:
  - {id: Add_Greeting, prompt: p, pool: "-x", gates: []}
`, []want{
			`1:7: invalid workflow name "Demo": use lowercase letters`,
			`2:18: invalid defaults pool "GPU"`,
			`4:12: invalid gate name "go vet"`,
			`6:10: invalid task id "Add_Greeting"`,
			`6:41: invalid task pool "-x"`,
		}},

		// Duplicates cite the first definition.
		{"duplicate task ids and gate names", head + `gates:
  - {name: vet, command: [go, vet]}
  - {name: vet, command: [go, vet, ./x]}
tasks:
  - {id: a, prompt: p}
  - {id: b, prompt: p}
  - {id: a, prompt: q}
`, []want{
			`5:12: duplicate gate name "vet" (first defined at line 4)`,
			`9:10: duplicate task id "a" (first defined at line 7)`,
		}},
		{"repeated list entries", head + "gates:\n  - {name: vet, command: [go, vet]}\ntasks:\n  - {id: a, prompt: p}\n  - {id: b, prompt: p, depends_on: [a, a], gates: [vet, vet]}\n",
			[]want{`7:40: task "b" depends_on lists "a" twice (first at line 7)`, `7:57: task "b" gates lists "vet" twice`}},

		// References.
		{"unknown references and self-dependency", head + `gates:
  - {name: vet, command: [go, vet], depends_on: [build, vet]}
tasks:
  - {id: a, prompt: p, depends_on: [z], gates: [vet, lint]}
  - {id: b, prompt: p, depends_on: [b]}
`, []want{
			`4:50: gate "vet" depends on unknown gate "build"`,
			`4:57: gate "vet" depends on itself`,
			`6:37: task "a" depends on unknown task "z"`,
			`6:54: task "a" uses unknown gate "lint"`,
			`7:37: task "b" depends on itself`,
		}},
		{"gate reference without gates section", head + "tasks: [{id: a, prompt: p, gates: [vet]}]\n",
			[]want{`3:36: task "a" uses unknown gate "vet" (the workflow defines no gates)`}},

		// Cycles are named, in order (DAG-04).
		{"DAG-04 task cycle named in order", head + `tasks:
  - {id: a, prompt: p, depends_on: [c]}
  - {id: b, prompt: p, depends_on: [a]}
  - {id: c, prompt: p, depends_on: [b]}
  - {id: d, prompt: p, depends_on: [c]}
`, []want{"4:10: task dependency cycle: a -> c -> b -> a"}},
		{"DAG-04 every disjoint cycle reported", head + `tasks:
  - {id: a, prompt: p, depends_on: [b]}
  - {id: b, prompt: p, depends_on: [a]}
  - {id: c, prompt: p, depends_on: [d]}
  - {id: d, prompt: p, depends_on: [c]}
`, []want{"4:10: cycle: a -> b -> a", "6:10: cycle: c -> d -> c"}},
		{"DP-05 gate cycle named in order", head + `gates:
  - {name: lint, command: [x], depends_on: [vet]}
  - {name: test, command: [x], depends_on: [lint]}
  - {name: vet, command: [x], depends_on: [test]}
tasks: [{id: a, prompt: p}]
`, []want{"4:12: gate dependency cycle: lint -> vet -> test -> lint"}},

		// Commands.
		{"string command", head + `gates:
  - {name: vet, command: "go test ./..."}
  - {name: pipe, command: "go test ./... | tee log"}
tasks: [{id: a, prompt: p, agent: {command: my-agent}}]
`, []want{
			`4:26: gate "vet" command must be an argv list, e.g. [go, test, ./...], not a string: commands are not run by a shell`,
			`5:27: gate "pipe" command must be an argv list, e.g. [go, test, ./...], not a string`,
			`6:45: task "a" agent command must be an argv list, e.g. [my-agent], not a string`,
		}},
		{"empty and malformed commands", head + `gates:
  - {name: a, command: []}
  - {name: b, command: ["", x]}
  - {name: c, command: [go, [vet]]}
  - {name: d, command: {go: vet}}
tasks: [{id: a, prompt: p, gates: []}]
`, []want{
			`4:24: gate "a" command is empty`,
			`5:25: gate "b" command: the program name is empty`,
			`6:29: gate "c" command[1] must be a string, got a list`,
			`7:24: gate "d" command must be an argv list, e.g. [go, test, ./...], got a mapping`,
		}},
		{"shell commands rejected", head + `gates:
  - {name: a, command: [sh, -c, go test ./...]}
  - {name: b, command: [/bin/bash, -ec, make]}
  - {name: c, command: [env, -i, FOO=1, zsh, -c, x]}
  - {name: d, command: [nice, -n, "10", timeout, -s, KILL, 5m, dash, -c, x]}
  - {name: e, command: [xargs, -0, -I, "{}", ksh, -c, x]}
  - {name: f, command: [nohup, stdbuf, -o, L, bash, -o, pipefail, -c, x]}
  - {name: g, command: [env, -S, "sh -c x"]}
  - {name: ok1, command: [bash, scripts/check.sh, -c]}
  - {name: ok2, command: [env, GOOS=linux, go, test, -c]}
tasks: [{id: a, prompt: p, agent: {command: [sh, -c, my-agent]}, gates: []}]
`, []want{
			`4:24: gate "a" command runs a shell (sh -c); commands are argv lists run without a shell`,
			`5:24: gate "b" command runs a shell (bash -c)`,
			`6:24: gate "c" command runs a shell (zsh -c)`,
			`7:24: gate "d" command runs a shell (dash -c)`,
			`8:24: gate "e" command runs a shell (ksh -c)`,
			`9:24: gate "f" command runs a shell (bash -c)`,
			`10:24: gate "g" command runs a shell (sh -c)`,
			`13:45: task "a" agent command runs a shell (sh -c)`,
		}},

		// Timeouts.
		{"timeouts", `name: demo
defaults: {timeout: 48h, agent: {adapter: codex}}
gates:
  - {name: a, command: [x], timeout: 2h}
  - {name: b, command: [x], timeout: 0}
  - {name: c, command: [x], timeout: soon}
  - {name: d, command: [x], timeout: 1.5}
  - {name: e, command: [x], timeout: -5s}
  - {name: ok, command: [x], timeout: 3600}
tasks: [{id: t, prompt: p, timeout: 25h}]
`, []want{
			"2:21: defaults timeout 48h is out of range: must be between 1s and 24h",
			`4:38: gate "a" timeout 2h is out of range: must be between 1s and 1h`,
			`5:38: gate "b" timeout 0 is out of range`,
			`6:38: invalid gate "c" timeout "soon": use a Go duration such as 90s or 10m, or an integer number of seconds`,
			`7:38: gate "d" timeout must be a duration such as 10m or an integer number of seconds, got a number`,
			`8:38: gate "e" timeout -5s is out of range`,
			`10:37: task "t" timeout 25h is out of range`,
		}},

		// Prompts.
		{"empty prompt", head + "tasks:\n  - {id: a, prompt: \"  \"}\n  - {id: b, prompt: }\n",
			[]want{`4:21: task "a" prompt is empty`, `5:21: task "b" prompt must be a string, got nothing`}},
		{"prompt too large", head + "tasks:\n  - id: a\n    prompt: " + bigPrompt + "\n",
			[]want{fmt.Sprintf(`5:13: task "a" prompt is %d bytes; at most %d (256 KiB)`, MaxPromptSize+1, MaxPromptSize)}},

		// Size limits.
		{"too many tasks", manyTasks.String(), []want{fmt.Sprintf("4:3: too many tasks: %d (at most %d)", MaxTasks+1, MaxTasks)}},
		{"too many gates", manyGates.String(), []want{fmt.Sprintf("4:3: too many gates: %d (at most %d)", MaxGates+1, MaxGates)}},

		// Environment.
		{"env names", head + `gates:
  - name: vet
    command: [go, vet]
    env: {PATH: /x, LD_PRELOAD: x.so, SUPERVISOR_TOKEN: t, 1BAD: x, OK: fine}
tasks:
  - id: a
    prompt: p
    env:
      HOME: /tmp
      user: me
      PYTHONPATH: .
      GOOD_1: "yes"
      GOOD_1: again
      NESTED: {a: b}
      ld_library_path: /x
`, []want{
			`6:11: gate "vet" env may not set PATH: it is controlled by the runner`,
			`6:21: gate "vet" env may not set LD_PRELOAD: LD_* variables change how programs are loaded`,
			`6:39: gate "vet" env may not set SUPERVISOR_TOKEN: SUPERVISOR_* variables are reserved`,
			`6:60: invalid gate "vet" env name "1BAD"`,
			`11:7: task "a" env may not set HOME`,
			`12:7: task "a" env may not set user`,
			`13:7: task "a" env may not set PYTHONPATH`,
			`15:7: task "a" env sets GOOD_1 twice (first at line 14)`,
			`16:15: task "a" env value of NESTED must be a string, got a mapping`,
			`17:7: task "a" env may not set ld_library_path: LD_*`,
		}},

		// Working directories.
		{"working_dir", head + `gates:
  - {name: a, command: [x], working_dir: /abs}
  - {name: b, command: [x], working_dir: sub/../../up}
  - {name: c, command: [x], working_dir: ""}
  - {name: d, command: [x], working_dir: 'sub\dir'}
  - {name: e, command: [x], working_dir: "C:/x"}
tasks: [{id: a, prompt: p}]
`, []want{
			`4:42: gate "a" working_dir "/abs" must be relative to the repository root, not absolute`,
			`5:42: gate "b" working_dir "sub/../../up" must stay inside the repository`,
			`6:42: gate "c" working_dir is empty`,
			// 'sub\dir' is valid: backslashes are normalized to '/' (PP-01).
			`8:42: gate "e" working_dir "C:/x" must be relative`,
		}},
		{"non-string key and NUL byte", head + "tasks:\n  - id: a\n    prompt: \"a\\0b\"\n    [x]: 1\n    env:\n",
			[]want{`5:13: task "a" prompt must not contain NUL bytes`, "6:5: task keys must be strings, got a list"}},
		{"null gates list is ambiguous", head + "tasks:\n  - id: a\n    prompt: p\n    gates:\n",
			[]want{`6:11: task "a" gates has no value: write [] for no gates`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse("wf.yaml", []byte(tc.src))
			if err != nil && spec != nil {
				t.Errorf("Parse returned both a spec and an error")
			}
			checkProblems(t, "wf.yaml", tc.src, err, tc.wants)
		})
	}
}

func TestParseFileTooLarge(t *testing.T) {
	data := []byte(head + "tasks: [{id: a, prompt: p}]\n# " + strings.Repeat("x", MaxFileSize) + "\n")
	_, err := Parse("big.yaml", data)
	checkProblems(t, "big.yaml", "", err, []want{":: file is " + strconv.Itoa(len(data)) + " bytes; a workflow may be at most 1048576 bytes (1 MiB)"})
}

func TestValidationErrorFormat(t *testing.T) {
	_, err := Parse("wf.yaml", []byte("name: Bad\ntasks:\n  - {id: a, prompt: p, colour: x}\n"))
	if err == nil {
		t.Fatal("want error")
	}
	lines := strings.Split(err.Error(), "\n")
	wantPrefixes := []string{
		`wf.yaml:1:7: invalid workflow name "Bad"`,
		`wf.yaml:3:5: task "a" has no agent`,
		`wf.yaml:3:24: unknown field "colour" in task`,
	}
	if len(lines) != len(wantPrefixes) {
		t.Fatalf("Error() has %d lines, want %d:\n%s", len(lines), len(wantPrefixes), err)
	}
	for i, p := range wantPrefixes {
		if !strings.HasPrefix(lines[i], p) {
			t.Errorf("line %d = %q, want prefix %q", i+1, lines[i], p)
		}
	}
	if got := (Problem{File: "f", Message: "m"}).String(); got != "f: m" {
		t.Errorf("file-level problem = %q", got)
	}
}

// parseValid parses testdata/valid/name, which must be valid.
func parseValid(t *testing.T, name string) *protocol.WorkflowSpec {
	t.Helper()
	data, err := os.ReadFile("testdata/valid/" + name)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Parse(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestParseValid(t *testing.T) {
	spec := parseValid(t, "demo.yaml")
	// full adds what the gate schema fills in: every default explicit, and
	// where the gate was defined.
	full := func(g protocol.GateSpec, line int) protocol.GateSpec {
		yes, retries := true, 3
		g.Severity, g.Cache, g.SkipOnDependencyFailure, g.MaxRetries = "error", &yes, &yes, &retries
		g.PollIntervalSeconds, g.MaxPendingSeconds = 30, 86400
		g.Source = fmt.Sprintf("demo.yaml:%d", line)
		return g
	}
	want := &protocol.WorkflowSpec{
		Name: "demo",
		Gates: []protocol.GateSpec{
			full(protocol.GateSpec{Name: "vet", Command: []string{"go", "vet", "./..."}, TimeoutSeconds: 120, Pool: "default"}, 8),
			full(protocol.GateSpec{Name: "test", Command: []string{"go", "test", "-race", "./..."}, TimeoutSeconds: 600, DependsOn: []string{"vet"},
				Pool: "default", Env: map[string]string{"GOFLAGS": "-mod=mod", "CGO_ENABLED": "1"}}, 11),
			full(protocol.GateSpec{Name: "lint", Command: []string{"golangci-lint", "run"}, TimeoutSeconds: DefaultGateTimeout, Pool: "lint", WorkingDir: "cmd/tool"}, 16),
		},
		Tasks: []protocol.TaskSpec{
			{ID: "add-greeting", Agent: &protocol.AgentSpec{Adapter: "claude-code"},
				Prompt: "Add a Greeting function to greet.go that returns \"hello, <name>\".\n",
				Gates:  []string{"vet", "test", "lint"}, Required: []string{"vet", "test", "lint"}, Pool: "default", TimeoutSeconds: 600},
			{ID: "add-farewell", Agent: &protocol.AgentSpec{Adapter: "command", Command: []string{"my-agent", "--model", "fast"}}, Prompt: "Add a Farewell function next to Greeting.",
				DependsOn: []string{"add-greeting"}, Gates: []string{"test"}, Required: []string{"test"}, Pool: "gpu", TimeoutSeconds: 1200,
				Env: map[string]string{"MODEL_TIER": "fast"}},
			{ID: "docs", Agent: &protocol.AgentSpec{Adapter: "codex"}, Prompt: "Document both functions in README.md.",
				DependsOn: []string{"add-greeting", "add-farewell"}, Gates: []string{}, Pool: "default", TimeoutSeconds: 600},
		},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("Parse(demo.yaml) =\n%+v\nwant\n%+v", spec, want)
	}
}

func TestParseDefaults(t *testing.T) {
	spec := parseValid(t, "minimal.yaml")
	task := spec.Tasks[0]
	if task.Pool != protocol.DefaultPool || task.TimeoutSeconds != DefaultAgentTimeout ||
		!reflect.DeepEqual(task.Agent, &protocol.AgentSpec{Adapter: "gemini"}) || len(task.Gates) != 0 {
		t.Errorf("defaults not applied: %+v", task)
	}
	if len(spec.Gates) != 0 {
		t.Errorf("gates = %v, want none", spec.Gates)
	}
}

func TestParseTimeoutForms(t *testing.T) {
	tests := []struct {
		val  string
		want int
	}{
		{"90", 90}, {"90s", 90}, {"2m", 120}, {"1h", 3600}, {"1500ms", 2}, {"0x10", 16},
	}
	for _, tc := range tests {
		src := head + "gates: [{name: g, command: [x], timeout: " + tc.val + "}]\ntasks: [{id: a, prompt: p}]\n"
		spec, err := Parse("wf.yaml", []byte(src))
		if err != nil {
			t.Errorf("timeout %s: %v", tc.val, err)
			continue
		}
		if got := spec.Gates[0].TimeoutSeconds; got != tc.want {
			t.Errorf("timeout %s = %ds, want %ds", tc.val, got, tc.want)
		}
	}
}

// TestParseTestdata runs the example files: every file under valid/ parses,
// and every file under invalid/ fails with exactly the listed problems.
func TestParseTestdata(t *testing.T) {
	valid, _ := filepath.Glob("testdata/valid/*.yaml")
	if len(valid) == 0 {
		t.Fatal("no valid examples")
	}
	for _, f := range valid {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(f, data); err != nil {
			t.Errorf("%s:\n%v", f, err)
		}
	}
	invalid := map[string][]want{
		"typos.yaml": {
			`5:5: unknown field "comand" in gate; did you mean "command"?`,
			`4:5: gate "vet" is missing required field "command"`,
			`9:5: unknown field "dependson" in task; did you mean "depends_on"?`,
			`10:5: unknown field "gate" in task; did you mean "gates"?`,
		},
		"cycle.yaml": {
			`8:9: task dependency cycle: build -> deploy -> verify -> build`,
			`19:18: task "orphan" depends on unknown task "ghost"`,
		},
		"shell.yaml": {
			`4:14: gate "test" command must be an argv list, e.g. [go, test, ./...], not a string`,
			`7:14: gate "race" command runs a shell (bash -c)`,
			`9:5: task "a" has no agent`,
		},
	}
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) != len(invalid) {
		t.Errorf("testdata/invalid has %d files, the test lists %d", len(files), len(invalid))
	}
	for name, wants := range invalid {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata/invalid", name)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(path, data)
			checkProblems(t, path, string(data), err, wants)
		})
	}
}

// TestAgentSettings: a task's agent section, merged over defaults.agent,
// becomes its AgentSpec; a bare command means the command adapter, a task
// naming another adapter replaces the defaults whole, otherwise fields
// override field by field (ARCH-07, WORK-03).
func TestAgentSettings(t *testing.T) {
	tests := []struct {
		name     string
		defaults string // defaults.agent, "" for none
		agent    string // the task's agent, "" for none
		want     protocol.AgentSpec
	}{
		{name: "adapter alone", agent: "{adapter: claude-code}", want: protocol.AgentSpec{Adapter: "claude-code"}},
		{name: "every setting", agent: "{adapter: claude-code, model: opus, args: [--add-dir, ../x], max_turns: 12, permission: plan, output_format: json}",
			want: protocol.AgentSpec{Adapter: "claude-code", Model: "opus", Args: []string{"--add-dir", "../x"}, MaxTurns: 12,
				Permission: "plan", OutputFormat: "json"}},
		{name: "bare command", agent: "{command: [my-agent, --fast]}", want: protocol.AgentSpec{Adapter: "command", Command: []string{"my-agent", "--fast"}}},
		{name: "command adapter", agent: "{adapter: command, command: [my-agent], args: [-v]}",
			want: protocol.AgentSpec{Adapter: "command", Command: []string{"my-agent"}, Args: []string{"-v"}}},
		{name: "defaults only", defaults: "{adapter: codex, model: gpt-5-codex, permission: read-only}",
			want: protocol.AgentSpec{Adapter: "codex", Model: "gpt-5-codex", Permission: "read-only"}},
		{name: "field by field", defaults: "{adapter: gemini, model: gemini-2.5-pro, args: [--debug]}", agent: "{model: gemini-2.5-flash}",
			want: protocol.AgentSpec{Adapter: "gemini", Model: "gemini-2.5-flash", Args: []string{"--debug"}}},
		{name: "same adapter, field by field", defaults: "{adapter: claude-code, max_turns: 5, permission: plan}", agent: "{adapter: claude-code, max_turns: 0}",
			want: protocol.AgentSpec{Adapter: "claude-code", Permission: "plan"}},
		{name: "another adapter replaces", defaults: "{adapter: claude-code, model: opus, max_turns: 5}", agent: "{adapter: codex}",
			want: protocol.AgentSpec{Adapter: "codex"}},
		{name: "a command replaces", defaults: "{adapter: claude-code, model: opus}", agent: "{command: [x]}",
			want: protocol.AgentSpec{Adapter: "command", Command: []string{"x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "name: demo\n"
			if tt.defaults != "" {
				src += "defaults: {agent: " + tt.defaults + "}\n"
			}
			src += "tasks:\n  - id: a\n    prompt: p\n"
			if tt.agent != "" {
				src += "    agent: " + tt.agent + "\n"
			}
			spec, err := Parse("w.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			task := spec.Tasks[0]
			if task.Agent == nil || !reflect.DeepEqual(*task.Agent, tt.want) {
				t.Errorf("agent %+v, want %+v", task.Agent, tt.want)
			}
			if task.Command() != nil || task.Adapter() != "" {
				t.Errorf("new specs set no Command (%v) or Adapter (%q)", task.Command(), task.Adapter())
			}
		})
	}
}

// TestAgentSettingsRejected: settings the adapter cannot run are reported
// at the field, as the adapter words it; unknown keys, commands for CLI
// adapters and provider keys in env too; the defaults' problems once.
func TestAgentSettingsRejected(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []want
	}{
		{"bad permission", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: claude-code, permission: yolo}}\n",
			[]want{`3:66: task "a" agent: claude-code: permission mode "yolo" is not one of`}},
		{"negative max_turns", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: claude-code, max_turns: -1}}\n",
			[]want{`3:65: task "a" agent max_turns -1 is out of range`}},
		{"bad output format", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: gemini, output_format: yaml}}\n",
			[]want{`3:64: task "a" agent: gemini: output format "yaml"`}},
		{"unknown key", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: codex, modle: x}}\n",
			[]want{`3:48: unknown field "modle" in task "a" agent; did you mean "model"?`}},
		{"command for a CLI adapter", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: codex, command: [codex]}}\n",
			[]want{`3:57: task "a" agent: command is the argv of the command adapter; the codex adapter builds its own`}},
		{"command adapter without command", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: command}}\n",
			[]want{`3:31: task "a" agent: the command adapter needs a command`}},
		{"no adapter", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {model: x}}\n",
			[]want{`3:31: task "a" agent needs an adapter`}},
		{"unknown adapter", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: aider}}\n",
			[]want{`3:41: unknown task "a" agent adapter "aider" (known: claude-code, codex, command, gemini)`}},
		{"defaults reported once", "name: w\ndefaults: {agent: {adapter: codex, permission: root}}\ntasks:\n  - {id: a, prompt: p}\n  - {id: b, prompt: p, agent: {model: m}}\n",
			[]want{`2:48: defaults agent: codex: sandbox "root" is not one of`}},
		{"provider key in env", "name: w\ntasks:\n  - {id: a, prompt: p, agent: {adapter: codex}, env: {OPENAI_API_KEY: sk-x, MY_API_KEY: y, HOME_DIR: z}}\n",
			[]want{`3:55: task "a" env may not set OPENAI_API_KEY: provider credentials reach an agent only from its worker`,
				`3:77: task "a" env may not set MY_API_KEY`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(tt.src))
			checkProblems(t, "w.yaml", tt.src, err, tt.want)
		})
	}
}

// FuzzParse checks that Parse never panics, that failures are always a
// *ValidationError with problems, and that whatever it accepts the DAG and
// gate helpers accept too.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(head + "gates: [{name: g, command: [x], depends_on: [h]}, {name: h, command: [y]}]\ntasks: [{id: a, prompt: p}, {id: b, prompt: p, depends_on: [a]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := Parse("fuzz.yaml", data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 || spec != nil {
				t.Fatalf("Parse = %v, %v", spec, err)
			}
			return
		}
		if _, err := NewGraph(spec); err != nil {
			t.Fatalf("NewGraph rejects a parsed spec: %v", err)
		}
		for _, task := range spec.Tasks {
			if _, err := GateLayers(spec.GateDefinitions(task), task.Gates); err != nil {
				t.Fatalf("GateLayers rejects a parsed spec: %v", err)
			}
		}
	})
}

// Retry settings (RETRY-08, RETRY-15, S-7): max_attempts, retry_policy and
// retry_from in defaults apply to every task; a task's own replace them;
// bad values are reported where they are written.
func TestParseRetry(t *testing.T) {
	spec, err := Parse("r.yaml", []byte(`name: demo
defaults: {agent: {adapter: codex}, max_attempts: 4, retry_policy: conservative}
tasks:
  - {id: a, prompt: p}
  - {id: b, prompt: p, max_attempts: 1, retry_policy: aggressive, retry_from: base}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := spec.Tasks[0], spec.Tasks[1]
	if a.Attempts() != 4 || a.RetryPolicy().Name != "conservative" || a.RetryFrom() != "" {
		t.Errorf("a: %d attempts, policy %s, from %q", a.Attempts(), a.RetryPolicy().Name, a.RetryFrom())
	}
	if b.Attempts() != 1 || b.RetryPolicy().Name != "aggressive" || b.RetryFrom() != protocol.RetryFromBase {
		t.Errorf("b: %d attempts, policy %s, from %q", b.Attempts(), b.RetryPolicy().Name, b.RetryFrom())
	}
	// A policy alone sets the budget; nothing at all gives the default.
	spec, err = Parse("r.yaml", []byte(head+"tasks:\n  - {id: a, prompt: p, retry_policy: aggressive}\n  - {id: b, prompt: p}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Tasks[0].Attempts(); got != 5 {
		t.Errorf("aggressive policy: %d attempts, want 5", got)
	}
	if got := spec.Tasks[1].Attempts(); got != protocol.DefaultMaxAttempts {
		t.Errorf("no setting: %d attempts, want %d", got, protocol.DefaultMaxAttempts)
	}

	src := head + `tasks:
  - {id: a, prompt: p, max_attempts: 0}
  - {id: b, prompt: p, max_attempts: 21}
  - {id: c, prompt: p, retry_policy: eager}
  - {id: d, prompt: p, retry_from: scratch}
  - {id: e, prompt: p, max_attempts: two}
`
	_, err = Parse("r.yaml", []byte(src))
	checkProblems(t, "r.yaml", src, err, []want{
		`4:38: task "a" max_attempts 0 is out of range: must be between 1 and 20`,
		`5:38: task "b" max_attempts 21 is out of range: must be between 1 and 20`,
		`6:38: unknown task "c" retry_policy "eager" (known: aggressive, conservative, default)`,
		`7:36: task "d" retry_from must be "previous" or "base", got "scratch"`,
		`8:38: task "e" max_attempts must be an integer, got a string`,
	})
}

// The operator's retry policies (from the coordinator's config) are known
// by name beside the built-in ones; the CLI, which may not know them,
// leaves unknown names to the coordinator.
func TestParseRetryPolicyOptions(t *testing.T) {
	src := head + "tasks:\n  - {id: a, prompt: p, retry_policy: patient}\n"
	patient := protocol.RetryPolicy{MaxAttempts: 4, InitialDelay: 10e9, Multiplier: 2}
	spec, err := ParseWithOptions("r.yaml", []byte(src), Options{RetryPolicies: map[string]protocol.RetryPolicy{"patient": patient}})
	if err != nil {
		t.Fatal(err)
	}
	if p := spec.Tasks[0].RetryPolicy(); p.Name != "patient" || p.InitialDelay != 10e9 || spec.Tasks[0].Attempts() != 4 {
		t.Errorf("policy %+v, %d attempts", p, spec.Tasks[0].Attempts())
	}
	_, err = Parse("r.yaml", []byte(src))
	checkProblems(t, "r.yaml", src, err, []want{`4:38: unknown task "a" retry_policy "patient" (known: aggressive, conservative, default)`})
	if _, err := ParseWithOptions("r.yaml", []byte(src), Options{AnyRetryPolicy: true}); err != nil {
		t.Errorf("AnyRetryPolicy: %v", err)
	}
}

// Approval steps and human tasks (HITL-02, HITL-03) as written.
func TestParseApproval(t *testing.T) {
	spec, err := Parse("a.yaml", []byte(head+`tasks:
  - {id: a, prompt: p, approval: required}
  - {id: b, prompt: p, approval: {timeout: 2h, on_timeout: approve, approvers: [ada, bob]}}
  - {id: c, type: human, prompt: Sign it off., depends_on: [a]}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := spec.Tasks[0], spec.Tasks[1], spec.Tasks[2]
	if a.Approval() == nil || a.Approval().TimeoutSeconds != 0 || len(a.Approval().Approvers) != 0 {
		t.Errorf("a: %+v", a.Approval())
	}
	if b.Approval() == nil || b.Approval().TimeoutSeconds != 7200 || b.Approval().OnTimeout != "approve" ||
		strings.Join(b.Approval().Approvers, ",") != "ada,bob" {
		t.Errorf("b: %+v", b.Approval())
	}
	if c.Type != protocol.TaskHuman || len(c.Command()) != 0 || len(c.Gates) != 0 {
		t.Errorf("c: type %q, command %v, gates %v", c.Type, c.Command(), c.Gates)
	}
	src := head + `tasks:
  - {id: a, prompt: p, approval: maybe}
  - {id: b, prompt: p, approval: {on_timeout: later}}
  - {id: c, prompt: p, type: robot}
  - {id: d, prompt: p, type: human, agent: {adapter: codex}, gates: []}
  - {id: e, prompt: p, approval: {timeout: 1s}}
`
	_, err = Parse("a.yaml", []byte(src))
	checkProblems(t, "a.yaml", src, err, []want{
		`4:34: task "a" approval must be "required" or a mapping of timeout, on_timeout, approvers and auto_approve, got "maybe"`,
		`5:47: task "b" approval on_timeout must be approve, reject or escalate, got "later"`,
		`5:47: task "b" approval on_timeout needs a timeout`,
		`6:30: task "c" type must be agent or human, got "robot"`,
		`7:37: task "d" is a human task: it runs no agent`,
		`7:62: task "d" is a human task: it makes no change for gates to check`,
		`8:44: task "e" approval timeout`,
	})
}

// An approval policy (HITL-05): true for the default limits, or limits and
// sensitive paths of the task's own; off unless written.
func TestParseAutoApprove(t *testing.T) {
	spec, err := Parse("p.yaml", []byte(head+`tasks:
  - {id: a, prompt: p, approval: {auto_approve: true}}
  - {id: b, prompt: p, approval: {auto_approve: {max_files: 5, max_lines: 0, sensitive_paths: [db/migrations/**]}}}
  - {id: c, prompt: p, approval: {auto_approve: false}}
  - {id: d, prompt: p, approval: required}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []*protocol.AutoApprove{
		{MaxFiles: protocol.DefaultAutoApproveMaxFiles, MaxLines: protocol.DefaultAutoApproveMaxLines},
		{MaxFiles: 5, MaxLines: 0, SensitivePaths: []string{"db/migrations/**"}},
		nil, nil,
	} {
		if got := spec.Tasks[i].Approval().AutoApprove; !reflect.DeepEqual(got, want) {
			t.Errorf("task %s: auto_approve %+v, want %+v", spec.Tasks[i].ID, got, want)
		}
	}
	src := head + `tasks:
  - {id: a, prompt: p, approval: {auto_approve: yes please}}
  - {id: b, prompt: p, approval: {auto_approve: {max_files: -1, max_lines: lots}}}
  - {id: c, prompt: p, approval: {auto_approve: {sensitive_paths: x, risk: low}}}
  - {id: d, type: human, prompt: p, approval: {auto_approve: true}}
`
	_, err = Parse("p.yaml", []byte(src))
	checkProblems(t, "p.yaml", src, err, []want{
		`4:49: task "a" approval auto_approve must be true, false or a mapping of max_files, max_lines and sensitive_paths, got a string`,
		`5:61: task "b" approval auto_approve max_files`,
		`5:76: task "b" approval auto_approve max_lines`,
		`6:67: task "c" approval auto_approve sensitive_paths must be a list of globs, got a string`,
		`6:70: unknown field "risk" in task "c" approval auto_approve`,
		`7:47: task "d" is a human task: a human decides it, so auto_approve does not apply`,
	})
}

// TestBudgetSyntax: max_cost_usd on a task and at the top level is a
// positive number of US dollars.
func TestBudgetSyntax(t *testing.T) {
	spec, err := Parse("w.yaml", []byte("name: w\nmax_cost_usd: 10\ntasks:\n  - {id: a, prompt: p, agent: {adapter: codex}, max_cost_usd: 0.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if spec.MaxCostUSD != 10 || spec.Tasks[0].MaxCostUSD() != 0.5 {
		t.Errorf("budgets %v and %v, want 10 and 0.5", spec.MaxCostUSD, spec.Tasks[0].MaxCostUSD())
	}
	src := "name: w\nmax_cost_usd: lots\ntasks:\n  - {id: a, prompt: p, agent: {adapter: codex}, max_cost_usd: -1}\n"
	_, err = Parse("w.yaml", []byte(src))
	checkProblems(t, "w.yaml", src, err, []want{
		`2:15: workflow max_cost_usd must be a number of US dollars, e.g. 5 or 0.50, got a string`,
		`4:63: task "a" max_cost_usd -1 is out of range: must be more than 0`,
	})
}
