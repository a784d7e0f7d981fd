package gates

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// one is a mapping-form gate file whose gate "g" sets one field on line 4;
// the value starts at column len(field)+7.
func one(field, value string) string {
	return "gates:\n  g:\n    command: [x]\n    " + field + ": " + value + "\n"
}

// Every GC-* rule: each problem at its
// exact file:line:col, all problems of a file collected.
func TestBasicValidation(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen+1)
	tests := []struct {
		name  string
		src   string
		wants []want
	}{
		// GC-01 names: the valid pattern, and no path traversal.
		{"GC-01 path traversal rejected", "gates:\n  - name: ../etc\n    command: [x]\n", []want{`2:11: invalid gate name "../etc"`}},
		{"GC-01 dot rejected (NATS subject token)", "gates:\n  - name: a.b\n    command: [x]\n", []want{`2:11: invalid gate name "a.b": use letters, digits, '-' and '_'`}},
		{"GC-01 must start with alphanumeric", "gates:\n  - {name: -x, command: [x]}\n", []want{`2:12: invalid gate name "-x"`}},
		{"GC-01 must end with alphanumeric", "gates:\n  - {name: x-, command: [x]}\n", []want{`2:12: invalid gate name "x-"`}},
		{"GC-01 at most 64 characters", "gates:\n  - {name: " + long + ", command: [x]}\n", []want{`2:12: invalid gate name "` + long + `"`}},
		{"GC-01 valid names", "gates:\n  - {name: a, command: [x]}\n  - {name: Go_Test-2, command: [x]}\n  - {name: 9, command: [x]}\n", nil},
		{"GC-01 mapping key is the name", "gates:\n  a/b: {command: [x]}\n", []want{`2:3: invalid gate name "a/b"`}},
		{"GC-01 name must be a string", "gates:\n  - {name: [x], command: [x]}\n", []want{`2:12: gate name must be a string, got a list`}},
		{"GC-01 name required in the list form", "gates:\n  - command: [x]\n", []want{`2:5: gate is missing required field "name"`}},
		{"GC-01 name in the mapping form's body is reserved", "gates:\n  g: {name: g, command: [x]}\n",
			[]want{`2:7: "name" is not allowed in gate "g": the gate's name is its key under gates`}},
		{"duplicate name", "gates:\n  - {name: g, command: [x]}\n  - {name: g, command: [y]}\n",
			[]want{`3:12: duplicate gate name "g" (first defined at line 2)`}},

		// GC-02 command: a list is accepted, a string rejected.
		{"GC-02/CM-02 string command suggests the list form", "gates:\n  g:\n    command: go test ./...\n",
			[]want{`3:14: gate "g" command must be an argv list, e.g. [go, test, ./...], not a string: commands are not run by a shell`}},
		{"CM-02 string with shell syntax", "gates:\n  g:\n    command: \"make lint | tee x\"\n",
			[]want{`3:14: gate "g" command must be an argv list, e.g. [go, test, ./...], not a string`}},
		{"GC-02 empty list", "gates:\n  g:\n    command: []\n", []want{`3:14: gate "g" command is empty`}},
		{"GC-02 not a list", "gates:\n  g:\n    command: {go: vet}\n", []want{`3:14: gate "g" command must be an argv list, e.g. [go, test, ./...], got a mapping`}},
		{"GC-02 items must be strings", "gates:\n  g:\n    command: [go, [vet], ~]\n",
			[]want{`3:19: gate "g" command[1] must be a string, got a list`, `3:26: gate "g" command[2] must be a string, got nothing`}},
		{"GC-02 empty program", "gates:\n  g:\n    command: [\" \", x]\n", []want{`3:15: gate "g" command: the program name is empty`}},
		{"GC-02 missing", "gates:\n  g:\n    timeout: 5\n", []want{`3:5: gate "g" is missing required field "command"`}},
		{"GC-02 list accepted", "gates:\n  g:\n    command: [go, test, \"./...\"]\n", nil},

		// GC-04 timeout.
		{"GC-04 zero", one("timeout", "0"), []want{`4:14: gate "g" timeout 0 is out of range: must be between 1s and 1h`}},
		{"GC-04 above 3600 s", one("timeout", "3601"), []want{`4:14: gate "g" timeout 3601 is out of range: must be between 1s and 1h`}},
		{"GC-04 duration above 1h", one("timeout", "2h"), []want{`4:14: gate "g" timeout 2h is out of range`}},
		{"GC-04 a boolean is not a number", one("timeout", "true"), []want{`4:14: gate "g" timeout must be a duration such as 10m or an integer number of seconds, got a boolean`}},
		{"GC-04 fractions of a number", one("timeout", "1.5"), []want{`4:14: gate "g" timeout must be a duration such as 10m or an integer number of seconds, got a number`}},
		{"GC-04 bad duration", one("timeout", "soon"), []want{`4:14: invalid gate "g" timeout "soon": use a Go duration such as 90s or 10m`}},
		{"timeout_secs alias", one("timeout_secs", "900"), nil},
		{"alias and field together", "gates:\n  g:\n    command: [x]\n    timeout: 5m\n    timeout_secs: 300\n",
			[]want{`5:5: gate "g" sets both timeout and timeout_secs (an alias); keep one`}},

		// GC-05 depends_on: elements must be strings.
		{"GC-05 must be a list", one("depends_on", "vet"), []want{`4:17: gate "g" depends_on must be a list of names, e.g. [vet], got a string`}},
		{"GC-05 elements must be strings", one("depends_on", "[vet, [x], {a: b}]"),
			[]want{`4:23: gate "g" depends_on entry must be a string, got a list`, `4:28: gate "g" depends_on entry must be a string, got a mapping`}},
		{"GC-05 repeated", one("depends_on", "[vet, vet]"), []want{`4:23: gate "g" depends_on lists "vet" twice (first at line 4)`}},

		// GC-06 severity: one of the known values.
		{"GC-06 invalid", one("severity", "fatal"), []want{`4:15: invalid gate "g" severity "fatal": must be one of error, warning, info`}},
		{"GC-06 not a string", one("severity", "[error]"), []want{`4:15: gate "g" severity must be a string, got a list`}},
		{"GC-06 case-insensitive", one("severity", "WARNING"), nil},

		// GC-07 env: keys and values must be strings; the EV-03 denylist.
		{"GC-07/EV-03 denylisted names rejected at load", one("env", "{PATH: /x, home: /y, User: me, PYTHONPATH: ., LD_AUDIT: a, ld_preload: b, Supervisor_Token: t}"), []want{
			`4:11: gate "g" env may not set PATH: it is controlled by the runner`,
			`4:21: gate "g" env may not set home`,
			`4:31: gate "g" env may not set User`,
			`4:41: gate "g" env may not set PYTHONPATH`,
			`4:56: gate "g" env may not set LD_AUDIT: LD_* variables change how programs are loaded`,
			`4:69: gate "g" env may not set ld_preload`,
			`4:84: gate "g" env may not set Supervisor_Token: SUPERVISOR_* variables are reserved`,
		}},
		{"GC-07 names are POSIX identifiers", one("env", "{1BAD: x, A-B: y, OK_1: z}"),
			[]want{`4:11: invalid gate "g" env name "1BAD"`, `4:20: invalid gate "g" env name "A-B"`}},
		{"GC-07 values are scalars", one("env", "{A: {b: c}, B: [x], C: ~}"),
			[]want{`4:14: gate "g" env value of A must be a string, got a mapping`, `4:25: gate "g" env value of B must be a string, got a list`, `4:33: gate "g" env value of C must be a string, got nothing`}},
		{"GC-07 NUL in a value", one("env", `{A: "x\0y"}`), []want{`4:14: gate "g" env value of A must not contain NUL bytes`}},
		{"GC-07 must be a mapping", one("env", "[A=1]"), []want{`4:10: gate "g" env must be a mapping of variable names to values, got a list`}},
		{"GC-07 repeated", one("env", "{A: 1, A: 2}"), []want{`4:17: gate "g" env sets A twice (first at line 4)`}},

		// GC-08 working_dir.
		{"GC-08 absolute", one("working_dir", "/abs"), []want{`4:18: gate "g" working_dir "/abs" must be relative to the repository root, not absolute`}},
		{"GC-08 traversal", one("working_dir", "sub/../../up"), []want{`4:18: gate "g" working_dir "sub/../../up" must stay inside the repository`}},
		{"GC-08 traversal behind backslashes", one("working_dir", `'a\..\..\b'`), []want{`4:18: gate "g" working_dir "a\\..\\..\\b" must stay inside the repository`}},
		{"GC-08 drive letter", one("working_dir", `'C:\x'`), []want{`4:18: gate "g" working_dir "C:\\x" must be relative to the repository root, not a drive path`}},
		{"GC-08 empty", one("working_dir", `""`), []want{`4:18: gate "g" working_dir is empty`}},
		{"GC-08 not a pattern", one("working_dir", "sub/*"), []want{`4:18: gate "g" working_dir "sub/*" must be a directory, not a pattern`}},

		// GC-09, GC-10, GC-12, GC-13, GC-15: all five boolean fields must be booleans.
		{"booleans must be booleans", `gates:
  g:
    command: [x]
    parallel_safe: yes
    cache: 1
    force_hash_large_cache_inputs: "true"
    skip_on_dependency_failure: ~
    allow_shell: [true]
`, []want{
			`4:20: gate "g" parallel_safe must be true or false, got a string`,
			`5:12: gate "g" cache must be true or false, got a number`,
			`6:36: gate "g" force_hash_large_cache_inputs must be true or false, got a string`,
			`7:33: gate "g" skip_on_dependency_failure must be true or false, got nothing`,
			`8:18: gate "g" allow_shell must be true or false, got a list`,
		}},

		// GC-11 cache_inputs.
		{"GC-11 cache_inputs", one("cache_inputs", `[/etc/passwd, ../x, "  ", "C:/x", 'a\..\b', foo..bar, "**/*.lock"]`), []want{
			`4:20: gate "g" cache_inputs entry "/etc/passwd" must be relative to the repository root, not absolute`,
			`4:33: gate "g" cache_inputs entry "../x" must stay inside the repository`,
			`4:39: gate "g" cache_inputs entry "  " is empty`,
			`4:45: gate "g" cache_inputs entry "C:/x" must be relative to the repository root, not a drive path`,
			`4:53: gate "g" cache_inputs entry "a\\..\\b" must stay inside the repository`,
		}},
		{"GC-11 must be a list", one("cache_inputs", "go.sum"), []want{`4:19: gate "g" cache_inputs must be a list of paths or globs, got a string`}},

		// GC-16 reserved keys (errors, never silently stripped) and unknown keys.
		{"GC-16 required, optional and on_fail belong to the task", `gates:
  g:
    command: [x]
    required: true
    optional: false
    on_fail: warn
    hardened_integrity: true
    timout: 5
`, []want{
			`4:5: "required" is not allowed in gate "g": whether a gate is required is up to the task`,
			`5:5: "optional" is not allowed in gate "g"`,
			`6:5: "on_fail" is not allowed in gate "g": on_fail is up to the task`,
			`7:5: "hardened_integrity" is not allowed in gate "g": hardened_integrity is not supported`,
			`8:5: unknown field "timout" in gate "g"; did you mean "timeout"?`,
		}},
		{"repeated field", "gates:\n  - name: g\n    command: [x]\n    command: [y]\n", []want{`4:5: field "command" appears twice in gate (first at line 3)`}},

		// max_retries, poll_interval and max_pending.
		{"max_retries range", "gates:\n  a: {command: [x], max_retries: -1}\n  b: {command: [x], max_retries: 101}\n  c: {command: [x], max_retries: \"3\"}\n  d: {command: [x], max_retries: 0}\n", []want{
			`2:34: gate "a" max_retries -1 is out of range: must be between 0 and 100`,
			`3:34: gate "b" max_retries 101 is out of range`,
			`4:34: gate "c" max_retries must be an integer, got a string`,
		}},
		{"poll_interval at least 1s", one("poll_interval", "0"), []want{`4:20: gate "g" poll_interval 0 is out of range: must be between 1s and 24h`}},
		{"poll_interval_secs alias", one("poll_interval_secs", "300"), nil},
		{"max_pending at least poll_interval", "gates:\n  g:\n    command: [x]\n    poll_interval: 10m\n    max_pending: 5m\n",
			[]want{`5:18: gate "g" max_pending (5m) is shorter than poll_interval (10m)`}},
		{"max_pending range", one("max_pending_secs", "2592001"), []want{`4:23: gate "g" max_pending_secs 2592001 is out of range: must be between 1s and 720h`}},

		// Sandbox fields.
		{"resources", one("resources", "{memory: 2x, cpus: 0, pids: 0, gpus: 1}"), []want{
			`4:25: gate "g" resources memory must be a size such as 512m or 2g`,
			`4:35: gate "g" resources cpus 0 is out of range`,
			`4:44: gate "g" resources pids 0 is out of range: must be between 1 and 4194304`,
			`4:47: unknown field "gpus" in gate "g" resources`,
		}},
		{"resources memory too small", one("resources", "{memory: 1m, cpus: two}"),
			[]want{`4:25: gate "g" resources memory 1m is out of range`, `4:35: gate "g" resources cpus must be a number such as 2 or 0.5, got a string`}},
		{"image", one("image", `"bad image"`), []want{`4:12: invalid gate "g" image "bad image"`}},
		{"pool", one("pool", "GPU"), []want{`4:11: invalid gate "g" pool "GPU": use lowercase letters`}},
		{"description", one("description", "[x]"), []want{`4:18: gate "g" description must be a string, got a list`}},

		// The file (LD-07).
		{"LD-07 top level must be a mapping", "- a\n", []want{`1:1: gate file must be a mapping, got a list`}},
		{"LD-07 gates of the wrong type", "gates: vet\n", []want{`1:8: gates must be a list of gate definitions or a mapping from gate name to definition, got a string`}},
		{"unknown top-level key", "gates: {}\nversion: 2\n", []want{`2:1: unknown field "version" in gate file`}},
		{"LD-10 YAML syntax error", "gates:\n  g:\n    command: [x\n", []want{`3: invalid YAML: did not find expected ',' or ']'`}},
		{"two documents", "gates: {}\n---\ngates: {}\n", []want{`2:1: more than one YAML document`}},
		{"aliases", "gates:\n  g: {command: &c [x]}\n  h: {command: *c}\n", []want{`3:16: YAML aliases (*c) are not supported`}},
		{"LD-07 empty file", "", nil},
		{"LD-07 comments only", "# nothing\n", nil},
		{"LD-07 no gates key", "{}\n", nil},
		{"LD-07 null gates", "gates:\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gs, err := parseYAML(t, tc.src)
			checkProblems(t, "g.yaml", tc.src, err, tc.wants)
			if len(tc.wants) == 0 && strings.Contains(tc.src, "gates:\n  g:") && len(gs) != 1 {
				t.Errorf("gates = %v", gs)
			}
		})
	}
}

