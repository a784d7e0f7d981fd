// Package bench measures Supervisor against raw JetStream in one process
// and one run, like `river bench` does for River: first the bus alone (an
// embedded NATS with a file-store work-queue stream, consumed the fastest
// reasonable way, the way the runners consume jobs, and one message at a
// time), then the full path of no-op nodes through an in-process fleet
// (coordinator, worker and gate runner on an embedded NATS), and reports
// each scenario's throughput and latency with its ratio to the raw figures,
// plus the memory the whole process allocated per message or node.
//
// Then the gate engine, on a fleet of its own: the gate cache key, a cache
// hit and the integrity check on a generated repository, each against `git
// status` on the same tree in the same run (cache-key); and the gate
// throughput of 1, 2 and 4 gate runner processes on sleep gates, against
// linear scaling (gate-scale).
//
// Last, the sandboxes' cost per gate (sandbox): the process sandbox, the
// Docker sandbox (built and called as a gate runner does), a plain `docker
// run --rm` of the same image and command, and the same docker run with the
// Docker sandbox's hardening as flags, interleaved round-robin in one run;
// each with its overhead over the process sandbox, the Docker sandbox with
// its ratio to the plain docker runs, and the Docker variants' time split at
// the engine's container events. Without a Docker engine it is skipped, or
// fails if it was asked for by name; a missing image always fails it (make
// images builds it; nothing is pulled).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
)

// Scenario names, in the order they run.
const (
	// ScenarioRaw is the baseline: a burst of messages published
	// asynchronously and consumed with a batched pull consumer (Consume),
	// acked without waiting for the server's confirmation.
	ScenarioRaw = "raw"
	// ScenarioRawFetch1 is the same burst consumed the way workers and gate
	// runners consume jobs: bus.Pull, one Fetch(1) per free slot, a
	// heartbeat goroutine per job and a double (confirmed) ack.
	ScenarioRawFetch1 = "raw-fetch1"
	// ScenarioRawSerial sends one message at a time, published like the
	// coordinator publishes a job (synchronously, with a de-duplication id)
	// to an idle consumer waiting in Fetch(1): the unloaded latency of the
	// bus, which the chain scenario is compared against.
	ScenarioRawSerial = "raw-serial"
	// ScenarioNodes runs workflows of independent no-op tasks, no gates.
	ScenarioNodes = "nodes"
	// ScenarioGated runs the same with one no-op gate per task.
	ScenarioGated = "gated"
	// ScenarioChain runs a chain of no-op tasks, each depending on the
	// previous one, so only one node is ever in flight: the unloaded
	// ready→started latency of the full path.
	ScenarioChain = "chain"
	// ScenarioFeedback runs tasks whose gate fails on the first attempt
	// and passes once the scripted agent acts on the feedback: the closed
	// loop's round trip, from the failed gate.finished to the next agent
	// round's node.started, with and without the retry policy's delay.
	ScenarioFeedback = "feedback"
	// ScenarioCoordinator measures the coordinator alone: its agent jobs
	// are answered at once by an in-process responder instead of workers,
	// so only scheduling, the event log and the fold are left; a burst of
	// independent nodes, then a chain for the unloaded latency.
	ScenarioCoordinator = "coordinator"
	// ScenarioCacheKey computes the gate cache key of a generated
	// repository with a few uncommitted changes, looks a cached result up
	// (the fleet's KV store, and Redis if given) and captures and checks
	// the workspace's integrity, each against `git status` on the same
	// tree.
	ScenarioCacheKey = "cache-key"
	// ScenarioGateScale measures gate throughput with 1, 2 and 4 gate
	// runner processes on sleep gates, against linear scaling.
	ScenarioGateScale = "gate-scale"
	// ScenarioWorkerScale measures agent throughput with 1, 2 and 4
	// worker processes on sleep agents, against linear scaling.
	ScenarioWorkerScale = "worker-scale"
	// ScenarioSandbox measures the wall time per gate of the process
	// sandbox, the Docker sandbox and plain docker runs of the same image
	// and command, side by side.
	ScenarioSandbox = "sandbox"
	// ScenarioGoGate measures a Go gate (`go vet ./...`) with warm caches
	// in the Docker sandbox against the same in the process sandbox
	// (issue 13, figure 4, per gate).
	ScenarioGoGate = "go-gate"
	// ScenarioDemo runs `coordinator demo`'s workflow with runner
	// processes in the Docker sandbox against the same in the process
	// sandbox, alternating (issue 13, figure 4 at the demo level).
	ScenarioDemo = "demo"
	// ScenarioReplay times a coordinator's start on event logs of history
	// of ReplayEvents sizes, from a snapshot and the events after it
	// against folding the whole log.
	ScenarioReplay = "replay"
	// ScenarioScale measures the memory of the coordinator's state with
	// ScaleNodes nodes in flight, and as finished workflows accumulate,
	// retired or kept.
	ScenarioScale = "scale"
)

