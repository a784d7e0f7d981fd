package gaterunner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/gatecache"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// hostVar is set in the test process; gates must never see it.
const hostVar = "leaked-from-the-host"

var busConfig = bus.Config{AckWait: 6 * time.Second}

// runnerSecret is the value of a secret-named variable of the runner's
// own environment; nothing the runner publishes may contain it.
const runnerSecret = "runner-secret-4711"

func TestMain(m *testing.M) {
	// Process-wide so tests may run in parallel (t.Setenv forbids that).
	os.Setenv("SUPERVISOR_TEST_HOST_VAR", hostVar)
	os.Setenv("SUP_TEST_RUNNER_TOKEN", runnerSecret)
	sandboxtest.Main(m) // removes the probe image of the Docker tests, if one was built
}

// harness is a jobruntest.Fleet (an embedded NATS server with the fleet's
// resources, a state store, a repository uploaded as a bundle, and the
// reports runners send) with a node's patch and the gate runners started
// on it.
type harness struct {
	*jobruntest.Fleet
	t     *testing.T
	patch protocol.PatchRef // the node's patch: adds newfile, changes src/a.txt
	hosts atomic.Int64

	patches atomic.Int64 // variant patches uploaded
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	f := jobruntest.NewFleet(t, "gaterunner-test", busConfig, map[string]string{
		"README.md": "hello\n",
		"src/a.txt": "a1\n",
	})
	h := &harness{Fleet: f, t: t}

	// The node's own patch, as a worker would have uploaded it; it stays
	// staged in the repository (RepoDir).
	dir := f.RepoDir
	testkit.WriteFile(t, filepath.Join(dir, "newfile"), "made by the agent\n")
	testkit.WriteFile(t, filepath.Join(dir, "src/a.txt"), "a1\na2\n")
	testkit.Git(t, dir, "add", "--all")
	patch := testkit.GitOutput(t, dir, "diff", "--cached", "--binary", "--full-index", f.Repo.BaseCommit)
	ref, err := jobrun.UploadPatch(testkit.Context(t, time.Minute), f.Bus, "node", "wf/node/a1/1.patch", []byte(patch))
	if err != nil {
		t.Fatal(err)
	}
	h.patch = *ref
	return h
}

// variantPatch returns another version of the node's patch, in which
// src/a.txt gets content instead of "a1\na2\n".
func (h *harness) variantPatch(content string) protocol.PatchRef {
	t := h.t
	t.Helper()
	testkit.WriteFile(t, filepath.Join(h.RepoDir, "src/a.txt"), content)
	testkit.Git(t, h.RepoDir, "add", "--all")
	patch := testkit.GitOutput(t, h.RepoDir, "diff", "--cached", "--binary", "--full-index", h.Repo.BaseCommit)
	name := fmt.Sprintf("wf/node/a1/variant-%d.patch", h.patches.Add(1))
	ref, err := jobrun.UploadPatch(testkit.Context(t, time.Minute), h.Bus, "node", name, []byte(patch))
	if err != nil {
		t.Fatal(err)
	}
	return *ref
}

// startRunner runs a gate runner, with its own NATS connection, state
// store and data directory, until the test ends and returns its host.
func (h *harness) startRunner(cfg Config) string {
	return h.startRunnerWith(cfg, nil)
}

// startRunnerWith is startRunner with the runner's sandbox replaced by
// wrap(the process sandbox), if wrap is set.
func (h *harness) startRunnerWith(cfg Config, wrap func(sandbox.Sandbox) sandbox.Sandbox) string {
	return h.startRunnerOpts(cfg, runnerOpts{wrap: wrap})
}

// runnerOpts adjust a runner started by startRunnerOpts.
type runnerOpts struct {
	// host is the runner's identity (default test-gaterunner-<n>). A
	// runner with the Docker sandbox needs one unique on the engine: it
	// removes every container labelled with it when it starts.
	host string
	// settings, if set, adjusts the runner's jobrun settings (by default
	// the process sandbox with sandbox.BasePath) before its Deps are built
	// the way the gaterunner binary builds them (jobrun.NewDeps).
	settings func(*jobrun.Settings)
	// wrap, if set, replaces the runner's sandbox with wrap(sandbox).
	wrap func(sandbox.Sandbox) sandbox.Sandbox
}

