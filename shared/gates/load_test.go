package gates

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// writeFile writes data to path (see testkit.WriteFile) and returns path.
func writeFile(t *testing.T, path, data string) string {
	t.Helper()
	testkit.WriteFile(t, path, data)
	return path
}

// sources lays out all five gate sources; every source defines "shared",
// each with a different command, and one gate only it defines.
type sources struct {
	builtinDir, userFile, projectDir string
	workflow, task                   []Gate
}

func newSources(t *testing.T) sources {
	dir := t.TempDir()
	s := sources{
		builtinDir: filepath.Join(dir, "builtin"),
		userFile:   filepath.Join(dir, "home", ".supervisor", "gates.yaml"),
		projectDir: filepath.Join(dir, "repo"),
	}
	writeFile(t, filepath.Join(s.builtinDir, "a.yaml"), `gates:
  shared:
    command: [builtin]
    env: {FROM: builtin}
    timeout: 10m
  builtin-only: {command: [b]}
`)
	writeFile(t, filepath.Join(s.builtinDir, "b.toml"), "[[gate]]\nname = \"builtin-toml\"\ncommand = [\"bt\"]\n")
	writeFile(t, filepath.Join(s.builtinDir, "README.md"), "not a gate file")
	writeFile(t, s.userFile, "gates:\n  shared: {command: [user]}\n  user-only: {command: [u], depends_on: [builtin-only]}\n")
	writeFile(t, filepath.Join(s.projectDir, ".supervisor", "gates.yaml"),
		"gates:\n  - name: shared\n    command: [project]\n  - name: project-only\n    command: [p]\n")
	s.workflow = []Gate{New("shared", "workflow"), New("workflow-only", "w")}
	s.task = []Gate{New("shared", "task"), New("task-only", "t")}
	s.workflow[0].Source = Source{Origin: OriginWorkflow, File: "wf.yaml", Line: 3}
	s.task[0].Source = Source{Origin: OriginTask, File: "wf.yaml", Line: 9}
	return s
}

func (s sources) options(upTo Origin, trust bool) Options {
	o := Options{BuiltinDir: s.builtinDir}
	if upTo == OriginBuiltin {
		return o
	}
	o.UserFile = s.userFile
	if upTo == OriginUser {
		return o
	}
	o.ProjectDir, o.TrustProject = s.projectDir, trust
	if upTo == OriginProject {
		return o
	}
	o.Workflow = s.workflow
	if upTo == OriginWorkflow {
		return o
	}
	o.Task = s.task
	return o
}

// LD-01, LD-04: built-in < user < project < workflow < task, a later source replacing
// the whole gate (its env and timeout do not survive).
func TestLoadPrecedence(t *testing.T) {
	s := newSources(t)
	tests := []struct {
		upTo    Origin
		command string
		origin  Origin
		names   []string
	}{
		{OriginBuiltin, "builtin", OriginBuiltin, []string{"builtin-only", "builtin-toml", "shared"}},
		{OriginUser, "user", OriginUser, []string{"builtin-only", "builtin-toml", "shared", "user-only"}},
		{OriginProject, "project", OriginProject, []string{"builtin-only", "builtin-toml", "project-only", "shared", "user-only"}},
		{OriginWorkflow, "workflow", OriginWorkflow, []string{"builtin-only", "builtin-toml", "project-only", "shared", "user-only", "workflow-only"}},
		{OriginTask, "task", OriginTask, []string{"builtin-only", "builtin-toml", "project-only", "shared", "task-only", "user-only", "workflow-only"}},
	}
	for _, tc := range tests {
		res, err := Load(s.options(tc.upTo, true))
		if err != nil {
			t.Fatalf("%s: %v", tc.upTo, err)
		}
		g, ok := res.Set.Get("shared")
		if !ok || !reflect.DeepEqual(g.Command, []string{tc.command}) || g.Source.Origin != tc.origin {
			t.Errorf("LD-01 up to %s: shared = %v from %s, want [%s] from %s", tc.upTo, g.Command, g.Source.Origin, tc.command, tc.origin)
		}
		if tc.upTo != OriginBuiltin && (g.Env != nil || g.Timeout != DefaultTimeout) {
			t.Errorf("LD-04 up to %s: fields were merged: env %v, timeout %v", tc.upTo, g.Env, g.Timeout)
		}
		if got := res.Set.Names(); !reflect.DeepEqual(got, tc.names) {
			t.Errorf("up to %s: names = %v, want %v", tc.upTo, got, tc.names)
		}
		if len(res.IgnoredProject) != 0 {
			t.Errorf("trusted project reported ignored: %v", res.IgnoredProject)
		}
	}
	res, _ := Load(s.options(OriginProject, true))
	wantFiles := []string{filepath.Join(s.builtinDir, "a.yaml"), filepath.Join(s.builtinDir, "b.toml"), s.userFile,
		filepath.Join(s.projectDir, ".supervisor", "gates.yaml")}
	if !reflect.DeepEqual(res.Files, wantFiles) {
		t.Errorf("files = %v, want %v", res.Files, wantFiles)
	}
	g, _ := res.Set.Get("project-only")
	if g.Source.String() != filepath.Join(s.projectDir, ".supervisor", "gates.yaml")+":4" {
		t.Errorf("source = %s", g.Source)
	}
}

