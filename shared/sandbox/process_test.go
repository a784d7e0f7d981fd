package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Tests use /bin/sh as the program under test to build scenarios; the
// sandbox itself never adds a shell.

const (
	shortTimeout = 200 * time.Millisecond
	shortGrace   = 200 * time.Millisecond
)

// newWorkspace returns an absolute, symlink-free workspace directory.
func newWorkspace(t *testing.T) string {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// runOK runs spec and fails the test on an error.
func runOK(t *testing.T, p *Process, spec Spec) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.Run(ctx, spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Argv, err)
	}
	return res
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// readPid reads a pid written by a test script.
func readPid(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

// assertGone fails unless pid has exited (or is a zombie awaiting its
// reaper) within a short while.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return // no such process
		}
		// The state follows the parenthesised command name.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcessName(t *testing.T) {
	if got := NewProcess(ProcessOptions{}).Name(); got != "process" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	for _, code := range []int{0, 1, 75} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			before := time.Now()
			res := runOK(t, p, Spec{Argv: sh("exit " + strconv.Itoa(code)), Workspace: ws})
			if res.ExitCode != code || res.TimedOut || res.Signal != "" {
				t.Fatalf("result = %+v, want exit %d", res, code)
			}
			if res.StartedAt.Before(before) || res.Duration <= 0 || res.Duration > 5*time.Second {
				t.Fatalf("StartedAt %v (run began %v), Duration %v", res.StartedAt, before, res.Duration)
			}
		})
	}
}

func TestRunTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	// The background sleeper inherits stdout, so Run must not wait for EOF.
	script := `sleep 30 & echo $! > grandchild.pid; echo started; wait`
	start := time.Now()
	res := runOK(t, p, Spec{Argv: sh(script), Workspace: ws, Timeout: shortTimeout, KillGrace: shortGrace})
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Fatalf("Run took %v", elapsed)
	}
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGTERM" {
		t.Fatalf("result = %+v, want timed out by SIGTERM", res)
	}
	if got := string(res.Stdout); got != "started\n" {
		t.Errorf("stdout = %q", got)
	}
	assertGone(t, readPid(t, filepath.Join(ws, "grandchild.pid")))
}

func TestRunSIGKILLAfterGrace(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	// The ignored SIGTERM disposition is inherited by the sleeper too.
	script := `trap "" TERM; sleep 30 & echo $! > grandchild.pid; wait`
	res := runOK(t, p, Spec{Argv: sh(script), Workspace: ws, Timeout: shortTimeout, KillGrace: shortGrace})
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGKILL" {
		t.Fatalf("result = %+v, want timed out by SIGKILL", res)
	}
	if res.Duration < shortTimeout+shortGrace {
		t.Errorf("Duration = %v, want at least timeout + grace", res.Duration)
	}
	assertGone(t, readPid(t, filepath.Join(ws, "grandchild.pid")))
}

func TestRunContextCancel(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(shortTimeout, cancel)
	res, err := p.Run(ctx, Spec{Argv: sh(`sleep 30 & echo $! > bg.pid; wait`), Workspace: ws, KillGrace: shortGrace})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGTERM" {
		t.Fatalf("result = %+v, want killed by SIGTERM, not timed out", res)
	}
	assertGone(t, readPid(t, filepath.Join(ws, "bg.pid")))

	_, err = p.Run(ctx, Spec{Argv: []string{"true"}, Workspace: ws})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with cancelled context: err = %v, want context.Canceled", err)
	}
}

func TestRunNoLeftoverProcesses(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	start := time.Now()
	res := runOK(t, p, Spec{Argv: sh(`sleep 30 & echo $! > bg.pid; echo done`), Workspace: ws})
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Fatalf("Run took %v", elapsed)
	}
	if res.ExitCode != 0 || res.Signal != "" || string(res.Stdout) != "done\n" {
		t.Fatalf("result = %+v", res)
	}
	assertGone(t, readPid(t, filepath.Join(ws, "bg.pid")))
}

