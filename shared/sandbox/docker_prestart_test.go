package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Tests of containers started ahead of their job (PERF-63), against the
// real engine.

// prestartTest returns a Docker sandbox with Prestart and the probe image;
// the sandbox is closed, and no container of it may be left, when the
// test ends.
func prestartTest(t *testing.T, opts DockerOptions) (*Docker, string) {
	t.Helper()
	opts.Prestart, opts.Helper = true, sandboxtest.Helper(t)
	if opts.Host == "" {
		opts.Host = fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	}
	if opts.Caches.Dir == "" {
		opts.Caches.Dir = t.TempDir()
	}
	d, img := dockerTest(t, opts)
	// Registered after dockerTest's check of what is left, so it runs
	// before it.
	t.Cleanup(func() { d.Close() })
	return d, img
}

// runPrestarted runs spec after waiting for the workspace's prestarted
// container, and fails the test unless the command ran in one.
func runPrestarted(t *testing.T, d *Docker, spec Spec) Result {
	t.Helper()
	waitPrestarted(t, d, spec.Workspace)
	res := runDocker(t, d, spec)
	if !res.Prestarted {
		t.Fatalf("Run(%q) did not run in a prestarted container: %+v", spec.Argv, res)
	}
	return res
}

// waitPrestarted waits until the workspace's next prestarted container
// (the one its next run takes) is up.
func waitPrestarted(t *testing.T, d *Docker, ws string) {
	t.Helper()
	ic := nextIdle(d, ws)
	if ic == nil {
		t.Fatalf("no container is being started ahead for %s", ws)
	}
	waitReady(t, ic)
}

// nextIdle returns the container the workspace's next run would take
// (nil: none).
func nextIdle(d *Docker, ws string) *idleContainer {
	q := idleOf(d, ws)
	if len(q) == 0 {
		return nil
	}
	return q[0]
}

// idleOf returns a copy of the workspace's idle containers, oldest first.
func idleOf(d *Docker, ws string) []*idleContainer {
	d.pre.mu.Lock()
	defer d.pre.mu.Unlock()
	return slices.Clone(d.pre.idle[filepath.Clean(ws)])
}

// waitReady waits until the container started ahead ic is up, and fails
// the test if it could not be started.
func waitReady(t *testing.T, ic *idleContainer) {
	t.Helper()
	select {
	case <-ic.ready:
	case <-time.After(time.Minute):
		t.Fatal("the prestarted container did not come up within a minute")
	}
	if ic.err != nil {
		t.Fatalf("prestart: %v", ic.err)
	}
}