// startRunnerOpts runs a gate runner, with its own NATS connection, state
// store and data directory, until the test ends and returns its host.
func (h *harness) startRunnerOpts(cfg Config, o runnerOpts) string {
	t := h.t
	host := o.host
	if host == "" {
		host = fmt.Sprintf("test-gaterunner-%d", h.hosts.Add(1))
	}
	ctx := testkit.Context(t, time.Minute)
	rb, err := bus.Open(ctx, h.URL, host, busConfig, h.Log)
	if err != nil {
		t.Fatalf("runner bus: %v", err)
	}
	store, err := kvstate.New(ctx, rb.JS)
	if err != nil {
		rb.Close()
		t.Fatalf("runner kvstate: %v", err)
	}
	settings := jobrun.Settings{DataDir: t.TempDir(), SandboxPath: sandbox.BasePath, Host: host}
	if o.settings != nil {
		o.settings(&settings)
	}
	deps, closeDeps, err := jobrun.NewDeps(ctx, settings, rb, store, h.Log)
	if err != nil {
		rb.Close()
		t.Fatalf("NewDeps: %v", err)
	}
	if o.wrap != nil {
		deps.Sandbox = o.wrap(deps.Sandbox)
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
			closeDeps() // the engine client of a Docker sandbox
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
		Repo: h.Repo, Command: command, TimeoutSeconds: 60, PublishedAt: time.Now().UTC(), Round: round,
	}
}

// defJob is a gate job carrying def as its Definition (the execution
// fields repeated, as the coordinator sends them), for round round.
func (h *harness) defJob(def protocol.GateSpec, round int) *protocol.GateJob {
	j := h.gateJob(def.Name, round, def.Command...)
	j.Env, j.WorkingDir, j.TimeoutSeconds = def.Env, def.WorkingDir, def.TimeoutSeconds
	j.Definition = &def
	return j
}

func (h *harness) publish(j *protocol.GateJob) {
	h.t.Helper()
	h.publishIn(testkit.Context(h.t, time.Minute), j)
}

// publishIn publishes j with ctx's span context, as the coordinator's
// dispatch does.
func (h *harness) publishIn(ctx context.Context, j *protocol.GateJob) {
	h.t.Helper()
	data, err := protocol.Encode(j)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.Bus.PublishJob(ctx, protocol.KindGate, j.Pool, j.JobID, data); err != nil {
		h.t.Fatalf("publish: %v", err)
	}
}

func (h *harness) expectStarted(j *protocol.GateJob) *protocol.Started {
	h.t.Helper()
	r := h.Next(20 * time.Second)
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
	r := h.Next(30 * time.Second)
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
	if g.Round != j.Round {
		h.t.Errorf("gate result round %d, want the job's %d", g.Round, j.Round)
	}
	// A cache hit reports the log of the run that produced the result.
	wantLog := fmt.Sprintf("wf/node/a1/gate-%s-%d.log", j.Gate, s.LeaseToken)
	if g.Cached {
		if g.Log == "" || g.Log == wantLog {
			h.t.Errorf("cached result log %q, want the original run's", g.Log)
		}
	} else if g.Log != wantLog {
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
	data, err := h.Bus.Logs.GetBytes(testkit.Context(h.t, time.Minute), name)
	if err != nil {
		h.t.Fatalf("log %s: %v", name, err)
	}
	return string(data)
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
	if g.Sandbox != "process" {
		t.Errorf("sandbox %q, want process", g.Sandbox)
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

	info := h.Settled(protocol.KindGate)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 4 {
		t.Errorf("4 gate jobs delivered %d times (%d redelivered), want once each", info.Delivered.Consumer, info.NumRedelivered)
	}
	h.NoReports(300 * time.Millisecond)
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
		"gate=env", "task=node", "node=node", "workflow=wf", "attempt=1", "repo_id=" + h.Repo.ID,
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
	h.Settled(protocol.KindGate)
}

// Exit 75 reports pending and acknowledges the job: the coordinator
// schedules the next poll as a new gate job (round + 1).
func TestGatePendingAcked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})

	job := h.gateJob("poll", 1, "sh", "-c", "echo not yet; exit 75")
	g := h.run(job)
	if g.Status != protocol.GatePending || g.ExitCode == nil || *g.ExitCode != 75 || g.Cached {
		t.Fatalf("status %s exit %s cached %v, want pending 75", g.Status, exitCode(g.ExitCode), g.Cached)
	}
	if !strings.Contains(g.Output, "not yet") {
		t.Errorf("output %q", g.Output)
	}
	info := h.Settled(protocol.KindGate)
	if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("pending job delivered %d times (%d redelivered), want once, acked", info.Delivered.Consumer, info.NumRedelivered)
	}
	h.NoReports(2 * time.Second) // not redelivered, not polled by the runner

	// The coordinator's next poll is a new job; it is not a cache hit.
	next := h.gateJob("poll", 2, "sh", "-c", "echo not yet; exit 75")
	if g := h.run(next); g.Status != protocol.GatePending || g.Cached {
		t.Fatalf("round 2: status %s cached %v", g.Status, g.Cached)
	}
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
	if info := h.Settled(protocol.KindGate); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("delivered %d times", info.Delivered.Consumer)
	}
}

