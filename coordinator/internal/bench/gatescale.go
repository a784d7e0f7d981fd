package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/config"
)

// ScalePool is the pool of the scale-out scenarios' sleep jobs: only the
// runner processes the scenario starts consume it, not the fleet's
// in-process worker and gate runner.
const ScalePool = "bench-scale"

// ScaleSandboxPath is the PATH the runner processes give their jobs
// (`sleep` is in /usr/bin or /bin).
const ScaleSandboxPath = "/usr/local/bin:/usr/bin:/bin"

// GateSandboxes are the runner processes' sandboxes gate-scale accepts
// (the gaterunner's --sandbox values).
var GateSandboxes = []string{"process", "docker", "auto"}

func (c *Config) gateSandbox() string {
	if c.GateSandbox == "" {
		return "process"
	}
	return c.GateSandbox
}

// Limits of the gate-scale settings.
const (
	maxGateSleep   = time.Minute
	maxGateRunners = 64
)

// runnerReadyTimeout bounds a runner process's start, up to "pulling jobs".
const runnerReadyTimeout = 30 * time.Second

// ScaleOutReport is the figures of a scale-out scenario: the throughput of
// jobs with 1, 2, 4… runner processes of concurrency 1 on sleep jobs —
// gates with gate runner processes (gate-scale), agents with worker
// processes (worker-scale).
type ScaleOutReport struct {
	// Kind is what the runner processes run: gate or agent jobs.
	Kind string `json:"kind"`
	// Tasks is the number of tasks, one sleep job each, of every
	// measurement.
	Tasks int `json:"tasks"`
	// SleepSeconds is what every job (the gate, or the agent) sleeps.
	SleepSeconds float64 `json:"sleep_seconds"`
	// RunnerConcurrency is each runner process's --concurrency.
	RunnerConcurrency int `json:"runner_concurrency"`
	// WorkerConcurrency is gate-scale's in-process worker's (the
	// agents'); worker-scale has no gates.
	WorkerConcurrency int `json:"worker_concurrency,omitempty"`
	// NumCPU is the machine's logical CPUs.
	NumCPU int `json:"num_cpu"`
	// Binary is the executable the processes ran (gaterunner or worker).
	Binary string `json:"binary"`
	// Sandbox is the processes' --sandbox.
	Sandbox string `json:"sandbox"`
	// Note explains why the scaling measures the fleet, not the CPU.
	Note string        `json:"note"`
	Runs []ScaleOutRun `json:"runs"`
}

// ScaleOutRun is one measurement of a scale-out scenario.
type ScaleOutRun struct {
	Runners int `json:"runners"`
	// Jobs is how many sleep jobs (gates or agents) ran.
	Jobs int `json:"jobs"`
	// WindowSeconds runs, on the coordinator's clock, from the first
	// gate.dispatched to the last gate.finished (gates), or from the
	// first node.ready to the last node.agent_done (agents).
	WindowSeconds float64 `json:"window_seconds"`
	// WallSeconds runs from the submit to workflow.finished.
	WallSeconds float64 `json:"wall_seconds"`
	// AgentsDoneSeconds is, for gates, when the last agent finished,
	// from the start of the window: until then the agents overlap the
	// gates.
	AgentsDoneSeconds float64 `json:"agents_done_s,omitempty"`
	// Throughput is Jobs per second of the window.
	Throughput float64 `json:"jobs_per_s"`
	// IdealThroughput is Runners × RunnerConcurrency / sleep: every slot
	// sleeping all the time, nothing else.
	IdealThroughput float64 `json:"ideal_jobs_per_s"`
	// OfIdeal is Throughput over IdealThroughput.
	OfIdeal float64 `json:"of_ideal"`
	// Speedup is Throughput over the first measurement's; Linear is
	// Runners over the first measurement's; OfLinear is Speedup over
	// Linear.
	Speedup  float64 `json:"speedup"`
	Linear   float64 `json:"linear"`
	OfLinear float64 `json:"of_linear"`
	// OverheadPerJobMillis is the slot time each job took beyond its
	// sleep: Runners × RunnerConcurrency × window / Jobs − sleep.
	OverheadPerJobMillis float64 `json:"overhead_per_job_ms"`
	// JobLatency: gate dispatched → started, or node ready → started;
	// JobRun: gate started → finished, or node started → agent done;
	// both on the coordinator's clock.
	JobLatencyP50Micros float64 `json:"job_latency_p50_us"`
	JobLatencyP99Micros float64 `json:"job_latency_p99_us"`
	JobRunP50Micros     float64 `json:"job_run_p50_us"`
	JobRunP99Micros     float64 `json:"job_run_p99_us"`
	// JobsPerRunner is how many jobs each runner process started.
	JobsPerRunner []int `json:"jobs_per_runner"`
	// RunnerCPUSeconds is the CPU time of the runner processes and of the
	// children they waited for (git, sleep), from /proc (0 elsewhere).
	RunnerCPUSeconds      float64 `json:"runner_cpu_seconds"`
	RunnerCPUPerJobMillis float64 `json:"runner_cpu_per_job_ms"`
	// Memory is this process's share: NATS, coordinator, for gate-scale
	// the worker running the agents, the bench's client.
	Memory Memory `json:"memory"`
}

