package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/supervisorhq/supervisor/gaterunner"
	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/sandbox"
)

// The sandbox scenario's variants, in the order of the first round.
const (
	// VariantProcess is the process sandbox (sandbox.Process, as the gate
	// runner's --sandbox process builds it) running the command resolved
	// on this host: the reference.
	VariantProcess = "process"
	// VariantDockerSandbox is the Docker sandbox (sandbox.Docker, as the
	// gate runner's --sandbox docker builds it, with the gate runner's
	// default limits) running the command in the image, called with the
	// sandbox.Spec the gate runner gives it.
	VariantDockerSandbox = "docker-sandbox"
	// VariantDockerRun is `docker run --rm IMAGE COMMAND` with the docker
	// CLI: what the engine alone costs.
	VariantDockerRun = "docker-run"
	// VariantDockerRunHardened is the same docker run with the Docker
	// sandbox's hardening as flags (no network, read-only root, no
	// capabilities, no-new-privileges, limits, the workspace mounts, a
	// tmpfs /tmp, the user, an init): what the engine costs for the same
	// container, without the sandbox's own SDK calls and streaming.
	VariantDockerRunHardened = "docker-run-hardened"
)

// Defaults of the sandbox scenario (the command line's).
const (
	// DefaultSandboxImage is the image of the Docker variants: the gate
	// runner's default, built by `make images`, never pulled.
	DefaultSandboxImage = jobrun.DefaultSandboxImage
	// DefaultSandboxRuns is how many times each variant is measured.
	DefaultSandboxRuns = 20
	// SandboxWarmups is how many unmeasured rounds run first.
	SandboxWarmups = 2
)

// DefaultSandboxCommand is the command every variant runs by default.
var DefaultSandboxCommand = []string{"true"}

// Limits and timeouts of the sandbox scenario.
const (
	maxSandboxRuns = 10000
	// sandboxEngineTimeout bounds asking the engine whether it answers and
	// has the image.
	sandboxEngineTimeout = 10 * time.Second
	// sandboxRunTimeout bounds one run of one variant.
	sandboxRunTimeout = 2 * time.Minute
	// eventsGrace bounds the wait for the engine's events of the last runs.
	eventsGrace = 5 * time.Second
)

// SandboxReport is the sandbox scenario's figures: the wall time per gate
// of the process sandbox, the Docker sandbox and a plain docker run of the
// same image and command, with and without the sandbox's hardening,
// measured side by side in one run.
type SandboxReport struct {
	// Skipped says why the scenario did not run ("" if it did).
	Skipped string `json:"skipped,omitempty"`
	// Image is the Docker variants' image and ImageID its ID on the engine.
	Image   string `json:"image"`
	ImageID string `json:"image_id,omitempty"`
	// Command is what every variant runs (argv, no shell); HostCommand is
	// the executable the process sandbox resolved it to on this host.
	Command     []string `json:"command"`
	HostCommand string   `json:"host_command,omitempty"`
	// Runs is how many times each variant was measured, after Warmups
	// unmeasured rounds.
	Runs    int `json:"runs"`
	Warmups int `json:"warmups"`
	// Engine describes the Docker engine.
	Engine *EngineInfo `json:"engine,omitempty"`
	// DockerCLI is the docker executable of the plain runs ("" if absent:
	// those variants are left out and Notes say so).
	DockerCLI string `json:"docker_cli,omitempty"`
	// Reference is the variant overheads are relative to (process).
	Reference string           `json:"reference"`
	Variants  []SandboxVariant `json:"variants"`
	// CPUMeasured is false where this platform gives no process or
	// machine CPU times (the CPU figures are then 0).
	CPUMeasured bool     `json:"cpu_measured"`
	Notes       []string `json:"notes,omitempty"`
}

// EngineInfo is what the Docker engine says about itself.
type EngineInfo struct {
	Version       string `json:"version"`
	StorageDriver string `json:"storage_driver"`
	CgroupVersion string `json:"cgroup_version,omitempty"`
	CgroupDriver  string `json:"cgroup_driver,omitempty"`
	Runtime       string `json:"runtime,omitempty"`
	NCPU          int    `json:"ncpu"`
}

