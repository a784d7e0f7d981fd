package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/coordinator/internal/cli/demo"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// The demo scenario (issue 13, figure 4 at the demo level): the workflow
// `coordinator demo` submits (three tasks, each gated by go vet and go
// test, one of which fails its first round on purpose), on one fleet with
// two sets of runner processes, a worker and a gate runner each: one set
// in the process sandbox, the other in the Docker sandbox, each taking the
// jobs of a pool of its own. After one unmeasured demo on each, demos
// alternate between the two, and the Docker set's median wall time is
// compared with the process set's. The gates are uncached, so that every
// demo runs them all.

// Variants of the demo scenario.
const (
	// VariantDemoProcess runs agents and gates in the process sandbox, as
	// a runner that is not root does (no private caches): the reference.
	VariantDemoProcess = "process"
	// VariantDemoDocker runs agents in DemoAgentImage without a network and
	// gates in GoGateImage, on the trusted layers of the gate runner's
	// cache warm-up, with containers started ahead of their job: a gate
	// runner's and a worker's defaults with --sandbox docker.
	VariantDemoDocker = "docker"
)

// DemoAgentImage is the Docker variant's agent image: the one `make
// images` builds for workers, which holds supervisor-test-agent.
const DemoAgentImage = "supervisor/worker:latest"

// DefaultDemoRuns is how many demos of each variant are measured.
const DefaultDemoRuns = 3

// demoConcurrency is each runner process's concurrency, the embedded
// default's in `coordinator demo`.
const demoConcurrency = 2

// demoWarmupTimeout bounds the Docker gate runner's cache warm-up
// (gaterunner.CacheWarmup in the image), which takes minutes on a small
// machine the first time.
const demoWarmupTimeout = 45 * time.Minute

// DemoReport is the demo scenario's figures.
type DemoReport struct {
	// Skipped says why the scenario did not run ("" if it did).
	Skipped string `json:"skipped,omitempty"`
	// Workflow is the demo workflow's name and Tasks its task count.
	Workflow string `json:"workflow"`
	Tasks    int    `json:"tasks"`
	// Runs is how many demos of each variant were measured, after one
	// unmeasured demo each.
	Runs int `json:"runs"`
	// DataDir holds the runner processes' data directories, kept from one
	// run to the next (Config.DemoDataDir).
	DataDir  string        `json:"data_dir"`
	Variants []DemoVariant `json:"variants"`
	// DockerOverProcess is the Docker variant's median over the process
	// variant's: issue 13's figure 4 at the demo level (target: at most
	// 1.25).
	DockerOverProcess float64 `json:"docker_over_process"`
}

// DemoVariant is one set of runners' figures.
type DemoVariant struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Pool is the pool its runners take jobs from.
	Pool string `json:"pool"`
	// WarmupSeconds is how long the bench waited for its gate runner's
	// cache warm-up (0: none, or done by an earlier run).
	WarmupSeconds float64 `json:"warmup_seconds"`
	// Seconds is each measured demo's wall time, from the submit to
	// workflow.finished; MedianSeconds, MinSeconds and MaxSeconds sum
	// them up.
	Seconds       []float64 `json:"seconds"`
	MedianSeconds float64   `json:"median_seconds"`
	MinSeconds    float64   `json:"min_seconds"`
	MaxSeconds    float64   `json:"max_seconds"`
	// AgentHosts and GateHosts count the measured demos' agent rounds and
	// gate runs by the runner that started them (its host id).
	AgentHosts map[string]int `json:"agent_hosts"`
	GateHosts  map[string]int `json:"gate_hosts"`
	// AgentRunP50Micros is the measured demos' agent rounds' p50, node
	// started → agent done (workspace, agent, patch, report);
	// GateRunP50Micros their gates', gate started → finished; and
	// GateLatencyP50Micros gate dispatched → started. All on the
	// coordinator's clock.
	AgentRunP50Micros    float64 `json:"agent_run_p50_us"`
	GateRunP50Micros     float64 `json:"gate_run_p50_us"`
	GateLatencyP50Micros float64 `json:"gate_latency_p50_us"`
	// CPUSeconds is the machine's busy CPU time (all processes: runners,
	// engine, containers) during each measured demo, and
	// MedianCPUSeconds their median (0: /proc/stat unreadable).
	CPUSeconds       []float64 `json:"cpu_seconds,omitempty"`
	MedianCPUSeconds float64   `json:"median_cpu_seconds,omitempty"`

	agentRuns, gateRuns, gateLatency []time.Duration
}