// runs counts the lines a gate appended to its marker file, kept outside
// the (fresh, per job) workspaces.
func runs(t *testing.T, marker string) int {
	t.Helper()
	data, err := os.ReadFile(marker)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

func withEnv(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for name, val := range env {
		if name != k {
			out[name] = val
		}
	}
	return out
}

// A passing gate is cached: an identical job in a fresh workspace is a hit
// that does not run the command; the code, the env, no_cache and cache:
// false each make it run again; a failing gate is never cached.
func TestGateCache(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})
	marker := filepath.Join(t.TempDir(), "runs")
	def := protocol.GateSpec{
		Name: "cached", Pool: protocol.DefaultPool, TimeoutSeconds: 60,
		Command: []string{"sh", "-c", `echo run >> "$MARKER"; echo checked`},
		Env:     map[string]string{"MARKER": marker},
	}
	round := 0
	job := func(d protocol.GateSpec) *protocol.GateJob {
		round++
		j := h.defJob(d, round)
		j.Patches = []protocol.PatchRef{h.patch}
		return j
	}

	first := h.run(job(def))
	if first.Status != protocol.GatePassed || first.Cached || !gatecache.ValidKey(first.CacheKey) || first.CacheDisabled != "" {
		t.Fatalf("first run: status %s cached %v key %q disabled %q", first.Status, first.Cached, first.CacheKey, first.CacheDisabled)
	}
	if n := runs(t, marker); n != 1 {
		t.Fatalf("first run: the command ran %d times", n)
	}
	if !strings.Contains(first.Output, "checked") {
		t.Errorf("first run output %q", first.Output)
	}

	hit := h.run(job(def))
	if !hit.Cached || hit.Status != protocol.GatePassed || hit.CacheKey != first.CacheKey {
		t.Fatalf("identical job: cached %v status %s key %q, want a hit on %q", hit.Cached, hit.Status, hit.CacheKey, first.CacheKey)
	}
	if n := runs(t, marker); n != 1 {
		t.Fatalf("cache hit: the command ran again (%d runs)", n)
	}
	if hit.Log != first.Log || hit.Output != first.Output || hit.ExitCode == nil || *hit.ExitCode != 0 ||
		hit.DurationMillis != 0 || hit.Round != 2 || hit.Error != "" || hit.IntegrityViolation {
		t.Errorf("hit %+v does not carry the first run's result (log %q)", hit, first.Log)
	}
	if !hit.StartedAt.After(first.FinishedAt) || hit.FinishedAt.Before(hit.StartedAt) {
		t.Errorf("hit times %s..%s, want fresh ones after the first run's %s", hit.StartedAt, hit.FinishedAt, first.FinishedAt)
	}

	// One byte of the node's patch changed: another tree, a miss.
	variant := job(def)
	variant.Patches = []protocol.PatchRef{h.variantPatch("a1\na3\n")}
	g := h.run(variant)
	if g.Cached || g.Status != protocol.GatePassed || g.CacheKey == first.CacheKey || !gatecache.ValidKey(g.CacheKey) {
		t.Fatalf("changed patch: cached %v status %s key %q", g.Cached, g.Status, g.CacheKey)
	}
	if n := runs(t, marker); n != 2 {
		t.Fatalf("changed patch: %d runs, want 2", n)
	}

	// The env changed: a miss.
	envDef := def
	envDef.Env = withEnv(def.Env, "EXTRA", "1")
	if g := h.run(job(envDef)); g.Cached || g.CacheKey == first.CacheKey {
		t.Fatalf("changed env: cached %v key %q", g.Cached, g.CacheKey)
	}
	if n := runs(t, marker); n != 3 {
		t.Fatalf("changed env: %d runs, want 3", n)
	}

	// no_cache runs again, under the same key, and the entry stays.
	noCache := job(def)
	noCache.NoCache = true
	if g := h.run(noCache); g.Cached || g.Status != protocol.GatePassed || g.CacheKey != first.CacheKey {
		t.Fatalf("no_cache: cached %v status %s key %q", g.Cached, g.Status, g.CacheKey)
	}
	if n := runs(t, marker); n != 4 {
		t.Fatalf("no_cache: %d runs, want 4", n)
	}
	if g := h.run(job(def)); !g.Cached {
		t.Fatal("after no_cache: not a hit")
	}

	// cache: false runs every time and says why.
	off := def
	off.Cache = new(bool)
	for i := range 2 {
		g := h.run(job(off))
		if g.Cached || g.CacheKey != "" || !strings.HasPrefix(g.CacheDisabled, "cache: false") || g.Status != protocol.GatePassed {
			t.Fatalf("cache: false (run %d): cached %v key %q disabled %q", i+1, g.Cached, g.CacheKey, g.CacheDisabled)
		}
	}
	if n := runs(t, marker); n != 6 {
		t.Fatalf("cache: false: %d runs, want 6", n)
	}

	// A failing gate is not cached.
	failMarker := filepath.Join(t.TempDir(), "fails")
	fail := protocol.GateSpec{
		Name: "failing", Pool: protocol.DefaultPool, TimeoutSeconds: 60,
		Command: []string{"sh", "-c", `echo run >> "$MARKER"; echo broken >&2; exit 1`},
		Env:     map[string]string{"MARKER": failMarker},
	}
	for i := range 2 {
		g := h.run(job(fail))
		if g.Status != protocol.GateFailed || g.Cached || !gatecache.ValidKey(g.CacheKey) {
			t.Fatalf("failing gate (run %d): status %s cached %v key %q", i+1, g.Status, g.Cached, g.CacheKey)
		}
	}
	if n := runs(t, failMarker); n != 2 {
		t.Fatalf("failing gate: %d runs, want 2", n)
	}

	// A job without a definition (an older coordinator) is cached too.
	legacyMarker := filepath.Join(t.TempDir(), "legacy")
	for i := range 2 {
		lj := h.gateJob("legacy", 100+i, "sh", "-c", `echo run >> "$MARKER"`)
		lj.Env = map[string]string{"MARKER": legacyMarker}
		if g := h.run(lj); g.Status != protocol.GatePassed || g.Cached != (i == 1) {
			t.Fatalf("legacy job %d: status %s cached %v", i+1, g.Status, g.Cached)
		}
	}
	if n := runs(t, legacyMarker); n != 1 {
		t.Fatalf("legacy job: %d runs, want 1", n)
	}
	info := h.Settled(protocol.KindGate)
	if info.NumRedelivered != 0 {
		t.Errorf("%d jobs redelivered", info.NumRedelivered)
	}
}

