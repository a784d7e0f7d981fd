package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/strslice"

	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The Docker tests run against the real engine with the probe image of
// package sandboxtest (FROM scratch: nothing is pulled). Without an engine
// they skip, or fail under CI=true.

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runnerHelper())
	}
	sandboxtest.Main(m)
}

// dockerTest returns a Docker sandbox whose Host label is unique to the
// test, and the probe image. It skips (fails under CI) without an engine,
// and fails the test if a container of the test is left behind.
func dockerTest(t *testing.T, opts DockerOptions) (*Docker, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts.Host == "" {
		opts.Host = fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	}
	d, err := NewDocker(ctx, opts)
	if err != nil {
		t.Fatalf("NewDocker: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Available(ctx); err != nil {
		testkit.Missing(t, fmt.Sprintf("the Docker engine (%v)", err))
	}
	img := sandboxtest.ProbeImage(t)
	host := opts.Host
	t.Cleanup(func() {
		if n := len(listContainers(t, d, host)); n > 0 {
			t.Errorf("%d container(s) left behind", n)
			_, _ = d.RemoveOrphans(context.Background(), host)
		}
	})
	return d, img
}

// listContainers lists the containers labelled with host.
func listContainers(t *testing.T, d *Docker, host string) []container.Summary {
	t.Helper()
	list, err := sandboxtest.Containers(context.Background(), d.Client(), LabelHost+"="+host)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// runDocker runs spec and fails the test on an error.
func runDocker(t *testing.T, d *Docker, spec Spec) Result {
	t.Helper()
	res, err := runDockerErr(d, spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Argv, err)
	}
	return res
}

func runDockerErr(d *Docker, spec Spec) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if spec.Timeout == 0 {
		spec.Timeout = 30 * time.Second
	}
	return d.Run(ctx, spec)
}

// probeSpec is a Spec running the probe in a fresh workspace.
func probeSpec(t *testing.T, img string, args ...string) Spec {
	return Spec{Argv: append([]string{"probe"}, args...), Workspace: newWorkspace(t), Image: img}
}

func TestDockerExitCodes(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	for _, n := range []int{0, 3, 42} {
		res := runDocker(t, d, probeSpec(t, img, "exit", fmt.Sprint(n)))
		if res.ExitCode != n || res.TimedOut || res.Signal != "" || res.OOMKilled {
			t.Errorf("exit %d: got %+v", n, res)
		}
		if want := fmt.Sprintf("exiting with %d\n", n); string(res.Stderr) != want {
			t.Errorf("exit %d: stderr %q, want %q", n, res.Stderr, want)
		}
	}
}

func TestDockerNoNetwork(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	addr, accepted := listenOnBridge(t, d)

	// "network is unreachable" at once: there is no interface but loopback
	// (a filtered network would time out instead).
	res := runDocker(t, d, probeSpec(t, img, "tcp-connect", addr))
	if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "unreachable") {
		t.Fatalf("tcp-connect %s without network: %+v, stderr %q", addr, res, res.Stderr)
	}
	select {
	case <-accepted:
		t.Fatal("the listener accepted a connection from a container without network")
	default:
	}
}

