package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// binDir holds the binaries TestMain builds; sandboxPath is the PATH the
// runners give their sandboxed commands (the test agent, go, the base).
var (
	binDir      string
	sandboxPath string
)

// TestMain builds every binary once for the whole package.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped under -short")
		os.Exit(0)
	}
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	root, err := repoRoot()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "supervisor-e2e-bin-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	builds := []struct{ dir, out, pkg string }{
		{filepath.Join(root, "coordinator"), "coordinator", "./cmd/coordinator"},
		{filepath.Join(root, "worker"), "worker", "./cmd/worker"},
		{filepath.Join(root, "gaterunner"), "gaterunner", "./cmd/gaterunner"},
		{filepath.Join(root, "worker"), "supervisor-test-agent", "./cmd/supervisor-test-agent"},
		// Stand-ins for the real agent CLIs, under their names.
		{filepath.Join(root, "worker"), "claude", "./internal/testcli/claude"},
		{filepath.Join(root, "worker"), "codex", "./internal/testcli/codex"},
		{filepath.Join(root, "coordinator"), "gatehelper", "./e2e/testdata/gatehelper"},
		{filepath.Join(root, "shared"), "nats-server", "github.com/nats-io/nats-server/v2"},
	}
	start := time.Now()
	for _, b := range builds {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	fmt.Fprintf(os.Stderr, "e2e: built the binaries in %s\n", time.Since(start).Round(time.Millisecond))
	goBin, err := exec.LookPath("go")
	if err != nil {
		return 0, err
	}
	if resolved, err := filepath.EvalSymlinks(goBin); err == nil {
		goBin = resolved
	}
	binDir = dir
	sandboxPath = strings.Join([]string{dir, filepath.Dir(goBin), "/usr/local/bin", "/usr/bin", "/bin"}, ":")
	return m.Run(), nil
}

// repoRoot is the directory of go.work (the monorepo's root).
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	if gw := strings.TrimSpace(string(out)); gw != "" && gw != "off" {
		return filepath.Dir(gw), nil
	}
	return filepath.Abs(filepath.Join("..", ".."))
}

// proc is one running binary.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set when done is closed
}

// signal sends sig to the process (not its children).
func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// wait waits for the process to exit.
func (p *proc) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
		return nil
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logText returns what the process has logged so far.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// fleet is one test's set of servers and binaries.
type fleet struct {
	t        *testing.T
	dir      string
	natsURL  string
	redisURL string
	ackWait  string
	// env holds extra NAME=value variables for every process start runs
	// from then on (set it before starting them).
	env []string
	// coordArgs are extra arguments of every `coordinator serve` started
	// from then on, after the harness's own (so they override them).
	coordArgs []string
	// tlsDir, when set (newSecureFleet), is the directory `coordinator tls
	// init` wrote: NATS and Redis serve TLS only, Redis has an ACL user
	// per service, and every process connects with its role's files.
	tlsDir    string
	redisAddr string
	// creds, when set, is the credentials set (`coordinator creds init`)
	// nats-server enforces: every process started connects with its role's
	// key, the CLI with the cli role's or, for an operator's command, the
	// operator's (newAuthFleet).
	creds string

	mu    sync.Mutex
	procs []*proc
}

// newFleet starts a nats-server process and a Redis for the test. ackWait
// is passed to every service as --ack-wait.
func newFleet(t *testing.T, ackWait time.Duration) *fleet {
	t.Helper()
	return startFleet(t, ackWait, false)
}

// newAuthFleet is newFleet with NATS authorization on: a credentials set
// made by `coordinator creds init`, included by nats-server's config, and
// each process given its role's key (fleet.creds).
func newAuthFleet(t *testing.T, ackWait time.Duration) *fleet {
	t.Helper()
	return startFleet(t, ackWait, true)
}