// A gate that changes the workspace outside allowed_writes fails with an
// integrity violation, whatever its exit code, and is never cached.
func TestGateIntegrity(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})
	round := 0
	run := func(d protocol.GateSpec) *protocol.GateResult {
		round++
		j := h.defJob(d, round)
		j.Patches = []protocol.PatchRef{h.patch}
		return h.run(j)
	}
	gate := func(name, script string, allowed ...string) protocol.GateSpec {
		return protocol.GateSpec{Name: name, Pool: protocol.DefaultPool, TimeoutSeconds: 60,
			Command: []string{"sh", "-c", script}, AllowedWrites: allowed}
	}
	violation := func(g *protocol.GateResult, want string) {
		t.Helper()
		if g.Status != protocol.GateFailed || !g.IntegrityViolation || g.Cached {
			t.Fatalf("%s: status %s violation %v cached %v, want failed by an integrity violation", g.Gate, g.Status, g.IntegrityViolation, g.Cached)
		}
		if !slices.Contains(g.Violations, want) {
			t.Errorf("%s: violations %q lack %q", g.Gate, g.Violations, want)
		}
		for _, text := range []string{g.Error, g.Output, h.logText(g.Log)} {
			if !strings.Contains(text, "integrity violation: ") || !strings.Contains(text, want) {
				t.Errorf("%s: %q does not name the violation %q", g.Gate, text, want)
			}
		}
	}

	// A tracked file modified, exit 0: failed, and again on the next round
	// (a violation is never cached).
	modify := gate("modify", `echo more >> README.md; exit 0`)
	for range 2 {
		g := run(modify)
		violation(g, "modified README.md")
		if g.ExitCode == nil || *g.ExitCode != 0 {
			t.Errorf("modify: exit %s, want the gate's own 0", exitCode(g.ExitCode))
		}
	}
	// The node's own file, added by its patch.
	violation(run(gate("modify-patched", `echo more >> newfile`)), "modified newfile")
	// A new file.
	violation(run(gate("create", `echo x > made.txt`)), "new made.txt")
	// .supervisor/ can never be written, even if allow-listed.
	violation(run(gate("protected", `mkdir -p .supervisor && echo x > .supervisor/evil`, ".supervisor/**", "**")), "new .supervisor/evil")
	// Nor can the .git state.
	g := run(gate("git-state", `touch "$(git rev-parse --git-dir)/HEAD"`))
	violation(g, ".git/HEAD changed")

	// Writes inside allowed_writes pass, and the result is cached.
	marker := filepath.Join(t.TempDir(), "runs")
	allowed := gate("allowed", `mkdir -p out && echo report >> out/report.txt && echo run >> "$MARKER"`, "out/**")
	allowed.Env = map[string]string{"MARKER": marker}
	g = run(allowed)
	if g.Status != protocol.GatePassed || g.IntegrityViolation || len(g.Violations) != 0 || g.Cached {
		t.Fatalf("allowed writes: status %s violations %q cached %v error %q", g.Status, g.Violations, g.Cached, g.Error)
	}
	if g = run(allowed); !g.Cached || g.Status != protocol.GatePassed {
		t.Fatalf("allowed writes, second run: cached %v status %s", g.Cached, g.Status)
	}
	if n := runs(t, marker); n != 1 {
		t.Errorf("allowed writes: %d runs, want 1", n)
	}

	// Ignored paths written are logged, not violations.
	g = run(gate("ignored", `echo 'scratch/' > .gitignore && mkdir scratch && echo x > scratch/tmp`, ".gitignore"))
	if g.Status != protocol.GatePassed || g.IntegrityViolation {
		t.Fatalf("ignored writes: status %s violations %q", g.Status, g.Violations)
	}
	if logText := h.logText(g.Log); !strings.Contains(logText, "ignored path written by the gate (not a violation): scratch/") {
		t.Errorf("log does not list the ignored path:\n%s", logText)
	}
	h.Settled(protocol.KindGate)
}