// TestDockerEgressNetwork is the control for TestDockerNoNetwork: on a
// network (the default bridge standing in for the egress network) the same
// probe reaches the same listener, and gets the proxy variables.
func TestDockerEgressNetwork(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{EgressNetwork: "bridge", EgressProxy: "http://egress-proxy.invalid:3128"})
	addr, accepted := listenOnBridge(t, d)

	spec := probeSpec(t, img, "env")
	spec.Network = []string{"api.anthropic.com:443"}
	spec.Env = map[string]string{"HTTPS_PROXY": "http://elsewhere:1"}
	res := runDocker(t, d, spec)
	env := string(res.Stdout)
	for _, kv := range []string{
		"HTTPS_PROXY=http://egress-proxy.invalid:3128", "https_proxy=http://egress-proxy.invalid:3128",
		"HTTP_PROXY=http://egress-proxy.invalid:3128", "http_proxy=http://egress-proxy.invalid:3128",
		"NO_PROXY=" + DefaultNoProxy, "no_proxy=" + DefaultNoProxy,
	} {
		if !strings.Contains(env, kv+"\n") {
			t.Errorf("agent env lacks %s:\n%s", kv, env)
		}
	}

	if strings.HasPrefix(addr, "127.") {
		t.Skipf("the engine's bridge gateway is not an address of this machine; no control connection")
	}
	spec = probeSpec(t, img, "tcp-connect", addr)
	spec.Network = []string{addr}
	res = runDocker(t, d, spec)
	if res.ExitCode != 0 {
		t.Skipf("a container on the bridge cannot reach %s either (firewall?): %q", addr, res.Stderr)
	}
	testkit.Receive(t, accepted, 5*time.Second, "the listener saw no connection")
}