// Defaults (GC-04, GC-06, GC-10, GC-13, Q-8)
// and every field, in both shapes of a gates section.
func TestGateConfigLoadFromYAML(t *testing.T) {
	src := `gates:
  test:
    command: [pytest, -v, --tb=short, -p, no:cacheprovider]
    description: Unit tests
    timeout: 2m
    depends_on: [lint]
    severity: Warning
    env: {PYTHONDONTWRITEBYTECODE: "1", CGO_ENABLED: 0}
    working_dir: ./src/
    parallel_safe: true
    cache: false
    cache_inputs: ['testdata\golden', build/]
    force_hash_large_cache_inputs: true
    skip_on_dependency_failure: false
    allowed_writes: [.coverage, htmlcov/**, "./reports/"]
    allow_shell: true
    max_retries: 0
    poll_interval: 300
    max_pending_secs: 172800
    image: registry.example.com/ci/python:3.12
    resources: {memory: 2g, cpus: 1.5, pids: 256}
    pool: py
  lint: {command: [make, lint]}
`
	gs, err := parseYAML(t, src)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 {
		t.Fatalf("gates = %v", gs)
	}
	got := gs[0]
	want := Gate{
		Name: "test", Command: []string{"pytest", "-v", "--tb=short", "-p", "no:cacheprovider"},
		Description: "Unit tests", Timeout: 2 * time.Minute, DependsOn: []string{"lint"}, Severity: SeverityWarning,
		Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1", "CGO_ENABLED": "0"}, WorkingDir: "src",
		ParallelSafe: true, Cache: false, CacheInputs: []string{"testdata/golden", "build/**"},
		ForceHashLargeCacheInputs: true, SkipOnDependencyFailure: false,
		AllowedWrites: []string{".coverage", "htmlcov/**", "reports/**"}, AllowShell: true, MaxRetries: 0,
		PollInterval: 5 * time.Minute, MaxPending: 48 * time.Hour, Image: "registry.example.com/ci/python:3.12",
		Resources: Resources{MemoryBytes: 2 << 30, CPUs: 1.5, PIDs: 256}, Pool: "py",
		Source: Source{Origin: OriginProject, File: "g.yaml", Line: 2, Column: 3},
	}
	got.depPos = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("test =\n%+v\nwant\n%+v", got, want)
	}
	lint := gs[1]
	lint.Source = Source{}
	if def := New("lint", "make", "lint"); !reflect.DeepEqual(lint, def) {
		t.Errorf("defaults =\n%+v\nwant\n%+v", lint, def)
	}
	if lint.Timeout != 300*time.Second || lint.Severity != SeverityError || !lint.Cache || !lint.SkipOnDependencyFailure ||
		lint.MaxRetries != 3 || lint.PollInterval != 30*time.Second || lint.MaxPending != 24*time.Hour || lint.Pool != "default" {
		t.Errorf("defaults wrong: %+v", lint)
	}
	if s := gs[0].Source.String(); s != "g.yaml:2" {
		t.Errorf("Source = %q, want g.yaml:2", s)
	}
	// The list form gives the same gates.
	list := `gates:
  - name: lint
    command: [make, lint]
`
	lg, err := parseYAML(t, list)
	if err != nil || len(lg) != 1 {
		t.Fatal(lg, err)
	}
	lg[0].Source = Source{}
	if !reflect.DeepEqual(lg[0], lint) {
		t.Errorf("list form = %+v, want %+v", lg[0], lint)
	}
}

