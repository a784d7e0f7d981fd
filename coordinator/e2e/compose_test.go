package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// The Compose tests run the fleet of compose.yaml — a three-node NATS
// JetStream cluster, Redis, the coordinator, two workers and two gate
// runners, each in a container of its own, from the images `make images`
// builds locally — and drive it from this host with the coordinator CLI
// through the NATS port Compose publishes. They need a Docker engine and
// docker-compose (or `docker compose`): without them they skip, and under
// CI=true they fail.
//
// Each run is a Compose project of its own (supervisor-e2e-<unix time>-<random>)
// on a free host port, with an override file that gives the fleet a short
// ack wait and one job slot per runner; it is taken down with its volumes
// when the test ends, whatever happened. Projects a killed test run left
// behind are removed by the next run once they are an hour old.

const (
	// composeAckWait is the fleet-wide ack wait of the Compose tests: how
	// long after a killed runner's last heartbeat its job is redelivered.
	composeAckWait = 5 * time.Second
	// composeProjectPrefix starts the name of every Compose project the
	// tests create.
	composeProjectPrefix = "supervisor-e2e-"
	// composeStaleAfter is the age past which a left-over project is removed.
	composeStaleAfter = time.Hour
)

// composeOverride is the test's override file: one job slot per runner (so
// four parallel tasks must spread over both workers and both gate runners)
// and short drain and stop times.
const composeOverride = `services:
  worker:
    environment:
      SUPERVISOR_CONCURRENCY: "1"
      SUPERVISOR_DRAIN_TIMEOUT: 5s
    stop_grace_period: 10s
  gaterunner:
    environment:
      SUPERVISOR_CONCURRENCY: "1"
      SUPERVISOR_DRAIN_TIMEOUT: 5s
    stop_grace_period: 10s
`

// composeFleet is one Compose project brought up for a test.
type composeFleet struct {
	t       *testing.T
	root    string   // the repository (compose.yaml's directory)
	tool    []string // "docker-compose" or "docker compose"
	up      []string // more arguments of `up -d`
	project string
	files   []string // -f arguments
	env     []string // the Compose tool's environment
	natsURL string   // the published client port of nats-1, from this host
	promURL string   // the published Prometheus API, from this host
	dir     string
	// creds is the project's credentials, as make compose-creds makes
	// them: a set of `coordinator creds init` (the CLI uses its cli or
	// operator key) and the certificates and Redis users of
	// scripts/compose-creds.sh (the CLI uses tls/cli).
	creds string
}

// composeTool returns the Compose command line to use: `docker compose`
// when the Docker CLI has it, else docker-compose. It skips the test (fails
// it under CI=true) when there is no Docker engine or no Compose.
func composeTool(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		testkit.Missing(t, "the docker CLI")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Logf("docker info: %v\n%s", err, out)
		testkit.Missing(t, "a running Docker engine")
	}
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	testkit.Missing(t, "docker-compose or the docker compose plugin")
	return nil
}

// buildImages runs `make images` (idempotent: it rebuilds only what
// changed) and fails the test with its output if it fails.
func buildImages(t *testing.T, root string) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "images")
	cmd.Dir = root
	// Not a sub-make of the `make test` that may be running these tests:
	// its jobserver's descriptors are not inherited through go test.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "MAKEFLAGS" && name != "MFLAGS" && name != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make images failed (the Compose tests need the locally built images): %v\n%s", err, out)
	}
	t.Logf("make images: %s", time.Since(start).Round(time.Millisecond))
}

// composeOptions changes the fleet newComposeFleet brings up.
type composeOptions struct {
	files []string // more Compose files, relative to the repository, after compose.yaml and before the test's override
	env   []string // more KEY=VALUE for the Compose tool
	up    []string // more arguments of `up -d`, e.g. --scale worker=1
	name  string   // a word in the project's name, after the time (e.g. "chaos")
	// before, if set, runs after the images are built and before `up`.
	before func()
}

