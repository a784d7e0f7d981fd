package gaterunner

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gatecache"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// gitWatch is the Docker sandbox recording, for every run, the workspace's
// .git as the host sees it just before and just after the container ran.
// It embeds *sandbox.Docker, so the runner still identifies the execution
// environment by the image's digest.
type gitWatch struct {
	*sandbox.Docker
	mu   sync.Mutex
	runs map[string]gitObs // by gate name
}

// gitObs is the host's view of a workspace's .git around one gate.
type gitObs struct {
	workspace     string
	before, after string // gitState
	// gitDir is the git directory the .git file names ("" if .git is not
	// a file naming one).
	gitDir string
}

func (w *gitWatch) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	before, gitDir := gitState(spec.Workspace)
	res, err := w.Docker.Run(ctx, spec)
	after, _ := gitState(spec.Workspace)
	w.mu.Lock()
	w.runs[spec.Labels["gate"]] = gitObs{workspace: spec.Workspace, before: before, after: after, gitDir: gitDir}
	w.mu.Unlock()
	return res, err
}

func (w *gitWatch) run(gate string) (gitObs, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.runs[gate]
	return r, ok
}

// gitState describes the workspace's .git entry (type, permissions, mtime,
// content) and, when it is a file naming a git directory (a linked
// worktree's, as the workspace package makes them), every entry of that
// directory (type, permissions, size, mtime, SHA-256 of files). It returns
// the git directory too.
func gitState(ws string) (state, gitDir string) {
	var b strings.Builder
	p := filepath.Join(ws, ".git")
	fi, err := os.Lstat(p)
	if err != nil {
		return "lstat .git: " + err.Error(), ""
	}
	fmt.Fprintf(&b, ".git %v %d\n", fi.Mode(), fi.ModTime().UnixNano())
	if !fi.Mode().IsRegular() {
		return b.String(), ""
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return b.String() + "read .git: " + err.Error(), ""
	}
	b.Write(data)
	gitDir, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir: ")
	if !ok {
		return b.String(), ""
	}
	_ = filepath.WalkDir(gitDir, func(q string, e fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", q, err)
			return nil
		}
		info, err := e.Info()
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", q, err)
			return nil
		}
		sum := ""
		if e.Type().IsRegular() {
			data, err := os.ReadFile(q)
			if err != nil {
				sum = err.Error()
			} else {
				sum = fmt.Sprintf("%x", sha256.Sum256(data))
			}
		}
		fmt.Fprintf(&b, "%s %v %d %d %s\n", q, info.Mode(), info.Size(), info.ModTime().UnixNano(), sum)
		return nil
	})
	return b.String(), gitDir
}