// SandboxVariant is one variant's figures in the sandbox scenario. Times
// are wall times per gate: from the call (Sandbox.Run, or starting the
// docker CLI) until it returned with the command's outcome.
type SandboxVariant struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Argv is the docker command line of the plain runs.
	Argv       []string `json:"argv,omitempty"`
	Count      int      `json:"count"`
	P50Micros  float64  `json:"p50_us"`
	P90Micros  float64  `json:"p90_us"`
	MeanMicros float64  `json:"mean_us"`
	// OverheadMillis is P50 minus the process sandbox's P50, and
	// RatioToProcess P50 over it.
	OverheadMillis float64 `json:"overhead_ms"`
	RatioToProcess float64 `json:"ratio_to_process"`
	// RatioToDockerRun and RatioToHardened are P50 over the plain and the
	// hardened docker run's P50 (Docker variants only; 0 if not run).
	RatioToDockerRun float64 `json:"ratio_to_docker_run,omitempty"`
	RatioToHardened  float64 `json:"ratio_to_docker_run_hardened,omitempty"`
	// CommandP50Micros is the p50 of the sandbox's own Result.Duration:
	// from starting the command (the container) until it exited, which
	// leaves out preparing and cleaning up (sandbox variants only).
	CommandP50Micros float64 `json:"command_p50_us,omitempty"`
	// Phases split the Docker variants' wall time by the engine's events.
	Phases *EnginePhases `json:"phases,omitempty"`
	// CPU per gate, in milliseconds: this process (the sandbox code and
	// the Docker SDK client, in Go); the child processes it waited for
	// (the command in the process sandbox, the docker CLI); the engine's
	// daemons (dockerd and containerd, from /proc); and the rest of the
	// machine's busy time (container shims, runc, the kernel's work for
	// the engine, and anything else running).
	BenchCPUMillis  float64 `json:"bench_cpu_ms"`
	ChildCPUMillis  float64 `json:"child_cpu_ms"`
	EngineCPUMillis float64 `json:"engine_cpu_ms"`
	OtherCPUMillis  float64 `json:"other_cpu_ms"`

	samples  []time.Duration
	commands []time.Duration
	cpu      cpuSample
}

// EnginePhases split a Docker variant's wall time per gate at the engine's
// container events (create, start, die, destroy). They are means, so they
// add up to the mean wall time.
type EnginePhases struct {
	// Runs is how many measured runs had all four events.
	Runs int `json:"runs"`
	// CallToCreateMicros: from the call until the engine created the
	// container (the CLI process starting; the API round trips).
	CallToCreateMicros float64 `json:"call_to_create_us"`
	// CreateToStartMicros: attach and start requests, mounting the
	// container's file systems, cgroups, runc create and start.
	CreateToStartMicros float64 `json:"create_to_start_us"`
	// StartToDieMicros: the command, from the engine's start to its exit.
	StartToDieMicros float64 `json:"start_to_die_us"`
	// DieToDestroyMicros: from the exit until the container is removed
	// (for the Docker sandbox this includes its wait, inspect and remove
	// requests; docker run --rm lets the engine remove it).
	DieToDestroyMicros float64 `json:"die_to_destroy_us"`
	// DestroyToReturnMicros: from the removal until the call returned.
	DestroyToReturnMicros float64 `json:"destroy_to_return_us"`
}

// Variant returns the named variant's figures, or nil.
func (s *SandboxReport) Variant(name string) *SandboxVariant {
	return named(s.Variants, name, func(v *SandboxVariant) string { return v.Name })
}