// newComposeFleet builds the images, brings a Compose project up and waits
// until the coordinator answers and every runner pulls jobs. The project
// is taken down (volumes included) when the test ends.
func newComposeFleet(t *testing.T, opts composeOptions) *composeFleet {
	t.Helper()
	tool := composeTool(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	buildImages(t, root)

	c := &composeFleet{t: t, root: root, tool: tool, dir: t.TempDir()}
	override := filepath.Join(c.dir, "compose.e2e.yaml")
	if err := os.WriteFile(override, []byte(composeOverride), 0o644); err != nil {
		t.Fatal(err)
	}
	c.files = []string{"-f", filepath.Join(root, "compose.yaml")}
	for _, f := range opts.files {
		c.files = append(c.files, "-f", filepath.Join(root, f))
	}
	c.files = append(c.files, "-f", override)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := hex.EncodeToString(suffix[:])
	if opts.name != "" {
		name = opts.name + "-" + name
	}
	c.project = fmt.Sprintf("%s%d-%s", composeProjectPrefix, time.Now().Unix(), name)
	c.env = append(os.Environ(),
		"SUPERVISOR_ACK_WAIT="+composeAckWait.String(),
		"SUPERVISOR_NATS_PORT=127.0.0.1:", // a free port, picked by the engine
		"SUPERVISOR_PROMETHEUS_PORT=127.0.0.1:",
		"COMPOSE_PROJECT_NAME="+c.project,
	)
	c.creds = filepath.Join(c.dir, "creds")
	c.makeCreds()
	c.env = append(c.env, "SUPERVISOR_CREDS_DIR="+c.creds)
	c.env = append(c.env, opts.env...)
	c.removeStale()

	// Registered before `up`, so a half-started project goes too.
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
		start := time.Now()
		if r := c.compose(3*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); r.code != 0 {
			t.Errorf("compose down of %s: exit %d\n%s%s", c.project, r.code, r.stdout, r.stderr)
		} else {
			t.Logf("compose down: %s", time.Since(start).Round(time.Millisecond))
		}
	})

	if opts.before != nil {
		opts.before()
	}
	c.up = opts.up
	c.start()
	return c
}

// cliTLS are the TLS files of this host's clients of the fleet (the CLI
// role's, which scripts/compose-creds.sh leaves this user's).
func (c *composeFleet) cliTLS() tlsconfig.Files {
	return testkit.CertFiles(filepath.Join(c.creds, "tls"), "cli")
}

// makeTLSCreds generates the fleet's certificates and Redis users as `make
// compose-up` does (scripts/compose-creds.sh, which hands each service's
// files to its container's uid) in the test's directory, for the Compose
// tool's SUPERVISOR_CREDS_DIR. When the test ends they are handed back to
// this process's uid, so that its temporary directory can be removed.
func (c *composeFleet) makeTLSCreds() {
	t := c.t
	t.Helper()
	t.Cleanup(func() {
		owner := strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())
		base := os.Getenv("SUPERVISOR_SANDBOX_BASE_IMAGE")
		if base == "" {
			base = "supervisor/sandbox-base:latest"
		}
		if r := c.run(time.Minute, "docker", "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "chown",
			"-v", c.creds+":/d", base, "-R", owner, "/d"); r.code != 0 {
			t.Errorf("hand the fleet's credentials back to %s: exit %d\n%s%s", owner, r.code, r.stdout, r.stderr)
		}
	})
	if r := c.run(2*time.Minute, filepath.Join(c.root, "scripts", "compose-creds.sh"), c.creds, filepath.Join(binDir, "coordinator")); r.code != 0 {
		t.Fatalf("scripts/compose-creds.sh: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// start runs `up -d` and waits until the coordinator answers and every
// runner pulls jobs.
func (c *composeFleet) start() {
	t := c.t
	t.Helper()
	start := time.Now()
	if r := c.compose(5*time.Minute, append([]string{"up", "-d"}, c.up...)...); r.code != 0 {
		t.Fatalf("compose up of %s: exit %d\n%s%s", c.project, r.code, r.stdout, r.stderr)
	}
	r := c.compose(time.Minute, "port", "nats-1", "4222")
	addr := strings.TrimSpace(r.stdout)
	if r.code != 0 || addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("compose port nats-1 4222: exit %d: %q %s", r.code, addr, r.stderr)
	}
	c.natsURL = "tls://" + strings.Replace(addr, "0.0.0.0:", "127.0.0.1:", 1)
	r = c.compose(time.Minute, "port", "prometheus", "9090")
	if addr = strings.TrimSpace(r.stdout); r.code != 0 || addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("compose port prometheus 9090: exit %d: %q %s", r.code, addr, r.stderr)
	}
	c.promURL = "http://" + strings.Replace(addr, "0.0.0.0:", "127.0.0.1:", 1)

	waitFor(t, 3*time.Minute, "the coordinator in "+c.project+" to answer", func() bool {
		return c.cli(30*time.Second, "status", "--timeout", "3s").code == 0
	})
	for _, svc := range []string{"worker", "gaterunner"} {
		for _, id := range c.containers(svc) {
			waitFor(t, 2*time.Minute, svc+" container "+id+" to pull jobs", func() bool {
				out, _ := exec.Command("docker", "logs", id).CombinedOutput()
				return bytes.Contains(out, []byte("pulling jobs"))
			})
		}
	}
	t.Logf("compose project %s up in %s; NATS at %s", c.project, time.Since(start).Round(time.Millisecond), c.natsURL)
}

