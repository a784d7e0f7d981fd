package jobrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/strslice"
	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/egress"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// captureLog returns a logger and what it logs.
func captureLog() (*slog.Logger, *testkit.Buffer) {
	l := &testkit.Buffer{}
	return slog.New(slog.NewTextHandler(l, nil)), l
}

// TestMain removes what sandboxtest built for the tests (the helper).
func TestMain(m *testing.M) { sandboxtest.Main(m) }

func TestSelectSandboxProcess(t *testing.T) {
	for _, mode := range []string{"", SandboxProcess} {
		log, logs := captureLog()
		sel, err := SelectSandbox(context.Background(), Settings{Sandbox: mode, SandboxPath: sandbox.BasePath}, t.TempDir(), "h", log)
		if err != nil {
			t.Fatalf("%q: %v", mode, err)
		}
		sel.Close()
		if sel.Sandbox.Name() != "process" || sel.Fallback != "" || len(sel.Network) != 0 {
			t.Errorf("%q: %s sandbox, fallback %q, network %v", mode, sel.Sandbox.Name(), sel.Fallback, sel.Network)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "no file-system or network isolation") {
			t.Errorf("%q: no warning:\n%s", mode, logs)
		}
	}
	if _, err := SelectSandbox(context.Background(), Settings{Sandbox: "chroot"}, t.TempDir(), "h", slog.New(slog.DiscardHandler)); err == nil ||
		!strings.Contains(err.Error(), "want auto, docker or process") {
		t.Errorf("unknown mode: %v", err)
	}
}

// With DOCKER_HOST pointing nowhere, auto falls back loudly and docker
// refuses to start.
func TestSelectSandboxNoEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	s := Settings{SandboxPath: sandbox.BasePath, Docker: DockerSettings{Image: DefaultSandboxImage},
		Egress: &EgressSettings{Allow: egress.DefaultAllow}}

	s.Sandbox = SandboxAuto
	log, logs := captureLog()
	sel, err := SelectSandbox(context.Background(), s, t.TempDir(), "h", log)
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	sel.Close()
	if sel.Sandbox.Name() != "process" || !strings.Contains(sel.Fallback, "does not answer") || len(sel.Network) != 0 {
		t.Errorf("auto: %s sandbox, fallback %q, network %v", sel.Sandbox.Name(), sel.Fallback, sel.Network)
	}
	out := logs.String()
	for _, want := range []string{"level=WARN", "NO SANDBOX ISOLATION", "falling back to the process sandbox", "no-docker.sock",
		"the process sandbox cannot restrict the network"} {
		if !strings.Contains(out, want) {
			t.Errorf("auto: log lacks %q:\n%s", want, out)
		}
	}

	s.Sandbox = SandboxDocker
	_, err = SelectSandbox(context.Background(), s, t.TempDir(), "h", slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "sandbox docker: the Docker engine does not answer") || !strings.Contains(err.Error(), "no-docker.sock") {
		t.Errorf("docker: err = %v", err)
	}
}