// Scenarios lists every scenario in the order they run.
var Scenarios = []string{ScenarioRaw, ScenarioRawFetch1, ScenarioRawSerial, ScenarioNodes, ScenarioGated, ScenarioChain,
	ScenarioFeedback, ScenarioCoordinator, ScenarioCacheKey, ScenarioGateScale,
	ScenarioWorkerScale, ScenarioSandbox, ScenarioGoGate, ScenarioDemo, ScenarioReplay, ScenarioScale}

// latencyReference is the scenario each scenario's p50 is compared with:
// bursts with the raw burst, one-at-a-time runs with the raw serial run.
var latencyReference = map[string]string{
	ScenarioRaw:       ScenarioRaw,
	ScenarioRawFetch1: ScenarioRaw,
	ScenarioRawSerial: ScenarioRawSerial,
	ScenarioNodes:     ScenarioRaw,
	ScenarioGated:     ScenarioRaw,
	ScenarioChain:     ScenarioRawSerial,
	ScenarioFeedback:  ScenarioRawSerial,
	// The coordinator scenario's two rows.
	resultCoordinator:      ScenarioRaw,
	resultCoordinatorChain: ScenarioRawSerial,
}

// MaxSerialMessages caps the raw serial scenario's messages.
const MaxSerialMessages = 1000

// MaxTasksPerWorkflow is the most tasks one submitted workflow holds (the
// workflow schema's limit); more nodes are split over several workflows.
const MaxTasksPerWorkflow = 500

