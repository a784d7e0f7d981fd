package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Tests of the process sandbox's protections (SBX-11…SBX-15). Those that
// switch users need root; elsewhere they skip, or fail under CI=true.

// secretValue is planted in the runner's environment by the tests that
// check a command cannot read it.
const secretValue = "runner-secret-9f1c2e7a"

// needRoot skips the test unless it runs as root (fails under CI=true).
func needRoot(t *testing.T) {
	t.Helper()
	if err := CanSwitchUser(); err != nil {
		testkit.Missing(t, "root (to switch users): "+err.Error())
	}
}

// reachableDir returns a new directory every user can enter (t.TempDir's
// parents are private to the test's user).
func reachableDir(t *testing.T) string {
	t.Helper()
	dir := newWorkspace(t)
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mirrorAndWorktree lays out a runner's data as package workspace does: a
// bare mirror holding a repository's commit, and a job's worktree of it,
// both made by the runner (the test, as root).
func mirrorAndWorktree(t *testing.T, root string) (mirror, worktree string) {
	t.Helper()
	src, commit := testkit.Repo(t, map[string]string{"main.go": "package main\n", "README": "hello\n"})
	mirror = filepath.Join(root, "mirrors", "repo.git")
	worktree = filepath.Join(root, "jobs", "job-1")
	if err := os.MkdirAll(filepath.Join(root, "jobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.Git(t, "", "init", "--quiet", "--bare", mirror)
	testkit.Git(t, "", "-C", mirror, "fetch", "--quiet", src, "+refs/heads/*:refs/heads/*")
	testkit.Git(t, "", "-C", mirror, "worktree", "add", "--quiet", "--detach", worktree, commit)
	return mirror, worktree
}

// TestProcessRunAs: as root with RunAs, the command runs as the sandbox
// user with no supplementary group; it writes its workspace, its HOME and
// the cache, and reads the repository with git, but cannot write the
// mirror (its config, hooks, objects), the worktree's metadata, or read
// the runner's environment; later runs and the runner's own git still work
// (SBX-11, SBX-13).
func TestProcessRunAs(t *testing.T) {
	needRoot(t)
	t.Setenv("SUPERVISOR_TEST_SECRET", secretValue)
	root := reachableDir(t)
	mirror, ws := mirrorAndWorktree(t, root)
	cache := filepath.Join(root, "cache")
	u := RunAs{UID: 65534, GID: 65534}
	p := NewProcess(ProcessOptions{ScratchRoot: reachableDir(t), CacheDir: cache, RunAs: &u})

	steps := []struct {
		name, script string
		ok           bool   // exit 0 expected
		out          string // expected in stdout, if set
	}{
		{"identity", `id -u; id -g; id -G`, true, "65534\n65534\n65534\n"},
		{"write workspace", `echo new > created.txt && echo edit >> README && mkdir -p sub/dir && touch sub/dir/f`, true, ""},
		{"write home and cache", `touch "$HOME/x" "$TMPDIR/y" && mkdir -p "$XDG_CACHE_HOME/go-build"`, true, ""},
		{"git status", `git status --porcelain`, true, "?? created.txt"},
		{"git diff", `git diff --stat`, true, "README"},
		{"git config", `git config core.repositoryformatversion 99`, false, ""},
		{"mirror config by path", `echo '[core] repositoryformatversion = 99' >> ` + mirror + `/config`, false, ""},
		{"mirror hook", `echo 'exit 1' > ` + mirror + `/hooks/pre-commit`, false, ""},
		{"mirror objects", `touch ` + mirror + `/objects/x`, false, ""},
		{"mirror refs", `git update-ref refs/heads/evil HEAD`, false, ""},
		{"worktree metadata", `git add created.txt`, false, ""},
		{"runner environment", `cat /proc/$PPID/environ`, false, ""},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			res := runOK(t, p, Spec{Argv: sh(st.script), Workspace: ws, Timeout: 30 * time.Second})
			if (res.ExitCode == 0) != st.ok {
				t.Fatalf("exit %d (want success %v): stdout %q stderr %q", res.ExitCode, st.ok, res.Stdout, res.Stderr)
			}
			if !strings.Contains(string(res.Stdout), st.out) {
				t.Errorf("stdout %q, want it to contain %q", res.Stdout, st.out)
			}
			if strings.Contains(string(res.Stdout)+string(res.Stderr), secretValue) {
				t.Errorf("the runner's secret leaked: %q %q", res.Stdout, res.Stderr)
			}
		})
	}
	if v := testkit.Git(t, "", "-C", mirror, "config", "core.repositoryformatversion"); v != "0" {
		t.Errorf("mirror core.repositoryformatversion = %q, want 0", v)
	}
	if out := testkit.Git(t, "", "-C", mirror, "for-each-ref", "--format=%(refname)"); strings.Contains(out, "evil") {
		t.Errorf("mirror refs changed: %s", out)
	}
	// The runner's own git sees the command's work, and can clean up.
	if out := testkit.Git(t, ws, "status", "--porcelain"); !strings.Contains(out, "created.txt") || !strings.Contains(out, "sub/") {
		t.Errorf("runner's git status: %q", out)
	}
	if err := os.RemoveAll(ws); err != nil {
		t.Errorf("removing the workspace: %v", err)
	}
}

// TestProcessRunAsUnreachable: a workspace the sandbox user cannot enter
// is a start error naming the directory in the way; nothing runs.
func TestProcessRunAsUnreachable(t *testing.T) {
	needRoot(t)
	private := filepath.Join(reachableDir(t), "private")
	ws := filepath.Join(private, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	p := NewProcess(ProcessOptions{ScratchRoot: reachableDir(t), RunAs: &DefaultRunAs})
	_, err := p.Run(context.Background(), Spec{Argv: []string{"touch", "ran"}, Workspace: ws})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), private) {
		t.Fatalf("err = %v, want ErrStart naming %s", err, private)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the command ran")
	}
}

