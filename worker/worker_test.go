package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

const (
	agentName = "supervisor-test-agent"
	// hostSecret and hostVar are set in the test process's environment;
	// the sandbox must never pass them to an agent.
	hostSecret = "host-aws-secret-value"
	hostVar    = "leaked-from-the-host"
	// hostProviderKey is a provider key in the worker's environment, given
	// to agents whose adapter's allow-list names it (credentials_test.go).
	hostProviderKey   = "SUPERVISOR_TEST_PROVIDER_KEY"
	hostProviderValue = "from-the-host-env-7731"
)

// agentDir holds the scripted test agent, built once by TestMain.
var agentDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "supervisor-worker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The scripted test agent, and the stand-ins for the real CLIs under
	// their names (agent_test.go).
	for name, pkg := range map[string]string{agentName: "./cmd/supervisor-test-agent", "claude": "./internal/testcli/claude",
		"codex": "./internal/testcli/codex", "gemini": "./internal/testcli/gemini"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build the test agent:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	agentDir = dir
	// Commands may run as the process sandbox's user, who must reach the
	// agents (MkdirTemp makes the directory private).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Host variables an agent must not see (process-wide so tests may run
	// in parallel; t.Setenv forbids that).
	os.Setenv("AWS_SECRET_ACCESS_KEY", hostSecret)
	os.Setenv("SUPERVISOR_TEST_HOST_VAR", hostVar)
	os.Setenv(hostProviderKey, hostProviderValue)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// harness is a jobruntest.Fleet (an embedded NATS server with the fleet's
// resources, a state store, a repository uploaded as a bundle, and the
// reports runners send) with the workers started on it.
type harness struct {
	*jobruntest.Fleet
	t     *testing.T
	hosts atomic.Int64
	// openStore, if set, opens each worker's state store on its bus
	// (default: JetStream KV); breakers is the workers' breaker policy.
	openStore func(b *bus.Bus) state.Store
	breakers  state.BreakerPolicy
	// settings, if set, adjusts each worker's jobrun settings.
	settings func(*jobrun.Settings)
}

func newHarness(t *testing.T, cfg bus.Config) *harness {
	t.Helper()
	if cfg.AckWait == 0 {
		cfg.AckWait = 6 * time.Second
	}
	f := jobruntest.NewFleet(t, "worker-test", cfg, map[string]string{
		"README.md": "hello\n",
		"src/a.txt": "a1\na2\n",
	})
	return &harness{Fleet: f, t: t}
}

// startWorker runs a worker with its own NATS connection, state store and
// data directory, as a separate process would have. stop cancels Run's
// context and waits for it to return (draining as in production); the
// test's cleanup does the same, then closes the connection.
func (h *harness) startWorker(cfg Config) (host string, stop func()) {
	return h.startWorkerWith(cfg, nil)
}

// workerDeps gives a worker its own NATS connection, state store and data
// directory, with labels (gpus=N makes it a GPU worker); the connection is
// closed when the test ends.
func (h *harness) workerDeps(labels map[string]string) jobrun.Deps {
	t := h.t
	host := fmt.Sprintf("test-worker-%d", h.hosts.Add(1))
	ctx := testkit.Context(t, time.Minute)
	wb, err := bus.Open(ctx, h.URL, host, h.Config, h.Log)
	if err != nil {
		t.Fatalf("worker bus: %v", err)
	}
	t.Cleanup(wb.Close)
	var store state.Store
	if h.openStore != nil {
		store = h.openStore(wb)
	} else if store, err = kvstate.New(ctx, wb.JS); err != nil {
		t.Fatalf("worker kvstate: %v", err)
	}
	settings := jobrun.Settings{
		DataDir:     t.TempDir(),
		SandboxPath: agentDir + ":" + sandbox.BasePath,
		Host:        host,
		Labels:      labels,
		Breakers:    h.breakers,
	}
	if h.settings != nil {
		h.settings(&settings)
	}
	deps, err := jobrun.LocalDeps(settings, wb, store, h.Log)
	if err != nil {
		t.Fatalf("LocalDeps: %v", err)
	}
	return deps
}

// startWorkerWith is startWorker for a worker with labels.
func (h *harness) startWorkerWith(cfg Config, labels map[string]string) (host string, stop func()) {
	return h.runWorker(h.workerDeps(labels), cfg)
}

// runWorker runs a worker on deps, as startWorker does.
func (h *harness) runWorker(deps jobrun.Deps, cfg Config) (host string, stop func()) {
	t := h.t
	host = deps.Host
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(deps, cfg).Run(runCtx) }()
	var once sync.Once
	wait := func() {
		once.Do(func() {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker %s: Run: %v", host, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("worker %s did not stop within 30s", host)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wait()
	})
	return host, func() { cancel(); wait() }
}

func (h *harness) agentJob(node string, attempt int, prompt string) *protocol.AgentJob {
	wf := "wf-" + strings.ToLower(strings.ReplaceAll(h.t.Name(), "/", "-"))
	if len(wf) > 40 {
		wf = wf[:40]
	}
	return &protocol.AgentJob{
		JobID: protocol.AgentJobID(wf, node, attempt), WorkflowID: wf, NodeID: node, Attempt: attempt,
		Pool: protocol.DefaultPool, Repo: h.Repo, Command: []string{agentName, "-p"}, Prompt: prompt,
		TimeoutSeconds: 60, PublishedAt: time.Now().UTC(),
	}
}

func (h *harness) publish(j *protocol.AgentJob) {
	h.t.Helper()
	h.publishIn(testkit.Context(h.t, time.Minute), j)
}

// publishIn publishes j with ctx's span context, as the coordinator's
// dispatch does.
func (h *harness) publishIn(ctx context.Context, j *protocol.AgentJob) {
	h.t.Helper()
	data, err := protocol.Encode(j)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.Bus.PublishJob(ctx, protocol.KindAgent, j.Pool, j.JobID, data); err != nil {
		h.t.Fatalf("publish: %v", err)
	}
}

func (h *harness) expectStarted(j *protocol.AgentJob, within time.Duration) *protocol.Started {
	h.t.Helper()
	r := h.Next(within)
	if r.Type != protocol.ReportStarted || r.Started.JobID != j.JobID {
		h.t.Fatalf("got %s report %+v, want started for %s", r.Type, r, j.JobID)
	}
	s := r.Started
	if s.Kind != protocol.KindAgent || s.WorkflowID != j.WorkflowID || s.NodeID != j.NodeID ||
		s.Attempt != j.Attempt || s.LeaseToken == 0 || s.Host == "" || s.Delivery == 0 {
		h.t.Fatalf("started report %+v does not match job %s", s, j.JobID)
	}
	if !s.PublishedAt.Equal(j.PublishedAt) {
		h.t.Errorf("started.published_at = %v, want the job's %v", s.PublishedAt, j.PublishedAt)
	}
	if s.StartedAt.Before(j.PublishedAt) {
		h.t.Errorf("started_at %v is before published_at %v", s.StartedAt, j.PublishedAt)
	}
	return s
}

func (h *harness) expectResult(j *protocol.AgentJob, within time.Duration) *protocol.AgentResult {
	h.t.Helper()
	r := h.Next(within)
	if r.Type != protocol.ReportAgentResult || r.Agent.JobID != j.JobID {
		h.t.Fatalf("got %s report %+v, want agent_result for %s", r.Type, r, j.JobID)
	}
	a := r.Agent
	if a.WorkflowID != j.WorkflowID || a.NodeID != j.NodeID || a.Attempt != j.Attempt {
		h.t.Fatalf("agent result %+v does not match job %s", a, j.JobID)
	}
	if a.FinishedAt.IsZero() {
		h.t.Errorf("agent result without finished_at")
	}
	return a
}

// run publishes an agent job and returns its result, having checked the
// started report before it.
func (h *harness) run(j *protocol.AgentJob) *protocol.AgentResult {
	h.t.Helper()
	h.publish(j)
	h.expectStarted(j, 20*time.Second)
	return h.expectResult(j, 30*time.Second)
}

func (h *harness) jobsInStream() uint64 {
	h.t.Helper()
	ctx := testkit.Context(h.t, time.Minute)
	s, err := h.Bus.JS.Stream(ctx, protocol.StreamJobs)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Msgs
}

// patchBytes downloads a patch and checks it against its ref.
func (h *harness) patchBytes(ref *protocol.PatchRef) []byte {
	h.t.Helper()
	data, err := h.Bus.Patches.GetBytes(testkit.Context(h.t, time.Minute), ref.Object)
	if err != nil {
		h.t.Fatalf("patch %s: %v", ref.Object, err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		h.t.Fatalf("patch %s: %d bytes sha256 %x, ref says %d bytes %s", ref.Object, len(data), sum, ref.Size, ref.SHA256)
	}
	return data
}

func (h *harness) logBytes(name string) []byte {
	h.t.Helper()
	if name == "" {
		h.t.Fatal("result names no log")
	}
	data, err := h.Bus.Logs.GetBytes(testkit.Context(h.t, time.Minute), name)
	if err != nil {
		h.t.Fatalf("log %s: %v", name, err)
	}
	return data
}

// patchedFiles lists the paths a patch touches, with "new", "deleted" or
// "modified".
func patchedFiles(patch []byte) map[string]string {
	files := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(patch), "\n") {
		if rest, ok := strings.CutPrefix(line, "diff --git a/"); ok {
			cur, _, _ = strings.Cut(rest, " b/")
			files[cur] = "modified"
			continue
		}
		switch {
		case strings.HasPrefix(line, "new file mode"):
			files[cur] = "new"
		case strings.HasPrefix(line, "deleted file mode"):
			files[cur] = "deleted"
		}
	}
	return files
}

// applied checks out the base commit in a fresh clone, applies patches in
// order with git apply, and returns the clone's directory.
func (h *harness) applied(patches ...[]byte) string {
	h.t.Helper()
	dir := filepath.Join(h.t.TempDir(), "clone")
	testkit.Git(h.t, "", "clone", "--quiet", h.RepoDir, dir)
	testkit.Git(h.t, dir, "checkout", "--quiet", "--detach", h.Repo.BaseCommit)
	for i, p := range patches {
		file := filepath.Join(h.t.TempDir(), fmt.Sprintf("p%d.patch", i))
		testkit.WriteFile(h.t, file, p)
		testkit.Git(h.t, dir, "apply", "--binary", "--index", file)
	}
	return dir
}

func lines(s string) []string { return strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") }

func TestAgentSucceeds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	host, _ := h.startWorker(Config{})

	job := h.agentJob("add-hello", 2, strings.Join([]string{
		"Please add a greeting.",
		"@env SUPERVISOR_WORKFLOW_ID",
		"@env SUPERVISOR_NODE_ID",
		"@env SUPERVISOR_ATTEMPT",
		"@env SUPERVISOR_JOB_ID",
		"@env TASK_SETTING",
		"@env SUPERVISOR_TEST_HOST_VAR",
		"@env AWS_SECRET_ACCESS_KEY",
		"@print password=hunter2",
		"@print done printing",
		"@write hello.txt",
		"hello from the agent",
		"@end",
	}, "\n"))
	job.Env = map[string]string{"TASK_SETTING": "from-the-job"}
	h.publish(job)

	started := h.expectStarted(job, 20*time.Second)
	if started.Host != host || started.Delivery != 1 {
		t.Errorf("started host %q delivery %d, want %q and 1", started.Host, started.Delivery, host)
	}
	res := h.expectResult(job, 30*time.Second)
	if res.Status != protocol.AgentSucceeded || res.ExitCode != 0 || res.Error != "" {
		t.Fatalf("result status %s exit %d error %q, want succeeded 0; stdout:\n%s\nstderr:\n%s",
			res.Status, res.ExitCode, res.Error, res.Stdout, res.Stderr)
	}
	if res.LeaseToken != started.LeaseToken || res.Host != host {
		t.Errorf("result token %d host %q, want the started report's %d %q", res.LeaseToken, res.Host, started.LeaseToken, host)
	}
	if res.StartedAt.IsZero() || res.FinishedAt.Before(res.StartedAt) {
		t.Errorf("result timestamps started %v finished %v", res.StartedAt, res.FinishedAt)
	}

	// The agent's environment: the job's variables and SUPERVISOR_*, never
	// the host's.
	out := lines(res.Stdout)
	for _, want := range []string{
		"SUPERVISOR_WORKFLOW_ID=" + job.WorkflowID,
		"SUPERVISOR_NODE_ID=add-hello",
		"SUPERVISOR_ATTEMPT=2",
		"SUPERVISOR_JOB_ID=" + job.JobID,
		"TASK_SETTING=from-the-job",
		"SUPERVISOR_TEST_HOST_VAR=",
		"AWS_SECRET_ACCESS_KEY=",
		"password=[REDACTED]",
		"done printing",
	} {
		if !slices.Contains(out, want) {
			t.Errorf("stdout tail lacks the line %q:\n%s", want, res.Stdout)
		}
	}
	for _, leak := range []string{hostVar, hostSecret, "hunter2"} {
		if strings.Contains(res.Stdout, leak) || strings.Contains(res.Stderr, leak) {
			t.Errorf("output tails contain %q:\n%s\n%s", leak, res.Stdout, res.Stderr)
		}
	}

	// The patch adds exactly the file the prompt wrote.
	if res.Patch == nil {
		t.Fatal("no patch")
	}
	wantObj := fmt.Sprintf("%s/add-hello/a2/%d.patch", job.WorkflowID, res.LeaseToken)
	if res.Patch.Object != wantObj || res.Patch.NodeID != "add-hello" {
		t.Errorf("patch ref %+v, want object %s of node add-hello", res.Patch, wantObj)
	}
	patch := h.patchBytes(res.Patch)
	if got := patchedFiles(patch); len(got) != 1 || got["hello.txt"] != "new" {
		t.Fatalf("patch touches %v, want only a new hello.txt:\n%s", got, patch)
	}
	clone := h.applied(patch)
	if got := string(testkit.ReadFile(t, filepath.Join(clone, "hello.txt"))); got != "hello from the agent\n" {
		t.Errorf("hello.txt after applying the patch = %q", got)
	}
	if st := testkit.Git(t, clone, "status", "--porcelain", "--untracked-files=all"); st != "A  hello.txt" {
		t.Errorf("clone status after applying the patch = %q, want only hello.txt added", st)
	}

	// The full log is uploaded, redacted.
	wantLog := fmt.Sprintf("%s/add-hello/a2/agent-%d.log", job.WorkflowID, res.LeaseToken)
	if res.Log != wantLog {
		t.Errorf("log = %q, want %q", res.Log, wantLog)
	}
	logText := string(h.logBytes(res.Log))
	for _, want := range []string{"[supervisor] agent job " + job.JobID, "SUPERVISOR_NODE_ID=add-hello", "password=[REDACTED]", "patch " + wantObj} {
		if !strings.Contains(logText, want) {
			t.Errorf("log lacks %q:\n%s", want, logText)
		}
	}
	if !slices.Contains(lines(logText), "AWS_SECRET_ACCESS_KEY=") {
		t.Errorf("log lacks an empty AWS_SECRET_ACCESS_KEY line:\n%s", logText)
	}
	for _, leak := range []string{hostVar, hostSecret, "hunter2"} {
		if strings.Contains(logText, leak) {
			t.Errorf("log contains %q:\n%s", leak, logText)
		}
	}

	info := h.Settled(protocol.KindAgent)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Errorf("job delivered %d times (%d redelivered), want once", info.Delivered.Consumer, info.NumRedelivered)
	}
	if n := h.jobsInStream(); n != 0 {
		t.Errorf("%d jobs left in %s after the ack", n, protocol.StreamJobs)
	}
	h.NoReports(300 * time.Millisecond)
}