// Config is what to measure.
type Config struct {
	// Nodes is the number of tasks of the nodes and gated scenarios.
	Nodes int
	// ChainNodes is the length of the chain scenario (at most 500).
	ChainNodes int
	// RawMessages is the number of messages of the raw burst scenarios;
	// the serial one sends at most MaxSerialMessages of them.
	RawMessages int
	// PayloadBytes is the raw messages' size (at least 8: the timestamp).
	PayloadBytes int
	// Concurrency is the runners' concurrency, and the slots of raw-fetch1.
	Concurrency int
	// Scenarios to run (nil: all), by name.
	Scenarios []string
	// WorkDir holds every file of the run; "" means a temporary directory
	// removed afterwards.
	WorkDir string
	// FleetLog is the in-process fleets' logger (nil: discarded).
	FleetLog *slog.Logger
	// MaxWait bounds each scenario, and each repository size of cache-key
	// (default 10 minutes).
	MaxWait time.Duration
	// Progress receives one line per step (nil: discarded).
	Progress io.Writer
	// Log is the bench's own NATS clients' logger (nil: discarded).
	Log *slog.Logger

	// RepoFiles is the size of the cache-key scenario's generated
	// repository, in files, unless RepoSizes is set.
	RepoFiles int
	// RepoSizes, if set, are the sizes (increasing) of the repositories
	// the cache-key scenario measures in turn, instead of RepoFiles alone.
	RepoSizes []int
	// ChangedFiles is how many of them are modified and staged (uncommitted) before
	// the measurement.
	ChangedFiles int
	// KeyIterations is how many times each cache-key operation is measured.
	KeyIterations int
	// RedisURL, if set, adds a cache hit against Redis to the cache-key
	// scenario.
	RedisURL string
	// Redis are the TLS and password settings of the connection to
	// RedisURL.
	Redis []redisstate.Option

	// GateTasks is the number of tasks, one gate each, of each gate-scale
	// measurement (at most MaxTasksPerWorkflow).
	GateTasks int
	// GateSleep is what each gate-scale gate sleeps.
	GateSleep time.Duration
	// GateRunners are the numbers of gate runner processes measured, in
	// increasing order; speed-ups are relative to the first.
	GateRunners []int
	// WorkerRunners are the numbers of worker processes worker-scale
	// measures, in increasing order, on GateTasks tasks whose agents
	// sleep GateSleep.
	WorkerRunners []int
	// BinDir holds the gaterunner and worker binaries the scale-out
	// scenarios start.
	BinDir string
	// GateSandbox is the runner processes' --sandbox: "process" (the
	// default when empty, like the in-process fleet's), "docker" or "auto".
	GateSandbox string

	// SandboxImage is the sandbox scenario's image (DefaultSandboxImage
	// on the command line). It must be on the engine's host: nothing is
	// pulled.
	SandboxImage string
	// SandboxCommand is the argv every sandbox variant runs, never
	// through a shell (DefaultSandboxCommand on the command line).
	SandboxCommand []string
	// SandboxRuns is how many times each sandbox variant is measured.
	SandboxRuns int
	// GoGateRuns is how many times each go-gate variant is measured.
	GoGateRuns int
	// SandboxHelper is supervisor-sandbox-helper for the go-gate
	// scenario's prestarted variant ("" = beside this executable).
	SandboxHelper string

	// DemoRuns is how many demos of each demo variant are measured.
	DemoRuns int
	// DemoDataDir holds the demo scenario's runner processes' data
	// directories, kept between runs ("" = a directory in the user's cache
	// directory): the Docker gate runner's cache warm-up is done once.
	DemoDataDir string
	// demoProcessOnly has the demo scenario compare the process sandbox
	// with itself instead of the Docker sandbox (for tests of the
	// scenario's machinery: export_test.go).
	demoProcessOnly bool

	// CoordinatorNodes is the number of tasks of the coordinator
	// scenario's burst; its chain has ChainNodes.
	CoordinatorNodes int

	// FeedbackTasks is the number of tasks of the feedback scenario's
	// workflow (at most MaxTasksPerWorkflow). Its agent, TestAgentBinary,
	// is looked for in BinDir.
	FeedbackTasks int

	// ReplayEvents are the sizes, in events, of the replay scenario's
	// logs; ScaleNodes the scale scenario's node counts, increasing.
	ReplayEvents []int
	ScaleNodes   []int
}

// GateRunnerBinary is the executable the gate-scale scenario looks for in
// Config.BinDir.
const GateRunnerBinary = "gaterunner"

