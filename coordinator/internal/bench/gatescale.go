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

// GateScalePool is the runner pool of the gate-scale scenario's gates: only
// the gate runner processes the scenario starts consume it, not the fleet's
// in-process gate runner.
const GateScalePool = "bench-scale"

// GateScaleSandboxPath is the PATH the runner processes give their gates
// (`sleep` is in /usr/bin or /bin).
const GateScaleSandboxPath = "/usr/local/bin:/usr/bin:/bin"

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

// GateScaleReport is the gate-scale scenario's figures: gate throughput
// with 1, 2, 4… gate runner processes of concurrency 1 on sleep gates.
type GateScaleReport struct {
	// Tasks is the number of tasks, one gate each, of every measurement.
	Tasks int `json:"tasks"`
	// SleepSeconds is what every gate sleeps.
	SleepSeconds float64 `json:"sleep_seconds"`
	// RunnerConcurrency is each runner process's --concurrency.
	RunnerConcurrency int `json:"runner_concurrency"`
	// WorkerConcurrency is the in-process worker's (the agents').
	WorkerConcurrency int `json:"worker_concurrency"`
	// NumCPU is the machine's logical CPUs.
	NumCPU int `json:"num_cpu"`
	// Binary is the gaterunner executable the processes ran.
	Binary string `json:"binary"`
	// Sandbox is the processes' --sandbox.
	Sandbox string `json:"sandbox"`
	// Note explains why the scaling measures the fleet, not the CPU.
	Note string     `json:"note"`
	Runs []ScaleRun `json:"runs"`
}

// ScaleRun is one measurement of the gate-scale scenario.
type ScaleRun struct {
	Runners int `json:"runners"`
	Gates   int `json:"gates"`
	// WindowSeconds runs from the first gate.dispatched to the last
	// gate.finished (the coordinator's clock): the gates' part of the run.
	WindowSeconds float64 `json:"window_seconds"`
	// WallSeconds runs from the submit to workflow.finished.
	WallSeconds float64 `json:"wall_seconds"`
	// AgentsDoneSeconds is when the last agent finished, from the start
	// of the window: until then the agents overlap the gates.
	AgentsDoneSeconds float64 `json:"agents_done_s"`
	// Throughput is Gates per second of the window.
	Throughput float64 `json:"gates_per_s"`
	// IdealThroughput is Runners × RunnerConcurrency / sleep: every slot
	// sleeping all the time, nothing else.
	IdealThroughput float64 `json:"ideal_gates_per_s"`
	// OfIdeal is Throughput over IdealThroughput.
	OfIdeal float64 `json:"of_ideal"`
	// Speedup is Throughput over the first measurement's; Linear is
	// Runners over the first measurement's; OfLinear is Speedup over
	// Linear.
	Speedup  float64 `json:"speedup"`
	Linear   float64 `json:"linear"`
	OfLinear float64 `json:"of_linear"`
	// OverheadPerGateMillis is the slot time each gate took beyond its
	// sleep: Runners × RunnerConcurrency × window / Gates − sleep.
	OverheadPerGateMillis float64 `json:"overhead_per_gate_ms"`
	// GateLatency: gate dispatched → started; GateRun: gate started →
	// finished, both on the coordinator's clock.
	GateLatencyP50Micros float64 `json:"gate_latency_p50_us"`
	GateLatencyP99Micros float64 `json:"gate_latency_p99_us"`
	GateRunP50Micros     float64 `json:"gate_run_p50_us"`
	GateRunP99Micros     float64 `json:"gate_run_p99_us"`
	// GatesPerRunner is how many gates each runner process started.
	GatesPerRunner []int `json:"gates_per_runner"`
	// RunnerCPUSeconds is the CPU time of the runner processes and of the
	// children they waited for (git, sleep), from /proc (0 elsewhere).
	RunnerCPUSeconds       float64 `json:"runner_cpu_seconds"`
	RunnerCPUPerGateMillis float64 `json:"runner_cpu_per_gate_ms"`
	// Memory is this process's share: NATS, coordinator, the worker
	// running the agents, the bench's client.
	Memory Memory `json:"memory"`
}

