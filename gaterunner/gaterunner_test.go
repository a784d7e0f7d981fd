package gaterunner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/testserver"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// hostVar is set in the test process; gates must never see it.
const hostVar = "leaked-from-the-host"

var busConfig = bus.Config{AckWait: 6 * time.Second}

func TestMain(m *testing.M) {
	// Process-wide so tests may run in parallel (t.Setenv forbids that).
	os.Setenv("SUPERVISOR_TEST_HOST_VAR", hostVar)
	os.Exit(m.Run())
}

// testLog sends log lines to t.Log until the test's cleanup ends it.
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func newLogger(t *testing.T) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// gitRun runs git in dir with a fixed identity and no user configuration.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// harness is one embedded NATS server with the fleet's resources, a state
// store, a repository uploaded as a bundle with a node's patch, and the
// reports runners send.
type harness struct {
	t       *testing.T
	url     string
	b       *bus.Bus
	store   *kvstate.Store
	log     *slog.Logger
	repo    protocol.RepoRef
	patch   protocol.PatchRef // the node's patch: adds newfile, changes src/a.txt
	reports chan *protocol.Report
	hosts   atomic.Int64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, log: newLogger(t), reports: make(chan *protocol.Report, 100)}
	ctx := testCtx(t)
	h.url = testserver.NATS(t)
	b, err := bus.Open(ctx, h.url, "gaterunner-test", busConfig, h.log)
	if err != nil {
		t.Fatalf("bus: %v", err)
	}
	t.Cleanup(b.Close)
	h.b = b
	if h.store, err = kvstate.New(ctx, b.JS); err != nil {
		t.Fatalf("kvstate: %v", err)
	}

	dir := filepath.Join(t.TempDir(), "repo")
	gitRun(t, "", "init", "--quiet", "--initial-branch=main", dir)
	writeFile(t, filepath.Join(dir, "README.md"), "hello\n")
	writeFile(t, filepath.Join(dir, "src/a.txt"), "a1\n")
	gitRun(t, dir, "add", "--all")
	gitRun(t, dir, "commit", "--quiet", "-m", "init")
	commit, err := workspace.ResolveCommit(ctx, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	id, err := workspace.RepoID(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "repo.bundle")
	if err := workspace.CreateBundle(ctx, dir, commit, bundle); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	name := id + "/" + commit + ".bundle"
	if _, err := b.Bundles.PutBytes(ctx, name, data); err != nil {
		t.Fatalf("upload bundle: %v", err)
	}
	h.repo = protocol.RepoRef{ID: id, BaseCommit: commit, Bundle: name}

	// The node's own patch, as a worker would have uploaded it.
	writeFile(t, filepath.Join(dir, "newfile"), "made by the agent\n")
	writeFile(t, filepath.Join(dir, "src/a.txt"), "a1\na2\n")
	gitRun(t, dir, "add", "--all")
	patch := gitRun(t, dir, "diff", "--cached", "--binary", "--full-index", commit)
	ref, err := jobrun.UploadPatch(ctx, b, "node", "wf/node/a1/1.patch", []byte(patch))
	if err != nil {
		t.Fatal(err)
	}
	h.patch = *ref

	cons, err := b.JS.CreateOrUpdateConsumer(ctx, protocol.StreamResults, jetstream.ConsumerConfig{
		Durable: "test-results", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: protocol.SubjectResults,
	})
	if err != nil {
		t.Fatalf("results consumer: %v", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var r protocol.Report
		if err := protocol.Decode(m.Data(), &r); err != nil {
			h.log.Error("undecodable report", "err", err)
		} else if err := r.Validate(); err != nil {
			h.log.Error("invalid report", "err", err)
		} else {
			h.reports <- &r
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatalf("consume results: %v", err)
	}
	t.Cleanup(cc.Stop)
	return h
}

// startRunner runs a gate runner, with its own NATS connection, state
// store and data directory, until the test ends and returns its host.
func (h *harness) startRunner(cfg Config) string {
	t := h.t
	host := fmt.Sprintf("test-gaterunner-%d", h.hosts.Add(1))
	ctx := testCtx(t)
	rb, err := bus.Open(ctx, h.url, host, busConfig, h.log)
	if err != nil {
		t.Fatalf("runner bus: %v", err)
	}
	store, err := kvstate.New(ctx, rb.JS)
	if err != nil {
		t.Fatalf("runner kvstate: %v", err)
	}
	deps, err := jobrun.LocalDeps(jobrun.Settings{DataDir: t.TempDir(), SandboxPath: sandbox.BasePath, Host: host}, rb, store, h.log)
	if err != nil {
		t.Fatalf("LocalDeps: %v", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(deps, cfg).Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gate runner %s: Run: %v", host, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("gate runner %s did not stop within 30s", host)
		}
		rb.Close()
	})
	return host
}

func (h *harness) gateJob(gate string, round int, command ...string) *protocol.GateJob {
	return &protocol.GateJob{
		JobID:      protocol.GateJobID("wf", "node", 1, gate, round),
		WorkflowID: "wf", NodeID: "node", Attempt: 1, Gate: gate, Pool: protocol.DefaultPool,
		Repo: h.repo, Command: command, TimeoutSeconds: 60, PublishedAt: time.Now().UTC(),
	}
}

func (h *harness) publish(j *protocol.GateJob) {
	h.t.Helper()
	data, err := protocol.Encode(j)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.b.PublishJob(testCtx(h.t), protocol.KindGate, j.Pool, j.JobID, data); err != nil {
		h.t.Fatalf("publish: %v", err)
	}
}

func (h *harness) next(within time.Duration) *protocol.Report {
	h.t.Helper()
	select {
	case r := <-h.reports:
		return r
	case <-time.After(within):
		h.t.Fatalf("no report within %s", within)
		return nil
	}
}

func (h *harness) expectStarted(j *protocol.GateJob) *protocol.Started {
	h.t.Helper()
	r := h.next(20 * time.Second)
	if r.Type != protocol.ReportStarted || r.Started.JobID != j.JobID {
		h.t.Fatalf("got %s report (started %+v, gate %+v), want started for %s", r.Type, r.Started, r.Gate, j.JobID)
	}
	s := r.Started
	if s.Kind != protocol.KindGate || s.Gate != j.Gate || s.NodeID != j.NodeID || s.WorkflowID != j.WorkflowID ||
		s.Attempt != j.Attempt || s.LeaseToken == 0 || s.Delivery == 0 || !s.PublishedAt.Equal(j.PublishedAt) {
		h.t.Fatalf("started report %+v does not match job %s", s, j.JobID)
	}
	return s
}

func (h *harness) expectResult(j *protocol.GateJob, s *protocol.Started) *protocol.GateResult {
	h.t.Helper()
	r := h.next(30 * time.Second)
	if r.Type != protocol.ReportGateResult || r.Gate.JobID != j.JobID {
		h.t.Fatalf("got %s report (started %+v), want gate_result for %s", r.Type, r.Started, j.JobID)
	}
	g := r.Gate
	if g.Gate != j.Gate || g.NodeID != j.NodeID || g.WorkflowID != j.WorkflowID || g.Attempt != j.Attempt {
		h.t.Fatalf("gate result %+v does not match job %s", g, j.JobID)
	}
	if g.LeaseToken != s.LeaseToken || g.Host != s.Host {
		h.t.Errorf("gate result token %d host %q, want the started report's %d %q", g.LeaseToken, g.Host, s.LeaseToken, s.Host)
	}
	wantLog := fmt.Sprintf("wf/node/a1/gate-%s-%d.log", j.Gate, s.LeaseToken)
	if g.Log != wantLog {
		h.t.Errorf("log %q, want %q", g.Log, wantLog)
	}
	return g
}

// run publishes a gate job and returns its result.
func (h *harness) run(j *protocol.GateJob) *protocol.GateResult {
	h.t.Helper()
	h.publish(j)
	return h.expectResult(j, h.expectStarted(j))
}

func (h *harness) logText(name string) string {
	h.t.Helper()
	data, err := h.b.Logs.GetBytes(testCtx(h.t), name)
	if err != nil {
		h.t.Fatalf("log %s: %v", name, err)
	}
	return string(data)
}

func (h *harness) noReports(d time.Duration) {
	h.t.Helper()
	select {
	case r := <-h.reports:
		h.t.Fatalf("unexpected %s report: started=%+v gate=%+v", r.Type, r.Started, r.Gate)
	case <-time.After(d):
	}
}

// settled waits until the gate consumer has nothing pending or unacked.
func (h *harness) settled() *jetstream.ConsumerInfo {
	h.t.Helper()
	ctx := testCtx(h.t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		cons, err := h.b.JS.Consumer(ctx, protocol.StreamJobs, protocol.ConsumerName(protocol.KindGate, protocol.DefaultPool))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			h.t.Fatalf("jobs consumer: %v", err)
		}
		if err == nil {
			info, err := cons.Info(ctx)
			if err != nil {
				h.t.Fatalf("jobs consumer info: %v", err)
			}
			if info.NumAckPending == 0 && info.NumPending == 0 {
				return info
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatal("gate jobs not settled")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func exitCode(p *int) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}

func TestGateOutcomes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})

	pass := h.gateJob("pass", 1, "sh", "-c", "echo all good; exit 0")
	g := h.run(pass)
	if g.Status != protocol.GatePassed || g.ExitCode == nil || *g.ExitCode != 0 || g.Error != "" {
		t.Fatalf("exit 0: status %s exit %s error %q", g.Status, exitCode(g.ExitCode), g.Error)
	}
	if !strings.Contains(g.Stdout, "all good") {
		t.Errorf("stdout tail %q", g.Stdout)
	}
	logText := h.logText(g.Log)
	for _, want := range []string{"[supervisor] gate pass for wf/node attempt 1", "all good", "exit 0, status passed"} {
		if !strings.Contains(logText, want) {
			t.Errorf("log lacks %q:\n%s", want, logText)
		}
	}

	fail := h.gateJob("fail", 1, "sh", "-c", "echo broken >&2; exit 1")
	g = h.run(fail)
	if g.Status != protocol.GateFailed || g.ExitCode == nil || *g.ExitCode != 1 {
		t.Fatalf("exit 1: status %s exit %s", g.Status, exitCode(g.ExitCode))
	}
	if !strings.Contains(g.Stderr, "broken") || !strings.Contains(h.logText(g.Log), "broken") {
		t.Errorf("stderr %q / log lack the gate's output", g.Stderr)
	}

	other := h.gateJob("other", 1, "sh", "-c", "exit 2")
	if g = h.run(other); g.Status != protocol.GateFailed || g.ExitCode == nil || *g.ExitCode != 2 {
		t.Fatalf("exit 2: status %s exit %s", g.Status, exitCode(g.ExitCode))
	}

	// A command that cannot start fails the gate, naming it, with no exit
	// code; it is not retried.
	missing := h.gateJob("missing", 1, "no-such-gate-tool", "--check")
	g = h.run(missing)
	if g.Status != protocol.GateFailed || g.ExitCode != nil || !strings.Contains(g.Error, "no-such-gate-tool") {
		t.Fatalf("missing command: status %s exit %s error %q", g.Status, exitCode(g.ExitCode), g.Error)
	}
	if !strings.Contains(h.logText(g.Log), "no-such-gate-tool") {
		t.Error("log does not name the missing command")
	}

	info := h.settled()
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 4 {
		t.Errorf("4 gate jobs delivered %d times (%d redelivered), want once each", info.Delivered.Consumer, info.NumRedelivered)
	}
	h.noReports(300 * time.Millisecond)
}