// envVar returns the value of name in a probe env output.
func envVar(out []byte, name string) (string, bool) {
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestDockerPrestartFreshContainerPerJob: each run after the first in a
// workspace runs in a container started ahead of it, and that container is
// its own: another container, none of the last job's /tmp,
// environment or processes, while the workspace is the same directory.
func TestDockerPrestartFreshContainerPerJob(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	ws := newWorkspace(t)
	spec := func(env map[string]string, args ...string) Spec {
		return Spec{Argv: append([]string{"probe"}, args...), Workspace: ws, Image: img, Env: env}
	}

	first := runDocker(t, d, spec(map[string]string{"JOB": "one"}, "env"))
	if first.Prestarted || first.ExitCode != 0 {
		t.Fatalf("first run: %+v", first)
	}

	// The second job leaves a file in /tmp and in the workspace, and a
	// process that holds its output open: the run ends once the command
	// has, and nothing of it runs on once Run has returned.
	res := runPrestarted(t, d, spec(nil, "write", "/tmp/left", filepath.Join(ContainerWorkspace, "kept")))
	if res.ExitCode != 0 {
		t.Fatalf("write: %+v", res)
	}
	waitPrestarted(t, d, ws)
	id := nextIdle(d, ws).id
	res = runPrestarted(t, d, spec(nil, "spawn", "60s"))
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "spawned") {
		t.Fatalf("spawn: %+v", res)
	}
	// Its container may still be there (removed in the background), but
	// nothing of the job runs in it.
	if top, err := d.Client().ContainerTop(context.Background(), id, nil); err == nil {
		for _, proc := range top.Processes {
			if strings.Contains(strings.Join(proc, " "), "probe") {
				t.Errorf("a process the job left behind outlived Run: %q", proc)
			}
		}
	}

	waitPrestarted(t, d, ws)
	id2 := nextIdle(d, ws).id
	res = runPrestarted(t, d, spec(map[string]string{"OTHER": "x"}, "env"))
	if id2 == id {
		t.Errorf("the next job was given the container %.12s of the job before", id)
	}
	// The container it ran in served it alone: it ends with it.
	if !stopsSoon(d, id2) {
		t.Errorf("container %.12s still runs after its job", id2)
	}
	if _, ok := envVar(res.Stdout, "JOB"); ok {
		t.Errorf("the environment of an earlier job leaked:\n%s", res.Stdout)
	}
	if v, _ := envVar(res.Stdout, "OTHER"); v != "x" {
		t.Errorf("OTHER=%q, want x", v)
	}
	if v, _ := envVar(res.Stdout, "HOME"); v != "/tmp" {
		t.Errorf("HOME=%q, want the sandbox's", v)
	}
	if !strings.HasPrefix(res.Environment, "docker "+img+"@sha256:") {
		t.Errorf("Environment %q", res.Environment)
	}

	res = runPrestarted(t, d, spec(nil, "cat", "/tmp/left", filepath.Join(ContainerWorkspace, "kept")))
	if got := string(res.Stdout); !strings.HasPrefix(got, "/tmp/left: <missing>\n") || !strings.Contains(got, "kept: written by probe") {
		t.Errorf("cat: %q; want /tmp fresh and the workspace kept", got)
	}
	res = runPrestarted(t, d, spec(nil, "procs"))
	if strings.Contains(string(res.Stdout), "sleep") {
		t.Errorf("a process of an earlier job is still there:\n%s", res.Stdout)
	}
}