// demoVariant is how one set of runners is started.
type demoVariant struct {
	name, description string
	// workerArgs and gateArgs are the sandbox flags of its worker and
	// gate runner processes.
	workerArgs, gateArgs []string
	// warmImage, when set, is the image ID whose cache warm-up the bench
	// waits for in the gate runner's cache directory before measuring.
	warmImage string
}

// pool is the variant's pool.
func (v demoVariant) pool() string { return "bench-demo-" + v.name }

// demoVariants are the scenario's two variants. PATH in the process
// sandbox is BinDir (for supervisor-test-agent) and the sandbox's
// default, as `coordinator demo` gives it.
func (r *runner) demoVariants(gateImageID string) []demoVariant {
	path := r.cfg.BinDir + string(os.PathListSeparator) + jobrun.DefaultSandboxPath()
	return []demoVariant{
		{name: VariantDemoProcess,
			description: "agents and gates in the process sandbox, as the runners' own user (no private caches), Go's caches shared and kept",
			workerArgs:  []string{"--sandbox", "process", "--sandbox-path", path, "--sandbox-process-user", "off"},
			gateArgs:    []string{"--sandbox", "process", "--sandbox-path", path, "--sandbox-process-user", "off"}},
		{name: VariantDemoDocker,
			description: fmt.Sprintf("agents in %s with no network, gates in %s on the trusted layers of the gate runner's warm-up, "+
				"containers started ahead of their job", DemoAgentImage, GoGateImage),
			workerArgs: []string{"--sandbox", "docker", "--sandbox-image", DemoAgentImage, "--egress-allow="},
			gateArgs:   []string{"--sandbox", "docker", "--sandbox-image", GoGateImage},
			warmImage:  gateImageID},
	}
}

// demoDataDir is where the runner processes keep their data: DemoDataDir,
// or a directory in the user's cache directory, so that the Docker gate
// runner's warm-up is done once per image, not once per run.
func (c *Config) demoDataDir() (string, error) {
	if c.DemoDataDir != "" {
		return filepath.Abs(c.DemoDataDir)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no directory for the runners' data (give --demo-data-dir): %w", err)
	}
	return filepath.Join(cache, "supervisor-bench", "demo"), nil
}

// runDemo runs the demo scenario: skipped without a Docker engine (unless
// named), an error without the images.
func (r *runner) runDemo(ctx context.Context, eng *sandboxEngine) (*DemoReport, error) {
	if r.cfg.demoProcessOnly {
		vs := r.demoVariants("")
		second := vs[0]
		second.name = VariantDemoProcess + "-2"
		return r.measureDemo(ctx, []demoVariant{vs[0], second})
	}
	if eng.skip != "" {
		r.progress("%s: skipped: %s", ScenarioDemo, eng.skip)
		return &DemoReport{Skipped: eng.skip}, nil
	}
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var gateID string
	for _, image := range []string{DemoAgentImage, GoGateImage} {
		id, err := eng.docker.ImageDigest(ictx, image)
		if err != nil {
			return nil, fmt.Errorf("the image %s is not on this host: build it with `make images` (images are never pulled): %w", image, err)
		}
		if image == GoGateImage {
			gateID = id
		}
	}
	if _, err := exec.LookPath("go"); err != nil {
		return nil, fmt.Errorf("the process variant's gates run the host's go: %w", err)
	}
	return r.measureDemo(ctx, r.demoVariants(gateID))
}