// The gate sees the node's patch applied, its SUPERVISOR_* variables and
// the job's env, never the host's; secrets it prints are redacted.
func TestGateWorkspaceAndEnv(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})

	withPatch := h.gateJob("exists", 1, "test", "-f", "newfile")
	withPatch.Patches = []protocol.PatchRef{h.patch}
	if g := h.run(withPatch); g.Status != protocol.GatePassed {
		t.Fatalf("test -f newfile with the node's patch: %s exit %s", g.Status, exitCode(g.ExitCode))
	}
	without := h.gateJob("exists", 2, "test", "-f", "newfile")
	if g := h.run(without); g.Status != protocol.GateFailed || g.ExitCode == nil || *g.ExitCode != 1 {
		t.Fatalf("test -f newfile without the patch: %s exit %s", g.Status, exitCode(g.ExitCode))
	}

	script := strings.Join([]string{
		`echo "gate=$SUPERVISOR_GATE_NAME"`,
		`echo "task=$SUPERVISOR_TASK_ID"`,
		`echo "node=$SUPERVISOR_NODE_ID"`,
		`echo "workflow=$SUPERVISOR_WORKFLOW_ID"`,
		`echo "attempt=$SUPERVISOR_ATTEMPT"`,
		`echo "repo_id=$SUPERVISOR_REPO_ID"`,
		`echo "repo_path=$SUPERVISOR_REPO_PATH"`,
		`echo "setting=$GATE_SETTING"`,
		`echo "host=${SUPERVISOR_TEST_HOST_VAR:-unset}"`,
		`echo "token=tok-12345"`,
		`test -n "$SUPERVISOR_REPO_PATH" || exit 10`,
		`test "$(cd "$SUPERVISOR_REPO_PATH" && pwd -P)" = "$(cd .. && pwd -P)" || exit 11`,
		`test -f "$SUPERVISOR_REPO_PATH/newfile" || exit 12`,
		`test "$(cat a.txt)" = "$(printf 'a1\na2')" || exit 13`,
	}, "\n")
	envJob := h.gateJob("env", 1, "sh", "-c", script)
	envJob.Patches = []protocol.PatchRef{h.patch}
	envJob.Env = map[string]string{"GATE_SETTING": "from-the-job"}
	envJob.WorkingDir = "src"
	g := h.run(envJob)
	if g.Status != protocol.GatePassed {
		t.Fatalf("env gate: %s exit %s\nstdout:\n%s\nstderr:\n%s", g.Status, exitCode(g.ExitCode), g.Stdout, g.Stderr)
	}
	out := strings.Split(g.Stdout, "\n")
	for _, want := range []string{
		"gate=env", "task=node", "node=node", "workflow=wf", "attempt=1", "repo_id=" + h.repo.ID,
		"setting=from-the-job", "host=unset", "token=[REDACTED]",
	} {
		if !slices.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, g.Stdout)
		}
	}
	if strings.Contains(g.Stdout, "tok-12345") || strings.Contains(g.Stdout, hostVar) {
		t.Errorf("stdout leaks a secret or host variable:\n%s", g.Stdout)
	}
	logText := h.logText(g.Log)
	if !strings.Contains(logText, "token=[REDACTED]") || strings.Contains(logText, "tok-12345") {
		t.Errorf("log not redacted:\n%s", logText)
	}
	if !strings.Contains(logText, "repo_path=/") {
		t.Errorf("log lacks the repo path:\n%s", logText)
	}
	h.settled()
}