// computeScaling fills in each run's ideal, speed-up and linear figures,
// relative to the first run.
func (g *ScaleOutReport) computeScaling() {
	if len(g.Runs) == 0 {
		return
	}
	base := g.Runs[0]
	for i := range g.Runs {
		run := &g.Runs[i]
		run.IdealThroughput, run.OfIdeal = 0, 0
		if g.SleepSeconds > 0 {
			run.IdealThroughput = float64(run.Runners*g.RunnerConcurrency) / g.SleepSeconds
			run.OfIdeal = run.Throughput / run.IdealThroughput
		}
		run.Speedup, run.Linear, run.OfLinear = 0, 0, 0
		if base.Throughput > 0 && base.Runners > 0 {
			run.Speedup = run.Throughput / base.Throughput
			run.Linear = float64(run.Runners) / float64(base.Runners)
			run.OfLinear = run.Speedup / run.Linear
		}
		run.OverheadPerJobMillis = 0
		if run.Jobs > 0 {
			slot := float64(run.Runners*g.RunnerConcurrency) * run.WindowSeconds / float64(run.Jobs)
			run.OverheadPerJobMillis = (slot - g.SleepSeconds) * 1e3
		}
		run.RunnerCPUPerJobMillis = 0
		if run.Jobs > 0 {
			run.RunnerCPUPerJobMillis = run.RunnerCPUSeconds * 1e3 / float64(run.Jobs)
		}
	}
}

// gateScaleYAML writes a workflow of tasks no-op agents, each with one
// gate sleeping sleep, uncached, in ScalePool.
func gateScaleYAML(name string, tasks int, sleep time.Duration) []byte {
	var b strings.Builder
	agent := `["` + strings.Join(NoopCommand, `", "`) + `"]`
	secs := strconv.FormatFloat(sleep.Seconds(), 'f', -1, 64)
	fmt.Fprintf(&b, "name: %s\ndefaults:\n  agent:\n    command: %s\n  timeout: 1m\n  allow_empty: true\n", name, agent)
	fmt.Fprintf(&b, "gates:\n  - name: sleep\n    command: [\"sleep\", %q]\n    timeout: 2m\n    cache: false\n    pool: %s\n",
		secs, ScalePool)
	b.WriteString("tasks:\n")
	for i := 0; i < tasks; i++ {
		fmt.Fprintf(&b, "  - id: t%04d\n    prompt: no-op\n", i)
	}
	return []byte(b.String())
}

// workerScaleYAML writes a workflow of tasks whose agents sleep sleep, in
// ScalePool, without gates.
func workerScaleYAML(name string, tasks int, sleep time.Duration) []byte {
	var b strings.Builder
	secs := strconv.FormatFloat(sleep.Seconds(), 'f', -1, 64)
	fmt.Fprintf(&b, "name: %s\ndefaults:\n  pool: %s\n  agent:\n    command: [\"sleep\", %q]\n  timeout: 2m\n  allow_empty: true\n",
		name, ScalePool, secs)
	b.WriteString("tasks:\n")
	for i := 0; i < tasks; i++ {
		fmt.Fprintf(&b, "  - id: t%04d\n    prompt: no-op\n", i)
	}
	return []byte(b.String())
}

// scaleOutSpec is what tells gate-scale and worker-scale apart.
type scaleOutSpec struct {
	scenario string // ScenarioGateScale or ScenarioWorkerScale
	kind     string // "gate" or "agent"
	binary   string // GateRunnerBinary or WorkerBinary
	counts   []int
	tasks    int
	sleep    time.Duration
	sandbox  string
	yaml     func(name string, tasks int, sleep time.Duration) []byte
}