// TestRunKillsEscapedDescendants: processes a run started that left its
// process group — setsid children, double-forked daemons — are killed when
// the run ends, times out or is cancelled (SBX-12).
func TestRunKillsEscapedDescendants(t *testing.T) {
	escape := `setsid sleep 1000 & echo $! > setsid.pid; ` +
		`(setsid sh -c 'sleep 1000 & echo $! > daemon.pid; sleep 1000' &) ; ` +
		`while [ ! -s daemon.pid ]; do sleep 0.05; done; `
	tests := []struct {
		name    string
		script  string
		timeout time.Duration
		cancel  bool
		runAs   bool
	}{
		{"command exits", escape + `echo done`, 0, false, false},
		{"timeout", escape + `sleep 1000`, 500 * time.Millisecond, false, false},
		{"cancel", escape + `sleep 1000`, 0, true, false},
		{"command exits, sandbox user", escape + `echo done`, 0, false, true},
		{"timeout, sandbox user", escape + `sleep 1000`, 500 * time.Millisecond, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := ProcessOptions{ScratchRoot: t.TempDir()}
			ws := newWorkspace(t)
			if tt.runAs {
				needRoot(t)
				opts.RunAs = &DefaultRunAs
				opts.ScratchRoot = reachableDir(t)
				ws = reachableDir(t)
			}
			p := NewProcess(opts)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tt.cancel {
				go func() {
					testkit.WaitFor(t, 10*time.Second, 20*time.Millisecond, "daemon started", func() bool {
						data, err := os.ReadFile(filepath.Join(ws, "daemon.pid"))
						return err == nil && len(data) > 0
					})
					cancel()
				}()
			}
			res, err := p.Run(ctx, Spec{Argv: sh(tt.script), Workspace: ws, Timeout: tt.timeout, KillGrace: shortGrace})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tt.timeout > 0 && !res.TimedOut {
				t.Errorf("result %+v, want timed out", res)
			}
			for _, f := range []string{"setsid.pid", "daemon.pid"} {
				assertGone(t, readPid(t, filepath.Join(ws, f)))
			}
		})
	}
}

// The test binary run with helperEnv set is a runner (runnerHelper) that
// runs one command in the process sandbox and reports its output.
const (
	helperEnv       = "SUPERVISOR_TEST_SANDBOX_RUNNER"
	helperScriptEnv = "SUPERVISOR_TEST_SANDBOX_SCRIPT"
	helperWSEnv     = "SUPERVISOR_TEST_SANDBOX_WS"
	helperOwnerEnv  = "SUPERVISOR_TEST_SANDBOX_OWNER"
)

// runnerHelper is the body of the helper runner (see TestMain).
func runnerHelper() int {
	p := NewProcess(ProcessOptions{ScratchRoot: os.Getenv(helperWSEnv), Owner: os.Getenv(helperOwnerEnv)})
	res, err := p.Run(context.Background(), Spec{Argv: sh(os.Getenv(helperScriptEnv)), Workspace: os.Getenv(helperWSEnv), Timeout: time.Minute})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 2
	}
	os.Stdout.Write(res.Stdout)
	os.Stderr.Write(res.Stderr)
	return res.ExitCode
}

// helperCommand returns the helper runner running script in ws, as the
// test's user or, with cred, as another (the test binary is copied where
// that user can run it).
func helperCommand(t *testing.T, ws, script string, cred *syscall.Credential) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		bin := filepath.Join(reachableDir(t), "runner")
		data, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		self = bin
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperScriptEnv+"="+script, helperWSEnv+"="+ws,
		"SUPERVISOR_TEST_SECRET="+secretValue)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// TestRunnerEnvironmentHidden: a command running as the runner's own uid