// Exit 75 reports pending and the job comes back after the poll interval.
func TestGatePendingPolledAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	poll := 500 * time.Millisecond
	h.startRunner(Config{PollInterval: poll})

	// The marker lives outside the workspace, which is fresh on each run.
	marker := filepath.Join(t.TempDir(), "polled-once")
	job := h.gateJob("poll", 1, "sh", "-c", `if [ -e "$MARKER" ]; then echo ready; exit 0; fi; touch "$MARKER"; echo not yet; exit 75`)
	job.Env = map[string]string{"MARKER": marker}
	h.publish(job)

	s1 := h.expectStarted(job)
	g := h.expectResult(job, s1)
	if g.Status != protocol.GatePending || g.ExitCode == nil || *g.ExitCode != 75 {
		t.Fatalf("first run: status %s exit %s, want pending 75", g.Status, exitCode(g.ExitCode))
	}
	pendingAt := time.Now()

	s2 := h.expectStarted(job)
	if waited := time.Since(pendingAt); waited < poll-200*time.Millisecond {
		t.Errorf("polled again after %s, before the %s poll interval", waited, poll)
	}
	if s2.Delivery != 2 || s2.LeaseToken <= s1.LeaseToken {
		t.Errorf("second run: delivery %d token %d (first token %d)", s2.Delivery, s2.LeaseToken, s1.LeaseToken)
	}
	g = h.expectResult(job, s2)
	if g.Status != protocol.GatePassed || g.ExitCode == nil || *g.ExitCode != 0 || !strings.Contains(g.Stdout, "ready") {
		t.Fatalf("second run: status %s exit %s stdout %q", g.Status, exitCode(g.ExitCode), g.Stdout)
	}
	info := h.settled()
	if info.Delivered.Consumer != 2 {
		t.Errorf("delivered %d times, want 2", info.Delivered.Consumer)
	}
	h.noReports(800 * time.Millisecond) // passed: not polled again
}

func TestGateTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})
	job := h.gateJob("slow", 1, "sh", "-c", "echo starting; exec sleep 30")
	job.TimeoutSeconds = 1
	begin := time.Now()
	g := h.run(job)
	if g.Status != protocol.GateTimeout || g.ExitCode != nil {
		t.Fatalf("status %s exit %s, want timeout with no exit code", g.Status, exitCode(g.ExitCode))
	}
	if took := time.Since(begin); took > 15*time.Second {
		t.Errorf("timeout took %s", took)
	}
	if logText := h.logText(g.Log); !strings.Contains(logText, "starting") || !strings.Contains(logText, "status timeout") {
		t.Errorf("log:\n%s", logText)
	}
	if info := h.settled(); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("delivered %d times", info.Delivered.Consumer)
	}
}