func (r *runner) gateScaleSpec() scaleOutSpec {
	return scaleOutSpec{scenario: ScenarioGateScale, kind: "gate", binary: GateRunnerBinary, counts: r.cfg.GateRunners,
		tasks: r.cfg.GateTasks, sleep: r.cfg.GateSleep, sandbox: r.cfg.gateSandbox(), yaml: gateScaleYAML}
}

func (r *runner) workerScaleSpec() scaleOutSpec {
	return scaleOutSpec{scenario: ScenarioWorkerScale, kind: "agent", binary: WorkerBinary, counts: r.cfg.WorkerRunners,
		tasks: r.cfg.GateTasks, sleep: r.cfg.GateSleep, sandbox: r.cfg.gateSandbox(), yaml: workerScaleYAML}
}

// runScaleOut adds runner processes (gate runners or workers) up to each
// count of spec.counts and measures the sleep jobs' throughput with them.
// Runners stay from one measurement to the next; each new set runs a
// warm-up workflow of one job per runner first (so every runner has its
// mirror).
func (r *runner) runScaleOut(ctx context.Context, fs *fleetSession, spec scaleOutSpec) (*ScaleOutReport, error) {
	bin := filepath.Join(r.cfg.BinDir, spec.binary)
	rep := &ScaleOutReport{Kind: spec.kind, Tasks: spec.tasks, SleepSeconds: spec.sleep.Seconds(), RunnerConcurrency: 1,
		NumCPU: runtime.NumCPU(), Binary: bin, Sandbox: spec.sandbox}
	if spec.kind == "gate" {
		rep.WorkerConcurrency = r.cfg.Concurrency
	}
	rep.Note = fmt.Sprintf("this machine has %d CPUs: a sleep %s holds its runner's slot without using CPU, so %d runners "+
		"compete only for the per-job overhead (workspace, reports, and for gates the integrity check), not for the jobs themselves; "+
		"the scaling measures the fleet, not the CPU", rep.NumCPU, spec.kind, spec.counts[len(spec.counts)-1])
	if rep.Sandbox != "process" {
		rep.Note += "; with Docker, starting each job's container is the engine's work (dockerd, containerd, runc), " +
			"which RUNNER CPU/JOB does not count"
	}
	if _, err := workflow.Parse(spec.scenario+".yaml", spec.yaml("bench-scale", spec.tasks, spec.sleep)); err != nil {
		return nil, fmt.Errorf("generated workflow: %w", err)
	}

	var procs []*runnerProc
	defer func() { stopRunners(procs) }()
	for _, n := range spec.counts {
		for len(procs) < n {
			p, err := r.startRunner(ctx, spec, bin, fs.url, len(procs)+1)
			if err != nil {
				return nil, err
			}
			procs = append(procs, p)
		}
		for _, p := range procs {
			if err := p.waitReady(ctx); err != nil {
				return nil, err
			}
		}
		run, err := r.scaleRun(ctx, fs, spec, procs, n)
		if err != nil {
			return nil, fmt.Errorf("%d runners: %w", n, err)
		}
		rep.Runs = append(rep.Runs, run)
		r.progress("%s: %d runner(s): %d %ss in %.2fs, %.2f/s", spec.scenario, n, run.Jobs, spec.kind, run.WindowSeconds, run.Throughput)
	}
	rep.computeScaling()
	return rep, nil
}