func TestRunOutputTail(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	// 70000 bytes of 'a' then "END", on the chosen stream.
	big := `head -c 70000 /dev/zero | tr '\0' a; printf END`
	tests := []struct {
		name       string
		script     string
		limit      int
		wantOutLen int
		wantErrLen int
		outTrunc   bool
		errTrunc   bool
	}{
		{"small", `printf out; printf err >&2`, 0, 3, 3, false, false},
		{"stdout over default", big, 0, DefaultOutputLimit, 0, true, false},
		{"stderr over default", "{ " + big + "; } >&2", 0, 0, DefaultOutputLimit, false, true},
		{"custom limit", `printf 0123456789; printf abcdefghij >&2`, 4, 4, 4, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runOK(t, p, Spec{Argv: sh(tt.script), Workspace: ws, OutputLimit: tt.limit})
			if res.ExitCode != 0 {
				t.Fatalf("exit %d, stderr %q", res.ExitCode, res.Stderr)
			}
			if len(res.Stdout) != tt.wantOutLen || res.StdoutTruncated != tt.outTrunc {
				t.Errorf("stdout: %d bytes, truncated %v; want %d, %v", len(res.Stdout), res.StdoutTruncated, tt.wantOutLen, tt.outTrunc)
			}
			if len(res.Stderr) != tt.wantErrLen || res.StderrTruncated != tt.errTrunc {
				t.Errorf("stderr: %d bytes, truncated %v; want %d, %v", len(res.Stderr), res.StderrTruncated, tt.wantErrLen, tt.errTrunc)
			}
			for _, out := range [][]byte{res.Stdout, res.Stderr} {
				if len(out) > 100 && !bytes.HasSuffix(out, []byte("aaaEND")) {
					t.Errorf("output does not keep the tail: ends with %q", out[len(out)-10:])
				}
			}
		})
	}
	res := runOK(t, p, Spec{Argv: sh(`printf 0123456789; printf abcdefghij >&2`), Workspace: ws, OutputLimit: 4})
	if string(res.Stdout) != "6789" || string(res.Stderr) != "ghij" {
		t.Errorf("tails = %q, %q; want 6789, ghij", res.Stdout, res.Stderr)
	}
}

func TestRunTeeGetsFullOutput(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	var out, errOut bytes.Buffer
	res := runOK(t, p, Spec{
		Argv:        sh(`i=0; while [ $i -lt 100 ]; do echo "line $i"; echo "err $i" >&2; i=$((i+1)); done`),
		Workspace:   ws,
		OutputLimit: 16,
		Stdout:      &out,
		Stderr:      &errOut,
	})
	var wantOut, wantErr strings.Builder
	for i := range 100 {
		wantOut.WriteString("line " + strconv.Itoa(i) + "\n")
		wantErr.WriteString("err " + strconv.Itoa(i) + "\n")
	}
	if out.String() != wantOut.String() || errOut.String() != wantErr.String() {
		t.Fatalf("tee got %d/%d bytes, want %d/%d", out.Len(), errOut.Len(), wantOut.Len(), wantErr.Len())
	}
	if !res.StdoutTruncated || len(res.Stdout) != 16 || !strings.HasSuffix(wantOut.String(), string(res.Stdout)) {
		t.Fatalf("stdout tail = %q, truncated %v", res.Stdout, res.StdoutTruncated)
	}

	// One writer for both streams is safe (run with -race).
	var both bytes.Buffer
	runOK(t, p, Spec{Argv: sh(`echo a; echo b >&2; echo c`), Workspace: ws, Stdout: &both, Stderr: &both})
	if both.Len() != 6 {
		t.Fatalf("shared writer got %q", both.String())
	}
}