// TestDockerPrestartCommand: what the command sees and how it ends are the
// same in a prestarted container: exit status, working directory, user,
// standard input and output, files, and a command that cannot start.
func TestDockerPrestartCommand(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	ws := newWorkspace(t)
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	runDocker(t, d, Spec{Argv: []string{"probe", "id"}, Workspace: ws, Image: img})

	reports := d.reports.Load()
	res := runPrestarted(t, d, Spec{Argv: []string{"probe", "exit", "7"}, Workspace: ws, Image: img})
	if res.ExitCode != 7 || res.Signal != "" || string(res.Stderr) != "exiting with 7\n" {
		t.Errorf("exit 7: %+v", res)
	}
	if d.reports.Load() != reports+1 {
		t.Error("the run did not end on the helper's report (PERF-75)")
	}
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "pwd"}, Workspace: ws, WorkingDir: "sub", Image: img})
	if got := strings.TrimSpace(string(res.Stdout)); got != ContainerWorkspace+"/sub" {
		t.Errorf("pwd %q", got)
	}
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "id"}, Workspace: ws, Image: img})
	if want := fmt.Sprintf("uid=%d ", os.Getuid()); os.Getuid() != 0 && !strings.HasPrefix(string(res.Stdout), want) {
		t.Errorf("id %q, want %s…", res.Stdout, want)
	} else if os.Getuid() == 0 && !strings.HasPrefix(string(res.Stdout), "uid=65534 ") {
		t.Errorf("id %q, want nobody", res.Stdout)
	}
	var live bytes.Buffer
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "read-stdin"}, Workspace: ws, Image: img,
		Stdin: strings.NewReader("prompt\nlines\n"), Stdout: &live})
	if string(res.Stdout) != "prompt\nlines\n" || live.String() != "prompt\nlines\n" {
		t.Errorf("stdin: %q, live %q", res.Stdout, live.String())
	}

	feedback := filepath.Join(t.TempDir(), "feedback.json")
	if err := os.WriteFile(feedback, []byte(`{"round":1}`), 0o444); err != nil {
		t.Fatal(err)
	}
	files := []File{{HostPath: feedback, Env: "FEEDBACK"}}
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "cat-env", "FEEDBACK"}, Workspace: ws, Image: img, Files: files})
	if string(res.Stdout) != `{"round":1}` {
		t.Errorf("file: %q %q", res.Stdout, res.Stderr)
	}
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "write", ContainerFiles + "/0-feedback.json"}, Workspace: ws, Image: img, Files: files})
	if res.ExitCode == 0 {
		t.Errorf("the files directory is writable: %+v", res)
	}

	// The job's user cannot reach the container's init or the idle
	// helper: killing all it can leaves the command alone.
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "kill-all", "9"}, Workspace: ws, Image: img})
	if res.ExitCode != 0 || !strings.HasSuffix(string(res.Stdout), "alive\n") {
		t.Errorf("kill(-1, SIGKILL) as the job's user: %+v, stdout %q", res, res.Stdout)
	}

	// PERF-75: the run ends on the helper's report, which nothing the
	// command writes can pass for: a command that prints an exit frame
	// ("x", length 1, "0") and exits 3 has exit status 3 and that output;
	// nor can it write on the helper's own output, or trace it.
	fake := hex.EncodeToString([]byte("x\x00\x00\x00\x010"))
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "stdout-hex", fake + fake, "3"}, Workspace: ws, Image: img})
	if res.ExitCode != 3 || string(res.Stdout) != "x\x00\x00\x00\x010x\x00\x00\x00\x010" {
		t.Errorf("a command printing an exit frame: exit %d, stdout %q, stderr %q; want 3 and the frame as output", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, target := range []string{"/proc/1/fd/1", "/proc/1/mem"} {
		res = runPrestarted(t, d, Spec{Argv: []string{"probe", "write", target}, Workspace: ws, Image: img})
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "permission denied") {
			t.Errorf("writing the helper's %s: exit %d, %q; want permission denied", target, res.ExitCode, res.Stderr)
		}
	}

	waitPrestarted(t, d, ws)
	_, err := runDockerErr(d, Spec{Argv: []string{"no-such-command"}, Workspace: ws, Image: img})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("missing command: %v, want ErrStart naming it", err)
	}
	waitPrestarted(t, d, ws)
	_, err = runDockerErr(d, Spec{Argv: []string{"/etc"}, Workspace: ws, Image: img})
	if !errors.Is(err, ErrStart) {
		t.Errorf("a directory as the command: %v, want ErrStart", err)
	}
	res = runPrestarted(t, d, Spec{Argv: []string{"probe", "exit", "0"}, Workspace: ws, Image: img})
	if res.ExitCode != 0 {
		t.Errorf("after a failed start: %+v", res)
	}
}