// Agents that fail, time out or cannot start are reported once, with
// their status, and acked: a task's own failure is never retried here.
func TestAgentFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	h.startWorker(Config{})
	jobs := 0

	t.Run("exit 3", func(t *testing.T) {
		job := h.agentJob("fails", 1, "@write partial.txt\nhalf done\n@end\n@print giving up\n@exit 3\n@write never.txt\nx\n@end\n")
		jobs++
		res := h.run(job)
		if res.Status != protocol.AgentFailed || res.ExitCode != 3 {
			t.Fatalf("status %s exit %d, want failed 3", res.Status, res.ExitCode)
		}
		if res.Patch != nil {
			t.Errorf("a failed agent reported a patch: %+v", res.Patch)
		}
		if !strings.Contains(res.Stdout, "giving up") {
			t.Errorf("stdout tail = %q", res.Stdout)
		}
		if logText := string(h.logBytes(res.Log)); !strings.Contains(logText, "agent exited 3") {
			t.Errorf("log lacks the exit:\n%s", logText)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		job := h.agentJob("slow", 1, "@print sleeping\n@sleep 30s\n@write late.txt\nx\n@end\n")
		job.TimeoutSeconds = 1
		h.publish(job)
		jobs++
		h.expectStarted(job, 20*time.Second)
		begin := time.Now()
		res := h.expectResult(job, 20*time.Second)
		if res.Status != protocol.AgentTimeout {
			t.Fatalf("status %s exit %d, want timeout", res.Status, res.ExitCode)
		}
		if took := time.Since(begin); took > 15*time.Second {
			t.Errorf("timeout result took %s", took)
		}
		if res.Patch != nil {
			t.Errorf("a timed-out agent reported a patch: %+v", res.Patch)
		}
		if logText := string(h.logBytes(res.Log)); !strings.Contains(logText, "timed out: true") {
			t.Errorf("log lacks the timeout:\n%s", logText)
		}
	})

	// A command that does not exist is the task's failure, reported once and
	// acked, not an infrastructure error retried until it dead-letters.
	t.Run("missing command", func(t *testing.T) {
		job := h.agentJob("missing", 1, "@write x.txt\nx\n@end\n")
		job.Command = []string{"no-such-agent-cli", "-p"}
		jobs++
		res := h.run(job)
		if res.Status != protocol.AgentFailed {
			t.Fatalf("status %s, want failed (error %q)", res.Status, res.Error)
		}
		if !strings.Contains(res.Error, "no-such-agent-cli") {
			t.Errorf("error %q does not name the command", res.Error)
		}
		if res.Patch != nil {
			t.Errorf("patch %+v", res.Patch)
		}
		if logText := string(h.logBytes(res.Log)); !strings.Contains(logText, "no-such-agent-cli") {
			t.Errorf("log does not name the command:\n%s", logText)
		}
	})

	info := h.Settled(protocol.KindAgent)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != uint64(jobs) {
		t.Errorf("%d jobs delivered %d times (%d redelivered), want once each and acked", jobs, info.Delivered.Consumer, info.NumRedelivered)
	}
	if n := h.jobsInStream(); n != 0 {
		t.Errorf("%d jobs left in the stream", n)
	}
	h.NoReports(time.Second)
}