// computeScaling fills in each run's ideal, speed-up and linear figures,
// relative to the first run.
func (g *GateScaleReport) computeScaling() {
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
		run.OverheadPerGateMillis = 0
		if run.Gates > 0 {
			slot := float64(run.Runners*g.RunnerConcurrency) * run.WindowSeconds / float64(run.Gates)
			run.OverheadPerGateMillis = (slot - g.SleepSeconds) * 1e3
		}
		run.RunnerCPUPerGateMillis = 0
		if run.Gates > 0 {
			run.RunnerCPUPerGateMillis = run.RunnerCPUSeconds * 1e3 / float64(run.Gates)
		}
	}
}

// gateScaleYAML writes a workflow of tasks no-op agents, each with one
// gate sleeping sleep, uncached, in GateScalePool.
func gateScaleYAML(name string, tasks int, sleep time.Duration) []byte {
	var b strings.Builder
	agent := `["` + strings.Join(NoopCommand, `", "`) + `"]`
	secs := strconv.FormatFloat(sleep.Seconds(), 'f', -1, 64)
	fmt.Fprintf(&b, "name: %s\ndefaults:\n  agent:\n    command: %s\n  timeout: 1m\n  allow_empty: true\n", name, agent)
	fmt.Fprintf(&b, "gates:\n  - name: sleep\n    command: [\"sleep\", %q]\n    timeout: 2m\n    cache: false\n    pool: %s\n",
		secs, GateScalePool)
	b.WriteString("tasks:\n")
	for i := 0; i < tasks; i++ {
		fmt.Fprintf(&b, "  - id: t%04d\n    prompt: no-op\n", i)
	}
	return []byte(b.String())
}