// The combined output is redacted, then its tail kept with a marker.
func TestGateOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})

	long := h.gateJob("long", 1, "sh", "-c", `head -c 12000 /dev/zero | tr '\0' x; echo; echo tail-token=tok-999 >&2`)
	g := h.run(long)
	if g.Status != protocol.GatePassed {
		t.Fatalf("long: %s", g.Status)
	}
	want := "...[truncated 2023 chars]...\n" + strings.Repeat("x", 9977) + "\n\ntail-token=[REDACTED]"
	if g.Output != want {
		t.Errorf("long output: %d chars starting %.60q, ending %q; want %d chars starting %.60q",
			len(g.Output), g.Output, g.Output[max(len(g.Output)-40, 0):], len(want), want)
	}
	if strings.Contains(g.Stderr, "tok-999") || strings.Contains(g.Output, "tok-999") {
		t.Error("secret not redacted")
	}

	// A secret across the cut: redacted before truncation, no part of it
	// survives (and the redacted output fits without truncation).
	cut := h.gateJob("cut", 1, "sh", "-c", `printf 'token='; head -c 200 /dev/zero | tr '\0' Q; echo; head -c 9950 /dev/zero | tr '\0' y`)
	g = h.run(cut)
	if strings.Contains(g.Output, "Q") || !strings.HasPrefix(g.Output, "token=[REDACTED]\n") || strings.Contains(g.Output, "truncated") {
		t.Errorf("cut output starts %.80q", g.Output)
	}
	if n := len(g.Output); n != len("token=[REDACTED]\n")+9950 {
		t.Errorf("cut output is %d chars", n)
	}
	if g.DurationMillis < 0 || g.TimedOut {
		t.Errorf("duration %d timed out %v", g.DurationMillis, g.TimedOut)
	}
	h.Settled(protocol.KindGate)
}