func TestRunStdin(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	tests := []struct {
		name  string
		stdin *strings.Reader
		want  string
	}{
		{"reader", strings.NewReader("hello\nworld\n"), "hello\nworld\n"},
		{"nil is /dev/null", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Argv: []string{"cat"}, Workspace: ws, Timeout: 5 * time.Second}
			if tt.stdin != nil {
				spec.Stdin = tt.stdin
			}
			res := runOK(t, p, spec)
			if res.ExitCode != 0 || string(res.Stdout) != tt.want {
				t.Fatalf("result = %+v, stdout %q; want %q", res, res.Stdout, tt.want)
			}
		})
	}
}

// envOf runs env in the sandbox and returns the child's environment.
func envOf(t *testing.T, p *Process, ws string, extra map[string]string) map[string]string {
	t.Helper()
	// Touching $HOME proves the scratch directory exists and is writable.
	res := runOK(t, p, Spec{Argv: sh(`touch "$HOME/probe" && exec env`), Workspace: ws, Env: extra})
	if res.ExitCode != 0 {
		t.Fatalf("env failed: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(res.Stdout)) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		env[k] = v
	}
	return env
}

func TestRunEnvironment(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "host-secret-must-not-leak")
	t.Setenv("LD_PRELOAD", "/host/evil.so")
	scratchRoot := t.TempDir()
	cacheDir := filepath.Join(t.TempDir(), "cache")
	p := NewProcess(ProcessOptions{ScratchRoot: scratchRoot, CacheDir: cacheDir})
	ws := newWorkspace(t)

	env := envOf(t, p, ws, nil)
	home := env["HOME"]
	want := map[string]string{
		"PATH":           BasePath,
		"HOME":           home,
		"TMPDIR":         home,
		"LANG":           "C.UTF-8",
		"TERM":           "dumb",
		"USER":           "supervisor",
		"XDG_CACHE_HOME": cacheDir,
	}
	// The run's marker is a fresh 128-bit hex value (SBX-12).
	if m := env[RunMarkerEnv]; len(m) != 32 || strings.Trim(m, "0123456789abcdef") != "" {
		t.Errorf("%s = %q, want 32 hex digits", RunMarkerEnv, m)
	}
	marker := env[RunMarkerEnv]
	// sh may export PWD/SHLVL/_ to env; anything else is a leak.
	for _, k := range []string{"PWD", "SHLVL", "_", "OLDPWD", RunMarkerEnv} {
		delete(env, k)
	}
	if len(env) != len(want) {
		t.Errorf("environment = %v, want exactly %v", env, want)
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if filepath.Dir(home) != scratchRoot {
		t.Errorf("HOME %q is not under the scratch root %q", home, scratchRoot)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Errorf("scratch HOME %q not removed after the run (stat: %v)", home, err)
	}
	if fi, err := os.Stat(cacheDir); err != nil || !fi.IsDir() {
		t.Errorf("cache directory not created: %v", err)
	}

	// Each run gets its own scratch directory and marker.
	again := envOf(t, p, ws, nil)
	if again["HOME"] == home {
		t.Errorf("HOME reused between runs: %q", again["HOME"])
	}
	if again[RunMarkerEnv] == marker {
		t.Errorf("%s reused between runs: %q", RunMarkerEnv, marker)
	}
}

// TestRunWorkspaceEnv: WorkspaceEnv is the workspace's host path and
// overrides Env; a name the base environment reserves is refused.
func TestRunWorkspaceEnv(t *testing.T) {
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	res := runOK(t, p, Spec{Argv: []string{"env"}, Workspace: ws, Env: map[string]string{"REPO": "/elsewhere"}, WorkspaceEnv: "REPO"})
	if !strings.Contains("\n"+string(res.Stdout), "\nREPO="+filepath.Clean(ws)+"\n") {
		t.Errorf("environment:\n%s\nwant REPO=%s", res.Stdout, ws)
	}
	for _, name := range []string{"PATH", "LD_PRELOAD", "A=B"} {
		_, err := p.Run(context.Background(), Spec{Argv: []string{"true"}, Workspace: ws, WorkspaceEnv: name})
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("WorkspaceEnv %q: err %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestRunEnvDenylist(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir(), Path: "/opt/tools/bin:relative/dir:" + BasePath})
	ws := newWorkspace(t)
	env := envOf(t, p, ws, map[string]string{
		"PATH":                   "/evil",
		"Path":                   "/evil",
		"HOME":                   "/evil",
		"home":                   "/evil",
		"USER":                   "root",
		"LD_PRELOAD":             "/evil.so",
		"ld_library_path":        "/evil",
		"LD_AUDIT":               "/evil.so",
		"PYTHONPATH":             "/evil",
		"SUPERVISOR_WORKFLOW_ID": "wf-1",
		"GOFLAGS":                "-mod=mod",
		"LANG":                   "en_US.UTF-8",
	})
	for _, k := range []string{"Path", "home", "LD_PRELOAD", "ld_library_path", "LD_AUDIT", "PYTHONPATH"} {
		if v, ok := env[k]; ok {
			t.Errorf("denylisted %s passed through as %q", k, v)
		}
	}
	wantPath := "/opt/tools/bin:" + BasePath
	if env["PATH"] != wantPath || env["USER"] != "supervisor" || !strings.HasPrefix(env["HOME"], "/") || env["HOME"] == "/evil" {
		t.Errorf("base overridden: PATH=%q HOME=%q USER=%q", env["PATH"], env["HOME"], env["USER"])
	}
	for k, v := range map[string]string{"SUPERVISOR_WORKFLOW_ID": "wf-1", "GOFLAGS": "-mod=mod", "LANG": "en_US.UTF-8"} {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

func TestRunWorkingDir(t *testing.T) {
	t.Parallel()
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	outside := newWorkspace(t)
	for _, d := range []string{"sub/deep", "real"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(ws, "real"), filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "sub", "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	valid := []struct{ dir, want string }{
		{"", ws},
		{".", ws},
		{"sub", filepath.Join(ws, "sub")},
		{"sub/deep", filepath.Join(ws, "sub", "deep")},
		{"sub/../real", filepath.Join(ws, "real")},
	}
	for _, tt := range valid {
		t.Run("valid "+tt.dir, func(t *testing.T) {
			res := runOK(t, p, Spec{Argv: []string{"pwd"}, Workspace: ws, WorkingDir: tt.dir})
			if got := strings.TrimSpace(string(res.Stdout)); got != tt.want {
				t.Fatalf("pwd = %q, want %q", got, tt.want)
			}
		})
	}

	invalid := []struct {
		name string
		spec Spec
	}{
		{"dotdot", Spec{WorkingDir: ".."}},
		{"dotdot below", Spec{WorkingDir: "../" + filepath.Base(outside)}},
		{"dotdot after descent", Spec{WorkingDir: "sub/../../x"}},
		{"absolute", Spec{WorkingDir: outside}},
		{"absolute inside", Spec{WorkingDir: filepath.Join(ws, "sub")}},
		{"missing", Spec{WorkingDir: "nope"}},
		{"not a directory", Spec{WorkingDir: "file"}},
		{"symlink", Spec{WorkingDir: "link"}},
		{"symlink component", Spec{WorkingDir: "sub/out"}},
		{"relative workspace", Spec{Workspace: "relative/ws"}},
		{"missing workspace", Spec{Workspace: filepath.Join(ws, "missing")}},
		{"workspace is a file", Spec{Workspace: filepath.Join(ws, "file")}},
		{"empty argv", Spec{Argv: []string{}}},
		{"empty argv0", Spec{Argv: []string{""}}},
		{"NUL in argv", Spec{Argv: []string{"echo", "a\x00b"}}},
		{"bad env name", Spec{Env: map[string]string{"A=B": "c"}}},
		{"negative timeout", Spec{Timeout: -time.Second}},
	}
	for _, tt := range invalid {
		t.Run("invalid "+tt.name, func(t *testing.T) {
			spec := tt.spec
			if spec.Argv == nil {
				spec.Argv = []string{"pwd"}
			}
			if spec.Workspace == "" {
				spec.Workspace = ws
			}
			_, err := p.Run(context.Background(), spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidSpec", err)
			}
		})
	}
}

func TestRunCommandResolution(t *testing.T) {
	// Not parallel: modifies the host PATH to prove it is not consulted.
	ws := newWorkspace(t)
	tools := newWorkspace(t)
	script := "#!/bin/sh\necho tool ran\n"
	if err := os.WriteFile(filepath.Join(tools, "supervisor-test-tool"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "bin", "local.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "bin", "noexec.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", tools+string(filepath.ListSeparator)+os.Getenv("PATH"))

	base := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	withTools := NewProcess(ProcessOptions{ScratchRoot: t.TempDir(), Path: tools + ":" + BasePath})

	notStarted := []struct {
		name string
		p    *Process
		spec Spec
	}{
		{"not in PATH", base, Spec{Argv: []string{"no-such-command-supervisor"}}},
		{"only in host PATH", base, Spec{Argv: []string{"supervisor-test-tool"}}},
		{"missing absolute", base, Spec{Argv: []string{"/nonexistent/bin/tool"}}},
		{"missing relative", base, Spec{Argv: []string{"./nope"}}},
		{"not executable", base, Spec{Argv: []string{"./noexec.sh"}, WorkingDir: "bin"}},
		{"directory", base, Spec{Argv: []string{"./bin"}}},
	}
	for _, tt := range notStarted {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Workspace = ws
			_, err := tt.p.Run(context.Background(), spec)
			if !errors.Is(err, ErrStart) {
				t.Fatalf("err = %v, want ErrStart", err)
			}
		})
	}

	started := []struct {
		name string
		p    *Process
		spec Spec
	}{
		{"operator PATH", withTools, Spec{Argv: []string{"supervisor-test-tool"}}},
		{"relative to working dir", base, Spec{Argv: []string{"./local.sh"}, WorkingDir: "bin"}},
		{"relative with subdir", base, Spec{Argv: []string{"bin/local.sh"}}},
		{"absolute", base, Spec{Argv: []string{filepath.Join(ws, "bin", "local.sh")}}},
	}
	for _, tt := range started {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Workspace = ws
			res := runOK(t, tt.p, spec)
			if res.ExitCode != 0 || string(res.Stdout) != "tool ran\n" {
				t.Fatalf("result = %+v, stdout %q, stderr %q", res, res.Stdout, res.Stderr)
			}
		})
	}
}

// Files: the process sandbox gives a host file's own path in its variable;
// a bad file is an invalid spec, and nothing runs.
func TestRunFiles(t *testing.T) {
	p := NewProcess(ProcessOptions{ScratchRoot: t.TempDir()})
	ws := newWorkspace(t)
	file := filepath.Join(t.TempDir(), "feedback.json")
	if err := os.WriteFile(file, []byte("from the host\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	res := runOK(t, p, Spec{Argv: sh(`cat "$FEEDBACK"`), Workspace: ws, Files: []File{{HostPath: file, Env: "FEEDBACK"}}})
	if res.ExitCode != 0 || string(res.Stdout) != "from the host\n" {
		t.Errorf("cat $FEEDBACK: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, f := range []File{{HostPath: "rel.json", Env: "FEEDBACK"}, {HostPath: file, Env: "PATH"}, {HostPath: file, Env: "A=B"}} {
		_, err := p.Run(context.Background(), Spec{Argv: []string{"true"}, Workspace: ws, Files: []File{f}})
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("file %+v: %v, want ErrInvalidSpec", f, err)
		}
	}
}