// computeRatios fills in each variant's overhead and ratios.
func (s *SandboxReport) computeRatios() {
	p50 := func(name string) float64 {
		if v := s.Variant(name); v != nil {
			return v.P50Micros
		}
		return 0
	}
	ref, run, hardened := p50(s.Reference), p50(VariantDockerRun), p50(VariantDockerRunHardened)
	for i := range s.Variants {
		v := &s.Variants[i]
		v.OverheadMillis, v.RatioToProcess, v.RatioToDockerRun, v.RatioToHardened = 0, ratioTo(v.P50Micros, ref), 0, 0
		if ref > 0 {
			v.OverheadMillis = (v.P50Micros - ref) / 1e3
		}
		if v.Name != VariantProcess {
			v.RatioToDockerRun, v.RatioToHardened = ratioTo(v.P50Micros, run), ratioTo(v.P50Micros, hardened)
		}
	}
}

// sandboxEngine is the Docker engine as the sandbox scenario found it
// before any scenario ran.
type sandboxEngine struct {
	// skip says why the scenario is skipped ("" if it runs).
	skip    string
	docker  *sandbox.Docker
	info    EngineInfo
	imageID string
}

func (e *sandboxEngine) close() {
	if e != nil && e.docker != nil {
		_ = e.docker.Close()
	}
}

// sandboxHost is the supervisor.host label of the Docker sandbox's
// containers, and the supervisor.workflow label of every container of the
// scenario, by which its events are told from other containers'.
func sandboxHost() string { return fmt.Sprintf("bench-sandbox-%d", os.Getpid()) }

// workflowLabel is the label the Docker sandbox gives a gate's workflow
// id (Spec.Labels "workflow"); the plain docker runs get it too.
const workflowLabel = "supervisor.workflow"

// probeSandboxEngine checks, before any scenario runs, that the Docker
// engine answers and has the image. Without an engine the scenario is
// skipped, or it is an error if it was asked for by name (required); a
// missing image is always an error, since images are never pulled.
func (r *runner) probeSandboxEngine(ctx context.Context, required bool) (*sandboxEngine, error) {
	skip := func(reason string, err error) (*sandboxEngine, error) {
		if required {
			return nil, fmt.Errorf("the Docker scenarios (%s, %s, %s): %s: %w", ScenarioSandbox, ScenarioGoGate, ScenarioDemo, reason, err)
		}
		return &sandboxEngine{skip: fmt.Sprintf("%s: %v", reason, err)}, nil
	}
	d, err := sandbox.NewDocker(ctx, sandbox.DockerOptions{Host: sandboxHost()})
	if err != nil {
		return skip("no Docker engine client", err)
	}
	cctx, cancel := context.WithTimeout(ctx, sandboxEngineTimeout)
	defer cancel()
	if err := d.Available(cctx); err != nil {
		_ = d.Close()
		return skip(fmt.Sprintf("no Docker engine answers (DOCKER_HOST=%q)", os.Getenv("DOCKER_HOST")), err)
	}
	var id string
	if r.cfg.selected()[ScenarioSandbox] {
		id, err = d.ImageDigest(cctx, r.cfg.SandboxImage)
	}
	if err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("scenario %s: the image %s is not on this host: build it with `make images` "+
			"(images are never pulled), or name another with --sandbox-image: %w", ScenarioSandbox, r.cfg.SandboxImage, err)
	}
	info, err := d.Client().Info(cctx)
	if err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("scenario %s: docker info: %w", ScenarioSandbox, err)
	}
	return &sandboxEngine{docker: d, imageID: id, info: EngineInfo{
		Version: info.ServerVersion, StorageDriver: info.Driver, CgroupVersion: info.CgroupVersion,
		CgroupDriver: info.CgroupDriver, Runtime: info.DefaultRuntime, NCPU: info.NCPU,
	}}, nil
}

// sandboxVariant is one way of running the command.
type sandboxVariant struct {
	name, description string
	argv              []string
	docker            bool
	// run runs the command once and returns how long the command itself
	// ran as the sandbox measured it (0 if unknown).
	run func(ctx context.Context) (time.Duration, error)
}