// restart stops every container of the project, keeping its volumes (the
// NATS cluster's streams, Redis, the coordinator's mirrors), and starts
// them again: `make compose-down`, then `make compose-up`.
func (c *composeFleet) restart() {
	c.t.Helper()
	if r := c.compose(3*time.Minute, "stop", "-t", "10"); r.code != 0 {
		c.t.Fatalf("compose stop of %s: exit %d\n%s%s", c.project, r.code, r.stdout, r.stderr)
	}
	c.start()
}

// makeCreds makes the project's credentials as make compose-creds does:
// creds init, then the coordinator's and runners' keys chown'd to their
// containers' uid in a throw-away container, then the certificates and
// Redis users (makeTLSCreds).
func (c *composeFleet) makeCreds() {
	c.t.Helper()
	if r := runCLI(c.t, c.dir, "", time.Minute, "creds", "init", c.creds); r.code != 0 {
		c.t.Fatalf("creds init: %s", r)
	}
	// The chaos suite's own NATS clients (connectNATS) observe and steer
	// the cluster as the coordinator role: a copy of its key this host's
	// user keeps reading after the chown.
	key, err := os.ReadFile(filepath.Join(c.creds, "coordinator.nk"))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(c.observerKey(), key, 0o600); err != nil {
		c.t.Fatal(err)
	}
	if r := c.run(time.Minute, "docker", "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "chown",
		"-v", c.creds+":/d", "supervisor/sandbox-base:latest", "10001:10001",
		"/d/coordinator.nk", "/d/worker.nk", "/d/gaterunner.nk"); r.code != 0 {
		c.t.Fatalf("chown the fleet's keys: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	c.makeTLSCreds()
}

// observerKey is the test's copy of the coordinator role's key.
func (c *composeFleet) observerKey() string { return filepath.Join(c.dir, "observer.nk") }

// compose runs the Compose tool on the project.
func (c *composeFleet) compose(timeout time.Duration, args ...string) result {
	c.t.Helper()
	argv := append(append(append(append([]string(nil), c.tool[1:]...), "-p", c.project), c.files...), args...)
	return c.run(timeout, c.tool[0], argv...)
}

// run runs a command in the repository with the Compose environment.
func (c *composeFleet) run(timeout time.Duration, name string, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.root
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return ended(ctx, timeout, append([]string{name}, args...), &stdout, &stderr, err)
}

// containers returns the ids of a service's running containers.
func (c *composeFleet) containers(service string) []string {
	c.t.Helper()
	r := c.run(time.Minute, "docker", "ps", "-q", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+c.project,
		"--filter", "label=com.docker.compose.service="+service)
	if r.code != 0 {
		c.t.Fatalf("docker ps: exit %d: %s", r.code, r.stderr)
	}
	return strings.Fields(r.stdout)
}

// hostnames maps the hostnames of a service's running containers (the
// runners' --host-id) to the containers' ids.
func (c *composeFleet) hostnames(service string) map[string]string {
	c.t.Helper()
	hosts := map[string]string{}
	for _, id := range c.containers(service) {
		r := c.run(time.Minute, "docker", "inspect", "--format", "{{.Config.Hostname}}", id)
		if r.code != 0 {
			c.t.Fatalf("docker inspect %s: exit %d: %s", id, r.code, r.stderr)
		}
		hosts[strings.TrimSpace(r.stdout)] = id
	}
	return hosts
}

// cli runs the coordinator CLI (built by TestMain) on this host against
// the fleet's published NATS port.
func (c *composeFleet) cli(timeout time.Duration, args ...string) result {
	c.t.Helper()
	if !hasFlag(args, "--nats-nkey") {
		args = append(append([]string(nil), args...), "--nats-nkey", filepath.Join(c.creds, cliRole(args)+".nk"))
	}
	if !hasFlag(args, "--nats-ca") {
		f := c.cliTLS()
		args = append(append([]string(nil), args...), "--nats-ca", f.CA, "--nats-cert", f.Cert, "--nats-key", f.Key)
	}
	return runCLI(c.t, c.dir, c.natsURL, timeout, args...)
}

// status runs `coordinator status WF -o json` and decodes it.
func (c *composeFleet) status(wf string) (wfStatus, int) {
	c.t.Helper()
	return statusOf(c.t, c.cli(time.Minute, "status", wf, "-o", "json"))
}

// dumpLogs logs the tail of every container's log.
func (c *composeFleet) dumpLogs() {
	r := c.compose(2*time.Minute, "logs", "--no-color", "--tail", "300")
	out := r.stdout + r.stderr
	const max = 256 << 10
	if len(out) > max {
		out = "[... " + strconv.Itoa(len(out)-max) + " bytes cut ...]\n" + out[len(out)-max:]
	}
	c.t.Logf("==== logs of compose project %s ====\n%s", c.project, out)
}

// removeStale takes down projects of earlier runs that were killed before
// their cleanup ran (a go test timeout), once they are composeStaleAfter old.
func (c *composeFleet) removeStale() {
	c.t.Helper()
	r := c.run(time.Minute, "docker", "ps", "-a", "--format", `{{.Label "com.docker.compose.project"}}`)
	if r.code != 0 {
		return
	}
	seen := map[string]bool{}
	for _, p := range strings.Fields(r.stdout) {
		if seen[p] || !strings.HasPrefix(p, composeProjectPrefix) {
			continue
		}
		seen[p] = true
		stamp, _, _ := strings.Cut(strings.TrimPrefix(p, composeProjectPrefix), "-")
		sec, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil || time.Since(time.Unix(sec, 0)) < composeStaleAfter {
			continue
		}
		c.t.Logf("removing compose project %s, left over by an earlier run", p)
		argv := append(append(append([]string(nil), c.tool[1:]...), "-p", p), c.files...)
		c.run(3*time.Minute, c.tool[0], append(argv, "down", "-v", "--remove-orphans", "-t", "1")...)
	}
}

// composeSpreadWorkflow: four tasks in parallel (each agent sleeps, so
// two workers with one slot each share them), each gated by gates the
// runner image's Debian base provides, and one task depending on all four.
const composeSpreadWorkflow = `name: compose-spread
` + agentDefaults + `gates:
  - name: exists
    command: [test, -f, README.md]
  - name: readme
    command: [grep, -q, "^base readme", README.md]
    depends_on: [exists]
  - name: settle
    command: [sleep, "1"]
  - name: toolchain
    command: [go, version]
  - name: parts
    command: [cat, part-1.txt, part-2.txt, part-3.txt, part-4.txt]
tasks:
%s  - id: combine
    depends_on: [part-1, part-2, part-3, part-4]
    gates: [parts, toolchain]
    prompt: |
      Combine the four parts.
      @append README.md
      all four parts are in
      @end
`

const composeSpreadPart = `  - id: part-%[1]d
    gates: [readme, settle]
    prompt: |
      Write part %[1]d.
      @sleep 2s
      @write part-%[1]d.txt
      part %[1]d
      @end
`

// composeRestartWorkflow: one gated task, after the fleet restarted.
const composeRestartWorkflow = `name: compose-restart
` + agentDefaults + `gates:
  - name: check
    command: [grep, -q, "^again$", again.txt]
tasks:
  - id: again
    gates: [check]
    prompt: |
      @write again.txt
      again
      @end
`

// composeKillWorkflow: one task whose first gate sleeps long enough for
// the test to kill the gate runner running it.
const composeKillWorkflow = `name: compose-kill
` + agentDefaults + `gates:
  - name: hold
    command: [sleep, "8"]
  - name: check
    command: [grep, -q, "^survived$", survivor.txt]
    depends_on: [hold]
tasks:
  - id: victim
    prompt: |
      Write one file.
      @write survivor.txt
      survived
      @end
`

// TestComposeFleet brings compose.yaml's fleet up, runs a workflow whose
// jobs spread over both workers and both gate runners and whose branch
// comes back to this host through the result bundle, then kills the gate
// runner container running a gate and sees the gate redelivered to the
// other runner and the workflow succeed.
func TestComposeFleet(t *testing.T) {
	c := newComposeFleet(t, composeOptions{})
	workers := c.hostnames("worker")
	gaters := c.hostnames("gaterunner")
	if len(workers) != 2 || len(gaters) != 2 {
		t.Fatalf("compose.yaml started workers %v and gate runners %v, want two of each", workers, gaters)
	}
	// NATS authorization is on (AUTH-10): without a key the CLI is refused.
	if r := c.cli(time.Minute, "status", "--nats-nkey", ""); r.code != 77 || !strings.Contains(r.stderr, "requires credentials") {
		t.Fatalf("an anonymous client of the Compose fleet: want exit 77, credentials required\n%s", r)
	}

	t.Run("Spread", func(t *testing.T) {
		repo, base := testkit.Repo(t, map[string]string{"README.md": "base readme\n", "keep.txt": "untouched\n"})
		var parts strings.Builder
		for i := 1; i <= 4; i++ {
			fmt.Fprintf(&parts, composeSpreadPart, i)
		}
		wfFile := writeFile(t, t.TempDir(), "spread.yaml", fmt.Sprintf(composeSpreadWorkflow, parts.String()))

		started := time.Now()
		wf := submitWait(t, c, 4*time.Minute, wfFile, repo)
		t.Logf("workflow %s succeeded in %s", wf, time.Since(started).Round(time.Millisecond))

		// The coordinator's container cannot see this repository: the branch
		// arrived through the result bundle submit --wait fetched.
		branch := "supervisor/" + wf
		want := []string{"A\tpart-1.txt", "A\tpart-2.txt", "A\tpart-3.txt", "A\tpart-4.txt", "M\tREADME.md"}
		if got := branchChanges(t, repo, base, branch); !equalStrings(got, want) {
			t.Errorf("git diff --name-status %s..%s = %v, want %v", base[:12], branch, got, want)
		}
		if got := fileAt(t, repo, branch, "README.md"); got != "base readme\nall four parts are in\n" {
			t.Errorf("README.md on %s = %q", branch, got)
		}

		s, code := c.status(wf)
		if code != 0 || s.Status != "succeeded" {
			t.Fatalf("status %s: exit %d, status %q (%s)", wf, code, s.Status, s.Reason)
		}
		nodeHosts, gateHosts := map[string]int{}, map[string]int{}
		for _, n := range s.Nodes {
			if n.Status != "succeeded" {
				t.Errorf("node %s: %s (%s)", n.ID, n.Status, n.Reason)
			}
			nodeHosts[n.Host]++
			for _, g := range n.Gates {
				if g.Status != "passed" {
					t.Errorf("node %s gate %s: %q %s %s", n.ID, g.Name, g.Status, g.Error, g.Output)
				}
				if g.Name == "toolchain" && !strings.Contains(g.Output, "go version go1.") {
					t.Errorf("gate toolchain printed %q, want go version …", g.Output)
				}
				gateHosts[g.Host]++
			}
		}
		t.Logf("agent jobs per container: %v; gate jobs per container: %v", nodeHosts, gateHosts)
		checkSpread(t, "agent jobs", nodeHosts, sortedKeys(workers))
		checkSpread(t, "gate jobs", gateHosts, sortedKeys(gaters))
	})

	// Prometheus, built from Debian's package, scrapes every replica.
	t.Run("Metrics", func(t *testing.T) { testComposeMetrics(t, c, len(workers), len(gaters)) })

	// The demo workflow `make run` runs on the embedded default, submitted
	// to this fleet (what `make compose-demo` does): go vet and go test run
	// in the gate runners' containers.
	t.Run("Demo", func(t *testing.T) {
		r := c.cli(5*time.Minute, "demo", "--fleet")
		if r.code != 0 {
			t.Fatalf("demo --fleet did not succeed:\n%s", r)
		}
		for _, want := range []string{"greet-demo: add-goodbye", "greet-demo: add-shout", "greet-demo: document", "6 files changed"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("demo --fleet output lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	// The whole fleet stopped and started again on its volumes: the
	// coordinator replays the three-node cluster's event log (a stream
	// whose leader the restart moves) and knows every workflow, and the
	// runners take new work.
	t.Run("Restart", func(t *testing.T) {
		before := c.cli(time.Minute, "status", "-o", "json")
		if before.code != 0 {
			t.Fatalf("status: %s", before)
		}
		c.restart()
		after := c.cli(time.Minute, "status", "-o", "json")
		if after.code != 0 || after.stdout != before.stdout {
			t.Errorf("the workflows after the restart differ:\nbefore: %s\nafter: %s", before.stdout, after)
		}
		repo, base := testkit.Repo(t, map[string]string{"README.md": "base\n"})
		wfFile := writeFile(t, t.TempDir(), "after-restart.yaml", composeRestartWorkflow)
		wf := submitWait(t, c, 3*time.Minute, wfFile, repo)
		if got := branchChanges(t, repo, base, "supervisor/"+wf); !equalStrings(got, []string{"A\tagain.txt"}) {
			t.Errorf("branch changes %v, want just again.txt", got)
		}
	})

	t.Run("GateRunnerKilled", func(t *testing.T) {
		repo, base := testkit.Repo(t, map[string]string{"README.md": "base\n"})
		wfFile := writeFile(t, t.TempDir(), "kill.yaml", composeKillWorkflow)
		wf := submit(t, c, wfFile, repo)

		// Wait for the hold gate to start, and kill the container running it.
		var victim string
		waitFor(t, 2*time.Minute, "gate hold of "+wf+" to start", func() bool {
			s, _ := c.status(wf)
			if s.Status != "running" {
				t.Fatalf("workflow %s ended (%s: %s) before its gate started", wf, s.Status, s.Reason)
			}
			for _, n := range s.Nodes {
				for _, g := range n.Gates {
					if g.Name == "hold" && g.Host != "" && g.Status == "" {
						victim = g.Host
						return true
					}
				}
			}
			return false
		})
		id, ok := gaters[victim]
		if !ok {
			t.Fatalf("gate hold runs on %q, not one of the gate runner containers %v", victim, gaters)
		}
		var survivor string
		for h := range gaters {
			if h != victim {
				survivor = h
			}
		}
		killed := time.Now()
		if r := c.run(time.Minute, "docker", "kill", id); r.code != 0 {
			t.Fatalf("docker kill %s: exit %d: %s", id, r.code, r.stderr)
		}
		t.Logf("killed gate runner %s (container %.12s) mid-gate; %s should take the gate over after the ack wait (%s)", victim, id, survivor, composeAckWait)

		// watch --repo follows the workflow to its end and fetches the branch.
		r := c.cli(3*time.Minute, "watch", wf, "--repo", repo)
		if r.code != 0 {
			t.Fatalf("watch %s did not succeed:\n%s", wf, r)
		}
		t.Logf("workflow %s succeeded %s after the kill", wf, time.Since(killed).Round(time.Millisecond))
		s, code := c.status(wf)
		if code != 0 || s.Status != "succeeded" {
			t.Fatalf("status %s: exit %d, %q (%s)", wf, code, s.Status, s.Reason)
		}
		for _, n := range s.Nodes {
			if n.Attempt != 1 {
				t.Errorf("node %s ran its agent %d times; the kill of a gate runner must not rerun it", n.ID, n.Attempt)
			}
			for _, g := range n.Gates {
				if g.Status != "passed" {
					t.Errorf("gate %s: %q %s", g.Name, g.Status, g.Error)
				}
				if g.Name == "hold" && g.Host != survivor {
					t.Errorf("gate hold finished on %q, want the surviving runner %s", g.Host, survivor)
				}
			}
		}
		if got := branchChanges(t, repo, base, "supervisor/"+wf); !equalStrings(got, []string{"A\tsurvivor.txt"}) {
			t.Errorf("branch supervisor/%s changes %v, want just survivor.txt", wf, got)
		}
	})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