// Malformed and too-new jobs are terminated: no report, no redelivery.
func TestMalformedJobTerminated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{AckWait: 2 * time.Second})
	h.startWorker(Config{})
	ctx := testkit.Context(t, time.Minute)
	for id, payload := range map[string]string{
		"bad-json":  `{"v":1,"job_id":`,
		"too-new":   `{"v":99,"job_id":"wf.n.a1","workflow_id":"wf","node_id":"n","attempt":1}`,
		"no-object": `[1,2,3]`,
	} {
		if err := h.Bus.PublishJob(ctx, protocol.KindAgent, protocol.DefaultPool, id, []byte(payload)); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
	}
	// The consumer's counts may show nothing pending before its delivered
	// and ack-floor counters have caught up: wait for all three settled.
	var info *jetstream.ConsumerInfo
	testkit.WaitFor(t, 15*time.Second, 50*time.Millisecond, "the 3 malformed jobs delivered and settled", func() bool {
		info = h.Settled(protocol.KindAgent)
		return info.Delivered.Consumer >= 3 && info.AckFloor.Stream >= 3
	})
	if info.Delivered.Consumer != 3 || info.AckFloor.Stream != 3 {
		t.Fatalf("consumer delivered %d, ack floor %d; want all 3 jobs delivered once and settled",
			info.Delivered.Consumer, info.AckFloor.Stream)
	}
	// Longer than AckWait: a job merely left unacked would come back.
	time.Sleep(3 * time.Second)
	info = h.Settled(protocol.KindAgent)
	if info.Delivered.Consumer != 3 || info.NumRedelivered != 0 {
		t.Errorf("after AckWait: delivered %d, redelivered %d; want 3 and 0", info.Delivered.Consumer, info.NumRedelivered)
	}
	if n := h.jobsInStream(); n != 0 {
		t.Errorf("%d terminated jobs left in the stream", n)
	}
	h.NoReports(100 * time.Millisecond)

	// The worker is still healthy afterwards.
	job := h.agentJob("after", 1, "@write ok.txt\nok\n@end\n")
	if res := h.run(job); res.Status != protocol.AgentSucceeded {
		t.Fatalf("status %s after malformed jobs", res.Status)
	}
}