// Against the real engine: a missing image is a fallback (auto) or an
// error (docker); with the image, docker mode removes the runner's
// orphans, creates the internal egress network and serves the proxy on
// its gateway, behind the host firewall, until Close.
func TestSelectSandboxDocker(t *testing.T) {
	cli := sandboxtest.Engine(t)
	sandboxtest.HostFirewall(t)
	ctx := context.Background()
	host := fmt.Sprintf("jobrun-test-%d", os.Getpid())
	dataDir := t.TempDir()

	missing := Settings{Sandbox: SandboxAuto, SandboxPath: sandbox.BasePath, Docker: DockerSettings{Image: "supervisor-test/absent:none"}}
	sel, err := SelectSandbox(ctx, missing, dataDir, host, slog.New(slog.DiscardHandler))
	if err != nil || sel.Sandbox.Name() != "process" || !strings.Contains(sel.Fallback, "not on this host") || !strings.Contains(sel.Fallback, "make images") {
		t.Errorf("auto without the image: %v, fallback %q", err, sel.Fallback)
	}
	missing.Sandbox = SandboxDocker
	if _, err := SelectSandbox(ctx, missing, dataDir, host, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "supervisor-test/absent:none") {
		t.Errorf("docker without the image: %v", err)
	}

	// An image with nothing in it (FROM scratch: nothing is pulled).
	img := sandboxtest.Image(t, fmt.Sprintf("supervisor-test/jobrun-empty:%d", os.Getpid()),
		sandboxtest.File{Name: "Dockerfile", Mode: 0o644, Data: []byte("FROM scratch\nLABEL supervisor.test=1\n")})
	orphan, err := cli.ContainerCreate(ctx, &container.Config{
		Image: img, Cmd: strslice.StrSlice{"/nothing"},
		Labels: map[string]string{sandbox.LabelSandbox: "1", sandbox.LabelHost: host},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), orphan.ID, container.RemoveOptions{Force: true})
	})
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	netName := egress.NetworkName(host)
	t.Cleanup(func() {
		if err := cli.NetworkRemove(context.Background(), netName); err != nil {
			t.Errorf("removing the egress network: %v", err)
		}
	})

	log, logs := captureLog()
	s := Settings{Sandbox: SandboxDocker, Docker: DockerSettings{Image: img, Resources: sandbox.Resources{MemoryBytes: 4 << 30},
		Prestart: true, Helper: filepath.Join(t.TempDir(), "no-helper")},
		Egress: &EgressSettings{Allow: []string{"API.example.com:443", "*.example.org:443"}, Port: port}, GPUs: 1}
	sel, err = SelectSandbox(ctx, s, dataDir, host, log)
	if err != nil {
		t.Fatalf("docker: %v", err)
	}
	// Without the helper: no prestart (PERF-63), with a warning naming it.
	if !strings.Contains(logs.String(), "containers are not started ahead of their jobs") ||
		!strings.Contains(logs.String(), "no-helper") || !strings.Contains(logs.String(), "prestart=false") {
		t.Errorf("no warning about the missing helper:\n%s", logs)
	}
	closed := false
	defer func() {
		if !closed {
			sel.Close()
		}
	}()
	if sel.Sandbox.Name() != "docker" || sel.Fallback != "" {
		t.Fatalf("docker: %s sandbox, fallback %q", sel.Sandbox.Name(), sel.Fallback)
	}
	if got := strings.Join(sel.Network, ","); got != "api.example.com:443,*.example.org:443" {
		t.Errorf("Network = %s", got)
	}
	if d := sel.Sandbox.(*sandbox.Docker); d.Resources().MemoryBytes != 4<<30 || d.Resources().Pids != sandbox.DefaultDockerPids {
		t.Errorf("resources %+v", d.Resources())
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelHost+"="+host))})
	if err != nil || len(list) != 0 {
		t.Errorf("the orphan was not removed: %d left, %v", len(list), err)
	}
	if !strings.Contains(logs.String(), "removed containers left by a previous run") {
		t.Errorf("no log of the orphan removal:\n%s", logs)
	}

	nw, err := cli.NetworkInspect(ctx, netName, network.InspectOptions{})
	if err != nil || !nw.Internal || nw.Labels[egress.LabelEgress] != "1" || !strings.HasPrefix(nw.Options["com.docker.network.bridge.name"], "sup-eg-") {
		t.Fatalf("egress network: %+v, %v", nw, err)
	}
	gateway := nw.IPAM.Config[0].Gateway
	proxy := net.JoinHostPort(gateway, strconv.Itoa(port))
	bridge := nw.Options["com.docker.network.bridge.name"]
	firewalled := func() bool {
		out, err := exec.Command("iptables", "-w", "-S", "INPUT").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S INPUT: %v: %s", err, out)
		}
		return strings.Contains(string(out), "-i "+bridge+" -j ")
	}
	if !firewalled() {
		t.Errorf("no host firewall rule for the egress bridge %s", bridge)
	}
	connect := func(target string) (int, error) {
		c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, err
		}
		return resp.StatusCode, nil
	}
	if code, err := connect("exfil.example.net:443"); err != nil || code != http.StatusForbidden {
		t.Errorf("proxy on the gateway %s: %d, %v", proxy, code, err)
	}
	if !strings.Contains(logs.String(), `msg="egress denied" host=exfil.example.net port=443`) {
		t.Errorf("no denial logged:\n%s", logs)
	}

	sel.Close()
	closed = true
	if _, err := connect("exfil.example.net:443"); err == nil {
		t.Error("the proxy still answers after Close")
	}
	if firewalled() {
		t.Errorf("the host firewall rule for %s outlived Close", bridge)
	}

	// With the helper: prestart on.
	log, logs = captureLog()
	s = Settings{Sandbox: SandboxDocker, Docker: DockerSettings{Image: img, Prestart: true, Helper: sandboxtest.Helper(t)}}
	sel, err = SelectSandbox(ctx, s, dataDir, host, log)
	if err != nil {
		t.Fatalf("docker with the helper: %v", err)
	}
	sel.Close()
	if !strings.Contains(logs.String(), "prestart=true") || strings.Contains(logs.String(), "not started ahead") {
		t.Errorf("prestart with the helper:\n%s", logs)
	}
}