// runGateScale adds gate runner processes up to each count of
// GateRunners and measures the gates' throughput with them. Runners stay
// from one measurement to the next; each new set runs a warm-up workflow
// of one gate per runner first (so every runner has its mirror).
func (r *runner) runGateScale(ctx context.Context, fs *fleetSession) (*GateScaleReport, error) {
	bin := filepath.Join(r.cfg.BinDir, GateRunnerBinary)
	rep := &GateScaleReport{Tasks: r.cfg.GateTasks, SleepSeconds: r.cfg.GateSleep.Seconds(), RunnerConcurrency: 1,
		WorkerConcurrency: r.cfg.Concurrency, NumCPU: runtime.NumCPU(), Binary: bin, Sandbox: r.cfg.gateSandbox()}
	rep.Note = fmt.Sprintf("this machine has %d CPUs: a sleep gate holds its runner's slot without using CPU, so %d runners "+
		"compete only for the per-gate overhead (workspace, integrity check, reports), not for the gates themselves; "+
		"the scaling measures the fleet, not the CPU", rep.NumCPU, r.cfg.GateRunners[len(r.cfg.GateRunners)-1])
	if rep.Sandbox != "process" {
		rep.Note += "; with Docker, starting each gate's container is the engine's work (dockerd, containerd, runc), " +
			"which RUNNER CPU/GATE does not count"
	}
	for _, y := range [][]byte{gateScaleYAML("bench-scale", r.cfg.GateTasks, r.cfg.GateSleep)} {
		if _, err := workflow.Parse("bench-scale.yaml", y); err != nil {
			return nil, fmt.Errorf("generated workflow: %w", err)
		}
	}

	var procs []*runnerProc
	defer func() { stopRunners(procs) }()
	for _, n := range r.cfg.GateRunners {
		for len(procs) < n {
			p, err := r.startGateRunner(ctx, bin, fs.url, len(procs)+1)
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
		run, err := r.scaleRun(ctx, fs, procs, n)
		if err != nil {
			return nil, fmt.Errorf("%d runners: %w", n, err)
		}
		rep.Runs = append(rep.Runs, run)
		r.progress("%s: %d runner(s): %d gates in %.2fs, %.2f gates/s", ScenarioGateScale, n, run.Gates, run.WindowSeconds, run.Throughput)
	}
	rep.computeScaling()
	return rep, nil
}

// scaleRun warms the runners up, then runs and measures one workflow.
func (r *runner) scaleRun(ctx context.Context, fs *fleetSession, procs []*runnerProc, n int) (ScaleRun, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	warm := fmt.Sprintf("bench-scale-warmup-n%d", n)
	r.progress("%s: %d runner(s): warm-up", ScenarioGateScale, n)
	if _, err := fs.run(ctx, warm+".yaml", gateScaleYAML(warm, n, r.cfg.GateSleep)); err != nil {
		return ScaleRun{}, fmt.Errorf("warm-up: %w", err)
	}

	name := fmt.Sprintf("bench-scale-n%d", n)
	r.progress("%s: %d runner(s): %d tasks, one `sleep %s` gate each", ScenarioGateScale, n, r.cfg.GateTasks, r.cfg.GateSleep)
	cpu0 := runnersCPU(procs)
	mem := startMem()
	start := time.Now()
	id, err := submit(ctx, fs.client, fs.repo, name+".yaml", gateScaleYAML(name, r.cfg.GateTasks, r.cfg.GateSleep))
	if err != nil {
		return ScaleRun{}, err
	}
	end, err := fs.watcher.wait(ctx, []string{id})
	if err != nil {
		return ScaleRun{}, err
	}
	memory := mem.stop(r.cfg.GateTasks)
	cpu := runnersCPU(procs) - cpu0
	st := fs.watcher.collect([]string{id})
	if st.succeeded != r.cfg.GateTasks || st.gatesFinished != r.cfg.GateTasks {
		return ScaleRun{}, fmt.Errorf("%d of %d nodes succeeded, %d gates finished", st.succeeded, r.cfg.GateTasks, st.gatesFinished)
	}
	window := st.lastGateFinished.Sub(st.firstDispatched)
	if window <= 0 {
		return ScaleRun{}, fmt.Errorf("no gate window in the events (first dispatched %s, last finished %s)", st.firstDispatched, st.lastGateFinished)
	}
	run := ScaleRun{Runners: n, Gates: st.gatesFinished, WindowSeconds: window.Seconds(), WallSeconds: end.Sub(start).Seconds(),
		AgentsDoneSeconds: st.lastAgentDone.Sub(st.firstDispatched).Seconds(),
		Throughput:        float64(st.gatesFinished) / window.Seconds(),
		RunnerCPUSeconds:  cpu.Seconds(), Memory: memory}
	run.GateLatencyP50Micros, run.GateLatencyP99Micros = quantiles(st.gateLatency)
	run.GateRunP50Micros, run.GateRunP99Micros = quantiles(st.gateRun)
	for _, p := range procs[:n] {
		run.GatesPerRunner = append(run.GatesPerRunner, st.gateHosts[p.name])
	}
	return run, nil
}

// runnerProc is a gate runner process.
type runnerProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set when done is closed
}

// startGateRunner starts the i-th gate runner process: its own data
// directory and host id, GateScalePool, concurrency 1, the fleet's NATS
// and so its KV state store.
func (r *runner) startGateRunner(ctx context.Context, bin, natsURL string, i int) (*runnerProc, error) {
	name := fmt.Sprintf("bench-gaterunner-%d", i)
	dir := filepath.Join(r.dir, "gate-scale", name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "gaterunner.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--nats", natsURL, "--data-dir", filepath.Join(dir, "data"), "--host-id", name,
		"--pools", GateScalePool, "--concurrency", "1", "--sandbox", r.cfg.gateSandbox(), "--sandbox-path", GateScaleSandboxPath,
		"--drain-timeout", "10s")
	cmd.Dir = dir
	cmd.Env = config.ChildEnv()
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	r.progress("%s: started %s (pid %d, log %s)", ScenarioGateScale, name, cmd.Process.Pid, logPath)
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