func startFleet(t *testing.T, ackWait time.Duration, auth bool) *fleet {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is required: %v", err)
	}
	f := &fleet{t: t, dir: t.TempDir(), ackWait: ackWait.String()}
	for _, d := range []string{"logs", "data"} {
		if err := os.MkdirAll(filepath.Join(f.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Registered before any process starts, so it runs after they are all
	// killed (cleanups run last-in first-out).
	t.Cleanup(func() {
		killStrays(f.dir)
		if t.Failed() {
			f.dumpLogs()
		}
	})
	f.redisURL = fleetRedis(t)
	if auth {
		f.creds = filepath.Join(f.dir, "creds")
		if r := runCLI(t, f.dir, "", time.Minute, "creds", "init", f.creds); r.code != 0 {
			t.Fatalf("creds init: %s", r)
		}
	}
	f.natsURL = f.startNATS()
	return f
}

// nkeyArgs are the --nats-nkey arguments of a process of role ("" without
// credentials, or when args already name a key).
func (f *fleet) nkeyArgs(role string, args []string) []string {
	if f.creds == "" || hasFlag(args, "--nats-nkey") {
		return nil
	}
	return []string{"--nats-nkey", filepath.Join(f.creds, role+".nk")}
}

// operatorCommands are the CLI commands only the operator role may run.
var operatorCommands = map[string]bool{"approve": true, "reject": true, "retry": true, "resume": true, "merge": true}

// cliRole is the role of a CLI invocation: operator for operatorCommands,
// breakers reset and gate add|update|remove|rerun; cli otherwise.
func cliRole(args []string) string {
	if len(args) == 0 {
		return "cli"
	}
	if operatorCommands[args[0]] {
		return "operator"
	}
	if len(args) > 1 && (args[0] == "breakers" && args[1] == "reset" || args[0] == "gate" && args[1] != "list") {
		return "operator"
	}
	return "cli"
}

// dumpLogs prints every process's log (its tail, when long).
func (f *fleet) dumpLogs() {
	f.mu.Lock()
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	const max = 48 << 10
	for _, p := range procs {
		text := p.logText()
		if len(text) > max {
			text = "[... " + strconv.Itoa(len(text)-max) + " bytes cut ...]\n" + text[len(text)-max:]
		}
		f.t.Logf("==== log of %s (%s) ====\n%s", p.name, p.log, text)
	}
}

// start runs a binary from binDir as a separate process logging to its own
// file; it is killed when the test ends.
func (f *fleet) start(name, bin string, args ...string) *proc {
	f.t.Helper()
	logPath := filepath.Join(f.dir, "logs", name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Dir = f.dir
	cmd.Env = append(config.ChildEnv(), f.env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		f.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// startNATS runs a nats-server process with JetStream on a free port.
func (f *fleet) startNATS() string {
	f.t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := testkit.FreePort()
		if err != nil {
			f.t.Fatal(err)
		}
		name := "nats-server"
		if attempt > 0 {
			name += "-" + strconv.Itoa(attempt+1)
		}
		args := []string{"-js", "-sd", filepath.Join(f.dir, "data", name), "-p", strconv.Itoa(port), "-a", "127.0.0.1"}
		if f.creds != "" {
			// The include is relative to the config file.
			conf := filepath.Join(f.dir, name+".conf")
			testkit.WriteFile(f.t, conf, "include \"creds/nats-auth.conf\"\n")
			args = append(args, "-c", conf)
		}
		p := f.start(name, "nats-server", args...)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-p.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		lastErr = testkit.WaitTCP(ctx, addr, 15*time.Second)
		cancel()
		if lastErr == nil && !p.exited() {
			return "nats://" + addr
		}
		_ = p.cmd.Process.Kill() // the port was taken in the meantime; try another
	}
	f.t.Fatalf("nats-server did not start: %v", lastErr)
	return ""
}

// redisDBs holds the numbers of the shared server's databases no fleet is
// using (1…15 of Redis's default 16; 0 is left to other tests).
var redisDBs = func() chan int {
	c := make(chan int, 15)
	for i := 1; i <= 15; i++ {
		c <- i
	}
	return c
}()

// fleetRedis returns a Redis URL of the test's own. With a shared server
// (SUPERVISOR_TEST_REDIS_URL, which `make test` sets) each fleet gets a
// database of its own until the test ends, emptied first, since every
// binary uses the same key prefix and the coordinator leader lock would
// otherwise be shared. With every database taken it starts a redis-server
// of its own: a database handed to a second fleet while the first still
// runs would take the first one's leader lock away.
func fleetRedis(t *testing.T) string {
	t.Helper()
	raw := testkit.Redis(t)
	if os.Getenv("SUPERVISOR_TEST_REDIS_URL") == "" {
		return raw // a redis-server of the test's own
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("SUPERVISOR_TEST_REDIS_URL %q: %v", raw, err)
	}
	var db int
	select {
	case db = <-redisDBs:
		t.Cleanup(func() { redisDBs <- db })
	default:
		return testkit.PrivateRedis(t)
	}
	u.Path = "/" + strconv.Itoa(db)
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		t.Fatalf("redis URL %q: %v", u, err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("flush redis database %s: %v", u.Path, err)
	}
	return u.String()
}

// killStrays kills processes still working under dir: agents orphaned when
// a test killed their worker (they run in process groups of their own).
func killStrays(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+string(filepath.Separator))) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// coordinator starts `coordinator serve` with the given data dir (under
// the fleet's) and waits until it answers the API.
func (f *fleet) coordinator(name, dataDir string) *proc {
	f.t.Helper()
	p := f.startCoordinator(name, dataDir)
	f.waitCoordinator(p, 60*time.Second)
	return p
}

func (f *fleet) startCoordinator(name, dataDir string) *proc {
	f.t.Helper()
	// The tests fail many agent rounds on purpose, on one fleet: the
	// fleet-wide pause would stop them (its own tests are in cli and
	// statemachine).
	args := []string{"serve",
		"--nats", f.natsURL, "--redis-url", f.redisURLOf("coordinator"),
		"--data-dir", filepath.Join(f.dir, "data", dataDir), "--id", name,
		"--ack-wait", f.ackWait, "--max-failures-per-hour", "1000"}
	args = append(args, f.nkeyArgs("coordinator", f.coordArgs)...)
	if !hasFlag(f.coordArgs, "--repo-roots") {
		// The tests' repositories are temporary directories: the
		// coordinator may deliver branches and merge into them. (A
		// repeated --repo-roots adds a root, so a test's own replaces it.)
		args = append(args, "--repo-roots", os.TempDir())
	}
	args = append(args, f.securityArgs("coordinator")...)
	args = append(args, f.coordArgs...)
	return f.start(name, "coordinator", args...)
}

// waitCoordinator waits until `coordinator status` lists workflows.
func (f *fleet) waitCoordinator(p *proc, timeout time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := f.cli(10*time.Second, "status", "--timeout", "2s")
		if r.code == 0 {
			return
		}
		if p.exited() {
			f.t.Fatalf("%s exited before it was ready: %v", p.name, p.err)
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s not ready after %s: last status: exit %d: %s", p.name, timeout, r.code, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runner starts a worker or gaterunner process named name (also its
// --host-id) and waits until it pulls jobs. It uses the process sandbox
// even where a Docker sandbox image exists: the commands it runs are this
// host's binaries (binDir on sandboxPath).
func (f *fleet) runner(bin, name string, extra ...string) *proc {
	f.t.Helper()
	args := append([]string{
		"--nats", f.natsURL, "--redis-url", f.redisURLOf(bin),
		"--data-dir", filepath.Join(f.dir, "data", name), "--host-id", name,
		"--sandbox-path", sandboxPath, "--sandbox", "process", "--ack-wait", f.ackWait, "--drain-timeout", "5s",
	}, f.securityArgs(bin)...)
	args = append(args, extra...)
	args = append(args, f.nkeyArgs(bin, extra)...)
	p := f.start(name, bin, args...)
	waitFor(f.t, 30*time.Second, name+" to pull jobs", func() bool {
		if p.exited() {
			f.t.Fatalf("%s exited: %v\n%s", name, p.err, p.logText())
		}
		return strings.Contains(p.logText(), "pulling")
	})
	return p
}

func (f *fleet) worker(name string, extra ...string) *proc {
	return f.runner("worker", name, extra...)
}

func (f *fleet) gaterunner(name string, extra ...string) *proc {
	return f.runner("gaterunner", name, extra...)
}

// result is a finished CLI invocation.
type result struct {
	args   []string
	stdout string
	stderr string
	code   int
}

func (r result) String() string {
	return fmt.Sprintf("coordinator %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// cli runs the coordinator binary as a client of the fleet's NATS (unless
// args name another with --nats) and returns its output and exit code.
func (f *fleet) cli(timeout time.Duration, args ...string) result {
	f.t.Helper()
	if f.tlsDir != "" && !hasFlag(args, "--nats-ca") {
		args = append(append([]string(nil), args...), f.securityArgs("cli")...)
	}
	args = append(append([]string(nil), args...), f.nkeyArgs(cliRole(args), args)...)
	return runCLI(f.t, f.dir, f.natsURL, timeout, args...)
}

// runCLI runs the coordinator binary in dir as a client of natsURL
// (unless args name another with --nats) and returns its output and exit
// code; it fails the test if the binary cannot run or outlasts timeout.
func runCLI(t *testing.T, dir, natsURL string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if !hasFlag(args, "--nats") {
		args = append(append([]string(nil), args...), "--nats", natsURL)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "coordinator"), args...)
	cmd.Dir = dir
	cmd.Env = config.ChildEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("coordinator %s did not finish within %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run coordinator %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// background runs a CLI command without waiting for it; the returned
// channel yields its result.
func (f *fleet) background(timeout time.Duration, args ...string) <-chan result {
	ch := make(chan result, 1)
	args = append(append([]string(nil), args...), f.nkeyArgs(cliRole(args), args)...)
	if !hasFlag(args, "--nats") {
		args = append(append([]string(nil), args...), "--nats", f.natsURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "coordinator"), args...)
	cmd.Dir = f.dir
	cmd.Env = config.ChildEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		f.t.Fatalf("start coordinator %s: %v", strings.Join(args, " "), err)
	}
	f.t.Cleanup(func() { cancel() })
	go func() {
		defer cancel()
		err := cmd.Wait()
		ch <- ended(ctx, timeout, args, &stdout, &stderr, err)
	}()
	return ch
}

// ended is the result of a command run with args under ctx, which timeout
// bounds, that wrote stdout and stderr and ended with err (from Run or
// Wait): its exit code, or -1 with a note on stderr when it was killed at
// the timeout or did not run.
func ended(ctx context.Context, timeout time.Duration, args []string, stdout, stderr *bytes.Buffer, err error) result {
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.code = -1
		r.stderr += fmt.Sprintf("\n[e2e: killed after %s]", timeout)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		r.code = -1
		r.stderr += "\n[e2e: " + err.Error() + "]"
	}
	return r
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// wfStatus is a workflow as `coordinator status -o json` prints it, as
// the tests read it (the local fleet's and the Compose fleet's alike).
type wfStatus struct {
	ID         string         `json:"id"`
	Name       string         `json:"name"`
	Status     string         `json:"status"`
	Reason     string         `json:"reason"`
	BaseCommit string         `json:"base_commit"`
	RepoPath   string         `json:"repo_path"`
	Branch     string         `json:"branch"`
	Head       string         `json:"head"`
	Counts     map[string]int `json:"counts"`
	Nodes      []nodeStatus   `json:"nodes"`
}

type nodeStatus struct {
	ID        string       `json:"id"`
	Status    string       `json:"status"`
	Attempt   int          `json:"attempt"`
	Host      string       `json:"host"`
	Sandbox   string       `json:"sandbox"`
	DependsOn []string     `json:"depends_on"`
	Gates     []gateStatus `json:"gates"`
	Commit    string       `json:"commit"`
	Reason    string       `json:"reason"`
	// MaxAttempts is the node's budget of agent rounds, what humans
	// granted included; RetryAt is when a retrying node's next attempt
	// starts.
	MaxAttempts int        `json:"max_attempts"`
	RetryAt     *time.Time `json:"retry_at"`
	// WaitingForFiles names the nodes a pending node waits for because
	// their files may overlap its own.
	WaitingForFiles []string `json:"waiting_for_files"`
	// Planner names the node whose plan added this one; Expanded counts
	// the nodes a planner's plan added; Output is the check of the
	// attempt's result block.
	Planner  string `json:"planner"`
	Expanded int    `json:"expanded"`
	Output   *struct {
		Schema string          `json:"schema"`
		Status string          `json:"status"`
		Block  json.RawMessage `json:"block"`
	} `json:"output"`
}

// gateStatus is a gate as `status -o json` and `gate results -o json`
// print it.
type gateStatus struct {
	Name               string   `json:"name"`
	Status             string   `json:"status"`
	ExitCode           *int     `json:"exit_code"`
	Host               string   `json:"host"`
	Sandbox            string   `json:"sandbox"`
	Log                string   `json:"log"`
	Attempt            int      `json:"attempt"`
	Round              int      `json:"round"`
	DurationMillis     int64    `json:"duration_ms"`
	Cached             bool     `json:"cached"`
	CacheDisabled      string   `json:"cache_disabled"`
	Output             string   `json:"output"`
	IntegrityViolation bool     `json:"integrity_violation"`
	Violations         []string `json:"violations"`
	Error              string   `json:"error"`
}

func (s wfStatus) node(t testing.TB, id string) nodeStatus {
	t.Helper()
	for _, n := range s.Nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("workflow %s has no node %q in its status", s.ID, id)
	return nodeStatus{}
}

func (n nodeStatus) gate(t testing.TB, name string) gateStatus {
	t.Helper()
	for _, g := range n.Gates {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("node %s has no gate %q: %+v", n.ID, name, n.Gates)
	return gateStatus{}
}

func (g gateStatus) exit() string {
	if g.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(*g.ExitCode)
}

// status runs `coordinator status WF -o json` and decodes it; code is the
// command's exit code (0 succeeded, 2 failed, 4 running, ...).
func (f *fleet) status(wf string) (wfStatus, int) {
	f.t.Helper()
	return statusOf(f.t, f.cli(30*time.Second, "status", wf, "-o", "json"))
}

// detail is status without the exit code.
func (f *fleet) detail(wf string) wfStatus {
	f.t.Helper()
	s, _ := f.status(wf)
	return s
}

// statusOf decodes the result of `coordinator status WF -o json`.
func statusOf(t testing.TB, r result) (wfStatus, int) {
	t.Helper()
	var s wfStatus
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, r)
	}
	return s, r.code
}

// list runs `coordinator status -o json` and decodes the list.
func (f *fleet) list() []wfStatus {
	f.t.Helper()
	r := f.cli(30*time.Second, "status", "-o", "json")
	if r.code != 0 {
		f.t.Fatalf("list workflows: %s", r)
	}
	var l []wfStatus
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		f.t.Fatalf("status list JSON: %v\n%s", err, r)
	}
	return l
}

// waitNode polls the workflow's status until node has status want, and
// returns that status.
func (f *fleet) waitNode(wf, node, want string, timeout time.Duration) wfStatus {
	f.t.Helper()
	var last wfStatus
	waitFor(f.t, timeout, fmt.Sprintf("node %s of %s to be %s", node, wf, want), func() bool {
		last, _ = f.status(wf)
		for _, n := range last.Nodes {
			if n.ID == node && n.Status == want && (want != "running" || n.Host != "") {
				return true
			}
		}
		if last.Status != "running" && last.Status != "needs_attention" {
			f.t.Fatalf("workflow %s ended (%s: %s) while waiting for node %s to be %s", wf, last.Status, last.Reason, node, want)
		}
		return false
	})
	return last
}

// waitStatus polls the workflow's status until it is want (failed,
// succeeded, needs_attention ...) and returns it; it fails the test at
// once if the workflow ends otherwise.
func (f *fleet) waitStatus(wf, want string, timeout time.Duration) wfStatus {
	f.t.Helper()
	var last wfStatus
	waitFor(f.t, timeout, fmt.Sprintf("workflow %s to be %s", wf, want), func() bool {
		last = f.detail(wf)
		if last.Status == want {
			return true
		}
		if last.Status == "succeeded" || last.Status == "failed" || last.Status == "cancelled" {
			f.t.Fatalf("workflow %s ended %s (%s) while waiting for it to be %s", wf, last.Status, last.Reason, want)
		}
		return false
	})
	return last
}

// inboxItem is a node waiting for a human, as `coordinator inbox -o json`
// prints it.
type inboxItem struct {
	WorkflowID   string    `json:"workflow_id"`
	WorkflowName string    `json:"workflow_name"`
	NodeID       string    `json:"node_id"`
	Status       string    `json:"status"`
	Reason       string    `json:"reason"`
	Attempt      int       `json:"attempt"`
	Budget       int       `json:"budget"`
	Since        time.Time `json:"since"`
	// Deadline is when an approval step's on_timeout happens.
	Deadline *time.Time `json:"deadline"`
	DiffStat *struct {
		Files []struct {
			Path       string `json:"path"`
			Insertions int    `json:"insertions"`
			Deletions  int    `json:"deletions"`
		} `json:"files"`
		Insertions int `json:"insertions"`
		Deletions  int `json:"deletions"`
	} `json:"diff_stat"`
}

// inbox runs `coordinator inbox -o json` and returns the items of
// workflow wf (of every workflow when wf is ""), by node.
func (f *fleet) inbox(wf string) map[string]inboxItem {
	f.t.Helper()
	r := f.cli(30*time.Second, "inbox", "-o", "json")
	if r.code != 0 {
		f.t.Fatalf("inbox: %s", r)
	}
	var items []inboxItem
	if err := json.Unmarshal([]byte(r.stdout), &items); err != nil {
		f.t.Fatalf("inbox JSON: %v\n%s", err, r)
	}
	out := map[string]inboxItem{}
	for _, it := range items {
		if wf == "" || it.WorkflowID == wf {
			out[it.NodeID] = it
		}
	}
	return out
}

// decide runs a human's decision on an escalated node through the CLI
// (approve, reject or retry WF NODE with args) as who, failing the test
// unless it exits 0.
func (f *fleet) decide(decision, wf, node, who string, args ...string) result {
	f.t.Helper()
	r := f.cli(30*time.Second, append([]string{decision, wf, node, "--as", who}, args...)...)
	if r.code != 0 {
		f.t.Fatalf("%s %s %s: %s", decision, wf, node, r)
	}
	return r
}

// waitFor polls cond every 100 ms (conditions here run the CLI or scan
// processes) until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, timeout, 100*time.Millisecond, what, cond)
}

// cliRunner runs the coordinator CLI against a fleet, the local one or the
// Compose one.
type cliRunner interface {
	cli(timeout time.Duration, args ...string) result
}

// submit submits wfFile against repo through c and returns the workflow's
// id, failing the test unless submit exits 0.
func submit(t testing.TB, c cliRunner, wfFile, repo string) string {
	t.Helper()
	r := c.cli(time.Minute, "submit", wfFile, "--repo", repo)
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	return wfID(t, r)
}

// submitWait submits wfFile against repo with --wait through c and returns
// the workflow's id, failing the test unless the workflow succeeded within
// timeout.
func submitWait(t testing.TB, c cliRunner, timeout time.Duration, wfFile, repo string) string {
	t.Helper()
	r := c.cli(timeout, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 0 {
		t.Fatalf("submit --wait did not succeed:\n%s", r)
	}
	return wfID(t, r)
}

// wfID returns the workflow id submit printed (its first stdout line).
func wfID(t testing.TB, r result) string {
	t.Helper()
	line, _, _ := strings.Cut(r.stdout, "\n")
	if !strings.HasPrefix(line, "wf-") {
		t.Fatalf("submit printed no workflow id first:\n%s", r)
	}
	return strings.TrimSpace(line)
}

// writeFile writes a file under dir and returns its path.
func writeFile(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	testkit.WriteFile(t, p, body)
	return p
}

// branchChanges returns `git diff --name-status base..branch` as sorted
// "X\tpath" lines.
func branchChanges(t testing.TB, repo, base, branch string) []string {
	t.Helper()
	out := testkit.Git(t, repo, "diff", "--name-status", "--no-renames", base+".."+branch)
	if out == "" {
		return nil
	}
	lines := strings.Split(out, "\n")
	sort.Strings(lines)
	return lines
}

// branchCommit is one commit of a workflow branch.
type branchCommit struct {
	sha, subject, node string
	files              []string
}

// branchCommits returns the commits base..branch, oldest first, with the
// files each changed and the node its Supervisor-Node trailer names. It
// fails the test if the history is not linear.
func branchCommits(t testing.TB, repo, base, branch string) []branchCommit {
	t.Helper()
	if merges := testkit.Git(t, repo, "rev-list", "--merges", base+".."+branch); merges != "" {
		t.Fatalf("branch %s has merge commits: %s", branch, merges)
	}
	out := testkit.Git(t, repo, "rev-list", "--reverse", "--first-parent", base+".."+branch)
	if out == "" {
		return nil
	}
	var commits []branchCommit
	for _, sha := range strings.Split(out, "\n") {
		c := branchCommit{sha: sha}
		c.subject = testkit.Git(t, repo, "log", "-1", "--format=%s", sha)
		c.node = testkit.Git(t, repo, "log", "-1", "--format=%(trailers:key=Supervisor-Node,valueonly)", sha)
		files := testkit.Git(t, repo, "show", "--name-only", "--format=", sha)
		if files != "" {
			c.files = strings.Split(files, "\n")
			sort.Strings(c.files)
		}
		commits = append(commits, c)
	}
	testkit.Git(t, repo, "merge-base", "--is-ancestor", base, branch) // fails unless the branch grows from base
	return commits
}

// fileAt returns a file's content at a revision.
func fileAt(t testing.TB, repo, rev, path string) string {
	t.Helper()
	return testkit.GitOutput(t, repo, "show", rev+":"+path)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