// On shutdown past the drain timeout the running agent is stopped and its
// job handed back; the next worker completes it, and only it reports a
// result.
func TestDrainHandsJobBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	host1, stop1 := h.startWorker(Config{DrainTimeout: 300 * time.Millisecond})
	job := h.agentJob("long", 1, "@sleep 2s\n@write drained.txt\nfinished\n@end\n")
	h.publish(job)
	first := h.expectStarted(job, 20*time.Second)
	if first.Host != host1 || first.Delivery != 1 {
		t.Fatalf("first start on %q delivery %d", first.Host, first.Delivery)
	}
	time.Sleep(300 * time.Millisecond) // the agent is asleep
	begin := time.Now()
	stop1()
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("Run took %s to return after the drain timeout", took)
	}
	h.NoReports(500 * time.Millisecond) // the interrupted run reports nothing

	host2, _ := h.startWorker(Config{})
	second := h.expectStarted(job, 20*time.Second)
	if second.Host != host2 || second.Delivery != 2 {
		t.Errorf("second start on %q delivery %d, want %q and 2", second.Host, second.Delivery, host2)
	}
	if second.LeaseToken <= first.LeaseToken {
		t.Errorf("second lease token %d not greater than the first's %d", second.LeaseToken, first.LeaseToken)
	}
	res := h.expectResult(job, 30*time.Second)
	if res.Status != protocol.AgentSucceeded || res.Host != host2 || res.LeaseToken != second.LeaseToken {
		t.Fatalf("result %s from %q token %d", res.Status, res.Host, res.LeaseToken)
	}
	if res.Patch == nil {
		t.Fatal("no patch")
	}
	if got := patchedFiles(h.patchBytes(res.Patch)); len(got) != 1 || got["drained.txt"] != "new" {
		t.Errorf("patch touches %v", got)
	}
	h.Settled(protocol.KindAgent)
	h.NoReports(time.Second) // exactly one agent_result across both workers
}