func TestRunnerHost(t *testing.T) {
	if got := RunnerHost("given", "/x"); got != "given" {
		t.Errorf("given: %s", got)
	}
	a, b := RunnerHost("", "/data/a"), RunnerHost("", "/data/b")
	h, _ := os.Hostname()
	if a != RunnerHost("", "/data/a/") || a == b || !strings.HasPrefix(a, h+"-") || len(a) != len(h)+9 {
		t.Errorf("RunnerHost: %s, %s", a, b)
	}
	if strings.Contains(a, strconv.Itoa(os.Getpid())) && !strings.Contains(h, strconv.Itoa(os.Getpid())) {
		t.Errorf("RunnerHost %s contains the pid", a)
	}
	// A relative data directory is identified by its absolute path.
	wd, _ := os.Getwd()
	if RunnerHost("", "rel") != RunnerHost("", filepath.Join(wd, "rel")) {
		t.Error("relative and absolute data dirs differ")
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"1024": 1024, "512m": 512 << 20, "512MiB": 512 << 20, "4g": 4 << 30, "4GiB": 4 << 30, "4gb": 4 << 30,
		"1.5g": 3 << 29, "2 GiB": 2 << 30, "1t": 1 << 40, "0": 0, "16k": 16 << 10,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "g", "-1g", "4x", "lots", "1e30g"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
	for n, want := range map[int64]string{2 << 30: "2GiB", 4 << 30: "4GiB", 512 << 20: "512MiB", 1000: "1000", 3 << 29: "1536MiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %s, want %s", n, got, want)
		}
		if back, _ := ParseBytes(FormatBytes(n)); back != n {
			t.Errorf("FormatBytes(%d) does not parse back", n)
		}
	}
}

// TestPrestartMaxFollowsConcurrency: without --sandbox-prestart-max, a
// runner keeps at most twice its concurrency of containers started ahead
// (at most sandbox.DefaultPrestartMax); the flag overrides it, and a
// negative one is refused.
func TestPrestartMaxFollowsConcurrency(t *testing.T) {
	gates := Profile{Resources: sandbox.Resources{MemoryBytes: 2 << 30, CPUs: 2, Pids: 256}}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 2},
		{[]string{"--concurrency", "4"}, 8},
		{[]string{"--concurrency", "8"}, sandbox.DefaultPrestartMax},
		{[]string{"--concurrency", "50"}, sandbox.DefaultPrestartMax},
		{[]string{"--concurrency", "4", "--sandbox-prestart-max", "3"}, 3},
		{[]string{"--sandbox-prestart-max", "40"}, 40},
	} {
		s, err := settingsFor(t, gates, tc.args...)
		if err != nil || s.Docker.PrestartMax != tc.want {
			t.Errorf("%v: PrestartMax %d, %v; want %d", tc.args, s.Docker.PrestartMax, err, tc.want)
		}
	}
	if _, err := settingsFor(t, gates, "--sandbox-prestart-max", "-1"); err == nil || !strings.Contains(err.Error(), "--sandbox-prestart-max") {
		t.Errorf("a negative --sandbox-prestart-max: %v", err)
	}
}