// runSandbox measures every variant, interleaved round-robin.
func (r *runner) runSandbox(ctx context.Context, eng *sandboxEngine) (*SandboxReport, error) {
	rep := &SandboxReport{Image: r.cfg.SandboxImage, Command: slices.Clone(r.cfg.SandboxCommand), Runs: r.cfg.SandboxRuns,
		Warmups: SandboxWarmups, Reference: VariantProcess}
	if eng.skip != "" {
		rep.Skipped = eng.skip
		r.progress("%s: skipped: %s", ScenarioSandbox, eng.skip)
		return rep, nil
	}
	rep.ImageID, rep.Engine = eng.imageID, &eng.info
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()

	base := filepath.Join(r.dir, "sandbox")
	if err := os.RemoveAll(base); err != nil { // a kept --dir from an earlier run
		return nil, err
	}
	ws := filepath.Join(base, "workspace")
	if err := makeWorkspace(ctx, ws); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	variants, closeAll, err := r.sandboxVariants(ctx, rep, eng, filepath.Join(base, "data"), ws)
	if err != nil {
		return nil, err
	}
	defer closeAll()

	watch, err := watchContainers(ctx, eng.docker.Client(), workflowLabel+"="+sandboxHost())
	if err != nil {
		return nil, fmt.Errorf("engine events: %w", err)
	}
	defer watch.stop()

	names := make([]string, len(variants))
	for i, v := range variants {
		names[i] = v.name
	}
	r.progress("%s: %d warm-up rounds of %s", ScenarioSandbox, SandboxWarmups, strings.Join(names, ", "))
	for i := 0; i < SandboxWarmups; i++ {
		for _, v := range variants {
			if _, err := v.run(ctx); err != nil {
				return nil, fmt.Errorf("warm-up %s: %w", v.name, err)
			}
		}
	}

	r.progress("%s: %d rounds of `%s`, each variant once per round", ScenarioSandbox, r.cfg.SandboxRuns, strings.Join(r.cfg.SandboxCommand, " "))
	results := make([]SandboxVariant, len(variants))
	for i, v := range variants {
		results[i] = SandboxVariant{Name: v.name, Description: v.description, Argv: v.argv}
	}
	type window struct {
		variant int
		t0, t1  time.Time
	}
	var windows []window
	_, cpuOK := sampleCPU(nil)
	rep.CPUMeasured = cpuOK
	daemons := enginePIDs()
	for round := 0; round < r.cfg.SandboxRuns; round++ {
		// Each round starts one variant later, so no variant always
		// follows the same one.
		for k := range variants {
			i := (round + k) % len(variants)
			before, _ := sampleCPU(daemons)
			t0 := time.Now()
			took, err := variants[i].run(ctx)
			t1 := time.Now()
			after, _ := sampleCPU(daemons)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", variants[i].name, round+1, err)
			}
			res := &results[i]
			res.samples = append(res.samples, t1.Sub(t0))
			if took > 0 {
				res.commands = append(res.commands, took)
			}
			res.cpu = res.cpu.add(after.sub(before))
			if variants[i].docker {
				windows = append(windows, window{variant: i, t0: t0, t1: t1})
			}
		}
		if (round+1)%10 == 0 && round+1 < r.cfg.SandboxRuns {
			r.progress("%s: %d of %d rounds", ScenarioSandbox, round+1, r.cfg.SandboxRuns)
		}
	}

	// Split the Docker variants' times at the engine's events.
	deadline := time.Now().Add(eventsGrace)
	for _, w := range windows {
		for {
			if _, ok := watch.lookup(w.t0, w.t1); ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	phases := make([]EnginePhases, len(variants))
	for _, w := range windows {
		c, ok := watch.lookup(w.t0, w.t1)
		if !ok {
			continue
		}
		p := &phases[w.variant]
		p.Runs++
		p.CallToCreateMicros += micros(c.create.Sub(w.t0))
		p.CreateToStartMicros += micros(c.start.Sub(c.create))
		p.StartToDieMicros += micros(c.die.Sub(c.start))
		p.DieToDestroyMicros += micros(c.destroy.Sub(c.die))
		p.DestroyToReturnMicros += micros(w.t1.Sub(c.destroy))
	}
	for i, v := range variants {
		res := &results[i]
		res.Count = len(res.samples)
		res.P50Micros, res.P90Micros, res.MeanMicros = sampleStats(res.samples)
		if len(res.commands) > 0 {
			res.CommandP50Micros, _, _ = sampleStats(res.commands)
		}
		if n := float64(res.Count); n > 0 && cpuOK {
			c := res.cpu
			res.BenchCPUMillis = c.self.Seconds() * 1e3 / n
			res.ChildCPUMillis = c.children.Seconds() * 1e3 / n
			res.EngineCPUMillis = c.engine.Seconds() * 1e3 / n
			res.OtherCPUMillis = max(0, (c.busy-c.self-c.children-c.engine).Seconds()*1e3/n)
		}
		if v.docker {
			if p := phases[i]; p.Runs > 0 {
				n := float64(p.Runs)
				res.Phases = &EnginePhases{Runs: p.Runs, CallToCreateMicros: p.CallToCreateMicros / n,
					CreateToStartMicros: p.CreateToStartMicros / n, StartToDieMicros: p.StartToDieMicros / n,
					DieToDestroyMicros: p.DieToDestroyMicros / n, DestroyToReturnMicros: p.DestroyToReturnMicros / n}
			}
		}
	}
	if err := watch.failed(); err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the engine's event stream ended early (%v): phases cover fewer runs", err))
	}
	if len(daemons) == 0 && cpuOK {
		rep.Notes = append(rep.Notes, "no dockerd or containerd process on this host (a remote engine?): ENGINE CPU is 0 and the engine's work is not seen")
	}
	rep.Variants = results
	rep.computeRatios()
	for _, v := range rep.Variants {
		r.progress("%s: %s: p50 %s, mean %s", ScenarioSandbox, v.Name, dur(v.P50Micros), dur(v.MeanMicros))
	}
	return rep, nil
}