// OT-10 (#12): a gate that prints a secret of the runner's environment
// (here by value, and as its parent's environ shows it) leaks it neither
// in the result's output, stdout and stderr nor in the uploaded log: the
// runner masks its environment's secret values wherever they appear.
func TestGateOutputRedactsRunnerSecrets(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})

	j := h.gateJob("leak", 1, "sh", "-c",
		`echo "plain ${0} value"; tr '\0' '\n' < /proc/$PPID/environ | grep RUNNER_TOKEN; echo "in stderr ${0}" >&2; exit 1`,
		runnerSecret)
	g := h.run(j)
	if g.Status != protocol.GateFailed {
		t.Fatalf("status %s, want failed (output %q)", g.Status, g.Output)
	}
	logText := h.logText(g.Log)
	for what, text := range map[string]string{"output": g.Output, "stdout": g.Stdout, "stderr": g.Stderr, "log": logText} {
		if strings.Contains(text, runnerSecret) {
			t.Errorf("%s leaks the runner's secret:\n%s", what, text)
		}
	}
	if !strings.Contains(g.Stdout, "plain [REDACTED] value") || !strings.Contains(g.Stderr, "in stderr [REDACTED]") {
		t.Errorf("the gate's output lost more than the secret: stdout %q, stderr %q", g.Stdout, g.Stderr)
	}
	h.Settled(protocol.KindGate)
}

// Two runners (two processes' worth: separate connections and stores)
// given two jobs with the same key at once run the command once.
func TestGateCacheSingleFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunner(Config{})
	h.startRunner(Config{})
	marker := filepath.Join(t.TempDir(), "runs")
	def := protocol.GateSpec{
		Name: "shared", Pool: protocol.DefaultPool, TimeoutSeconds: 60,
		Command: []string{"sh", "-c", `echo run >> "$MARKER"; sleep 2; echo done`},
		Env:     map[string]string{"MARKER": marker},
	}
	jobs := map[string]*protocol.GateJob{}
	for round := 1; round <= 2; round++ {
		j := h.defJob(def, round)
		j.Patches = []protocol.PatchRef{h.patch}
		jobs[j.JobID] = j
	}
	for _, j := range jobs {
		h.publish(j)
	}
	started := map[string]*protocol.Started{}
	results := map[string]*protocol.GateResult{}
	for len(results) < 2 {
		r := h.Next(40 * time.Second)
		switch r.Type {
		case protocol.ReportStarted:
			started[r.Started.JobID] = r.Started
		case protocol.ReportGateResult:
			if _, dup := results[r.Gate.JobID]; dup {
				t.Fatalf("two results for %s", r.Gate.JobID)
			}
			results[r.Gate.JobID] = r.Gate
		}
	}
	cached := 0
	for id, g := range results {
		s := started[id]
		if s == nil || jobs[id] == nil {
			t.Fatalf("result for %s without its started report or job", id)
		}
		if g.Status != protocol.GatePassed || g.LeaseToken != s.LeaseToken || g.Host != s.Host {
			t.Errorf("%s: status %s token %d host %s (started %d %s)", id, g.Status, g.LeaseToken, g.Host, s.LeaseToken, s.Host)
		}
		if g.Cached {
			cached++
		}
		t.Logf("%s on %s: cached %v", id, g.Host, g.Cached)
	}
	if cached != 1 {
		t.Errorf("%d results cached, want exactly 1", cached)
	}
	if n := runs(t, marker); n != 1 {
		t.Errorf("the command ran %d times, want once", n)
	}
	h.Settled(protocol.KindGate)
	h.NoReports(300 * time.Millisecond)
}