// LD-03: an untrusted project's gates are not read, and the loader says it
// ignored them so the caller can warn.
func TestLoadUntrustedProjectIgnored(t *testing.T) {
	s := newSources(t)
	// Even an invalid project file is not read when untrusted.
	proj := filepath.Join(s.projectDir, ".supervisor", "gates.toml")
	writeFile(t, proj, "this is not toml [")
	os.Remove(filepath.Join(s.projectDir, ".supervisor", "gates.yaml"))
	res, err := Load(s.options(OriginTask, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Set.Get("project-only"); ok {
		t.Error("untrusted project gate loaded")
	}
	if !reflect.DeepEqual(res.IgnoredProject, []string{proj}) {
		t.Errorf("IgnoredProject = %v, want [%s]", res.IgnoredProject, proj)
	}
	for _, f := range res.Files {
		if strings.Contains(f, "repo") {
			t.Errorf("read %s", f)
		}
	}
	// Trusted, the same file is read and its problems reported.
	_, err = Load(s.options(OriginProject, true))
	if err == nil || !strings.Contains(err.Error(), proj+":1:") || !strings.Contains(err.Error(), "invalid TOML") {
		t.Errorf("trusted invalid project: %v", err)
	}
}

// LD-05 / LD-07: missing files are skipped; empty files define no gates.
func TestLoadMissingAndEmpty(t *testing.T) {
	dir := t.TempDir()
	res, err := Load(Options{BuiltinDir: filepath.Join(dir, "none"), UserFile: filepath.Join(dir, "none.yaml"),
		ProjectDir: filepath.Join(dir, "repo"), TrustProject: true})
	if err != nil || res.Set.Len() != 0 || len(res.Files) != 0 {
		t.Errorf("missing sources: %v, %v", res, err)
	}
	empty := writeFile(t, filepath.Join(dir, "empty.yaml"), "")
	writeFile(t, filepath.Join(dir, "repo", ".supervisor", "gates.toml"), "# nothing yet\n")
	res, err = Load(Options{UserFile: empty, ProjectDir: filepath.Join(dir, "repo"), TrustProject: true})
	if err != nil || res.Set.Len() != 0 || len(res.Files) != 2 {
		t.Errorf("empty files: %+v, %v", res, err)
	}
}

// Problems of every source are collected with their files; dependencies
// are checked on the merged set (DP-05, DP-06), at the entry causing them.
func TestLoadProblems(t *testing.T) {
	dir := t.TempDir()
	builtin := filepath.Join(dir, "builtin")
	a := writeFile(t, filepath.Join(builtin, "a.yaml"), "gates:\n  test: {command: [go, test]}\n  vet: {command: [go, vet], depends_on: [test]}\n")
	b := writeFile(t, filepath.Join(builtin, "b.yaml"), "gates:\n  test: {command: [pytest]}\n")
	user := writeFile(t, filepath.Join(dir, "user.yaml"), "gates:\n  test:\n    command: [go, test]\n    depends_on: [vet, ghost]\n  bad: {command: go test}\n")
	proj := filepath.Join(dir, "repo")
	writeFile(t, filepath.Join(proj, ".supervisor", "gates.yaml"), "gates: {}\n")
	writeFile(t, filepath.Join(proj, ".supervisor", "gates.toml"), "")
	_, err := Load(Options{BuiltinDir: builtin, UserFile: user, ProjectDir: proj, TrustProject: true})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Load = %v", err)
	}
	var got []string
	for _, p := range ve.Problems {
		got = append(got, p.String())
	}
	want := []string{
		user + `:2:3: gate dependency cycle: test -> vet -> test`, // the user's test closes the cycle
		b + `:2:3: gate "test" is also defined in ` + a + `:2; built-in gate files must not share names`,
		user + `:4:23: gate "test" depends on unknown gate "ghost"`,
		user + `:5:18: gate "bad" command must be an argv list, e.g. [go, test], not a string: commands are not run by a shell`,
		filepath.Join(proj, ".supervisor", "gates.toml") + `: both ` + filepath.Join(proj, ".supervisor", "gates.yaml") +
			` and ` + filepath.Join(proj, ".supervisor", "gates.toml") + ` exist; keep one`,
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A project gate file must be a regular file, not a symbolic link that
// could make the loader read (and quote) any file of the host.
func TestLoadProjectSymlinkRejected(t *testing.T) {
	dir := t.TempDir()
	target := writeFile(t, filepath.Join(dir, "elsewhere.yaml"), "gates: {x: {command: [x]}}\n")
	proj := filepath.Join(dir, "repo")
	link := filepath.Join(proj, ".supervisor", "gates.yaml")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Skip(err)
	}
	_, err := Load(Options{ProjectDir: proj, TrustProject: true})
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Load = %v", err)
	}
}

// TOML ([[gate]] tables, *_secs spellings) and YAML give the
// same gates, and TOML problems carry TOML positions.
func TestTOMLAndYAMLEquivalence(t *testing.T) {
	yml := `gates:
  - name: typecheck
    command: [npm, run, typecheck]
    timeout_secs: 120
    max_retries: 2
  - name: test
    command: [npm, test, --, --coverage]
    timeout: 600
    depends_on: [typecheck]
    env: {CI: "true", NODE_ENV: test}
    resources: {memory: 2g, cpus: 2, pids: 256}
    allowed_writes: [coverage/]
  - name: staging-deploy-approval
    command: [./scripts/check-deploy-approval.sh]
    timeout_secs: 30
    max_retries: 1
    poll_interval_secs: 300
    max_pending_secs: 172800
    severity: info
    cache: false
`
	tml := `# .supervisor/gates.toml
[[gate]]
name = "typecheck"
command = ["npm", "run", "typecheck"]
timeout_secs = 120
max_retries = 2

[[gate]]
name = "test"
command = [
  "npm", "test",
  "--", "--coverage",
]
timeout = 600
depends_on = ["typecheck"]
env = { CI = "true", NODE_ENV = "test" }
allowed_writes = ["coverage/"]

[gate.resources]
memory = "2g"
cpus = 2
pids = 256

[[gate]]
name = "staging-deploy-approval"
command = ["./scripts/check-deploy-approval.sh"]
timeout_secs = 30
max_retries = 1
poll_interval_secs = 300
max_pending_secs = 172_800
severity = "info"
cache = false
`
	yg, _, err := ParseFile("gates.yaml", []byte(yml), OriginProject)
	if err != nil {
		t.Fatal(err)
	}
	tg, _, err := ParseFile("gates.toml", []byte(tml), OriginProject)
	if err != nil {
		t.Fatal(err)
	}
	strip := func(gs []Gate) []Gate {
		out := append([]Gate(nil), gs...)
		for i := range out {
			out[i].Source, out[i].depPos = Source{}, nil
		}
		return out
	}
	if !reflect.DeepEqual(strip(yg), strip(tg)) {
		t.Errorf("YAML and TOML differ:\n%+v\n%+v", strip(yg), strip(tg))
	}
	if tg[1].Source.Line != 9 || tg[1].Source.Column != 8 || tg[1].depPos[0].Line != 15 || tg[1].depPos[0].Column != 15 {
		t.Errorf("TOML positions: %+v, deps %+v", tg[1].Source, tg[1].depPos)
	}

	bad := `[[gate]]
name = "a.b"
command = "npm test"
timeout_secs = 0
cache = "yes"
on_fail = "warn"
env = { PATH = "/x" }

[[gate]]
name = "lint"
command = ["sh", "-c", "npm run lint"]
[gate.resources]
memory = "lots"

[extra]
x = 1
`
	_, _, err = ParseFile("g.toml", []byte(bad), OriginProject)
	checkProblems(t, "g.toml", bad, err, []want{
		`2:8: invalid gate name "a.b"`,
		`3:11: gate command must be an argv list, e.g. [npm, test], not a string`,
		`4:16: gate timeout_secs 0 is out of range`,
		`5:9: gate cache must be true or false, got a string`,
		`6:1: "on_fail" is not allowed in gate`,
		`7:9: gate env may not set PATH`,
		`11:11: gate "lint" command runs a shell (sh -c)`,
		`13:10: gate "lint" resources memory must be a size`,
		`15:2: unknown field "extra" in gate file`,
	})
	for _, tc := range []struct{ src, want string }{
		{"[[gate]]\nname = \"x\"\ncommand = [\"x\"\n", "4:1: invalid TOML: expected character ]"},    // unclosed array
		{"[[gate]]\nname = \"x\"\nname = \"y\"\n", "3:1: invalid TOML: key name is already defined"}, // duplicate key
		{"[[gate]]\nname = \"x\"\ncommand = [\"x\"]\ntimeout = 5m\n", "4:12: invalid TOML"},          // bare word
	} {
		_, _, err := ParseFile("g.toml", []byte(tc.src), OriginProject)
		if err == nil || !strings.Contains(err.Error(), "g.toml:"+tc.want) {
			t.Errorf("TOML error for %q = %v, want g.toml:%s", tc.src, err, tc.want)
		}
	}
	// The gates key of the YAML shapes works in TOML too.
	gs, _, err := ParseFile("g.toml", []byte("[gates.vet]\ncommand = [\"go\", \"vet\"]\n"), OriginUser)
	if err != nil || len(gs) != 1 || gs[0].Name != "vet" || gs[0].Source.Line != 1 {
		t.Errorf("[gates.vet] = %+v, %v", gs, err)
	}
	// And [[gate]] is TOML-only.
	if _, _, err := ParseFile("g.yaml", []byte("gate: []\n"), OriginUser); err == nil || !strings.Contains(err.Error(), `did you mean "gates"`) {
		t.Errorf("gate: in YAML = %v", err)
	}
}

// The ready-made sets in configs/gates load cleanly, together, with no
// warnings, and their gates resolve.
func TestConfigsGatesLoad(t *testing.T) {
	dir := filepath.Join("..", "..", "configs", "gates")
	res, err := Load(Options{BuiltinDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 3 || len(res.Warnings) != 0 {
		t.Errorf("files %v, warnings %v", res.Files, res.Warnings)
	}
	for _, prefix := range []string{"go-", "py-", "node-"} {
		var names []string
		for _, n := range res.Set.Names() {
			if strings.HasPrefix(n, prefix) {
				names = append(names, n)
			}
		}
		if len(names) < 6 {
			t.Errorf("%s gates: %v", prefix, names)
		}
		if _, err := Resolve(res.Set, names); err != nil {
			t.Errorf("%s: %v", prefix, err)
		}
	}
	for _, g := range res.Set.Gates() {
		if g.AllowShell {
			t.Errorf("%s allows a shell", g.Source)
		}
		if g.Description == "" {
			t.Errorf("%s has no description", g.Source)
		}
	}
	cov, _ := res.Set.Get("go-coverage")
	if cov.Env["COVERAGE_MIN"] != "80" {
		t.Errorf("go-coverage threshold is not a parameter: %+v", cov.Env)
	}
	order, _ := Resolve(res.Set, []string{"go-coverage"})
	if !reflect.DeepEqual(order, []string{"go-build", "go-test", "go-coverage"}) {
		t.Errorf("go-coverage closure = %v", order)
	}
}