// sandboxVariants builds the variants: the process and Docker sandboxes
// exactly as a gate runner selects them (jobrun.SelectSandbox with the
// gate runner's default limits), and the plain docker runs if the docker
// CLI is installed.
func (r *runner) sandboxVariants(ctx context.Context, rep *SandboxReport, eng *sandboxEngine, dataDir, ws string) ([]sandboxVariant, func(), error) {
	proc, d, closeAll, err := selectSandboxes(ctx,
		jobrun.Settings{Sandbox: jobrun.SandboxProcess}, dataDir,
		jobrun.Settings{Sandbox: jobrun.SandboxDocker,
			Docker: jobrun.DockerSettings{Image: r.cfg.SandboxImage, Resources: gaterunner.DefaultResources}}, dataDir)
	if err != nil {
		return nil, nil, err
	}
	rep.HostCommand = hostCommand(r.cfg.SandboxCommand[0], jobrun.DefaultSandboxPath())

	argv := r.cfg.SandboxCommand
	runSandbox := func(sb sandbox.Sandbox) func(context.Context) (time.Duration, error) {
		return func(ctx context.Context) (time.Duration, error) {
			ctx, cancel := context.WithTimeout(ctx, sandboxRunTimeout)
			defer cancel()
			res, err := sb.Run(ctx, gateSpec(argv, ws, sandboxHost()))
			if err != nil {
				return 0, err
			}
			if res.ExitCode != 0 || res.TimedOut || res.Signal != "" {
				return 0, fmt.Errorf("`%s` did not succeed in the %s sandbox (exit %d, signal %q, timed out %v): %s",
					strings.Join(argv, " "), sb.Name(), res.ExitCode, res.Signal, res.TimedOut, bytes.TrimSpace(res.Stderr))
			}
			return res.Duration, nil
		}
	}
	variants := []sandboxVariant{
		{name: VariantProcess, run: runSandbox(proc),
			description: fmt.Sprintf("the process sandbox (as a gate runner's --sandbox process) runs %s in the workspace", rep.HostCommand)},
		{name: VariantDockerSandbox, docker: true, run: runSandbox(d),
			description: "the Docker sandbox (as a gate runner's --sandbox docker, default gate limits), with the gate runner's sandbox.Spec"},
	}

	cli, err := exec.LookPath("docker")
	if err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the docker CLI is not installed (%v): %s and %s are left out",
			err, VariantDockerRun, VariantDockerRunHardened))
		return variants, closeAll, nil
	}
	rep.DockerCLI = cli
	res := d.Resources()
	if n := eng.info.NCPU; n > 0 && res.CPUs > float64(n) {
		res.CPUs = float64(n) // as the Docker sandbox caps it
	}
	label := workflowLabel + "=" + sandboxHost()
	plain := plainRunArgs(r.cfg.SandboxImage, argv, label)
	hardened := hardenedRunArgs(r.cfg.SandboxImage, argv, label, ws, workspaceUser(ws), res, sandbox.DefaultTmpfsSize)
	variants = append(variants,
		sandboxVariant{name: VariantDockerRun, docker: true, argv: append([]string{"docker"}, plain...), run: runCLI(cli, plain),
			description: "docker run --rm with the docker CLI, no other flag (but --pull never, and a label for the events)"},
		sandboxVariant{name: VariantDockerRunHardened, docker: true, argv: append([]string{"docker"}, hardened...), run: runCLI(cli, hardened),
			description: "the same with the Docker sandbox's hardening, limits, mounts and user as flags"},
	)
	return variants, closeAll, nil
}