// listenOnBridge listens on the gateway of the engine's default bridge
// network (127.0.0.1 if that is not an address of this machine) and
// returns the address and a channel that receives accepted connections.
func listenOnBridge(t *testing.T, d *Docker) (string, <-chan struct{}) {
	t.Helper()
	host := "127.0.0.1"
	if nw, err := d.Client().NetworkInspect(context.Background(), "bridge", network.InspectOptions{}); err == nil {
		for _, c := range nw.IPAM.Config {
			if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
				host = c.Gateway
			} else if _, subnet, err := net.ParseCIDR(c.Subnet); err == nil && subnet.IP.To4() != nil {
				// Older engines leave Gateway empty: it is the first address.
				gw := subnet.IP.To4()
				gw[3]++
				host = gw.String()
			}
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	return ln.Addr().String(), accepted
}

func TestDockerFileSystem(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	ws := newWorkspace(t)
	for _, dir := range []string{".git/refs", "sub"} {
		if err := os.MkdirAll(filepath.Join(ws, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		".git/HEAD": "ref: refs/heads/main\n", "tracked.txt": "original\n", "sub/file.txt": "original\n",
	} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(wd string, args ...string) Result {
		t.Helper()
		return runDocker(t, d, Spec{Argv: append([]string{"probe"}, args...), Workspace: ws, WorkingDir: wd, Image: img})
	}

	for _, p := range []string{"/x", "/usr/local/bin/probe", "/workspace/.git/HEAD", "/workspace/.git/new"} {
		res := run("", "write", p)
		if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "read-only file system") {
			t.Errorf("write %s: exit %d, stderr %q; want a read-only file system error", p, res.ExitCode, res.Stderr)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(ws, ".git/HEAD")); string(got) != "ref: refs/heads/main\n" {
		t.Errorf(".git/HEAD changed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/new")); err == nil {
		t.Error(".git/new was created")
	}

	for _, p := range []string{"/workspace/x", "/workspace/tracked.txt", "/workspace/sub/file.txt", "/workspace/sub/new.txt", "/tmp/x"} {
		if res := run("", "write", p); res.ExitCode != 0 {
			t.Errorf("write %s: exit %d, stderr %q", p, res.ExitCode, res.Stderr)
		}
	}
	for _, name := range []string{"x", "tracked.txt", "sub/file.txt", "sub/new.txt"} {
		if got, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(got) != "written by probe\n" {
			t.Errorf("%s on the host: %q, %v", name, got, err)
		}
	}

	if res := run("sub", "pwd"); string(res.Stdout) != "/workspace/sub\n" {
		t.Errorf("pwd in sub: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if res := run("sub", "write", "created-here"); res.ExitCode != 0 {
		t.Errorf("relative write: %q", res.Stderr)
	} else if _, err := os.Stat(filepath.Join(ws, "sub", "created-here")); err != nil {
		t.Error(err)
	}
}

// A .git file (a linked worktree's) is mounted read-only too.
func TestDockerGitFileReadOnly(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	spec := probeSpec(t, img, "write", "/workspace/.git")
	if err := os.WriteFile(filepath.Join(spec.Workspace, ".git"), []byte("gitdir: /elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runDocker(t, d, spec)
	if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "read-only file system") {
		t.Errorf("write .git file: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(spec.Workspace, ".git")); string(got) != "gitdir: /elsewhere\n" {
		t.Errorf(".git changed: %q", got)
	}

	// A symlinked .git is refused: the engine would follow it on the host.
	spec = probeSpec(t, img, "id")
	if err := os.Symlink("/etc", filepath.Join(spec.Workspace, ".git")); err != nil {
		t.Fatal(err)
	}
	if _, err := runDockerErr(d, spec); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("symlinked .git: err %v, want ErrInvalidSpec", err)
	}
}

func TestDockerUser(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	spec := probeSpec(t, img, "id")
	res := runDocker(t, d, spec)
	var uid, gid int
	if _, err := fmt.Sscanf(string(res.Stdout), "uid=%d gid=%d", &uid, &gid); err != nil {
		t.Fatalf("id: %q %q", res.Stdout, res.Stderr)
	}
	if uid == 0 || gid == 0 {
		t.Fatalf("running as root: %q", res.Stdout)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(spec.Workspace, &st); err != nil {
		t.Fatal(err)
	}
	if want := int(st.Uid); want != 0 && uid != want {
		t.Errorf("uid %d, want the workspace owner %d", uid, want)
	}
	if st.Uid == 0 && uid != 65534 {
		t.Errorf("uid %d for a root-owned workspace, want 65534", uid)
	}

	if os.Geteuid() != 0 {
		return
	}
	// As root, a workspace owned by another user runs as that user,
	// unchanged.
	spec = probeSpec(t, img, "id")
	if err := os.WriteFile(filepath.Join(spec.Workspace, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{spec.Workspace, filepath.Join(spec.Workspace, "f")} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if res := runDocker(t, d, spec); string(res.Stdout) != "uid=1000 gid=1000\n" {
		t.Errorf("id for a workspace owned by 1000: %q %q", res.Stdout, res.Stderr)
	}
	spec.Argv = []string{"probe", "write", "/workspace/f"}
	if res := runDocker(t, d, spec); res.ExitCode != 0 {
		t.Errorf("writing a 0600 file of the owner: %q", res.Stderr)
	}
	if fi, err := os.Stat(filepath.Join(spec.Workspace, "f")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode of f changed: %v %v", fi.Mode(), err)
	}

	// An explicit user is used as is.
	d2, _ := dockerTest(t, DockerOptions{User: "4242:4343"})
	if res := runDocker(t, d2, probeSpec(t, img, "id")); string(res.Stdout) != "uid=4242 gid=4343\n" {
		t.Errorf("explicit user: %q %q", res.Stdout, res.Stderr)
	}
}

// Not parallel: t.Setenv.
func TestDockerEnvironment(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "host-secret")
	t.Setenv("HTTPS_PROXY", "http://host-proxy:1")
	d, img := dockerTest(t, DockerOptions{Path: "/opt/bin:" + BasePath})
	spec := probeSpec(t, img, "env")
	spec.Env = map[string]string{
		"FOO": "bar", "PATH": "/evil", "HOME": "/root", "USER": "root",
		"LD_PRELOAD": "/evil.so", "ld_library_path": "/evil", "PYTHONPATH": "/evil",
	}
	res := runDocker(t, d, spec)
	var got []string
	for _, kv := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if !strings.HasPrefix(kv, "HOSTNAME=") { // the engine sets it
			got = append(got, kv)
		}
	}
	want := []string{
		"FOO=bar", "HOME=/tmp", "LANG=C.UTF-8", "PATH=/opt/bin:" + BasePath,
		"TERM=dumb", "TMPDIR=/tmp", "USER=supervisor",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("environment:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDockerStdinAndOutput(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})

	spec := probeSpec(t, img, "read-stdin")
	spec.Stdin = strings.NewReader("hello\nworld\n")
	if res := runDocker(t, d, spec); string(res.Stdout) != "hello\nworld\n" || res.ExitCode != 0 {
		t.Errorf("read-stdin: %+v", res)
	}
	// Without Stdin the command reads EOF at once.
	if res := runDocker(t, d, probeSpec(t, img, "read-stdin")); len(res.Stdout) != 0 || res.ExitCode != 0 {
		t.Errorf("read-stdin without stdin: %+v", res)
	}

	const lines = 20000
	var live bytes.Buffer // shared by both streams: writes are serialized
	spec = probeSpec(t, img, "print-lines", fmt.Sprint(lines), "both")
	spec.OutputLimit = 1000
	spec.Stdout, spec.Stderr = &live, &live
	res := runDocker(t, d, spec)
	if len(res.Stdout) != 1000 || !res.StdoutTruncated || !bytes.HasSuffix(res.Stdout, []byte(fmt.Sprintf("out %d\n", lines))) {
		t.Errorf("stdout tail: %d bytes, truncated %v, ends %q", len(res.Stdout), res.StdoutTruncated, tail(res.Stdout))
	}
	if len(res.Stderr) != 1000 || !res.StderrTruncated || !bytes.HasSuffix(res.Stderr, []byte(fmt.Sprintf("err %d\n", lines))) {
		t.Errorf("stderr tail: %d bytes, truncated %v, ends %q", len(res.Stderr), res.StderrTruncated, tail(res.Stderr))
	}
	lineRE := regexp.MustCompile(`^(out|err) \d+$`)
	counts := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(live.String(), "\n"), "\n") {
		if !lineRE.MatchString(l) {
			t.Fatalf("live output has a broken line %q", l)
		}
		counts[l[:3]]++
	}
	if counts["out"] != lines || counts["err"] != lines {
		t.Errorf("live output: %v lines, want %d of each", counts, lines)
	}

	// A short run is not truncated; an unterminated last line is passed on.
	live.Reset()
	spec = probeSpec(t, img, "read-stdin")
	spec.Stdin = strings.NewReader("a\nno newline")
	spec.Stdout = &live
	if res := runDocker(t, d, spec); res.StdoutTruncated || live.String() != "a\nno newline" {
		t.Errorf("live %q, result %+v", live.String(), res)
	}
}

func tail(b []byte) []byte {
	if len(b) > 20 {
		return b[len(b)-20:]
	}
	return b
}

func TestDockerTimeout(t *testing.T) {
	t.Parallel()
	host := fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	d, img := dockerTest(t, DockerOptions{Host: host})

	spec := probeSpec(t, img, "sleep", "60s")
	spec.Timeout = time.Second
	spec.KillGrace = 5 * time.Second
	start := time.Now()
	res := runDocker(t, d, spec)
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGTERM" {
		t.Errorf("timeout: %+v", res)
	}
	if string(res.Stdout) != "sleeping\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Run took %v", el)
	}
	if n := len(listContainers(t, d, host)); n != 0 {
		t.Errorf("%d container(s) left after the timeout", n)
	}

	// A command ignoring SIGTERM is killed after the grace.
	spec = probeSpec(t, img, "sleep-ignore-term", "60s")
	spec.Timeout = 500 * time.Millisecond
	spec.KillGrace = 500 * time.Millisecond
	res = runDocker(t, d, spec)
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGKILL" {
		t.Errorf("timeout ignoring SIGTERM: %+v", res)
	}
	if n := len(listContainers(t, d, host)); n != 0 {
		t.Errorf("%d container(s) left after the timeout", n)
	}
}

func TestDockerCancel(t *testing.T) {
	t.Parallel()
	host := fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	d, img := dockerTest(t, DockerOptions{Host: host})
	ctx, cancel := context.WithCancel(context.Background())
	var live testkit.Buffer
	spec := probeSpec(t, img, "sleep", "60s")
	spec.Stdout = &live
	go func() {
		// Cancel once the command runs.
		for !strings.Contains(live.String(), "sleeping") {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	res, err := d.Run(ctx, spec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.TimedOut || res.ExitCode != -1 {
		t.Errorf("cancelled: %+v", res)
	}
	if n := len(listContainers(t, d, host)); n != 0 {
		t.Errorf("%d container(s) left after cancelling", n)
	}

	// Cancelled before the start: an error, nothing created.
	if _, err := d.Run(ctx, probeSpec(t, img, "id")); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v", err)
	}
}

func TestDockerForkBomb(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	if info, err := d.Client().Info(context.Background()); err != nil || !info.PidsLimit {
		t.Skipf("the engine does not enforce pids limits (%v)", err)
	}
	spec := probeSpec(t, img, "fork-bomb")
	spec.Resources.Pids = 64
	spec.Timeout = 20 * time.Second
	spec.KillGrace = time.Second
	start := time.Now()
	res := runDocker(t, d, spec)
	t.Logf("fork bomb after %v: exit %d, stdout %q, stderr tail %q", time.Since(start), res.ExitCode, res.Stdout, tail(res.Stderr))
	if !strings.Contains(string(res.Stdout), "pids limit 64") {
		t.Fatalf("the bomb did not see the pids limit: %q %q", res.Stdout, res.Stderr)
	}
	contained := strings.Contains(string(res.Stdout), "contained after") ||
		strings.Contains(string(res.Stderr), "resource temporarily unavailable")
	if !contained && !res.TimedOut {
		t.Errorf("no sign the pids limit stopped the bomb: %+v", res)
	}
	if res.ExitCode == 0 {
		t.Errorf("the bomb exited 0")
	}
}

func TestDockerOOM(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	if info, err := d.Client().Info(context.Background()); err != nil || !info.MemoryLimit {
		t.Skipf("the engine does not enforce memory limits (%v)", err)
	}
	spec := probeSpec(t, img, "alloc", "512")
	spec.Resources.MemoryBytes = 64 << 20
	res := runDocker(t, d, spec)
	if !res.OOMKilled || res.ExitCode != -1 || res.Signal != "SIGKILL" || res.TimedOut {
		t.Errorf("memory hog: %+v (stderr %q)", res, res.Stderr)
	}

	// Within the limit: no OOM.
	spec = probeSpec(t, img, "alloc", "16")
	spec.Resources.MemoryBytes = 64 << 20
	if res := runDocker(t, d, spec); res.OOMKilled || res.ExitCode != 0 {
		t.Errorf("small allocation: %+v", res)
	}
}

func TestDockerErrors(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	cases := []struct {
		name string
		mod  func(*Spec)
		want error
	}{
		{"empty argv", func(s *Spec) { s.Argv = nil }, ErrInvalidSpec},
		{"no image", func(s *Spec) { s.Image = "" }, ErrInvalidSpec},
		{"escaping working dir", func(s *Spec) { s.WorkingDir = "../x" }, ErrInvalidSpec},
		{"bad network entry", func(s *Spec) { s.Network = []string{"no-port"} }, ErrInvalidSpec},
		{"network without egress network", func(s *Spec) { s.Network = []string{"example.com:443"} }, ErrEngine},
		{"missing image", func(s *Spec) { s.Image = "supervisor-test/no-such-image:1" }, ErrEngine},
		{"missing program", func(s *Spec) { s.Argv = []string{"no-such-program"} }, ErrStart},
		{"missing program path", func(s *Spec) { s.Argv = []string{"/nowhere/prog"} }, ErrStart},
	}
	for _, c := range cases {
		spec := probeSpec(t, img, "id")
		c.mod(&spec)
		if _, err := runDockerErr(d, spec); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}

	// A CPU limit above what the engine has is lowered, not refused.
	spec := probeSpec(t, img, "id")
	spec.Resources.CPUs = 4096
	if res, err := runDockerErr(d, spec); err != nil || res.ExitCode != 0 {
		t.Errorf("huge CPU limit: %+v, %v", res, err)
	}
}

func TestDockerLabelsAndOrphans(t *testing.T) {
	t.Parallel()
	host := fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	d, img := dockerTest(t, DockerOptions{Host: host})
	ctx := context.Background()

	// Labels, seen from a run in progress.
	var live testkit.Buffer
	spec := probeSpec(t, img, "sleep", "30s")
	spec.Labels = map[string]string{"workflow": "wf1", "node": "n1", "attempt": "2", "example.com/x": "y", LabelHost: "spoofed"}
	spec.Stdout = &live
	spec.Timeout = 40 * time.Second
	started := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.Run(rctx, spec)
	}()
	var labels map[string]string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && labels == nil; time.Sleep(50 * time.Millisecond) {
		if list := listContainers(t, d, host); len(list) == 1 && strings.Contains(live.String(), "sleeping") {
			labels = list[0].Labels
		}
	}
	cancel()
	<-done
	want := map[string]string{
		"supervisor.workflow": "wf1", "supervisor.node": "n1", "supervisor.attempt": "2",
		"example.com/x": "y", LabelSandbox: "1", LabelHost: host,
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q (all: %v)", k, labels[k], v, labels)
		}
	}
	// The deadline: the timeout plus the time allowed to start.
	if sec, err := strconv.ParseInt(labels[LabelDeadline], 10, 64); err != nil {
		t.Errorf("label %s = %q: %v", LabelDeadline, labels[LabelDeadline], err)
	} else if dl, lo := time.Unix(sec, 0), started.Add(spec.Timeout).Truncate(time.Second); dl.Before(lo) || dl.After(time.Now().Add(spec.Timeout+startTimeout)) {
		t.Errorf("deadline %s, want between %s and %s", dl, lo, time.Now().Add(spec.Timeout+startTimeout))
	}

	// Orphans: leftovers of this host are removed, others' are not.
	other := host + "-other"
	create := func(h string) string {
		c, err := d.Client().ContainerCreate(ctx, &container.Config{
			Image: img, Cmd: strslice.StrSlice{"probe", "sleep", "60s"},
			Entrypoint: strslice.StrSlice{},
			Labels:     map[string]string{LabelSandbox: "1", LabelHost: h},
		}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	running := create(host)
	if err := d.Client().ContainerStart(ctx, running, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	create(host)
	otherID := create(other)
	t.Cleanup(func() {
		_ = d.Client().ContainerRemove(context.Background(), otherID, container.RemoveOptions{Force: true})
	})
	n, err := d.RemoveOrphans(ctx, "")
	if err != nil || n != 2 {
		t.Errorf("RemoveOrphans: %d, %v; want 2", n, err)
	}
	if left := listContainers(t, d, host); len(left) != 0 {
		t.Errorf("%d orphan(s) left", len(left))
	}
	if left := listContainers(t, d, other); len(left) != 1 {
		t.Errorf("another host's container was removed")
	}
}

func TestDockerImageDigest(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	id, err := d.ImageDigest(context.Background(), img)
	if err != nil || !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("ImageDigest: %q, %v", id, err)
	}
	info, err := d.Client().ImageInspect(context.Background(), img)
	if err != nil || info.ID != id {
		t.Errorf("ImageDigest %q, inspect %q (%v)", id, info.ID, err)
	}
	if _, err := d.ImageDigest(context.Background(), "supervisor-test/no-such-image:1"); !errors.Is(err, ErrEngine) {
		t.Errorf("missing image: %v", err)
	}
}

func TestDockerHostPath(t *testing.T) {
	d, err := NewDocker(context.Background(), DockerOptions{PathMaps: []PathMap{
		{Container: "/data", Host: "/var/lib/supervisor/data"},
		{Container: "/data/special/", Host: "/mnt/special"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for in, want := range map[string]string{
		"/data":                     "/var/lib/supervisor/data",
		"/data/workspaces/j1":       "/var/lib/supervisor/data/workspaces/j1",
		"/data/special/x":           "/mnt/special/x",
		"/database/x":               "/database/x",
		"/elsewhere/workspaces/j1/": "/elsewhere/workspaces/j1",
	} {
		if got := d.HostPath(in); got != want {
			t.Errorf("HostPath(%q) = %q, want %q", in, got, want)
		}
	}

	t.Setenv(EnvHostDataDir, "/var/lib/supervisor/data")
	maps, err := PathMapsFromEnv("/data")
	if err != nil || len(maps) != 1 || maps[0] != (PathMap{Container: "/data", Host: "/var/lib/supervisor/data"}) {
		t.Errorf("PathMapsFromEnv: %v, %v", maps, err)
	}
	t.Setenv(EnvHostDataDir, "")
	if maps, err := PathMapsFromEnv("/data"); err != nil || maps != nil {
		t.Errorf("PathMapsFromEnv without the variable: %v, %v", maps, err)
	}
	if _, err := NewDocker(context.Background(), DockerOptions{EgressProxy: "http://proxy:3128"}); err == nil {
		t.Error("a proxy without an egress network was accepted")
	}
}

// The path mapping is applied to bind mounts: with the workspace's parent
// mapped to itself under another name (a symlink standing in for the
// host's view), the container sees the workspace.
func TestDockerPathMapMount(t *testing.T) {
	t.Parallel()
	parent := newWorkspace(t)
	ws := filepath.Join(parent, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(newWorkspace(t), "host-view")
	if err := os.Symlink(parent, alias); err != nil {
		t.Fatal(err)
	}
	d, img := dockerTest(t, DockerOptions{PathMaps: []PathMap{{Container: parent, Host: alias}}})
	if got := d.HostPath(ws); got != filepath.Join(alias, "ws") {
		t.Fatalf("HostPath(%q) = %q", ws, got)
	}
	res := runDocker(t, d, Spec{Argv: []string{"probe", "write", "/workspace/x"}, Workspace: ws, Image: img})
	if res.ExitCode != 0 {
		t.Fatalf("write: %q", res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "x")); err != nil {
		t.Error(err)
	}

	// A mapping to a path the engine's host lacks is the runner's fault.
	d, _ = dockerTest(t, DockerOptions{PathMaps: []PathMap{{Container: parent, Host: "/nonexistent/supervisor-test"}}})
	_, err := runDockerErr(d, Spec{Argv: []string{"probe", "id"}, Workspace: ws, Image: img})
	if !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), EnvHostDataDir) {
		t.Errorf("unmapped host path: %v", err)
	}
}

// TestDockerRemoveExpired: containers past their deadline by more than the
// grace are removed whichever runner made them, running or exited; those
// within it, or without a deadline, stay.
func TestDockerRemoveExpired(t *testing.T) {
	t.Parallel()
	host := fmt.Sprintf("sandbox-test-%d-%s", os.Getpid(), t.Name())
	d, img := dockerTest(t, DockerOptions{Host: host})
	other := host + "-gone"
	ctx := context.Background()
	t.Cleanup(func() { _, _ = d.RemoveOrphans(context.Background(), other) })

	// Test binaries may run at once on this engine: each sweeps only its own.
	scope := "supervisor.test-run=" + host
	create := func(h string, deadline time.Time, start bool) string {
		t.Helper()
		labels := map[string]string{LabelSandbox: "1", LabelHost: h, "supervisor.test-run": host}
		if !deadline.IsZero() {
			labels[LabelDeadline] = strconv.FormatInt(deadline.Unix(), 10)
		}
		c, err := d.Client().ContainerCreate(ctx, &container.Config{
			Image: img, Cmd: strslice.StrSlice{"probe", "sleep", "60s"}, Entrypoint: strslice.StrSlice{}, Labels: labels,
		}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if start {
			if err := d.Client().ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return c.ID
	}
	now := time.Now()
	// Within the runners' own grace (expiredGrace in jobrun, 2 min), so a
	// runner sweeping this engine while the test runs leaves them be.
	expiredRunning := create(other, now.Add(-60*time.Second), true)
	expiredExited := create(host, now.Add(-30*time.Second), false)
	withinGrace := create(other, now.Add(-3*time.Second), true)
	future := create(host, now.Add(time.Hour), false)
	noDeadline := create(other, time.Time{}, false)

	removed, err := d.RemoveExpired(ctx, 15*time.Second, scope)
	if err != nil {
		t.Fatalf("RemoveExpired: %v", err)
	}
	got := map[string]string{}
	for _, e := range removed {
		got[e.ID] = e.Host
	}
	want := map[string]string{expiredRunning: other, expiredExited: host}
	if len(got) != len(want) || got[expiredRunning] != other || got[expiredExited] != host {
		t.Errorf("removed %v, want %v", got, want)
	}
	left := map[string]bool{}
	for _, c := range append(listContainers(t, d, host), listContainers(t, d, other)...) {
		left[c.ID] = true
	}
	for id, name := range map[string]string{withinGrace: "within the grace", future: "before its deadline", noDeadline: "without a deadline"} {
		if !left[id] {
			t.Errorf("the container %s was removed", name)
		}
	}
	for id := range want {
		if left[id] {
			t.Errorf("expired container %.12s is still there", id)
		}
	}
	_, _ = d.RemoveOrphans(ctx, host)
}

// TestDockerWorkspaceEnv: the command sees the workspace's path inside the
// container, whatever the caller's Env says.
func TestDockerWorkspaceEnv(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	spec := probeSpec(t, img, "env")
	spec.Env = map[string]string{"REPO": "/host/path"}
	spec.WorkspaceEnv = "REPO"
	res := runDocker(t, d, spec)
	if !strings.Contains(string(res.Stdout), "\nREPO=/workspace\n") {
		t.Errorf("environment:\n%s\nwant REPO=/workspace", res.Stdout)
	}
}

// Files reach the container read-only, their path in their variable.
func TestDockerFiles(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	file := filepath.Join(t.TempDir(), "feedback.json")
	if err := os.WriteFile(file, []byte(`{"note":"from the host"}`), 0o444); err != nil {
		t.Fatal(err)
	}
	spec := probeSpec(t, img, "cat-env", "FEEDBACK")
	spec.Files = []File{{HostPath: file, Env: "FEEDBACK"}}
	if res := runDocker(t, d, spec); res.ExitCode != 0 || string(res.Stdout) != `{"note":"from the host"}` {
		t.Errorf("cat-env: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	spec = probeSpec(t, img, "write", ContainerFiles+"/0-feedback.json")
	spec.Files = []File{{HostPath: file, Env: "FEEDBACK"}}
	if res := runDocker(t, d, spec); res.ExitCode == 0 {
		t.Errorf("the container wrote its read-only file: %s", res.Stdout)
	}
	spec.Files = []File{{HostPath: "relative.json", Env: "FEEDBACK"}}
	if _, err := runDockerErr(d, spec); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("a relative file path: %v, want ErrInvalidSpec", err)
	}
}

// TestDockerDuration: a run's Duration is the command's, as the engine
// timed it, not the container's start-up.
func TestDockerDuration(t *testing.T) {
	t.Parallel()
	d, img := dockerTest(t, DockerOptions{})
	start := time.Now()
	res := runDocker(t, d, probeSpec(t, img, "sleep", "300ms"))
	wall := time.Since(start)
	// The engine stamps StartedAt once the process has started, so its
	// span can fall a little short of the command's own: allow 50ms.
	if res.ExitCode != 0 || res.Duration < 250*time.Millisecond || res.Duration >= wall {
		t.Errorf("exit %d, duration %v for a 300ms sleep in %v of wall time", res.ExitCode, res.Duration, wall)
	}
	if res.StartedAt.Before(start) || res.StartedAt.Add(res.Duration).After(start.Add(wall)) {
		t.Errorf("the run [%v, +%v] is not within the call [%v, +%v]", res.StartedAt, res.Duration, start, wall)
	}
}