// oomSandbox reports every run as killed for running out of memory, like
// a container sandbox would. It does not identify its environment.
type oomSandbox struct{ sandbox.Sandbox }

func (s oomSandbox) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	res, err := s.Sandbox.Run(ctx, spec)
	res.OOMKilled, res.ExitCode, res.Signal = true, -1, "killed"
	return res, err
}

func TestGateOutOfMemory(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startRunnerWith(Config{}, func(sb sandbox.Sandbox) sandbox.Sandbox { return oomSandbox{sb} })
	g := h.run(h.gateJob("hungry", 1, "sh", "-c", "echo allocating"))
	if g.Status != protocol.GateError || g.Error != "resource limit: out of memory" || g.ExitCode != nil {
		t.Fatalf("status %s error %q exit %s, want error, out of memory", g.Status, g.Error, exitCode(g.ExitCode))
	}
	if !strings.Contains(g.Output, "out of memory") || !strings.Contains(g.Output, "allocating") {
		t.Errorf("output %q", g.Output)
	}
	if g.Cached || g.CacheKey != "" || !strings.Contains(g.CacheDisabled, "cannot identify its execution environment") {
		t.Errorf("cached %v key %q disabled %q", g.Cached, g.CacheKey, g.CacheDisabled)
	}
	if info := h.Settled(protocol.KindGate); info.NumRedelivered != 0 {
		t.Errorf("redelivered %d times", info.NumRedelivered)
	}
}

// A gate job whose patches do not apply together — an integration run of
// a node on top of another that changed the same lines (GIT-08) — fails
// at once with the patch and git's reason, for the node's feedback; it is
// neither handed back nor counted against the repository. The job comes
// in a workflow's trace, and the runner's log line about the conflict
// carries it (JSON through telemetry.Handler, as the binary logs).
func TestGatePatchesConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var logBuf testkit.Buffer
	h.Log = slog.New(telemetry.NewHandler(slog.NewJSONHandler(&logBuf, nil)))
	h.startRunner(Config{})
	other := h.variantPatch("a1\nsomething else\n")
	other.NodeID = "other"
	j := h.gateJob("combined", 1, "sh", "-c", "echo ran; exit 0")
	j.Patches = []protocol.PatchRef{h.patch, other}
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	h.publishIn(telemetry.WithTraceParent(testkit.Context(t, time.Minute), "00-"+traceID+"-b7ad6b7169203331-01"), j)
	g := h.expectResult(j, h.expectStarted(j))
	if g.Status != protocol.GateFailed || g.ExitCode != nil ||
		g.Error != "the patches under test do not apply together: node other's patch does not apply on top of the base and the work of node" ||
		!strings.Contains(g.Stderr, "patch failed: src/a.txt:1") || strings.Contains(g.Output, os.TempDir()) {
		t.Fatalf("conflicting patches: status %s exit %s error %q stderr %q", g.Status, exitCode(g.ExitCode), g.Error, g.Stderr)
	}
	if !strings.Contains(h.logText(g.Log), "patch failed: src/a.txt:1") {
		t.Errorf("the log does not say what did not apply")
	}
	if strings.Contains(g.Stdout, "ran") {
		t.Errorf("the gate ran on patches that do not apply: %q", g.Stdout)
	}
	info := h.Settled(protocol.KindGate)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Errorf("the job was delivered %d times (%d redelivered), want once", info.Delivered.Consumer, info.NumRedelivered)
	}
	h.NoReports(300 * time.Millisecond)
	if r := testkit.LogRecord(t, logBuf.String(), "gate job's patches conflict", "job", j.JobID); r["trace_id"] != traceID {
		t.Errorf("the conflict's log record %v does not carry the job's trace %s", r, traceID)
	}
}