// A job's dependency patches are in its workspace, and its own patch holds
// only its own change.
func TestDependencyPatches(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	h.startWorker(Config{})

	dep := h.agentJob("dep", 1, "@write dep.txt\nfrom the dependency\n@end\n@write src/a.txt\na1\na2 changed by dep\n@end\n")
	depRes := h.run(dep)
	if depRes.Status != protocol.AgentSucceeded || depRes.Patch == nil {
		t.Fatalf("dependency: %s, patch %v", depRes.Status, depRes.Patch)
	}
	depPatch := h.patchBytes(depRes.Patch)
	if got := patchedFiles(depPatch); len(got) != 2 || got["dep.txt"] != "new" || got["src/a.txt"] != "modified" {
		t.Fatalf("dependency patch touches %v", got)
	}

	// The dependent writes its own file on top of the dependency's work.
	own := h.agentJob("own", 1, "@write own.txt\nmine\n@end\n@append src/a.txt\na3 by own\n@end\n")
	own.Patches = []protocol.PatchRef{*depRes.Patch}
	ownRes := h.run(own)
	if ownRes.Status != protocol.AgentSucceeded || ownRes.Patch == nil {
		t.Fatalf("dependent: %s, patch %v, stderr %q", ownRes.Status, ownRes.Patch, ownRes.Stderr)
	}
	ownPatch := h.patchBytes(ownRes.Patch)
	if got := patchedFiles(ownPatch); len(got) != 2 || got["own.txt"] != "new" || got["src/a.txt"] != "modified" {
		t.Fatalf("dependent's patch touches %v, want own.txt and its append to src/a.txt only:\n%s", got, ownPatch)
	}
	if bytes.Contains(ownPatch, []byte("dep.txt")) || bytes.Contains(ownPatch, []byte("+a2 changed by dep")) {
		t.Errorf("dependent's patch repeats the dependency's change:\n%s", ownPatch)
	}
	clone := h.applied(depPatch, ownPatch)
	if got := string(testkit.ReadFile(t, filepath.Join(clone, "src/a.txt"))); got != "a1\na2 changed by dep\na3 by own\n" {
		t.Errorf("src/a.txt with both patches = %q", got)
	}
	for name, want := range map[string]string{"dep.txt": "from the dependency\n", "own.txt": "mine\n"} {
		if got := string(testkit.ReadFile(t, filepath.Join(clone, name))); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	// The dependency's new file is there to delete (the agent fails if not).
	del := h.agentJob("del", 1, "@delete dep.txt\n")
	del.Patches = []protocol.PatchRef{*depRes.Patch}
	delRes := h.run(del)
	if delRes.Status != protocol.AgentSucceeded || delRes.Patch == nil {
		t.Fatalf("delete dep.txt: %s exit %d, stderr %q", delRes.Status, delRes.ExitCode, delRes.Stderr)
	}
	if got := patchedFiles(h.patchBytes(delRes.Patch)); len(got) != 1 || got["dep.txt"] != "deleted" {
		t.Errorf("deleting patch touches %v", got)
	}
	h.Settled(protocol.KindAgent)
}

// An infrastructure failure (a dependency patch that fails its integrity
// check) is handed back while deliveries remain and reported as an error on
// the last one, then acked.
func TestInfrastructureErrorOnLastDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{MaxDeliver: 2})
	h.startWorker(Config{})
	ctx := testkit.Context(t, time.Minute)
	bad := []byte("not really a patch\n")
	if _, err := h.Bus.Patches.PutBytes(ctx, "wf/bad.patch", bad); err != nil {
		t.Fatal(err)
	}
	job := h.agentJob("unlucky", 1, "@write x.txt\nx\n@end\n")
	job.Patches = []protocol.PatchRef{{NodeID: "dep", Object: "wf/bad.patch", SHA256: strings.Repeat("0", 64), Size: int64(len(bad))}}
	h.publish(job)

	first := h.expectStarted(job, 20*time.Second)
	if first.Delivery != 1 {
		t.Fatalf("first delivery %d", first.Delivery)
	}
	second := h.expectStarted(job, 20*time.Second)
	if second.Delivery != 2 || second.LeaseToken <= first.LeaseToken {
		t.Fatalf("second start: delivery %d token %d (first %d)", second.Delivery, second.LeaseToken, first.LeaseToken)
	}
	res := h.expectResult(job, 20*time.Second)
	if res.Status != protocol.AgentError || !strings.Contains(res.Error, "wf/bad.patch") {
		t.Fatalf("status %s error %q, want error naming the patch", res.Status, res.Error)
	}
	if res.LeaseToken != second.LeaseToken {
		t.Errorf("error report token %d, want %d", res.LeaseToken, second.LeaseToken)
	}
	h.Settled(protocol.KindAgent)
	if n := h.jobsInStream(); n != 0 {
		t.Errorf("%d jobs left in the stream", n)
	}
	h.NoReports(500 * time.Millisecond)
}