// GC-14 / PP-01…PP-04: .git/ and .supervisor/ can never be allow-listed,
// literal patterns such as .git/config included; backslashes are
// normalized first.
func TestAllowedWritesProtectedPaths(t *testing.T) {
	tests := []struct {
		pattern string
		bad     string // message substring; "" = allowed
	}{
		{".git/config", "names .git/"}, // a literal pattern, not only wildcards
		{".git/refs/**", "names .git/"},
		{".supervisor/x", "names .supervisor/"},
		{".git", "names .git/"},
		{"./.git/HEAD", "names .git/"},
		{`.git\config`, "names .git/"},
		{"foo/.git/x", "names .git/"},
		{".GIT/config", "names .git/"},
		{".gi[t]/config", "names .git/"},
		{".git*", "names .git/"},
		{".g?t/x", "can match .git/"},
		{"*/x", "can match .git/"},
		{"**/description", "matches .git/description"},
		{"**/*.log", "matches .supervisor/artifacts/gate.log"},
		{"**/*.tmp", ""}, // ** is checked against probe paths (PP-03)
		{"**", "matches every path"},
		{"*", "can match .git/"},
		{".*", "can match .git/"},
		{"**/HEAD", "matches .git/HEAD"},
		{"**/config", "matches .git/config"},
		{"**/lock", "matches .supervisor/lock"},
		{"**/*", "matches .git"},
		{"/abs", "not absolute"},
		{`..\x`, "'..' is not allowed"},
		{"a/../../x", "'..' is not allowed"},
		{"", "is empty"},
		{".", "names the repository root"},
		{".coverage", ""},
		{"htmlcov/**", ""},
		{"*.log", ""},
		{"dist/", ""},
		{".gitignore", ""},
		{"build/.github-cache/x", ""},
		{".supervisorrc", ""},
	}
	for _, tc := range tests {
		src := "gates:\n  g:\n    command: [x]\n    allowed_writes: ['" + tc.pattern + "']\n"
		_, err := parseYAML(t, src)
		if tc.bad == "" {
			if err != nil {
				t.Errorf("PP: %q rejected: %v", tc.pattern, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "g.yaml:4:22:") {
			t.Errorf("PP: %q: error %v, want g.yaml:4:22 … %q", tc.pattern, err, tc.bad)
		}
	}
	// GC-14's warning for patterns that may match source (by path segment).
	_, warns, err := ParseFile("g.yaml", []byte("gates:\n  g:\n    command: [x]\n    allowed_writes: [src/gen/**, '**/*.go', '*.pyc', library/x]\n"), OriginUser)
	if err != nil {
		t.Fatal(err)
	}
	var ws []string
	for _, w := range warns {
		ws = append(ws, w.String())
	}
	if len(ws) != 2 || !strings.HasPrefix(ws[0], "g.yaml:4:22: ") || !strings.HasPrefix(ws[1], "g.yaml:4:34: ") {
		t.Errorf("warnings = %q", ws)
	}
}