// TestDockerPrestartTimeoutAndCancel: a timeout reaches a command that is
// not the container's first process with SIGTERM, then SIGKILL after the
// grace; a cancellation ends it too; nothing is left behind.
func TestDockerPrestartTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	ws := newWorkspace(t)
	runDocker(t, d, Spec{Argv: []string{"probe", "id"}, Workspace: ws, Image: img})

	spec := Spec{Argv: []string{"probe", "sleep", "60s"}, Workspace: ws, Image: img, Timeout: time.Second, KillGrace: 5 * time.Second}
	start := time.Now()
	res := runPrestarted(t, d, spec)
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGTERM" || string(res.Stdout) != "sleeping\n" {
		t.Errorf("timeout: %+v", res)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Run took %v", el)
	}

	spec = Spec{Argv: []string{"probe", "sleep-ignore-term", "60s"}, Workspace: ws, Image: img,
		Timeout: 500 * time.Millisecond, KillGrace: 500 * time.Millisecond}
	res = runPrestarted(t, d, spec)
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGKILL" {
		t.Errorf("timeout ignoring SIGTERM: %+v", res)
	}

	waitPrestarted(t, d, ws)
	ctx, cancel := context.WithCancel(context.Background())
	var live testkit.Buffer
	go func() {
		for !strings.Contains(live.String(), "sleeping") {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	res, err := d.Run(ctx, Spec{Argv: []string{"probe", "sleep", "60s"}, Workspace: ws, Image: img, Timeout: time.Minute, Stdout: &live})
	if err != nil || res.TimedOut || res.ExitCode != -1 || !res.Prestarted {
		t.Errorf("cancelled: %+v, %v", res, err)
	}

	d.Close()
	if n := len(listContainers(t, d, d.host)); n != 0 {
		t.Errorf("%d container(s) left after Close", n)
	}
	// Nor files directories, throw-away layers or a run's scratch.
	if left, err := os.ReadDir(filepath.Join(d.caches.dir, "runs")); err != nil || len(left) != 0 {
		t.Errorf("left in the cache directory's runs after Close: %v, %v", left, err)
	}
}

// TestHelperFailed: only the helper's own message about the command that
// was to run, alone, is a failure to start.
func TestHelperFailed(t *testing.T) {
	for _, tt := range []struct {
		out, argv0, want string
	}{
		{"supervisor-sandbox-helper: cannot start \"nope\": exec: \"nope\": executable file not found in $PATH\n",
			"nope", "exec: \"nope\": executable file not found in $PATH"},
		{"supervisor-sandbox-helper: cannot start \"/etc\": fork/exec /etc: permission denied\n",
			"/etc", "fork/exec /etc: permission denied"},
		{"supervisor-sandbox-helper: cannot start \"a \\\"q\\\"\": exec: no\n", "a \"q\"", "exec: no"},
		// The message about another command: printed by this one.
		{"supervisor-sandbox-helper: cannot start \"other\": exec: \"other\": executable file not found in $PATH\n", "nope", ""},
		{"some output\nsupervisor-sandbox-helper: cannot start \"nope\": x\n", "nope", ""},
		{"", "nope", ""},
	} {
		if got := helperFailed([]byte(tt.out), tt.argv0); got != tt.want {
			t.Errorf("helperFailed(%q, %q) = %q, want %q", tt.out, tt.argv0, got, tt.want)
		}
	}
}

// TestDockerPrestartOOM: a command killed for memory in a prestarted
// container is reported as such.
func TestDockerPrestartOOM(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	if info, err := d.Client().Info(context.Background()); err != nil || !info.MemoryLimit {
		t.Skipf("the engine does not enforce memory limits (%v)", err)
	}
	ws := newWorkspace(t)
	spec := Spec{Argv: []string{"probe", "alloc", "16"}, Workspace: ws, Image: img, Resources: Resources{MemoryBytes: 64 << 20}}
	runDocker(t, d, spec)
	if res := runPrestarted(t, d, spec); res.OOMKilled || res.ExitCode != 0 {
		t.Errorf("small allocation: %+v", res)
	}
	spec.Argv = []string{"probe", "alloc", "512"}
	res := runPrestarted(t, d, spec)
	if !res.OOMKilled || res.ExitCode != -1 || res.Signal != "SIGKILL" || res.TimedOut {
		t.Errorf("memory hog: %+v (stderr %q)", res, res.Stderr)
	}
	// PERF-75: a child the kernel killed for memory is the engine's to
	// report, though the command exits by itself: the helper sends no
	// report, and the run says what the engine says.
	reports := d.reports.Load()
	spec.Argv = []string{"probe", "child-alloc", "512"}
	res = runPrestarted(t, d, spec)
	if !res.OOMKilled || res.ExitCode != 3 || !strings.HasPrefix(string(res.Stdout), "child: signal: killed") {
		t.Errorf("a child killed for memory: %+v (stdout %q, stderr %q); want OOMKilled, exit 3", res, res.Stdout, res.Stderr)
	}
	if d.reports.Load() != reports {
		t.Error("a run with an OOM kill ended on the helper's report")
	}
}

// TestDockerPrestartOnlyWhatFits: a run whose container would differ from
// the prestarted one (another image setting, another workspace, a .git
// replaced since) runs in a new container; so does one whose prestarted
// container stopped meanwhile.
func TestDockerPrestartOnlyWhatFits(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	ws := newWorkspace(t)
	git := filepath.Join(ws, ".git")
	if err := os.WriteFile(git, []byte("gitdir: /elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Argv: []string{"probe", "cat", ContainerWorkspace + "/.git"}, Workspace: ws, Image: img}
	runDocker(t, d, spec)
	runPrestarted(t, d, spec)

	// Limits are the container's: other limits, another container.
	waitPrestarted(t, d, ws)
	other := spec
	other.Resources.Pids = 99
	if res := runDocker(t, d, other); res.Prestarted {
		t.Errorf("a run with other limits took the prestarted container")
	}

	// A .git replaced (a new file, as the workspace pool writes it) is
	// not what the prestarted container has mounted.
	waitPrestarted(t, d, ws)
	if err := os.Remove(git); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(git, []byte("gitdir: /the-new-one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runDocker(t, d, spec)
	if res.Prestarted || !strings.Contains(string(res.Stdout), "the-new-one") {
		t.Errorf("after .git changed: prestarted %v, %q", res.Prestarted, res.Stdout)
	}

	// A prestarted container that stopped: the run starts a new one.
	waitPrestarted(t, d, ws)
	id := nextIdle(d, ws).id
	if err := d.Client().ContainerKill(context.Background(), id, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := d.Client().ContainerInspect(context.Background(), id)
		if err != nil || !info.State.Running {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res = runDocker(t, d, spec)
	if res.Prestarted || res.ExitCode != 0 {
		t.Errorf("after the prestarted container stopped: %+v", res)
	}
	// The one after it is prestarted again.
	runPrestarted(t, d, spec)
}

// TestDockerPrestartLabels: a prestarted container carries the sandbox's
// labels, not its job's; RunLabels gives the job's while it runs.
func TestDockerPrestartLabels(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	ws := newWorkspace(t)
	spec := Spec{Argv: []string{"probe", "sleep", "2s"}, Workspace: ws, Image: img, Labels: map[string]string{"job": "j-1"}}
	runDocker(t, d, Spec{Argv: []string{"probe", "id"}, Workspace: ws, Image: img})
	waitPrestarted(t, d, ws)
	done := make(chan Result, 1)
	go func() { done <- runDocker(t, d, spec) }()
	var found bool
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !found; time.Sleep(50 * time.Millisecond) {
		for _, c := range listContainers(t, d, d.host) {
			if c.Labels[LabelPrestarted] != "1" || c.State != container.StateRunning {
				continue
			}
			if l := d.RunLabels(c.ID); l["supervisor.job"] == "j-1" {
				found = true
				if c.Labels["supervisor.job"] != "" || c.Labels[LabelDeadline] == "" {
					t.Errorf("labels of the prestarted container: %v", c.Labels)
				}
			}
		}
	}
	if !found {
		t.Error("RunLabels never named the job of the running command")
	}
	if res := <-done; !res.Prestarted {
		t.Errorf("not prestarted: %+v", res)
	}
}

// TestDockerPrestartKeepsAtMostMax: with PrestartMax 2, runs in three
// workspaces leave two containers waiting, those of the two latest
// workspaces; the oldest is removed from the engine, and its workspace's
// next run starts a container of its own.
func TestDockerPrestartKeepsAtMostMax(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{PrestartMax: 2})
	wss := []string{newWorkspace(t), newWorkspace(t), newWorkspace(t)}
	for _, ws := range wss {
		runDocker(t, d, Spec{Argv: []string{"probe", "id"}, Workspace: ws, Image: img})
		waitPrestarted(t, d, ws)
	}
	d.pre.mu.Lock()
	_, first := d.pre.idle[filepath.Clean(wss[0])]
	waiting := len(d.pre.idle)
	d.pre.mu.Unlock()
	if waiting != 2 || first {
		t.Fatalf("%d containers wait (the first workspace's among them: %v), want the last two workspaces'", waiting, first)
	}
	idle := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		idle = 0
		for _, c := range listContainers(t, d, d.host) {
			if c.Labels[LabelPrestarted] == "1" {
				idle++
			}
		}
		if idle == 2 {
			break
		}
	}
	if idle != 2 {
		t.Fatalf("%d prestarted containers on the engine, want 2", idle)
	}
	if res := runDocker(t, d, Spec{Argv: []string{"probe", "id"}, Workspace: wss[0], Image: img}); res.Prestarted {
		t.Errorf("the first workspace's run took a container that should have been removed: %+v", res)
	}
	runPrestarted(t, d, Spec{Argv: []string{"probe", "id"}, Workspace: wss[2], Image: img})
}

// TestDockerPrestartCachesCannotBePoisoned: what a gate writes to its
// caches in a prestarted container is gone for the next gate, which sees
// the trusted layer only (the poisoned-cache case, PERF-21, with PERF-63).
func TestDockerPrestartCachesCannotBePoisoned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, img := prestartTest(t, DockerOptions{Caches: CacheOptions{
		Dir:        dir,
		Warmup:     [][]string{{"probe", "write-text", "/tmp/.cache/tool/entry", "trusted"}},
		WarmCaches: toolCaches[:1],
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := d.WarmCaches(ctx, img); err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t)
	spec := func(args ...string) Spec {
		return Spec{Argv: append([]string{"probe"}, args...), Workspace: ws, Image: img, Caches: toolCaches[:1]}
	}
	runDocker(t, d, spec("id"))
	res := runPrestarted(t, d, spec("remove", "/tmp/.cache/tool/entry"))
	if res.ExitCode != 0 {
		t.Fatalf("poisoner: %+v", res)
	}
	res = runPrestarted(t, d, spec("write", "/tmp/.cache/tool/added"))
	if res.ExitCode != 0 {
		t.Fatalf("poisoner: %+v", res)
	}
	res = runPrestarted(t, d, spec("cat", "/tmp/.cache/tool/entry", "/tmp/.cache/tool/added"))
	if got := string(res.Stdout); got != "/tmp/.cache/tool/entry: trusted\n/tmp/.cache/tool/added: <missing>\n" {
		t.Errorf("the next gate's cache: %q, want the trusted entry only", got)
	}
	if v, _ := envVar(runPrestarted(t, d, spec("env")).Stdout, "TOOL_CACHE"); v != "/tmp/.cache/tool" {
		t.Errorf("TOOL_CACHE=%q", v)
	}
}

// TestDockerPrestartNextDuringTheRun: a run that takes a workspace's last
// container started ahead starts the workspace's next container while its
// command runs, so that a job following at once (a node's next gate) finds
// it ready instead of waiting for its start; that job runs in it
// (PERF-69). One container a workspace, so that the run takes the last.
func TestDockerPrestartNextDuringTheRun(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{PrestartDepth: 1})
	ws := filepath.Clean(newWorkspace(t))
	spec := func(args ...string) Spec {
		return Spec{Argv: append([]string{"probe"}, args...), Workspace: ws, Image: img}
	}
	runDocker(t, d, spec("env"))
	waitPrestarted(t, d, ws)
	idle := func() *idleContainer { return nextIdle(d, ws) }
	first := idle()

	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := runDockerErr(d, spec("sleep", "4s"))
		done <- outcome{res, err}
	}()
	var next *idleContainer
	for deadline := time.Now().Add(time.Minute); next == nil; {
		if ic := idle(); ic != nil && ic != first {
			next = ic
			break
		}
		select {
		case o := <-done:
			t.Fatalf("the run ended (%+v, %v) with no next container started during it", o.res, o.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no next container within a minute of the run's start")
		}
	}
	waitReady(t, next)
	select {
	case o := <-done:
		t.Fatalf("the run (4 s) ended (%+v, %v) before the next container was up: it was not started during the run", o.res, o.err)
	default:
	}
	o := <-done
	if o.err != nil || o.res.ExitCode != 0 || !o.res.Prestarted {
		t.Fatalf("the sleeping run: %+v, %v; want it in the container started ahead", o.res, o.err)
	}
	// The run kept the container it started (same key), and the next job
	// runs in it.
	if ic := idle(); ic != next {
		t.Fatal("the run replaced the container it had started for the next job")
	}
	runPrestarted(t, d, spec("env"))
	// It ran in that container, which ends with it.
	if !stopsSoon(d, next.id) {
		t.Errorf("the container started during the run (%.12s) still runs: the next job ran elsewhere", next.id)
	}
}

// TestDockerPrestartDepthToppedUpWhenQuiet (PERF-80): once the sandbox
// has run nothing for a moment, a workspace has two containers started
// ahead of it. A run that takes the first starts none beside it; the job
// after it takes the second, a container of its own; the workspace is
// topped up to two again once the sandbox is quiet.
func TestDockerPrestartDepthToppedUpWhenQuiet(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	ws := filepath.Clean(newWorkspace(t))
	spec := func(args ...string) Spec {
		return Spec{Argv: append([]string{"probe"}, args...), Workspace: ws, Image: img}
	}
	// waitTwo waits until two containers wait for the workspace, both up.
	waitTwo := func(when string) []*idleContainer {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if q := idleOf(d, ws); len(q) == DefaultPrestartDepth {
				for _, ic := range q {
					waitReady(t, ic)
				}
				return q
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d containers wait for the workspace after a minute, want %d", when, len(idleOf(d, ws)), DefaultPrestartDepth)
			}
		}
	}
	runDocker(t, d, spec("exit", "0"))
	q := waitTwo("after the first run")
	if q[0].id == q[1].id {
		t.Fatalf("the workspace's two containers are one: %.12s", q[0].id)
	}

	done := make(chan Result, 1)
	go func() { done <- runDocker(t, d, spec("sleep", "2s")) }()
	// While it runs, the second container waits alone: nothing is started
	// beside the run.
	for ended := false; !ended; {
		select {
		case res := <-done:
			if !res.Prestarted || res.ExitCode != 0 {
				t.Fatalf("the first job: %+v; want it in the first container started ahead", res)
			}
			ended = true
		case <-time.After(20 * time.Millisecond):
			// Before the job takes the first, both wait; after, the
			// second alone: none other.
			for _, ic := range idleOf(d, ws) {
				if ic != q[0] && ic != q[1] {
					t.Fatalf("during the first job, container %.12s was started beside the run", ic.id)
				}
			}
		}
	}
	if !stopsSoon(d, q[0].id) {
		t.Errorf("the first container (%.12s) still runs after its job", q[0].id)
	}
	// The next job takes the second.
	res := runPrestarted(t, d, spec("exit", "0"))
	if res.ExitCode != 0 {
		t.Fatalf("the second job: %+v", res)
	}
	if !stopsSoon(d, q[1].id) {
		t.Errorf("the second container (%.12s) still runs after the second job: it ran elsewhere", q[1].id)
	}
	again := waitTwo("once quiet again")
	for _, ic := range again {
		if ic.id == q[0].id || ic.id == q[1].id {
			t.Errorf("container %.12s, which took a job, waits for another", ic.id)
		}
	}
}

// TestDockerNetnsPerContainer (PERF-76): a job with no network, in a
// container started ahead of it or in one of its own, has a network
// namespace of its own, not the host's, with a loopback and nothing else,
// and an /etc/hosts that resolves localhost; its container is created with
// networking disabled, so the engine's network controller sets nothing
// up. A port listening in one job's namespace is out of reach of another
// workspace's jobs and of the next job of the same workspace.
func TestDockerNetnsPerContainer(t *testing.T) {
	t.Parallel()
	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	d, img := prestartTest(t, DockerOptions{})
	ws1, ws2 := newWorkspace(t), newWorkspace(t)
	netns := func(ws string) (ns string, prestarted bool) {
		t.Helper()
		res := runDocker(t, d, Spec{Argv: []string{"probe", "netns"}, Workspace: ws, Image: img})
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if res.ExitCode != 0 || len(lines) < 2 {
			t.Fatalf("netns: %+v", res)
		}
		if ifaces := lines[1:]; !slices.Equal(ifaces, []string{"lo"}) {
			t.Errorf("interfaces %v, want the loopback alone", ifaces)
		}
		if lines[0] == hostNS {
			t.Errorf("a job ran in the host's network namespace %s", hostNS)
		}
		return lines[0], res.Prestarted
	}
	if _, pre := netns(ws1); pre {
		t.Error("the first run of a workspace ran in a container started ahead of it")
	}
	waitPrestarted(t, d, ws1)
	if _, pre := netns(ws1); !pre {
		t.Error("the second run of a workspace did not run in the container started ahead of it")
	}
	for _, pre := range []bool{false, true} {
		ws := newWorkspace(t)
		if pre {
			runDocker(t, d, Spec{Argv: []string{"probe", "exit", "0"}, Workspace: ws, Image: img})
			waitPrestarted(t, d, ws)
		}
		res := runDocker(t, d, Spec{Argv: []string{"probe", "resolve", "localhost"}, Workspace: ws, Image: img})
		if got := strings.Fields(string(res.Stdout)); res.ExitCode != 0 || !slices.Equal(got, []string{"127.0.0.1", "::1"}) || res.Prestarted != pre {
			t.Errorf("localhost resolved (prestarted %v) to %q, %+v; want 127.0.0.1 and ::1", pre, res.Stdout, res)
		}
	}
	waitPrestarted(t, d, ws1)
	next := nextIdle(d, ws1)
	info, err := d.Client().ContainerInspect(context.Background(), next.id)
	if err != nil {
		t.Fatalf("a container started ahead: %v", err)
	}
	if !info.Config.NetworkDisabled || info.HostConfig.NetworkMode != "none" || info.NetworkSettings.SandboxKey != "" {
		t.Errorf("a container started ahead: networking disabled %v, network mode %q, the engine's network sandbox %q; "+
			"want it disabled, mode none and no sandbox", info.Config.NetworkDisabled, info.HostConfig.NetworkMode, info.NetworkSettings.SandboxKey)
	}

	// A port listening in a job of workspace 1 is out of reach of
	// workspace 2's jobs and of workspace 1's next job, which runs beside
	// it in the container started ahead.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	listening := make(chan error, 1)
	go func() {
		_, err := d.Run(ctx, Spec{Argv: []string{"probe", "listen", "127.0.0.1:7311"}, Workspace: ws1, Image: img,
			Timeout: time.Minute, Stdout: pw})
		pw.Close()
		listening <- err
	}()
	if line, err := bufio.NewReader(pr).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("listener: %q, %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	waitPrestarted(t, d, ws1)
	for _, ws := range []string{ws1, ws2} {
		res := runDocker(t, d, Spec{Argv: []string{"probe", "tcp-connect", "127.0.0.1:7311"}, Workspace: ws, Image: img})
		if res.ExitCode == 0 {
			t.Errorf("a job of workspace %s (prestarted %v) reached a port listening in another job's namespace", ws, res.Prestarted)
		}
		if ws == ws1 && !res.Prestarted {
			t.Error("workspace 1's job beside the listener did not run in the container started ahead of it")
		}
	}
	cancel()
	if err := <-listening; err != nil {
		t.Fatalf("listener: %v", err)
	}
}

// TestDockerPrestartRemovedAfterExit (PERF-77): the container of a job
// that ended on its helper's report is removed once it has exited by
// itself: the engine records its death and its removal, and never kills
// it.
func TestDockerPrestartRemovedAfterExit(t *testing.T) {
	t.Parallel()
	d, img := prestartTest(t, DockerOptions{})
	ws := newWorkspace(t)
	runDocker(t, d, Spec{Argv: []string{"probe", "exit", "0"}, Workspace: ws, Image: img})
	waitPrestarted(t, d, ws)
	id := nextIdle(d, ws).id
	// The engine's events of the container, from before the job to its
	// removal (the engine keeps few past events: they are followed live).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs, errs := d.Client().Events(ctx, events.ListOptions{
		Since:   strconv.FormatInt(time.Now().Add(-time.Second).Unix(), 10),
		Filters: filters.NewArgs(filters.Arg("type", "container"), filters.Arg("container", id)),
	})
	reports := d.reports.Load()
	runPrestarted(t, d, Spec{Argv: []string{"probe", "exit", "3"}, Workspace: ws, Image: img})
	if d.reports.Load() != reports+1 {
		t.Fatal("the run did not end on its helper's report")
	}
	var actions []string
	for destroyed := false; !destroyed; {
		select {
		case m := <-msgs:
			actions = append(actions, string(m.Action))
			destroyed = m.Action == "destroy"
		case err := <-errs:
			t.Fatalf("engine events (%v so far): %v", actions, err)
		}
	}
	if !slices.Contains(actions, "die") || slices.Contains(actions, "kill") {
		t.Errorf("the engine's events of the job's container: %v; want it to die and be destroyed, never killed", actions)
	}
}

// stopsSoon reports whether container id stops (or is removed) within 10
// seconds: a run's result comes as soon as the helper has reported the
// command's end, and the container ends in the background (PERF-75).
func stopsSoon(d *Docker, id string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		info, err := d.Client().ContainerInspect(context.Background(), id)
		if err != nil || info.State == nil || !info.State.Running {
			return true
		}
	}
	return false
}