// measureDemo starts a fleet with no runners of its own and a worker and a
// gate runner process for each variant, waits for their warm-ups, runs
// one unmeasured demo on each, then DemoRuns rounds of one demo on each
// in turn.
func (r *runner) measureDemo(ctx context.Context, variants []demoVariant) (*DemoReport, error) {
	data, err := r.cfg.demoDataDir()
	if err != nil {
		return nil, err
	}
	unlock, err := lockDemoData(data)
	if err != nil {
		return nil, err
	}
	defer unlock()
	repo, err := r.demoRepo(ctx)
	if err != nil {
		return nil, err
	}
	rep := &DemoReport{Runs: r.cfg.DemoRuns, DataDir: data}
	yamls := make([][]byte, len(variants))
	for i, v := range variants {
		if yamls[i], err = demoYAML(v.pool()); err != nil {
			return nil, err
		}
		rep.Variants = append(rep.Variants, DemoVariant{Name: v.name, Description: v.description, Pool: v.pool(),
			AgentHosts: map[string]int{}, GateHosts: map[string]int{}})
	}
	wf, err := workflow.Parse("demo-workflow.yaml", yamls[0])
	if err != nil {
		return nil, fmt.Errorf("the demo workflow: %w", err)
	}
	rep.Workflow, rep.Tasks = wf.Name, len(wf.Tasks)

	fs, closeFleet, err := r.openFleetWith(ctx, ScenarioDemo+"-fleet", "", true)
	if err != nil {
		return nil, err
	}
	defer closeFleet()

	var procs []*runnerProc
	defer func() { stopRunners(procs) }()
	gates := make([]*runnerProc, len(variants))
	for i, v := range variants {
		for _, kind := range []struct{ binary, label string }{{WorkerBinary, "worker"}, {GateRunnerBinary, "gates"}} {
			name := fmt.Sprintf("bench-demo-%s-%s", v.name, kind.label)
			args := []string{"--pools", v.pool(), "--concurrency", fmt.Sprint(demoConcurrency)}
			if kind.binary == WorkerBinary {
				args = append(args, v.workerArgs...)
			} else {
				args = append(args, v.gateArgs...)
			}
			p, err := r.startProc(ScenarioDemo, name, filepath.Join(r.cfg.BinDir, kind.binary), fs.url,
				filepath.Join(r.dir, ScenarioDemo, name), filepath.Join(data, name), args)
			if err != nil {
				return nil, err
			}
			procs = append(procs, p)
			if kind.binary == GateRunnerBinary {
				gates[i] = p
			}
		}
	}
	for _, p := range procs {
		if err := p.waitReady(ctx); err != nil {
			return nil, err
		}
	}
	for i, v := range variants {
		if v.warmImage == "" {
			continue
		}
		took, err := r.waitWarm(ctx, gates[i], filepath.Join(data, gates[i].name), v.warmImage)
		if err != nil {
			return nil, err
		}
		rep.Variants[i].WarmupSeconds = took.Seconds()
	}

	// run runs demo n of variant i and returns its wall time; it counts
	// the runners of a measured one's jobs. Each demo starts from a commit
	// of its own, which changes package greet: no demo, of this run or an
	// earlier one, finds what another compiled in a cache its gates share
	// (the process sandbox's), as a real fleet's next workflow would not.
	run := func(i, n int) (time.Duration, error) {
		rctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
		defer cancel()
		label := fmt.Sprintf("%s-%d", variants[i].name, n)
		base, err := r.demoCommit(rctx, repo, label)
		if err != nil {
			return 0, fmt.Errorf("%s demo %d: %w", variants[i].name, n, err)
		}
		if err := uploadBundle(rctx, fs.bus, base); err != nil {
			return 0, fmt.Errorf("%s demo %d: %w", variants[i].name, n, err)
		}
		file := "bench-demo-" + label + ".yaml"
		settle(rctx)
		busy0, busyOK := machineBusy()
		start := time.Now()
		id, err := submit(rctx, fs.client, base, file, yamls[i])
		if err != nil {
			return 0, fmt.Errorf("%s demo %d: %w", variants[i].name, n, err)
		}
		if _, err := fs.watcher.wait(rctx, []string{id}); err != nil {
			return 0, fmt.Errorf("%s demo %d (workflow %s): %w", variants[i].name, n, id, err)
		}
		took := time.Since(start)
		busy1, busyOK1 := machineBusy()
		if n > 0 {
			v := &rep.Variants[i]
			if busyOK && busyOK1 {
				v.CPUSeconds = append(v.CPUSeconds, (busy1 - busy0).Seconds())
			}
			st, err := fs.watcher.collect([]string{id})
			if err != nil {
				return 0, fmt.Errorf("%s demo %d (workflow %s): %w", variants[i].name, n, id, err)
			}
			for h, c := range st.agentHosts {
				v.AgentHosts[h] += c
			}
			for h, c := range st.gateHosts {
				v.GateHosts[h] += c
			}
			v.agentRuns = append(v.agentRuns, st.run...)
			v.gateRuns = append(v.gateRuns, st.gateRun...)
			v.gateLatency = append(v.gateLatency, st.gateLatency...)
		}
		return took, nil
	}
	for i, v := range variants {
		r.progress("%s: %s: one unmeasured demo", ScenarioDemo, v.name)
		if _, err := run(i, 0); err != nil {
			return nil, err
		}
	}
	for n := 1; n <= r.cfg.DemoRuns; n++ {
		for i, v := range variants {
			d, err := run(i, n)
			if err != nil {
				return nil, err
			}
			rep.Variants[i].Seconds = append(rep.Variants[i].Seconds, d.Seconds())
			r.progress("%s: %s: demo %d of %d in %.2fs", ScenarioDemo, v.name, n, r.cfg.DemoRuns, d.Seconds())
		}
	}
	rep.summarize()
	return rep, nil
}

