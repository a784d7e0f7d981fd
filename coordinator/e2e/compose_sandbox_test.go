package e2e

import (
	"fmt"
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

// composeSandboxWorkflow runs gates that only pass in a Docker sandbox
// whose workspace mount was translated to the host's path, and optional
// gates that must fail there: the network, the root file system and .git
// are out of reach.
const composeSandboxWorkflow = `name: compose-docker-sandbox
` + agentDefaults + `gates:
  - name: mounted
    command: [grep, -q, "^base readme", /workspace/README.md]
  - name: agent-work
    command: [grep, -q, "^sandboxed$", sandboxed.txt]
    depends_on: [mounted]
  - name: toolchain
    command: [go, version]
  - name: uid
    command: [id, -u]
  - name: network
    command: [git, -C, /tmp, ls-remote, "http://coordinator:9101/"]
    severity: warning
  - name: root-fs
    command: [touch, /escape]
    severity: warning
  - name: git-file
    command: [touch, .git]
    severity: warning
tasks:
  - id: sandboxed
    gates:
      required: [mounted, agent-work, toolchain, uid]
      optional: [network, root-fs, git-file]
    prompt: |
      Reach the network through the worker's proxy, then write one file.
      @env HTTPS_PROXY
      @fetch http://coordinator:9101/metrics
      @fetch http://example.com/
      @write sandboxed.txt
      sandboxed
      @end
`

// TestComposeDockerSandbox brings compose.yaml up with
// compose.docker-sandbox.yaml: the worker and the gate runner, themselves
// in containers, start every agent and gate as a sibling container on this
// engine through the mounted socket, with bind-mount sources translated to
// this host's paths (SUPERVISOR_SANDBOX_HOST_DATA_DIR). The agent reaches
// an allow-listed host:port through its worker's proxy on the internal
// egress network and is refused (and logged) anywhere else. The gates see
// the agent's work at /workspace, run as the runner's non-root uid with the
// sandbox image's Go, cannot resolve the fleet's hosts, write the root file
// system or .git, and nothing leaves a container behind.
func TestComposeDockerSandbox(t *testing.T) {
	dataDir := t.TempDir()
	// The runners run as uid 10001 and must write their data directory:
	// chown it from a container, as `make compose-up COMPOSE_SANDBOX=docker`
	// does, and give it back (after `down`) for t.TempDir's clean-up.
	chown := func(owner string) error {
		out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "chown",
			"-v", dataDir+":/d", "supervisor/sandbox-base:latest", "-R", owner, "/d").CombinedOutput()
		if err != nil {
			return fmt.Errorf("chown %s of the runners' data directory: %v\n%s", owner, err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		if os.Getuid() != 0 {
			if err := chown(fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())); err != nil {
				t.Error(err)
			}
		}
	})

	egressNet := fmt.Sprintf("supervisor-e2e-egress-%d-%d", time.Now().Unix(), os.Getpid())
	c := newComposeFleet(t, composeOptions{
		files: []string{"compose.docker-sandbox.yaml"},
		env: []string{
			"SUPERVISOR_SANDBOX_DATA_DIR=" + dataDir,
			"SUPERVISOR_DOCKER_GID=" + socketGroup(t, "/var/run/docker.sock"),
			"SUPERVISOR_EGRESS_NETWORK=" + egressNet,
			// The coordinator's metrics port stands in for an agent's API.
			"SUPERVISOR_EGRESS_ALLOW=coordinator:9101",
		},
		up: []string{"--scale", "worker=1", "--scale", "gaterunner=1"},
		before: func() {
			if err := chown("10001:10001"); err != nil {
				t.Fatal(err)
			}
		},
	})
	gaters := c.hostnames("gaterunner")
	workers := c.hostnames("worker")
	if len(gaters) != 1 || len(workers) != 1 {
		t.Fatalf("gate runners %v and workers %v, want one of each", gaters, workers)
	}
	var runner string
	for h := range gaters {
		runner = h
	}

	repo, base := testkit.Repo(t, map[string]string{"README.md": "base readme\n"})
	wfFile := writeFile(t, t.TempDir(), "sandbox.yaml", composeSandboxWorkflow)
	wf := submitWait(t, c, 4*time.Minute, wfFile, repo)
	if got := branchChanges(t, repo, base, "supervisor/"+wf); !equalStrings(got, []string{"A\tsandboxed.txt"}) {
		t.Errorf("branch supervisor/%s changes %v, want just sandboxed.txt", wf, got)
	}

	s, code := c.status(wf)
	if code != 0 || s.Status != "succeeded" || len(s.Nodes) != 1 {
		t.Fatalf("status %s: exit %d, %q (%s), %d nodes", wf, code, s.Status, s.Reason, len(s.Nodes))
	}
	// The images compose.docker-sandbox.yaml names, unless the
	// environment names others (as it may for the whole fleet).
	agentImage, gateImage := "supervisor/worker:latest", "supervisor/sandbox-go:latest"
	if v := os.Getenv("SUPERVISOR_AGENT_IMAGE"); v != "" {
		agentImage = v
	}
	if v := os.Getenv("SUPERVISOR_GATE_IMAGE"); v != "" {
		gateImage = v
	}
	if n := s.Nodes[0]; !strings.HasPrefix(n.Sandbox, "docker "+agentImage+"@sha256:") {
		t.Errorf("the agent ran in %q, want the Docker sandbox with %s", n.Sandbox, agentImage)
	}
	want := map[string]struct {
		status string
		output string // a substring of the gate's output
	}{
		"mounted":    {"passed", ""},
		"agent-work": {"passed", ""},
		"toolchain":  {"passed", "go version go1."},
		"uid":        {"passed", "10001"},
		"network":    {"failed", "Could not resolve host: coordinator"},
		"root-fs":    {"failed", "Read-only file system"},
		"git-file":   {"failed", "Read-only file system"},
	}
	seen := map[string]bool{}
	for _, g := range s.Nodes[0].Gates {
		w, ok := want[g.Name]
		if !ok {
			t.Errorf("unexpected gate %s", g.Name)
			continue
		}
		seen[g.Name] = true
		if g.Status != w.status || !strings.Contains(g.Output, w.output) {
			t.Errorf("gate %s: %s with output %q (error %q), want %s with output containing %q",
				g.Name, g.Status, g.Output, g.Error, w.status, w.output)
		}
		if !strings.HasPrefix(g.Sandbox, "docker "+gateImage+"@sha256:") {
			t.Errorf("gate %s ran in %q, want the Docker sandbox with %s", g.Name, g.Sandbox, gateImage)
		}
		if g.Host != runner {
			t.Errorf("gate %s ran on %q, want the gate runner %s", g.Name, g.Host, runner)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("gate %s did not report", name)
		}
	}

	// The agent, in its container, reached the allowed host:port through
	// the proxy and was refused anywhere else.
	logs := c.cli(time.Minute, "logs", wf, "sandboxed")
	for _, want := range []string{
		"HTTPS_PROXY=http://", "fetch http://coordinator:9101/metrics: 200 OK", "fetch http://example.com/: 403 Forbidden",
	} {
		if !strings.Contains(logs.stdout, want) {
			t.Errorf("the agent's log lacks %q:\n%s", want, logs.stdout)
		}
	}
	var worker string
	for h, id := range workers {
		worker = h
		out, _ := exec.Command("docker", "logs", id).CombinedOutput()
		if !strings.Contains(string(out), "egress denied") || !strings.Contains(string(out), "example.com") {
			t.Errorf("worker %s did not log the denied connection to example.com:\n%s", h, out)
		}
	}

	// Every agent and gate ran in a container of its own, labelled with
	// its runner, and none is left. The gate runner's cache warm-up
	// (supervisor.warmup=1), started in the background when it starts,
	// may still be running, and so may the copy of its gate image's
	// directories that comes first (supervisor.image-copy=1): neither is a
	// gate's. What each runner has instead is the container of its
	// workspace's next job, started ahead of it (supervisor.prestarted=1,
	// running, PERF-63): the runners ship the helper that needs.
	for _, h := range []string{runner, worker} {
		var left []string
		prestarted := 0
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			out, err := exec.Command("docker", "ps", "-a", "--filter", "label=supervisor.host="+h,
				"--format", `{{.ID}}|{{.Label "supervisor.warmup"}}{{.Label "supervisor.image-copy"}}|{{.Label "supervisor.prestarted"}}|{{.State}}`).CombinedOutput()
			if err != nil {
				t.Errorf("docker ps for runner %s: %v: %s", h, err, out)
				break
			}
			left, prestarted = nil, 0
			for line := range strings.Lines(string(out)) {
				f := strings.Split(strings.TrimSpace(line), "|")
				switch {
				case len(f) != 4 || f[0] == "":
				case f[1] != "": // the warm-up or the image copy
				case f[2] == "1" && f[3] == "running":
					prestarted++
				default:
					left = append(left, f[0])
				}
			}
			if (prestarted > 0 && len(left) == 0) || time.Now().After(deadline) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("containers of runner %s left behind: %q", h, left)
		}
		if prestarted == 0 {
			t.Errorf("runner %s has no container started ahead of its next job", h)
		}
	}
	// The runner's workspaces were in its directory on this host.
	if _, err := os.Stat(filepath.Join(dataDir, runner)); err != nil {
		t.Errorf("the runner's data directory on this host: %v", err)
	}
}

// socketGroup returns the group id owning path (the Docker socket), which
// the runner containers get as a supplementary group.
func socketGroup(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the Docker socket: %v", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("no owner for %s on this platform", path)
	}
	return strconv.FormatUint(uint64(st.Gid), 10)
}