// TestPrestartDepth (PERF-80): a workspace may have two containers
// started ahead waiting by default; --sandbox-prestart-depth sets another
// number, and one below 1 is refused.
func TestPrestartDepth(t *testing.T) {
	gates := Profile{Resources: sandbox.Resources{MemoryBytes: 2 << 30, CPUs: 2, Pids: 256}}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, sandbox.DefaultPrestartDepth},
		{[]string{"--sandbox-prestart-depth", "1"}, 1},
		{[]string{"--sandbox-prestart-depth", "4"}, 4},
	} {
		s, err := settingsFor(t, gates, tc.args...)
		if err != nil || s.Docker.PrestartDepth != tc.want {
			t.Errorf("%v: PrestartDepth %d, %v; want %d", tc.args, s.Docker.PrestartDepth, err, tc.want)
		}
	}
	for _, bad := range []string{"0", "-1"} {
		if _, err := settingsFor(t, gates, "--sandbox-prestart-depth", bad); err == nil || !strings.Contains(err.Error(), "--sandbox-prestart-depth") {
			t.Errorf("--sandbox-prestart-depth %s: %v", bad, err)
		}
	}
}

// settingsFor parses args with a runner command's flags for profile p.
func settingsFor(t *testing.T, p Profile, args ...string) (Settings, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "test", RunE: func(*cobra.Command, []string) error { return nil }}
	config.AddConfigFlag(cmd.Flags())
	AddRunnerFlags(cmd.Flags())
	AddSandboxFlags(cmd.Flags(), p)
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	v, err := config.Load(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return SettingsFrom(v, slog.New(slog.DiscardHandler), p)
}