// summarize fills in each variant's median, minimum and maximum, and the
// ratio of the second variant's median to the first's.
func (d *DemoReport) summarize() {
	for i := range d.Variants {
		v := &d.Variants[i]
		if len(v.Seconds) == 0 {
			continue
		}
		s := slices.Clone(v.Seconds)
		slices.Sort(s)
		v.MinSeconds, v.MaxSeconds = s[0], s[len(s)-1]
		v.MedianSeconds = median(s)
		v.AgentRunP50Micros, _ = quantiles(v.agentRuns)
		v.GateRunP50Micros, _ = quantiles(v.gateRuns)
		v.GateLatencyP50Micros, _ = quantiles(v.gateLatency)
		v.MedianCPUSeconds = median(v.CPUSeconds)
	}
	d.DockerOverProcess = 0
	if len(d.Variants) == 2 {
		d.DockerOverProcess = ratioTo(d.Variants[1].MedianSeconds, d.Variants[0].MedianSeconds)
	}
}

// Before each demo the scenario waits until the machine has been nearly
// idle (busy less than settleBusy of one CPU in each settleWindow) for
// settleQuiet, settleMax at most: what a demo leaves running in the
// background (the Docker sandbox removes its containers after the result,
// and tops up the containers waiting for the next jobs once it has run
// nothing for a quarter of a second, PERF-80) is then not counted in the
// next demo, the other variant's.
const (
	settleWindow = 250 * time.Millisecond
	settleQuiet  = time.Second
	settleBusy   = 0.15
	settleMax    = 10 * time.Second
)

// settle waits until the machine is nearly idle (see settleWindow).
func settle(ctx context.Context) {
	quiet := time.Duration(0)
	for began := time.Now(); time.Since(began) < settleMax; {
		b0, ok := machineBusy()
		if !ok {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(settleWindow):
		}
		b1, ok := machineBusy()
		if !ok {
			return
		}
		if float64(b1-b0) >= settleBusy*float64(settleWindow) {
			quiet = 0
			continue
		}
		if quiet += settleWindow; quiet >= settleQuiet {
			return
		}
	}
}

// median is the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// lockDemoData takes data's lock, so that two benches never run their
// runners on it at once (same host ids: each would remove the other's
// containers); unlock releases it.
func lockDemoData(data string) (unlock func(), err error) {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(data, ".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another bench runs the demo scenario on %s (%w): wait for it, or give another --demo-data-dir", data, err)
	}
	return func() { f.Close() }, nil
}