// TestGateIntegrityDocker runs gates end to end (NATS, lease, workspace,
// integrity check, report) through a gate runner whose sandbox is the real
// Docker sandbox, set up as for --sandbox docker with the probe image as
// its default image: writing the workspace works and the integrity check
// sees it, unless allowed_writes allows it; writing .git (a file naming
// the git directory in the runner's mirror, mounted read-only) or the root
// file system fails inside the container, and leaves the host's .git and
// the integrity check untouched.
func TestGateIntegrityDocker(t *testing.T) {
	t.Parallel()
	img := sandboxtest.ProbeImage(t)
	h := newHarness(t)
	host := fmt.Sprintf("gaterunner-test-%d-%s", os.Getpid(), t.Name())
	hostLabel := sandbox.LabelHost + "=" + host
	// Registered before the runner: checked once it has stopped.
	sandboxtest.ExpectNoContainers(t, hostLabel)

	var watch *gitWatch
	h.startRunnerOpts(Config{}, runnerOpts{
		host: host,
		settings: func(s *jobrun.Settings) {
			s.Sandbox = jobrun.SandboxDocker
			s.Docker = jobrun.DockerSettings{Image: img, Resources: DefaultResources}
		},
		wrap: func(sb sandbox.Sandbox) sandbox.Sandbox {
			d, ok := sb.(*sandbox.Docker)
			if !ok {
				t.Fatalf("--sandbox docker gave the %s sandbox (%T)", sb.Name(), sb)
			}
			watch = &gitWatch{Docker: d, runs: map[string]gitObs{}}
			return watch
		},
	})

	round := 0
	run := func(def protocol.GateSpec) *protocol.GateResult {
		t.Helper()
		round++
		j := h.defJob(def, round)
		j.Patches = []protocol.PatchRef{h.patch}
		return h.run(j)
	}
	gate := func(name string, allowed []string, args ...string) protocol.GateSpec {
		return protocol.GateSpec{Name: name, Pool: protocol.DefaultPool, TimeoutSeconds: 60,
			Command: append([]string{"probe"}, args...), AllowedWrites: allowed}
	}

	cases := []struct {
		name    string
		allowed []string
		args    []string // the probe's
		// want: the gate's status and exit code, the violations exactly,
		// and a piece of its output.
		status     protocol.GateStatus
		exit       int
		violations []string
		output     string
	}{
		{name: "create", args: []string{"write", "/workspace/new.txt"},
			status: protocol.GateFailed, violations: []string{"new new.txt"}, output: "wrote /workspace/new.txt"},
		{name: "modify-tracked", args: []string{"write", "/workspace/README.md"},
			status: protocol.GateFailed, violations: []string{"modified README.md"}, output: "wrote /workspace/README.md"},
		{name: "modify-patched", args: []string{"write", "/workspace/newfile"},
			status: protocol.GateFailed, violations: []string{"modified newfile"}, output: "wrote /workspace/newfile"},
		{name: "modify-subdir", args: []string{"write", "/workspace/src/a.txt"},
			status: protocol.GateFailed, violations: []string{"modified src/a.txt"}, output: "wrote /workspace/src/a.txt"},
		{name: "allowed", allowed: []string{"src/generated.txt"}, args: []string{"write", "/workspace/src/generated.txt"},
			status: protocol.GatePassed, output: "wrote /workspace/src/generated.txt"},
		{name: "allowed-and-not", allowed: []string{"src/generated.txt"},
			args:   []string{"write", "/workspace/src/generated.txt", "/workspace/new.txt"},
			status: protocol.GateFailed, violations: []string{"new new.txt"}, output: "wrote /workspace/new.txt"},
		// .git is a file (the worktree's pointer into the runner's
		// mirror), bind-mounted read-only; the mirror is not mounted.
		{name: "git-file", args: []string{"write", "/workspace/.git"},
			status: protocol.GateFailed, exit: 1, output: "write: open /workspace/.git: read-only file system"},
		{name: "git-config", args: []string{"write", "/workspace/.git/config"},
			status: protocol.GateFailed, exit: 1, output: "write: open /workspace/.git/config: not a directory"},
		{name: "git-remove", args: []string{"remove", "/workspace/.git"},
			status: protocol.GateFailed, exit: 1, output: "remove: remove /workspace/.git: device or resource busy"},
		// Even allow-listed, .git cannot be written.
		{name: "git-allowed", allowed: []string{"**"}, args: []string{"write", "/workspace/.git"},
			status: protocol.GateFailed, exit: 1, output: "write: open /workspace/.git: read-only file system"},
		{name: "root", args: []string{"write", "/evil"},
			status: protocol.GateFailed, exit: 1, output: "write: open /evil: read-only file system"},
		{name: "tmp", args: []string{"write", "/tmp/scratch"},
			status: protocol.GatePassed, output: "wrote /tmp/scratch"},
		{name: "clean", args: []string{"pwd"},
			status: protocol.GatePassed, output: "/workspace"},
		// The workspace as the gate sees it, not the runner's path.
		{name: "repo-path", args: []string{"env"},
			status: protocol.GatePassed, output: "SUPERVISOR_REPO_PATH=/workspace\n"},
	}
	for _, c := range cases {
		g := run(gate(c.name, c.allowed, c.args...))
		what := fmt.Sprintf("%s (probe %s)", c.name, strings.Join(c.args, " "))
		if g.Status != c.status || g.ExitCode == nil || *g.ExitCode != c.exit || g.Cached {
			t.Errorf("%s: status %s exit %s cached %v, want %s exit %d\noutput: %s",
				what, g.Status, exitCode(g.ExitCode), g.Cached, c.status, c.exit, g.Output)
		}
		if want := "docker " + img + "@sha256:"; !strings.HasPrefix(g.Sandbox, want) {
			t.Errorf("%s: sandbox %q, want %s…", what, g.Sandbox, want)
		}
		if g.IntegrityViolation != (len(c.violations) > 0) || !slices.Equal(g.Violations, c.violations) {
			t.Errorf("%s: integrity violation %v %q, want %q", what, g.IntegrityViolation, g.Violations, c.violations)
		}
		logText := h.logText(g.Log)
		if !strings.Contains(g.Output, c.output) || !strings.Contains(logText, c.output) {
			t.Errorf("%s: output %q / log lack %q", what, g.Output, c.output)
		}
		for _, v := range c.violations {
			for _, text := range []string{g.Error, g.Output, logText} {
				if !strings.Contains(text, "integrity violation: ") || !strings.Contains(text, v) {
					t.Errorf("%s: %q does not name the violation %q", what, text, v)
				}
			}
		}
		if len(c.violations) == 0 && strings.Contains(g.Error+g.Output+logText, "integrity violation") {
			t.Errorf("%s: an integrity violation is reported:\n%s", what, logText)
		}

		// The host's .git: a file naming a git directory outside the
		// workspace, unchanged by the gate.
		gr, ok := watch.run(c.name)
		if !ok {
			t.Errorf("%s: did not run in the Docker sandbox", what)
			continue
		}
		if gr.gitDir == "" || !filepath.IsAbs(gr.gitDir) || strings.HasPrefix(gr.gitDir, gr.workspace+"/") {
			t.Errorf("%s: the workspace's .git is not a file naming the mirror's git directory:\n%s", what, gr.before)
		}
		if gr.before != gr.after {
			t.Errorf("%s: the host's .git changed:\nbefore:\n%s\nafter:\n%s", what, gr.before, gr.after)
		}
	}

	// The clean gate again: a cache hit, so the Docker sandbox identified
	// its execution environment (the image's digest).
	first := run(gate("clean-cached", nil, "pwd"))
	hit := run(gate("clean-cached", nil, "pwd"))
	if first.Cached || first.CacheDisabled != "" || !gatecache.ValidKey(first.CacheKey) || first.Stdout != "/workspace\n" {
		t.Errorf("clean gate: cached %v key %q disabled %q stdout %q", first.Cached, first.CacheKey, first.CacheDisabled, first.Stdout)
	}
	if !hit.Cached || hit.CacheKey != first.CacheKey || hit.Status != protocol.GatePassed {
		t.Errorf("clean gate again: cached %v key %q status %s, want a hit on %q", hit.Cached, hit.CacheKey, hit.Status, first.CacheKey)
	}
	if info := h.Settled(protocol.KindGate); info.NumRedelivered != 0 {
		t.Errorf("%d gate jobs redelivered", info.NumRedelivered)
	}

	// Every run removed its container.
	left, err := sandboxtest.Containers(testkit.Context(t, time.Minute), sandboxtest.Engine(t), hostLabel)
	if err != nil || len(left) != 0 {
		t.Errorf("%d container(s) of the runner left after its gates (%v)", len(left), err)
	}
}