// selectSandboxes builds a process and a Docker sandbox exactly as a gate
// runner selects them (jobrun.SelectSandbox), each with its settings and
// data directory; closeAll releases both.
func selectSandboxes(ctx context.Context, procSettings jobrun.Settings, procDir string,
	dockSettings jobrun.Settings, dockDir string) (proc sandbox.Sandbox, d *sandbox.Docker, closeAll func(), err error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	host := sandboxHost()
	p, err := jobrun.SelectSandbox(ctx, procSettings, procDir, host, quiet)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("process sandbox: %w", err)
	}
	dock, err := jobrun.SelectSandbox(ctx, dockSettings, dockDir, host, quiet)
	if err != nil {
		p.Close()
		return nil, nil, nil, fmt.Errorf("docker sandbox: %w", err)
	}
	closeAll = func() { p.Close(); dock.Close() }
	d, ok := dock.Sandbox.(*sandbox.Docker)
	if !ok {
		closeAll()
		return nil, nil, nil, fmt.Errorf("docker sandbox: got the %s sandbox", dock.Sandbox.Name())
	}
	return p.Sandbox, d, closeAll, nil
}

// gateSpec is the sandbox.Spec a gate runner gives its sandbox for a gate
// of workflow wf running argv in the workspace ws (gaterunner's run): the
// SUPERVISOR_* metadata, the default gate timeout, output streamed to a
// job log, the labels.
func gateSpec(argv []string, ws, wf string) sandbox.Spec {
	logw := &jobrun.LogWriter{}
	return sandbox.Spec{
		Argv: slices.Clone(argv), Workspace: ws, Timeout: gates.DefaultTimeout, Stdout: logw, Stderr: logw,
		Env: map[string]string{
			"SUPERVISOR_WORKFLOW_ID": wf, "SUPERVISOR_NODE_ID": "t0000", "SUPERVISOR_TASK_ID": "t0000",
			"SUPERVISOR_GATE_NAME": "bench", "SUPERVISOR_ATTEMPT": "1", "SUPERVISOR_REPO_ID": "bench",
			"SUPERVISOR_REVIEW_ID": wf + ".t0000.a1",
		},
		WorkspaceEnv: "SUPERVISOR_REPO_PATH",
		Labels:       map[string]string{"workflow": wf, "node": "t0000", "gate": "bench", "attempt": "1", "round": "0"},
	}
}

// plainRunArgs is `docker run --rm IMAGE ARGV…` with two flags that cost
// nothing: --pull never (the CLI pulls only when the create finds no
// image, so with the image present it changes nothing, and it makes sure
// nothing is ever pulled) and --label label, which tells the run's events
// from other containers'.
func plainRunArgs(image string, argv []string, label string) []string {
	return append([]string{"run", "--rm", "--pull", "never", "--label", label, image}, argv...)
}