func TestSandboxFlags(t *testing.T) {
	gates := Profile{Resources: sandbox.Resources{MemoryBytes: 2 << 30, CPUs: 2, Pids: 256}}
	agents := Profile{Resources: sandbox.Resources{MemoryBytes: 4 << 30, CPUs: 2, Pids: 256}, Egress: true}

	s, err := settingsFor(t, gates)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sandbox != SandboxAuto || s.Docker.Image != DefaultSandboxImage || s.Docker.Resources != gates.Resources || s.Egress != nil ||
		!s.Docker.Prestart || s.Docker.Helper != "" {
		t.Errorf("gate defaults: %+v, egress %+v", s.Docker, s.Egress)
	}
	s, err = settingsFor(t, agents)
	if err != nil {
		t.Fatal(err)
	}
	if s.Docker.Resources != agents.Resources || s.Egress == nil ||
		strings.Join(s.Egress.Allow, ",") != strings.Join(egress.DefaultAllow, ",") || s.Egress.Port != egress.DefaultPort {
		t.Errorf("agent defaults: %+v, egress %+v", s.Docker, s.Egress)
	}

	s, err = settingsFor(t, agents, "--sandbox", "Docker", "--sandbox-image", "img:1", "--sandbox-user", "1000:1000",
		"--sandbox-memory", "6g", "--sandbox-cpus", "1.5", "--sandbox-pids", "100",
		"--egress-allow", "a.example:443", "--egress-allow", "*.b.example:8443,c.example:443", "--egress-proxy-port", "0",
		"--egress-network", "custom-egress", "--host-id", "w1", "--sandbox-prestart=false", "--sandbox-helper", "/opt/helper")
	if err != nil {
		t.Fatal(err)
	}
	want := DockerSettings{Image: "img:1", User: "1000:1000", Resources: sandbox.Resources{MemoryBytes: 6 << 30, CPUs: 1.5, Pids: 100},
		PrestartMax: 2, PrestartDepth: sandbox.DefaultPrestartDepth, Helper: "/opt/helper"}
	if s.Sandbox != SandboxDocker || s.Docker != want || s.Host != "w1" {
		t.Errorf("flags: %q %+v %q", s.Sandbox, s.Docker, s.Host)
	}
	if got := strings.Join(s.Egress.Allow, ","); got != "a.example:443,*.b.example:8443,c.example:443" || s.Egress.Port != 0 || s.Egress.Network != "custom-egress" {
		t.Errorf("egress: %+v", s.Egress)
	}
	// No network at all.
	if s, err := settingsFor(t, agents, "--egress-allow="); err != nil || s.Egress == nil || len(s.Egress.Allow) != 0 {
		t.Errorf("--egress-allow=: %+v, %v", s.Egress, err)
	}
	// The environment.
	t.Setenv("SUPERVISOR_SANDBOX", "process")
	t.Setenv("SUPERVISOR_EGRESS_ALLOW", "x.example:443,y.example:443")
	if s, err := settingsFor(t, agents); err != nil || s.Sandbox != SandboxProcess || strings.Join(s.Egress.Allow, ",") != "x.example:443,y.example:443" {
		t.Errorf("env: %q %+v, %v", s.Sandbox, s.Egress, err)
	}
	if s, err := settingsFor(t, gates); err != nil || s.Egress != nil {
		t.Errorf("gate runner with SUPERVISOR_EGRESS_ALLOW: %+v, %v", s.Egress, err)
	}

	for _, args := range [][]string{
		{"--sandbox", "vm"}, {"--sandbox-memory", "lots"}, {"--sandbox-cpus", "-1"},
		{"--egress-allow", "no-port"}, {"--egress-proxy-port", "70000"},
	} {
		if _, err := settingsFor(t, agents, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestStringListAndLabels(t *testing.T) {
	if got := FormatLabels(map[string]string{"gpu": "A100", "gpus": "2", "zone": "b"}); got != "gpu=A100,gpus=2,zone=b" {
		t.Errorf("FormatLabels = %s", got)
	}
	if FormatLabels(nil) != "" {
		t.Error("FormatLabels(nil)")
	}
}

// The breaker policy: the defaults (5 failures in 300 s, 300 s cool-down),
// the flags, and non-positive values refused.
func TestBreakerFlags(t *testing.T) {
	s, err := settingsFor(t, Profile{})
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b state.BreakerPolicy) bool {
		return a.Failures == b.Failures && a.Window == b.Window && a.CoolDown == b.CoolDown && a.Now == nil
	}
	if d := state.DefaultBreakerPolicy(); !same(s.Breakers, d) {
		t.Errorf("default policy %+v, want %+v", s.Breakers, d)
	}
	s, err = settingsFor(t, Profile{}, "--breaker-failures", "3", "--breaker-window", "1m", "--breaker-cool-down", "30s")
	if err != nil {
		t.Fatal(err)
	}
	if want := (state.BreakerPolicy{Failures: 3, Window: time.Minute, CoolDown: 30 * time.Second}); !same(s.Breakers, want) {
		t.Errorf("policy %+v, want %+v", s.Breakers, want)
	}
	for _, args := range [][]string{{"--breaker-failures", "0"}, {"--breaker-window", "-1s"}, {"--breaker-cool-down", "0s"}} {
		if _, err := settingsFor(t, Profile{}, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// A runner starting on a data directory removes what dead runners left
// there over an hour ago: a pool slot no process holds, a workspace of the
// layout before pools. What is newer stays.
func TestNewDepsSweepsLeftovers(t *testing.T) {
	t.Parallel()
	f := jobruntest.OpenFleet(t, "sweep-test", bus.Config{})
	dataDir := t.TempDir()
	ws := filepath.Join(dataDir, "workspaces")
	old := time.Now().Add(-2 * LeftoverAge)
	leftovers := map[string]bool{ // path → removed
		filepath.Join(ws, "pool", "r-1", "0"):   true,
		filepath.Join(ws, "jobs", "wf.n.a1-1"):  true,
		filepath.Join(ws, "pool", "r-1", "1"):   false,
		filepath.Join(ws, "jobs", "wf.n.a1-22"): false,
	}
	for dir, gone := range leftovers {
		testkit.WriteFile(t, filepath.Join(dir, "secret.txt"), []byte("left behind\n"))
		testkit.WriteFile(t, dir+".lock", []byte{})
		if gone {
			if err := os.Chtimes(dir, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	deps, closeDeps, err := NewDeps(testkit.Context(t, time.Minute), Settings{DataDir: dataDir, SandboxPath: sandbox.BasePath,
		Host: "sweeper", ProcessUser: ProcessUserOff}, f.Bus, f.Store, f.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDeps()
	if deps.Workspaces == nil {
		t.Fatal("no workspace manager")
	}
	for dir, gone := range leftovers {
		_, err := os.Stat(dir)
		if gone && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left by a dead runner not removed: %v", dir, err)
		}
		if !gone && err != nil {
			t.Errorf("%s, too recent to sweep, was removed: %v", dir, err)
		}
	}
}