// waitWarm waits until the cache warm-up of the gate runner p, whose data
// directory is data, has completed for the image imageID, and returns how
// long it waited.
func (r *runner) waitWarm(ctx context.Context, p *runnerProc, data, imageID string) (time.Duration, error) {
	dir := jobrun.CacheDir(data)
	if sandbox.DockerCachesWarmed(dir, imageID) {
		return 0, nil
	}
	r.progress("%s: %s: waiting for its cache warm-up (go build, vet and test of std in %s; minutes the first time, kept in %s)",
		ScenarioDemo, p.name, GoGateImage, data)
	began := time.Now()
	deadline := began.Add(demoWarmupTimeout)
	for !sandbox.DockerCachesWarmed(dir, imageID) {
		if b, _ := os.ReadFile(p.log); bytes.Contains(b, []byte(warmupTrouble)) {
			return 0, fmt.Errorf("%s: its cache warm-up did not complete:\n%s", p.name, tail(p.log))
		}
		select {
		case <-p.done:
			return 0, fmt.Errorf("%s exited during its cache warm-up: %v\n%s", p.name, p.err, tail(p.log))
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: no cache warm-up completed within %s:\n%s", p.name, demoWarmupTimeout, tail(p.log))
		}
	}
	// A warm-up counts as done only once every command of it succeeded.
	took := time.Since(began)
	r.progress("%s: %s: caches warmed after %.0fs", ScenarioDemo, p.name, took.Seconds())
	return took, nil
}

// warmupTrouble begins the runners' log messages of a cache warm-up that
// failed or could not complete.
const warmupTrouble = "msg=\"sandbox: cache warm-up"

// demoRepo writes the demo's sample repository (the same first commit as
// every `coordinator demo`'s, so the same repository id) and its bundle.
func (r *runner) demoRepo(ctx context.Context) (*benchRepo, error) {
	path := r.demoRepoPath()
	if err := os.RemoveAll(path); err != nil { // a kept --dir from an earlier run
		return nil, err
	}
	if err := demo.WriteRepo(ctx, path); err != nil {
		return nil, err
	}
	commit, err := workspace.ResolveCommit(ctx, path, "HEAD")
	if err != nil {
		return nil, err
	}
	return bundleRepo(ctx, path, commit, filepath.Join(r.dir, "demo.bundle"))
}

// demoCommit commits a change to package greet of repo, naming label, and
// returns the repository at that commit, bundled.
func (r *runner) demoCommit(ctx context.Context, repo *benchRepo, label string) (*benchRepo, error) {
	f, err := os.OpenFile(filepath.Join(repo.path, "greet.go"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	// The run's start makes the change differ from every earlier run's:
	// the process sandbox's Go cache is kept from one run to the next.
	_, err = fmt.Fprintf(f, "\n// Bench demo %s of the run of %s.\n", label, r.epoch.UTC().Format(time.RFC3339Nano))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"add", "greet.go"},
		{"-c", "user.name=Bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "bench: demo " + label},
	} {
		if err := demo.Git(ctx, repo.path, nil, args...); err != nil {
			return nil, err
		}
	}
	commit, err := workspace.ResolveCommit(ctx, repo.path, "HEAD")
	if err != nil {
		return nil, err
	}
	return bundleRepo(ctx, repo.path, commit, filepath.Join(r.dir, "demo-"+label+".bundle"))
}

// demoRepoPath is where the demo's sample repository is written.
func (r *runner) demoRepoPath() string { return filepath.Join(r.dir, "demo-repo") }

// demoYAML is the demo workflow with every agent and gate job in pool, and
// its gates uncached: every gate of every demo runs, on the Go caches
// its sandbox keeps warm, instead of being answered by the gate cache.
func demoYAML(pool string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(demo.Workflow(), &doc); err != nil {
		return nil, fmt.Errorf("the demo workflow: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the demo workflow is not a mapping")
	}
	top := doc.Content[0]
	defaults := mappingValue(top, "defaults")
	gates := mappingValue(top, "gates")
	if defaults == nil || defaults.Kind != yaml.MappingNode || gates == nil || gates.Kind != yaml.SequenceNode {
		return nil, errors.New("the demo workflow has no defaults mapping or no gates list")
	}
	setScalar(defaults, "pool", "!!str", pool)
	for _, g := range gates.Content {
		if g.Kind != yaml.MappingNode {
			return nil, errors.New("a gate of the demo workflow is not a mapping")
		}
		setScalar(g, "pool", "!!str", pool)
		setScalar(g, "cache", "!!bool", "false")
	}
	return yaml.Marshal(&doc)
}

// mappingValue returns the value of key in mapping m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setScalar sets key to value, a scalar of YAML tag tag, in mapping m.
func setScalar(m *yaml.Node, key, tag, value string) {
	if v := mappingValue(m, key); v != nil {
		*v = yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
		return
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value})
}