// A retry (RETRY-09, S-8): the agent starts from the previous attempt's
// work, uncommitted on top of the dependencies, so its patch holds both;
// it reads the failed round's feedback from a read-only file outside the
// workspace, named by SUPERVISOR_FEEDBACK_FILE, which never reaches the
// patch; and acts on it like a real agent.
func TestRetryStartsFromPreviousWorkWithFeedback(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	h.startWorker(Config{})

	first := h.agentJob("fix", 1, "@write shout.go\nbuggy\n@end\n")
	firstRes := h.run(first)
	if firstRes.Status != protocol.AgentSucceeded || firstRes.Patch == nil {
		t.Fatalf("attempt 1: %s, patch %v", firstRes.Status, firstRes.Patch)
	}

	feedback := []byte(`{"v":1,"gates":[{"name":"test","stdout_tail":"--- FAIL: TestShout"}],"note":{"from":"ada","text":"keep it short"}}`)
	retry := h.agentJob("fix", 2, strings.Join([]string{
		"@env SUPERVISOR_FEEDBACK_FILE",
		"@if-feedback FAIL: TestShout",
		"@write shout.go", "fixed", "@end",
		"@endif",
		"@if-no-feedback",
		"@write wrong.txt", "no feedback seen", "@end",
		"@endif",
		"@if-note keep it short",
		"@write note.txt", "noted", "@end",
		"@endif",
		"@if-note something else",
		"@write wrong-note.txt", "x", "@end",
		"@endif",
		"@write also.txt", "more", "@end",
	}, "\n"))
	retry.StartFrom = firstRes.Patch
	retry.Feedback = feedback
	res := h.run(retry)
	if res.Status != protocol.AgentSucceeded || res.Patch == nil {
		t.Fatalf("attempt 2: %s exit %d, stderr %q", res.Status, res.ExitCode, res.Stderr)
	}
	patch := h.patchBytes(res.Patch)
	if got := patchedFiles(patch); len(got) != 3 || got["shout.go"] != "new" || got["note.txt"] != "new" || got["also.txt"] != "new" {
		t.Errorf("attempt 2's patch touches %v, want shout.go, note.txt and also.txt, all new against the base:\n%s", got, patch)
	}
	clone := h.applied(patch)
	if got := string(testkit.ReadFile(t, filepath.Join(clone, "shout.go"))); got != "fixed\n" {
		t.Errorf("shout.go = %q", got)
	}
	var path string
	for _, l := range lines(res.Stdout) {
		if v, ok := strings.CutPrefix(l, "SUPERVISOR_FEEDBACK_FILE="); ok {
			path = v
		}
	}
	if path == "" || !filepath.IsAbs(path) || strings.Contains(string(patch), "feedback") {
		t.Errorf("feedback file %q (stdout %q)", path, res.Stdout)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the feedback file %s outlived its job (stat: %v)", path, err)
	}
	h.Settled(protocol.KindAgent)
}