// scaleRun warms the runners up, then runs and measures one workflow.
func (r *runner) scaleRun(ctx context.Context, fs *fleetSession, spec scaleOutSpec, procs []*runnerProc, n int) (ScaleOutRun, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	warm := fmt.Sprintf("bench-%s-warmup-n%d", spec.scenario, n)
	r.progress("%s: %d runner(s): warm-up", spec.scenario, n)
	if _, err := fs.run(ctx, warm+".yaml", spec.yaml(warm, n, spec.sleep)); err != nil {
		return ScaleOutRun{}, fmt.Errorf("warm-up: %w", err)
	}

	name := fmt.Sprintf("bench-%s-n%d", spec.scenario, n)
	r.progress("%s: %d runner(s): %d tasks, one `sleep %s` %s each", spec.scenario, n, spec.tasks, spec.sleep, spec.kind)
	cpu0 := runnersCPU(procs)
	mem := startMem()
	start := time.Now()
	id, err := submit(ctx, fs.client, fs.repo, name+".yaml", spec.yaml(name, spec.tasks, spec.sleep))
	if err != nil {
		return ScaleOutRun{}, err
	}
	end, err := fs.watcher.wait(ctx, []string{id})
	if err != nil {
		return ScaleOutRun{}, err
	}
	memory := mem.stop(spec.tasks, fs.watcher.settle)
	cpu := runnersCPU(procs) - cpu0
	st, err := fs.watcher.collect([]string{id})
	if err != nil {
		return ScaleOutRun{}, err
	}
	run := ScaleOutRun{Runners: n, WallSeconds: end.Sub(start).Seconds(), RunnerCPUSeconds: cpu.Seconds(), Memory: memory}
	var window time.Duration
	hosts := st.gateHosts
	if spec.kind == "gate" {
		if st.succeeded != spec.tasks || st.gatesFinished != spec.tasks {
			return ScaleOutRun{}, fmt.Errorf("%d of %d nodes succeeded, %d gates finished", st.succeeded, spec.tasks, st.gatesFinished)
		}
		window = st.lastGateFinished.Sub(st.firstDispatched)
		run.Jobs = st.gatesFinished
		run.AgentsDoneSeconds = st.lastAgentDone.Sub(st.firstDispatched).Seconds()
		run.JobLatencyP50Micros, run.JobLatencyP99Micros = quantiles(st.gateLatency)
		run.JobRunP50Micros, run.JobRunP99Micros = quantiles(st.gateRun)
	} else {
		if st.succeeded != spec.tasks {
			return ScaleOutRun{}, fmt.Errorf("%d of %d nodes succeeded", st.succeeded, spec.tasks)
		}
		window = st.lastAgentDone.Sub(st.firstReady)
		run.Jobs = st.succeeded
		run.JobLatencyP50Micros, run.JobLatencyP99Micros = quantiles(st.nodeLatency)
		run.JobRunP50Micros, run.JobRunP99Micros = quantiles(st.run)
		hosts = st.agentHosts
	}
	if window <= 0 {
		return ScaleOutRun{}, fmt.Errorf("no %s window in the events", spec.kind)
	}
	run.WindowSeconds = window.Seconds()
	run.Throughput = float64(run.Jobs) / window.Seconds()
	for _, p := range procs[:n] {
		run.JobsPerRunner = append(run.JobsPerRunner, hosts[p.name])
	}
	return run, nil
}

// runnerProc is a runner process (a gate runner or a worker).
type runnerProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set when done is closed
}

// startRunner starts the i-th runner process of spec (a gate runner or a
// worker): its own data directory and host id, ScalePool, concurrency 1,
// the fleet's NATS and so its KV state store.
func (r *runner) startRunner(ctx context.Context, spec scaleOutSpec, bin, natsURL string, i int) (*runnerProc, error) {
	name := fmt.Sprintf("bench-%s-%d", spec.binary, i)
	dir := filepath.Join(r.dir, spec.scenario, name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	return r.startProc(spec.scenario, name, bin, natsURL, dir, filepath.Join(dir, "data"),
		[]string{"--pools", ScalePool, "--concurrency", "1", "--sandbox", spec.sandbox, "--sandbox-path", ScaleSandboxPath})
}

// startProc starts runner process name of scenario: bin with the fleet's
// NATS, data directory data, host id name, a 10 s drain, no metrics
// listener (several share the host) and args, working
// in dir, where its log goes.
func (r *runner) startProc(scenario, name, bin, natsURL, dir, data string, args []string) (*runnerProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, filepath.Base(bin)+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"--nats", natsURL, "--data-dir", data, "--host-id", name, "--drain-timeout", "10s",
		"--metrics-listen", "off"},
		args...)...)
	cmd.Dir = dir
	cmd.Env = config.ChildEnv()
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	r.progress("%s: started %s (pid %d, log %s)", scenario, name, cmd.Process.Pid, logPath)
	p := &runnerProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until the runner logs that it pulls jobs.
func (p *runnerProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(runnerReadyTimeout)
	for {
		if b, _ := os.ReadFile(p.log); bytes.Contains(b, []byte("pulling jobs")) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it pulled jobs: %v\n%s", p.name, p.err, tail(p.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not pull jobs within %s:\n%s", p.name, runnerReadyTimeout, tail(p.log))
		}
	}
}

// stopRunners asks every runner to drain (SIGTERM) and kills those still
// running after the drain timeout.
func stopRunners(procs []*runnerProc) {
	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			_ = p.cmd.Process.Kill()
		}
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// runnersCPU is the CPU time the runner processes and their waited-for
// children have used so far.
func runnersCPU(procs []*runnerProc) time.Duration {
	var sum time.Duration
	for _, p := range procs {
		sum += processCPU(p.cmd.Process.Pid)
	}
	return sum
}

// tail returns the end of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