// hardenedRunArgs is docker run with the flags that give the container
// what the Docker sandbox's container configuration gives a gate: no
// network, a read-only root file system, the workspace bind-mounted at
// /workspace with its .git read-only, a tmpfs /tmp, the user, all
// capabilities dropped, no-new-privileges, a private IPC namespace, no
// log driver, an init, and the memory (no swap), CPU and pids limits.
func hardenedRunArgs(image string, argv []string, label, ws, user string, res sandbox.Resources, tmpfsSize int64) []string {
	args := []string{"run", "--rm", "--pull", "never", "--label", label,
		"--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--ipc", "private", "--log-driver", "none", "--init",
		"--memory", strconv.FormatInt(res.MemoryBytes, 10), "--memory-swap", strconv.FormatInt(res.MemoryBytes, 10),
		"--cpus", strconv.FormatFloat(res.CPUs, 'f', -1, 64), "--pids-limit", strconv.FormatInt(res.Pids, 10),
		"--tmpfs", fmt.Sprintf("/tmp:rw,exec,nosuid,nodev,size=%d,mode=1777", tmpfsSize),
		"--mount", "type=bind,source=" + ws + ",target=" + sandbox.ContainerWorkspace,
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git")); err == nil {
		args = append(args, "--mount", "type=bind,source="+filepath.Join(ws, ".git")+",target="+sandbox.ContainerWorkspace+"/.git,readonly")
	}
	args = append(args, "--workdir", sandbox.ContainerWorkspace, "--user", user, "--entrypoint", "", image)
	return append(args, argv...)
}

// workspaceUser is the user the Docker sandbox picks for a workspace when
// none is configured (sandbox.DockerOptions.User): the workspace's owner,
// unless that is root, then sandbox.DefaultSandboxUser.
func workspaceUser(ws string) string {
	if fi, err := os.Stat(ws); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			gid := st.Gid
			if gid == 0 {
				gid = 65534
			}
			return fmt.Sprintf("%d:%d", st.Uid, gid)
		}
	}
	return sandbox.DefaultSandboxUser
}

// runCLI runs the docker CLI with args and checks that it succeeded.
func runCLI(cli string, args []string) func(context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, sandboxRunTimeout)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
		}
		return 0, nil
	}
}

// hostCommand is what the process sandbox runs for name with PATH path:
// the first executable regular file in path, as it looks it up.
func hostCommand(name, path string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}

// makeWorkspace creates a gate's workspace: a git repository with one
// commit, whose .git the Docker sandbox mounts read-only.
func makeWorkspace(ctx context.Context, dir string) error {
	return commitFiles(ctx, dir, map[string]string{
		"README.md": "# bench\n\nThe workspace of `supervisor-bench`'s sandbox scenario.\n",
		"go.mod":    "module example.com/bench\n\ngo 1.21\n",
		"main.go":   "package main\n\nfunc main() {}\n",
	}, "bench: workspace")
}