// Dependencies whose patches do not apply together (GIT-05: the work a
// node builds on cannot be assembled) end the job at once with an error
// naming the patch that did not apply and git's account, instead of being
// handed back until dead-lettered; the agent never runs. The job comes in
// a workflow's trace, and the worker's log line about the conflict carries
// that trace (the worker logs JSON through telemetry.Handler, as the
// binary does).
func TestDependenciesConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{MaxDeliver: 3})
	var logBuf testkit.Buffer
	h.Log = slog.New(telemetry.NewHandler(slog.NewJSONHandler(&logBuf, nil)))
	h.startWorker(Config{})
	one := h.run(h.agentJob("one", 1, "@write src/a.txt\na1\nfrom one\n@end\n"))
	two := h.run(h.agentJob("two", 1, "@write src/a.txt\na1\nfrom two\n@end\n"))
	if one.Patch == nil || two.Patch == nil {
		t.Fatalf("dependencies made no patch: %+v %+v", one, two)
	}
	job := h.agentJob("both", 1, "@write ran.txt\nran\n@end\n")
	job.Patches = []protocol.PatchRef{*one.Patch, *two.Patch}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	h.publishIn(telemetry.WithTraceParent(testkit.Context(t, time.Minute), "00-"+traceID+"-00f067aa0ba902b7-01"), job)
	h.expectStarted(job, 20*time.Second)
	res := h.expectResult(job, 30*time.Second)
	if res.Status != protocol.AgentError || res.Patch != nil ||
		res.Error != "the dependencies' work does not apply together: node two's patch does not apply on top of the base and the work of one" ||
		!strings.Contains(res.Stderr, "src/a.txt") {
		t.Fatalf("status %s, patch %v, error %q, stderr %q", res.Status, res.Patch, res.Error, res.Stderr)
	}
	info := h.Settled(protocol.KindAgent)
	if info.NumRedelivered != 0 {
		t.Errorf("the job was handed back %d times; a redelivery would fail alike", info.NumRedelivered)
	}
	h.NoReports(300 * time.Millisecond)
	if r := testkit.LogRecord(t, logBuf.String(), "agent job's dependencies conflict", "job", job.JobID); r["trace_id"] != traceID {
		t.Errorf("the conflict's log record %v does not carry the job's trace %s", r, traceID)
	}
}