// (a runner that is not root, as in the Compose images) cannot read the
// runner's environment, nor that of any ancestor it walks up to that is
// not its own uid's (SBX-13).
func TestRunnerEnvironmentHidden(t *testing.T) {
	needRoot(t) // to start the runner as an unprivileged user
	const uid = 10001
	ws := reachableDir(t)
	if err := os.Chown(ws, uid, uid); err != nil {
		t.Fatal(err)
	}
	script := `p=$PPID; while [ "$p" -gt 1 ]; do echo "pid $p"; cat /proc/$p/environ | tr '\0' '\n'; ` +
		`p=$(cut -d' ' -f4 /proc/$p/stat); done; true`
	cmd := helperCommand(t, ws, script, &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper runner: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "pid "+strconv.Itoa(cmd.Process.Pid)+"\n") || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("the command did not walk up to the runner:\n%s", out)
	}
	if strings.Contains(string(out), secretValue) {
		t.Errorf("the runner's secret leaked to the command:\n%s", out)
	}
}

// TestRunParentDeath: when the runner is killed with SIGKILL, the command
// it was running gets SIGKILL too (SBX-14).
func TestRunParentDeath(t *testing.T) {
	ws := newWorkspace(t)
	cmd := helperCommand(t, ws, `echo $$ > cmd.pid; exec sleep 1000`, nil)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(ws, "cmd.pid")
	testkit.WaitFor(t, 10*time.Second, 20*time.Millisecond, "the command started", func() bool {
		data, err := os.ReadFile(pidFile)
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	pid := readPid(t, pidFile)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	assertGone(t, pid)
	// Reap it if it was re-parented to this process (a subreaper).
	_, _ = syscall.Wait4(pid, nil, syscall.WNOHANG, nil)
}

// TestKillLeftovers: the command's own children survive a runner killed
// with SIGKILL (the parent-death signal reaches the command only); the
// next runner of the same identity kills them; a runner of another
// identity, or one while the first still lives, leaves them alone
// (SBX-14).
func TestKillLeftovers(t *testing.T) {
	ws := newWorkspace(t)
	owner := "test-runner-" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(ws)
	NewProcess(ProcessOptions{}) // this process is a subreaper: the orphan comes here
	cmd := helperCommand(t, ws, `sleep 1000 & echo $! > child.pid; echo $$ > cmd.pid; exec sleep 1000`, nil)
	cmd.Env = append(cmd.Env, helperOwnerEnv+"="+owner)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, 20*time.Millisecond, "the command started", func() bool {
		data, err := os.ReadFile(filepath.Join(ws, "cmd.pid"))
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	child := readPid(t, filepath.Join(ws, "child.pid"))
	// While that runner lives, its runs are not leftovers, even for a
	// runner of the same identity.
	if n := NewProcess(ProcessOptions{Owner: owner}).KillLeftovers(); n != 0 {
		t.Errorf("KillLeftovers killed %d processes of a live runner", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	assertGone(t, readPid(t, filepath.Join(ws, "cmd.pid")))
	if _, err := os.Stat("/proc/" + strconv.Itoa(child)); err != nil {
		t.Fatalf("the command's child %d died with the runner; the test needs it alive", child)
	}
	if n := NewProcess(ProcessOptions{Owner: owner + "-other"}).KillLeftovers(); n != 0 {
		t.Errorf("a runner of another identity killed %d processes", n)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(child)); err != nil {
		t.Fatalf("the command's child %d was killed by another runner", child)
	}
	if n := NewProcess(ProcessOptions{Owner: owner}).KillLeftovers(); n != 1 {
		t.Errorf("KillLeftovers killed %d processes, want 1", n)
	}
	assertGone(t, child)
	_, _ = syscall.Wait4(child, nil, syscall.WNOHANG, nil)
}

func TestParseRunAs(t *testing.T) {
	valid := map[string]RunAs{
		"65534:65534": {65534, 65534},
		"1234":        {1234, 1234},
		" 1000:2000 ": {1000, 2000},
		"nobody":      {65534, 65534},
	}
	for in, want := range valid {
		if got, err := ParseRunAs(in); err != nil || got != want {
			t.Errorf("ParseRunAs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0:0", "1000:0", "root", "1000:x", "x:1000", "no-such-user-supervisor"} {
		if got, err := ParseRunAs(in); err == nil {
			t.Errorf("ParseRunAs(%q) = %v, want an error", in, got)
		}
	}
}

func TestRunAsCanReach(t *testing.T) {
	open := reachableDir(t)
	private := filepath.Join(open, "private")
	if err := os.MkdirAll(filepath.Join(private, "in"), 0o700); err != nil {
		t.Fatal(err)
	}
	u := RunAs{UID: 4242, GID: 4242}
	if err := u.CanReach(open); err != nil {
		t.Errorf("CanReach(%s): %v", open, err)
	}
	err := u.CanReach(filepath.Join(private, "in"))
	if err == nil || !strings.Contains(err.Error(), private+" ") {
		t.Errorf("CanReach below a private directory: %v, want an error naming %s", err, private)
	}
	if self := (RunAs{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}); self.CanReach(filepath.Join(private, "in")) != nil {
		t.Errorf("the owner cannot reach its own directory")
	}
}