// WorkerBinary is the executable the worker-scale scenario looks for in
// Config.BinDir.
const WorkerBinary = "worker"

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	want := c.selected()
	for _, s := range c.Scenarios {
		if !slices.Contains(Scenarios, s) {
			errs = append(errs, fmt.Errorf("unknown scenario %q (known: %s)", s, strings.Join(Scenarios, ", ")))
		}
	}
	if len(c.Scenarios) > 0 && len(want) == 0 {
		errs = append(errs, errors.New("no scenario selected"))
	}
	raw := want[ScenarioRaw] || want[ScenarioRawFetch1] || want[ScenarioRawSerial]
	if raw && c.RawMessages < 1 {
		errs = append(errs, fmt.Errorf("raw messages must be at least 1, got %d", c.RawMessages))
	}
	if raw && c.PayloadBytes < 8 {
		errs = append(errs, fmt.Errorf("payload must be at least 8 bytes (the timestamp), got %d", c.PayloadBytes))
	}
	if (want[ScenarioNodes] || want[ScenarioGated]) && c.Nodes < 1 {
		errs = append(errs, fmt.Errorf("nodes must be at least 1, got %d", c.Nodes))
	}
	if want[ScenarioCoordinator] && c.CoordinatorNodes < 1 {
		errs = append(errs, fmt.Errorf("coordinator nodes must be at least 1, got %d", c.CoordinatorNodes))
	}
	if (want[ScenarioChain] || want[ScenarioCoordinator]) && (c.ChainNodes < 1 || c.ChainNodes > MaxTasksPerWorkflow) {
		errs = append(errs, fmt.Errorf("chain nodes must be between 1 and %d, got %d", MaxTasksPerWorkflow, c.ChainNodes))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency))
	}
	if want[ScenarioCacheKey] {
		sizes := c.repoSizes()
		for i, n := range sizes {
			if n < 1 {
				errs = append(errs, fmt.Errorf("repository files must be at least 1, got %d", n))
			}
			if i > 0 && n <= sizes[i-1] {
				errs = append(errs, fmt.Errorf("repository sizes must increase, got %v", sizes))
				break
			}
		}
		if c.ChangedFiles < 0 || c.ChangedFiles > sizes[0] {
			errs = append(errs, fmt.Errorf("changed files must be between 0 and the smallest repository's %d, got %d", sizes[0], c.ChangedFiles))
		}
		if c.KeyIterations < 1 {
			errs = append(errs, fmt.Errorf("key iterations must be at least 1, got %d", c.KeyIterations))
		}
	}
	if want[ScenarioFeedback] {
		if c.FeedbackTasks < 1 || c.FeedbackTasks > MaxTasksPerWorkflow {
			errs = append(errs, fmt.Errorf("feedback tasks must be between 1 and %d, got %d", MaxTasksPerWorkflow, c.FeedbackTasks))
		}
		if err := c.checkBinary(ScenarioFeedback, TestAgentBinary, "runs it as the agent"); err != nil {
			errs = append(errs, err)
		}
	}
	if want[ScenarioGateScale] {
		errs = append(errs, c.validateScale(ScenarioGateScale, GateRunnerBinary, "gate runner", c.GateRunners)...)
	}
	if want[ScenarioWorkerScale] {
		errs = append(errs, c.validateScale(ScenarioWorkerScale, WorkerBinary, "worker", c.WorkerRunners)...)
	}
	if want[ScenarioSandbox] {
		errs = append(errs, c.validateSandbox()...)
	}
	if want[ScenarioDemo] {
		if c.DemoRuns < 1 || c.DemoRuns > maxSandboxRuns {
			errs = append(errs, fmt.Errorf("demo runs must be between 1 and %d, got %d", maxSandboxRuns, c.DemoRuns))
		}
		bins := []struct{ name, what string }{
			{WorkerBinary, "runs worker processes"}, {GateRunnerBinary, "runs gate runner processes"}, {TestAgentBinary, "runs it as the agent"},
		}
		if !c.demoProcessOnly {
			bins = append(bins, struct{ name, what string }{sandbox.HelperName, "starts Docker sandbox containers ahead of their job with it"})
		}
		for _, b := range bins {
			if err := c.checkBinary(ScenarioDemo, b.name, b.what); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if want[ScenarioGoGate] && (c.GoGateRuns < 1 || c.GoGateRuns > maxSandboxRuns) {
		errs = append(errs, fmt.Errorf("go-gate runs must be between 1 and %d, got %d", maxSandboxRuns, c.GoGateRuns))
	}
	errs = append(errs, c.validateHistory(want)...)
	return errors.Join(errs...)
}

// validateScale checks a scale-out scenario's settings: the tasks and
// sleep they share, the runner counts and the binary.
func (c *Config) validateScale(scenario, binary, what string, counts []int) []error {
	var errs []error
	if c.GateTasks < 1 || c.GateTasks > MaxTasksPerWorkflow {
		errs = append(errs, fmt.Errorf("gate tasks must be between 1 and %d, got %d", MaxTasksPerWorkflow, c.GateTasks))
	}
	if c.GateSleep <= 0 || c.GateSleep > maxGateSleep {
		errs = append(errs, fmt.Errorf("gate sleep must be positive and at most %s, got %s", maxGateSleep, c.GateSleep))
	}
	if !slices.Contains(GateSandboxes, c.gateSandbox()) {
		errs = append(errs, fmt.Errorf("gate sandbox %q: want one of %s", c.GateSandbox, strings.Join(GateSandboxes, ", ")))
	}
	if len(counts) == 0 {
		errs = append(errs, fmt.Errorf("%ss: give at least one count", what))
	}
	for i, n := range counts {
		if n < 1 || n > maxGateRunners {
			errs = append(errs, fmt.Errorf("%ss must be between 1 and %d, got %d", what, maxGateRunners, n))
		} else if i > 0 && n <= counts[i-1] {
			errs = append(errs, fmt.Errorf("%s counts must increase, got %v", what, counts))
		}
	}
	if err := c.checkBinary(scenario, binary, "runs "+what+" processes"); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// repoSizes are the cache-key scenario's repository sizes: RepoSizes, or
// RepoFiles alone.
func (c *Config) repoSizes() []int {
	if len(c.RepoSizes) > 0 {
		return c.RepoSizes
	}
	return []int{c.RepoFiles}
}

// checkBinary checks that BinDir holds the executable name that scenario
// needs (what says what it does with it).
func (c *Config) checkBinary(scenario, name, what string) error {
	bin := filepath.Join(c.BinDir, name)
	switch fi, err := os.Stat(bin); {
	case c.BinDir == "":
		return fmt.Errorf("%s needs the directory of the %s binary (--bin-dir)", scenario, name)
	case err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0:
		return fmt.Errorf("%s %s, but there is no executable %s: "+
			"build the binaries first (make build, then run bin/supervisor-bench), point --bin-dir at a directory "+
			"holding %s, or leave %s out of --scenarios", scenario, what, bin, name, scenario)
	}
	return nil
}

func (c *Config) selected() map[string]bool {
	want := map[string]bool{}
	if len(c.Scenarios) == 0 {
		for _, s := range Scenarios {
			want[s] = true
		}
		return want
	}
	for _, s := range c.Scenarios {
		if slices.Contains(Scenarios, s) {
			want[s] = true
		}
	}
	return want
}

// Report is the outcome of a run.
type Report struct {
	GoVersion    string    `json:"go_version"`
	OS           string    `json:"os"`
	Arch         string    `json:"arch"`
	NumCPU       int       `json:"num_cpu"`
	GOMAXPROCS   int       `json:"gomaxprocs"`
	StartedAt    time.Time `json:"started_at"`
	TotalSeconds float64   `json:"total_seconds"`
	Nodes        int       `json:"nodes"`
	ChainNodes   int       `json:"chain_nodes"`
	RawMessages  int       `json:"raw_messages"`
	PayloadBytes int       `json:"payload_bytes"`
	Concurrency  int       `json:"concurrency"`
	// Baseline is the scenario throughput ratios are relative to.
	Baseline string   `json:"baseline"`
	Results  []Result `json:"results"`
	// FeedbackTasks is the feedback scenario's task count, if it ran.
	FeedbackTasks int `json:"feedback_tasks,omitempty"`
	// CacheKey is the cache-key scenario's figures, if it ran.
	CacheKey *CacheKeyReport `json:"cache_key,omitempty"`
	// GateScale is the gate-scale scenario's figures, if it ran.
	GateScale *ScaleOutReport `json:"gate_scale,omitempty"`
	// WorkerScale is the worker-scale scenario's figures, if it ran.
	WorkerScale *ScaleOutReport `json:"worker_scale,omitempty"`
	// Sandbox is the sandbox scenario's figures, or why it was skipped,
	// if it was selected.
	Sandbox *SandboxReport `json:"sandbox,omitempty"`
	// GoGate is the go-gate scenario's figures, if it ran.
	GoGate *GoGateReport `json:"go_gate,omitempty"`
	// Demo is the demo scenario's figures, or why it was skipped, if it
	// was selected.
	Demo *DemoReport `json:"demo,omitempty"`
	// Replay and Scale are the replay and scale scenarios' figures, if
	// they ran.
	Replay *ReplayReport `json:"replay,omitempty"`
	Scale  *ScaleReport  `json:"scale,omitempty"`
}

// Result is one scenario's figures.
type Result struct {
	Scenario    string `json:"scenario"`
	Description string `json:"description"`
	// Unit is what Count counts: "msg" or "node".
	Unit  string `json:"unit"`
	Count int    `json:"count"`
	// Workflows is how many workflows the nodes were submitted in.
	Workflows   int     `json:"workflows,omitempty"`
	WallSeconds float64 `json:"wall_seconds"`
	// Throughput is Count per second of WallSeconds.
	Throughput float64 `json:"throughput_per_s"`
	// Latency names what P50 and P99 measure.
	Latency          string  `json:"latency"`
	LatencyP50Micros float64 `json:"latency_p50_us"`
	LatencyP99Micros float64 `json:"latency_p99_us"`
	// ThroughputRatio is Throughput over the baseline's (0: baseline not run).
	ThroughputRatio float64 `json:"throughput_ratio,omitempty"`
	// LatencyRatio is LatencyP50 over LatencyReference's (0: not run).
	LatencyRatio     float64 `json:"latency_ratio,omitempty"`
	LatencyReference string  `json:"latency_reference,omitempty"`
	// Full-path scenarios, from the event log's timestamps (the
	// coordinator's clock, taken as it folds each report): node ready →
	// node finished (turnaround); gate dispatched → gate started; node
	// started → agent done (run: workspace, agent, diff, log upload, the
	// result report); agent done → node finished (settle: gates and
	// integration).
	TurnaroundP50Micros  float64 `json:"turnaround_p50_us,omitempty"`
	TurnaroundP99Micros  float64 `json:"turnaround_p99_us,omitempty"`
	GateLatencyP50Micros float64 `json:"gate_latency_p50_us,omitempty"`
	GateLatencyP99Micros float64 `json:"gate_latency_p99_us,omitempty"`
	RunP50Micros         float64 `json:"run_p50_us,omitempty"`
	RunP99Micros         float64 `json:"run_p99_us,omitempty"`
	SettleP50Micros      float64 `json:"settle_p50_us,omitempty"`
	SettleP99Micros      float64 `json:"settle_p99_us,omitempty"`
	// Feedback is the feedback scenario's detail (nil for the others).
	Feedback *FeedbackFigures `json:"feedback,omitempty"`
	Memory   Memory           `json:"memory"`
}

// Memory is what the whole process (NATS server, coordinator, runners and
// the bench's own clients alike) allocated, and the CPU time it and its
// child processes (git, agents, gates) used, during a scenario's measured
// part.
type Memory struct {
	TotalAllocBytes uint64  `json:"total_alloc_bytes"`
	Mallocs         uint64  `json:"mallocs"`
	AllocBytesPerOp float64 `json:"alloc_bytes_per_op"`
	AllocsPerOp     float64 `json:"allocs_per_op"`
	// HeapDeltaBytes is the live heap after a GC at the end minus that at
	// the start: what the scenario left behind (the fleet's state).
	HeapDeltaBytes int64 `json:"heap_delta_bytes"`
	// CPUSeconds is user plus system time of the process and of the child
	// processes it waited for (0 where not measured). Unlike throughput it
	// barely moves when other work shares the machine.
	CPUSeconds float64 `json:"cpu_seconds"`
	// ChildCPUSeconds is the child processes' part of CPUSeconds.
	ChildCPUSeconds float64 `json:"child_cpu_seconds"`
	CPUPerOpMicros  float64 `json:"cpu_per_op_us"`
}

// Run runs the selected scenarios and returns their figures.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 10 * time.Minute
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir := cfg.WorkDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "supervisor-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, err
		}
		dir = abs
	}
	r := &runner{cfg: cfg, dir: dir, epoch: time.Now()}
	rep := &Report{
		GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), StartedAt: time.Now().UTC(),
		Nodes: cfg.Nodes, ChainNodes: cfg.ChainNodes, RawMessages: cfg.RawMessages,
		PayloadBytes: cfg.PayloadBytes, Concurrency: cfg.Concurrency, Baseline: ScenarioRaw,
	}
	want := cfg.selected()
	if want[ScenarioFeedback] {
		rep.FeedbackTasks = cfg.FeedbackTasks
	}
	started := time.Now()

	// The sandbox scenario runs last, but a missing image must not wait
	// for the others to fail.
	var engine *sandboxEngine
	dockerDemo := want[ScenarioDemo] && !cfg.demoProcessOnly
	if want[ScenarioSandbox] || want[ScenarioGoGate] || dockerDemo {
		var err error
		named := slices.Contains(cfg.Scenarios, ScenarioSandbox) || slices.Contains(cfg.Scenarios, ScenarioGoGate) ||
			(dockerDemo && slices.Contains(cfg.Scenarios, ScenarioDemo))
		if engine, err = r.probeSandboxEngine(ctx, named); err != nil {
			return nil, err
		}
		defer engine.close()
	}

	if want[ScenarioRaw] || want[ScenarioRawFetch1] || want[ScenarioRawSerial] {
		res, err := r.runRaw(ctx, want)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res...)
	}
	if want[ScenarioNodes] || want[ScenarioGated] || want[ScenarioChain] || want[ScenarioFeedback] {
		res, err := r.runFull(ctx, want)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res...)
	}
	if want[ScenarioCoordinator] {
		res, err := r.runCoordinator(ctx)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", ScenarioCoordinator, err)
		}
		rep.Results = append(rep.Results, res...)
	}
	if want[ScenarioCacheKey] || want[ScenarioGateScale] || want[ScenarioWorkerScale] {
		if err := r.runGateEngine(ctx, want, rep); err != nil {
			return nil, err
		}
	}
	if want[ScenarioSandbox] {
		sb, err := r.runSandbox(ctx, engine)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", ScenarioSandbox, err)
		}
		rep.Sandbox = sb
	}
	if want[ScenarioGoGate] {
		gg, err := r.runGoGate(ctx, engine)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", ScenarioGoGate, err)
		}
		rep.GoGate = gg
	}
	if want[ScenarioDemo] {
		d, err := r.runDemo(ctx, engine)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", ScenarioDemo, err)
		}
		rep.Demo = d
	}
	if err := r.runHistory(ctx, want, rep); err != nil {
		return nil, err
	}
	rep.TotalSeconds = time.Since(started).Seconds()
	computeRatios(rep)
	return rep, nil
}

// computeRatios fills in each result's ratios to its references.
func computeRatios(rep *Report) {
	byName := map[string]*Result{}
	for i := range rep.Results {
		byName[rep.Results[i].Scenario] = &rep.Results[i]
	}
	base := byName[rep.Baseline]
	for i := range rep.Results {
		res := &rep.Results[i]
		if base != nil {
			res.ThroughputRatio = ratioTo(res.Throughput, base.Throughput)
		}
		res.LatencyReference = latencyReference[res.Scenario]
		if ref := byName[res.LatencyReference]; ref != nil {
			res.LatencyRatio = ratioTo(res.LatencyP50Micros, ref.LatencyP50Micros)
			if fb := res.Feedback; fb != nil {
				fb.BeyondDelayRatio = ratioTo(fb.BeyondDelayP50Micros, ref.LatencyP50Micros)
			}
		}
	}
}

// runner carries the state of one run.
type runner struct {
	cfg Config
	dir string
	// epoch is the monotonic origin of the timestamps in raw payloads.
	epoch time.Time
	repo  *benchRepo
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "bench: "+format+"\n", args...)
}