// TestGateCachesDocker: through a gate runner with the Docker sandbox, a
// gate's cache_dirs and Go's caches start with the warm-up's trusted
// content, and what one gate writes there (a planted entry) does not reach
// the next gate (PERF-20, PERF-23).
func TestGateCachesDocker(t *testing.T) {
	t.Parallel()
	img := sandboxtest.ProbeImage(t)
	h := newHarness(t)
	host := fmt.Sprintf("gaterunner-test-%d-%s", os.Getpid(), t.Name())
	sandboxtest.ExpectNoContainers(t, sandbox.LabelHost+"="+host)
	dataDir := t.TempDir()
	h.startRunnerOpts(Config{}, runnerOpts{
		host: host,
		settings: func(s *jobrun.Settings) {
			s.Sandbox = jobrun.SandboxDocker
			s.DataDir = dataDir
			s.Docker = jobrun.DockerSettings{Image: img, Resources: DefaultResources}
			s.Caches = sandbox.CacheOptions{
				Warmup:     [][]string{{"probe", "write-text", "/tmp/.npm/entry", "trusted"}},
				WarmCaches: []sandbox.Cache{{Path: ".npm"}},
			}
		},
	})
	// The runner warms its caches in the background as it starts: wait.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m, _ := filepath.Glob(filepath.Join(jobrun.CacheDir(dataDir), "trusted", "*", ".complete"))
		if len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner's cache warm-up did not complete")
		}
		time.Sleep(100 * time.Millisecond)
	}

	gate := func(name string, round int, args ...string) *protocol.GateResult {
		t.Helper()
		no := false
		def := protocol.GateSpec{Name: name, Pool: protocol.DefaultPool, TimeoutSeconds: 60, Cache: &no,
			Command: append([]string{"probe"}, args...), CacheDirs: []string{".npm"}}
		return h.run(h.defJob(def, round))
	}
	if g := gate("plant", 1, "write-text", "/tmp/.npm/new", "planted"); g.Status != protocol.GatePassed {
		t.Fatalf("plant: %s %s", g.Status, g.Output)
	}
	g := gate("read", 2, "cat", "/tmp/.npm/entry", "/tmp/.npm/new")
	if want := "/tmp/.npm/entry: trusted\n/tmp/.npm/new: <missing>"; g.Status != protocol.GatePassed || strings.TrimSpace(g.Stdout) != want {
		t.Fatalf("the next gate: %s, stdout %q, want %q", g.Status, g.Stdout, want)
	}
	g = gate("env", 3, "env")
	for _, kv := range []string{"GOCACHE=/tmp/.cache/go-build\n", "GOMODCACHE=/tmp/go/pkg/mod\n"} {
		if !strings.Contains(g.Stdout, kv) {
			t.Errorf("the gate's environment lacks %s:\n%s", strings.TrimSpace(kv), g.Stdout)
		}
	}
}