// commitFiles makes dir a git repository whose one commit holds files
// (slash-separated paths).
func commitFiles(ctx context.Context, dir string, files map[string]string, message string) error {
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=Bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false", "commit", "-q", "-m", message},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = config.ChildEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// sampleStats returns the nearest-rank p50 and p90 and the mean of ds, in
// microseconds.
func sampleStats(ds []time.Duration) (p50, p90, mean float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return micros(rank(sorted, 0.50)), micros(rank(sorted, 0.90)), micros(sum) / float64(len(ds))
}

// cpuSample is a reading (or a difference of readings) of CPU times: this
// process, its waited-for children, the engine's daemons, and the whole
// machine's busy time.
type cpuSample struct {
	self, children, engine, busy time.Duration
}

func (c cpuSample) sub(o cpuSample) cpuSample {
	return cpuSample{c.self - o.self, c.children - o.children, c.engine - o.engine, c.busy - o.busy}
}

func (c cpuSample) add(o cpuSample) cpuSample {
	return cpuSample{c.self + o.self, c.children + o.children, c.engine + o.engine, c.busy + o.busy}
}

// sampleCPU reads the CPU times now; ok is false where the machine's busy
// time cannot be read.
func sampleCPU(daemons []int) (cpuSample, bool) {
	var s cpuSample
	s.self, s.children = cpuTime()
	for _, pid := range daemons {
		s.engine += processCPU(pid)
	}
	busy, ok := machineBusy()
	s.busy = busy
	return s, ok
}

// containerTimes are the engine's event times of one container.
type containerTimes struct {
	create, start, die, destroy time.Time
}

func (c *containerTimes) complete() bool {
	return !c.create.IsZero() && !c.start.IsZero() && !c.die.IsZero() && !c.destroy.IsZero()
}

// containerWatch records the engine's container events.
type containerWatch struct {
	mu     sync.Mutex
	byID   map[string]*containerTimes
	key    string // the label the events must carry, and its value
	value  string
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// watchContainers subscribes to the engine's events of containers with
// label ("key=value"); it returns once the subscription is in place.
func watchContainers(ctx context.Context, cli *client.Client, label string) (*containerWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	msgs, errs := cli.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("label", label))})
	key, value, _ := strings.Cut(label, "=")
	w := &containerWatch{byID: map[string]*containerTimes{}, key: key, value: value, cancel: cancel, done: make(chan struct{})}
	select {
	case err := <-errs:
		cancel()
		return nil, err
	default:
	}
	go func() {
		defer close(w.done)
		for {
			select {
			case m := <-msgs:
				w.record(m)
			case err := <-errs:
				if err != nil && ctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
				}
				return
			}
		}
	}()
	return w, nil
}

func (w *containerWatch) record(m events.Message) {
	if m.Actor.ID == "" || m.TimeNano == 0 || m.Actor.Attributes[w.key] != w.value {
		return
	}
	at := time.Unix(0, m.TimeNano)
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.byID[m.Actor.ID]
	if c == nil {
		c = &containerTimes{}
		w.byID[m.Actor.ID] = c
	}
	var field *time.Time
	switch m.Action {
	case events.ActionCreate:
		field = &c.create
	case events.ActionStart:
		field = &c.start
	case events.ActionDie:
		field = &c.die
	case events.ActionDestroy:
		field = &c.destroy
	default:
		return
	}
	if field.IsZero() {
		*field = at
	}
}

// lookup returns the times of the container created between t0 and t1,
// if all four events of exactly one such container were seen.
func (w *containerWatch) lookup(t0, t1 time.Time) (containerTimes, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var found *containerTimes
	for _, c := range w.byID {
		if c.create.IsZero() || c.create.Before(t0) || c.create.After(t1) {
			continue
		}
		if found != nil {
			return containerTimes{}, false
		}
		found = c
	}
	if found == nil || !found.complete() {
		return containerTimes{}, false
	}
	return *found, true
}

// failed returns why the event stream ended early, if it did.
func (w *containerWatch) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *containerWatch) stop() {
	w.cancel()
	<-w.done
}

// validateSandbox checks the sandbox scenario's settings.
func (c *Config) validateSandbox() []error {
	var errs []error
	if c.SandboxRuns < 1 || c.SandboxRuns > maxSandboxRuns {
		errs = append(errs, fmt.Errorf("sandbox runs must be between 1 and %d, got %d", maxSandboxRuns, c.SandboxRuns))
	}
	if c.SandboxImage == "" || strings.ContainsAny(c.SandboxImage, " \t\n") {
		errs = append(errs, fmt.Errorf("sandbox image %q: give an image reference (default %s)", c.SandboxImage, DefaultSandboxImage))
	}
	switch {
	case len(c.SandboxCommand) == 0 || c.SandboxCommand[0] == "":
		errs = append(errs, errors.New("sandbox command: give the argv to run, e.g. true"))
	case slices.ContainsFunc(c.SandboxCommand, func(a string) bool { return strings.IndexByte(a, 0) >= 0 }):
		errs = append(errs, errors.New("sandbox command: an argument contains a NUL byte"))
	}
	return errs
}
