package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/cli/demo"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
)

func TestSplit(t *testing.T) {
	for n, want := range map[int][]int{1: {1}, 500: {500}, 501: {251, 250}, 1001: {334, 334, 333}} {
		if got := split(n); !slices.Equal(got, want) {
			t.Errorf("split(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestWorkflowYAMLIsValid(t *testing.T) {
	for _, c := range []struct {
		chain, gated bool
	}{{false, false}, {false, true}, {true, false}} {
		spec, err := workflow.Parse("w.yaml", workflowYAML("bench-x", MaxTasksPerWorkflow, c.chain, c.gated))
		if err != nil {
			t.Fatalf("chain %v gated %v: %v", c.chain, c.gated, err)
		}
		if len(spec.Tasks) != MaxTasksPerWorkflow {
			t.Fatalf("%d tasks", len(spec.Tasks))
		}
		last := spec.Tasks[len(spec.Tasks)-1]
		if last.Agent == nil || last.Agent.Adapter != "command" || !slices.Equal(last.Agent.Command, NoopCommand) {
			t.Errorf("agent %+v, want the command adapter running %q", last.Agent, NoopCommand)
		}
		if c.chain != (len(last.DependsOn) == 1) || c.gated != (len(last.Gates) == 1) {
			t.Errorf("chain %v gated %v: last task depends on %v, gates %v", c.chain, c.gated, last.DependsOn, last.Gates)
		}
	}
}

func TestFeedbackYAMLIsValid(t *testing.T) {
	spec, err := workflow.Parse("w.yaml", feedbackYAML("bench-feedback", MaxTasksPerWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Tasks) != MaxTasksPerWorkflow || len(spec.Gates) != 1 {
		t.Fatalf("%d tasks, %d gates", len(spec.Tasks), len(spec.Gates))
	}
	if g := spec.Gates[0]; g.Name != FeedbackGate || !slices.Equal(g.Command, FeedbackGateCommand) || !g.UsesCache() {
		t.Errorf("gate %+v; want %s, %q, cached", g, FeedbackGate, FeedbackGateCommand)
	}
	last := spec.Tasks[len(spec.Tasks)-1]
	if last.Agent == nil || !slices.Equal(last.Agent.Command, FeedbackAgentCommand) || !slices.Equal(last.Gates, []string{FeedbackGate}) {
		t.Errorf("last task: agent %+v, gates %v", last.Agent, last.Gates)
	}
	if last.Retry == nil || last.Retry.Name != FeedbackRetryPolicy || last.MaxAttempts != 2 {
		t.Errorf("last task: retry policy %+v, max attempts %d; want %s, 2", last.Retry, last.MaxAttempts, FeedbackRetryPolicy)
	}
	id := fmt.Sprintf("t%04d", MaxTasksPerWorkflow-1)
	for _, want := range []string{"@if-feedback " + FeedbackGate + "\n@write " + id + "/fixed.txt\nfixed by " + id + "\n@end\n@endif"} {
		if !strings.Contains(last.Prompt, want) {
			t.Errorf("prompt %q lacks %q", last.Prompt, want)
		}
	}
}

func TestCheckGates(t *testing.T) {
	failed := gateOutcome{gate: FeedbackGate, status: protocol.GateFailed, key: "k1"}
	passed := gateOutcome{gate: FeedbackGate, status: protocol.GatePassed, key: "k2"}
	if err := checkGates("t", []gateOutcome{failed}, []gateOutcome{passed}); err != nil {
		t.Fatalf("a failure, then a pass with another key: %v", err)
	}
	cachedFailure, cachedPass, sameKey, passedFirst := failed, passed, passed, passed
	cachedFailure.cached, cachedPass.cached, sameKey.key = true, true, "k1"
	for name, c := range map[string][2][]gateOutcome{
		"no gate in attempt 1": {nil, {passed}},
		"attempt 1 passed":     {{passedFirst}, {passed}},
		"attempt 1 from cache": {{cachedFailure}, {passed}},
		"attempt 2 failed":     {{failed}, {failed}},
		"attempt 2 from cache": {{failed}, {cachedPass}},
		"attempt 2 same key":   {{failed}, {sameKey}},
		"no gate in attempt 2": {{failed}, nil},
	} {
		if err := checkGates("t", c[0], c[1]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	if p50, p99 := quantiles(ds); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %v, p99 %v; want 50 and 99", p50, p99)
	}
	if p50, p99 := quantiles(nil); p50 != 0 || p99 != 0 {
		t.Errorf("empty: %v %v", p50, p99)
	}
}

func TestGateScaleYAMLIsValid(t *testing.T) {
	spec, err := workflow.Parse("w.yaml", gateScaleYAML("bench-scale", MaxTasksPerWorkflow, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Tasks) != MaxTasksPerWorkflow || len(spec.Gates) != 1 {
		t.Fatalf("%d tasks, %d gates", len(spec.Tasks), len(spec.Gates))
	}
	g := spec.Gates[0]
	if !slices.Equal(g.Command, []string{"sleep", "0.5"}) || g.UsesCache() || g.Pool != ScalePool {
		t.Errorf("gate %+v; want sleep 0.5, uncached, pool %s", g, ScalePool)
	}
	if last := spec.Tasks[len(spec.Tasks)-1]; !slices.Equal(last.Gates, []string{"sleep"}) || last.Agent == nil || !slices.Equal(last.Agent.Command, NoopCommand) {
		t.Errorf("last task %+v", last)
	}
}

func TestWorkerScaleYAMLIsValid(t *testing.T) {
	spec, err := workflow.Parse("w.yaml", workerScaleYAML("bench-worker-scale", MaxTasksPerWorkflow, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Tasks) != MaxTasksPerWorkflow || len(spec.Gates) != 0 {
		t.Fatalf("%d tasks, %d gates; want %d and none", len(spec.Tasks), len(spec.Gates), MaxTasksPerWorkflow)
	}
	last := spec.Tasks[len(spec.Tasks)-1]
	if last.Agent == nil || !slices.Equal(last.Agent.Command, []string{"sleep", "0.5"}) || last.Pool != ScalePool || len(last.Gates) != 0 {
		t.Errorf("last task %+v; want agent sleep 0.5 in pool %s, no gates", last, ScalePool)
	}
}

func TestComputeScaling(t *testing.T) {
	g := &ScaleOutReport{SleepSeconds: 0.5, RunnerConcurrency: 1, Runs: []ScaleOutRun{
		{Runners: 1, Jobs: 24, WindowSeconds: 15, Throughput: 1.6, RunnerCPUSeconds: 2.4},
		{Runners: 2, Jobs: 24, WindowSeconds: 24 / 3.04, Throughput: 3.04},
		{Runners: 4, Jobs: 24, WindowSeconds: 24 / 5.76, Throughput: 5.76},
	}}
	g.computeScaling()
	for i, want := range []struct{ speedup, ofLinear, ideal float64 }{{1, 1, 2}, {1.9, 0.95, 4}, {3.6, 0.9, 8}} {
		r := g.Runs[i]
		if math.Abs(r.Speedup-want.speedup) > 1e-9 || math.Abs(r.OfLinear-want.ofLinear) > 1e-9 || r.IdealThroughput != want.ideal {
			t.Errorf("%d runners: speed-up %v, of linear %v, ideal %v; want %+v", r.Runners, r.Speedup, r.OfLinear, r.IdealThroughput, want)
		}
	}
	if r := g.Runs[0]; math.Abs(r.OverheadPerJobMillis-125) > 1e-9 || math.Abs(r.RunnerCPUPerJobMillis-100) > 1e-9 {
		t.Errorf("overhead %vms, runner CPU %vms per job; want 125 and 100", r.OverheadPerJobMillis, r.RunnerCPUPerJobMillis)
	}
}

func TestCacheKeyRatios(t *testing.T) {
	c := &CacheKeySize{Ops: []KeyOp{
		{Name: OpGitStatus, P50Micros: 20_000}, {Name: OpComputeKey, P50Micros: 50_000}, {Name: OpCacheHitKV, P50Micros: 200},
	}}
	c.computeRatios(OpGitStatus)
	for name, want := range map[string]float64{OpGitStatus: 1, OpComputeKey: 2.5, OpCacheHitKV: 0.01} {
		if got := c.Op(name).Ratio; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: ratio %v, want %v", name, got, want)
		}
	}
	if c.Op(OpIntegrity) != nil {
		t.Error("an operation that did not run was found")
	}
}

// TestCacheKeyGrowth: each larger size's operations are compared with the
// first size's, only for operations measured at both (the cache hits run
// on the first size only).
func TestCacheKeyGrowth(t *testing.T) {
	op := func(name string, p50, cpu float64) KeyOp {
		return KeyOp{Name: name, P50Micros: p50, Memory: Memory{CPUPerOpMicros: cpu}}
	}
	sizes := []CacheKeySize{
		{Files: 100, Ops: []KeyOp{op(OpGitStatus, 10, 20), op(OpComputeKey, 12, 30), op(OpCacheHitKV, 1, 1), op(OpIntegrity, 20, 40)}},
		{Files: 1000, Ops: []KeyOp{op(OpGitStatus, 100, 200), op(OpComputeKey, 150, 330), op(OpIntegrity, 300, 400)}},
		{Files: 5000, Ops: []KeyOp{op(OpGitStatus, 400, 800), op(OpComputeKey, 480, 1200), op(OpIntegrity, 800, 1600)}},
	}
	for i := range sizes {
		sizes[i].computeRatios(OpGitStatus)
	}
	c := &CacheKeyReport{CacheKeySize: sizes[0], Reference: OpGitStatus, Sizes: sizes}
	c.computeGrowth()
	want := []KeyGrowth{
		{Op: OpGitStatus, FromFiles: 100, ToFiles: 1000, P50: 10, CPU: 10, RatioFrom: 1, RatioTo: 1},
		{Op: OpComputeKey, FromFiles: 100, ToFiles: 1000, P50: 12.5, CPU: 11, RatioFrom: 1.2, RatioTo: 1.5},
		{Op: OpIntegrity, FromFiles: 100, ToFiles: 1000, P50: 15, CPU: 10, RatioFrom: 2, RatioTo: 3},
		{Op: OpGitStatus, FromFiles: 100, ToFiles: 5000, P50: 40, CPU: 40, RatioFrom: 1, RatioTo: 1},
		{Op: OpComputeKey, FromFiles: 100, ToFiles: 5000, P50: 40, CPU: 40, RatioFrom: 1.2, RatioTo: 1.2},
		{Op: OpIntegrity, FromFiles: 100, ToFiles: 5000, P50: 40, CPU: 40, RatioFrom: 2, RatioTo: 2},
	}
	if len(c.Growth) != len(want) {
		t.Fatalf("growth %+v; want %+v", c.Growth, want)
	}
	for i, g := range c.Growth {
		w := want[i]
		if g.Op != w.Op || g.FromFiles != w.FromFiles || g.ToFiles != w.ToFiles || math.Abs(g.P50-w.P50) > 1e-9 ||
			math.Abs(g.CPU-w.CPU) > 1e-9 || math.Abs(g.RatioFrom-w.RatioFrom) > 1e-9 || math.Abs(g.RatioTo-w.RatioTo) > 1e-9 {
			t.Errorf("growth %d = %+v; want %+v", i, g, w)
		}
	}
	var table bytes.Buffer
	printCacheKey(&table, c)
	for _, s := range []string{"Growth from 100 to 1,000 files (10x)", "Growth from 100 to 5,000 files (50x)",
		"against git-status's growth (p50, CPU): compute-key 1.25x (CPU 1.10x), integrity 1.50x (CPU 1.00x)"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	c.Sizes = c.Sizes[:1]
	if c.computeGrowth(); c.Growth != nil {
		t.Errorf("growth with one size: %+v", c.Growth)
	}
}

// TestSandboxSkippedWithoutEngine points the sandbox scenario at a socket
// where no engine answers: selected implicitly (all scenarios) it is
// skipped with the reason, asked for by name it is an error.
func TestSandboxSkippedWithoutEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-engine.sock"))
	ctx := context.Background()
	r := &runner{cfg: Config{SandboxImage: DefaultSandboxImage, SandboxCommand: DefaultSandboxCommand, SandboxRuns: 1,
		MaxWait: time.Minute, Progress: io.Discard}, dir: t.TempDir()}
	eng, err := r.probeSandboxEngine(ctx, false)
	if err != nil {
		t.Fatalf("not required: %v", err)
	}
	defer eng.close()
	rep, err := r.runSandbox(ctx, eng)
	if err != nil {
		t.Fatalf("runSandbox: %v", err)
	}
	if !strings.Contains(rep.Skipped, "no Docker engine answers") || len(rep.Variants) != 0 {
		t.Errorf("skipped %q with %d variants; want the reason and none", rep.Skipped, len(rep.Variants))
	}
	var table bytes.Buffer
	PrintTable(&table, &Report{Sandbox: rep})
	if !strings.Contains(table.String(), "skipped: no Docker engine answers") {
		t.Errorf("table does not say the scenario was skipped:\n%s", table.String())
	}
	if _, err := r.probeSandboxEngine(ctx, true); err == nil || !strings.Contains(err.Error(), "no Docker engine answers") {
		t.Errorf("required: %v; want an error saying no engine answers", err)
	}
}

func TestSandboxRatios(t *testing.T) {
	s := &SandboxReport{Reference: VariantProcess, Variants: []SandboxVariant{
		{Name: VariantProcess, P50Micros: 2_000}, {Name: VariantDockerSandbox, P50Micros: 600_000},
		{Name: VariantDockerRun, P50Micros: 500_000}, {Name: VariantDockerRunHardened, P50Micros: 400_000},
	}}
	s.computeRatios()
	for name, want := range map[string]struct{ over, proc, run, hardened float64 }{
		VariantProcess:           {0, 1, 0, 0},
		VariantDockerSandbox:     {598, 300, 1.2, 1.5},
		VariantDockerRun:         {498, 250, 1, 1.25},
		VariantDockerRunHardened: {398, 200, 0.8, 1},
	} {
		v := s.Variant(name)
		if math.Abs(v.OverheadMillis-want.over) > 1e-9 || math.Abs(v.RatioToProcess-want.proc) > 1e-9 ||
			math.Abs(v.RatioToDockerRun-want.run) > 1e-9 || math.Abs(v.RatioToHardened-want.hardened) > 1e-9 {
			t.Errorf("%s: overhead %v, ratios %v %v %v; want %+v", name, v.OverheadMillis, v.RatioToProcess, v.RatioToDockerRun,
				v.RatioToHardened, want)
		}
	}
}

func TestHardenedRunArgs(t *testing.T) {
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := hardenedRunArgs("img:1", []string{"go", "test", "./..."}, "supervisor.workflow=w", ws, "1000:1000",
		sandbox.Resources{MemoryBytes: 2 << 30, CPUs: 1.5, Pids: 256}, 1<<30)
	line := strings.Join(args, " ")
	for _, want := range []string{"run --rm --pull never --label supervisor.workflow=w", "--network none", "--read-only", "--cap-drop ALL",
		"--security-opt no-new-privileges", "--init", "--memory 2147483648 --memory-swap 2147483648", "--cpus 1.5",
		"--pids-limit 256", "--tmpfs /tmp:rw,exec,nosuid,nodev,size=1073741824,mode=1777",
		"--mount type=bind,source=" + ws + ",target=/workspace",
		"--mount type=bind,source=" + filepath.Join(ws, ".git") + ",target=/workspace/.git,readonly", "--user 1000:1000"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if !slices.Equal(args[len(args)-4:], []string{"img:1", "go", "test", "./..."}) {
		t.Errorf("args end %q, want the image and the command", args[len(args)-4:])
	}
	if got := plainRunArgs("img:1", []string{"true"}, "k=v"); !slices.Equal(got, []string{"run", "--rm", "--pull", "never", "--label", "k=v", "img:1", "true"}) {
		t.Errorf("plain run %q", got)
	}
}

// TestDemoSummarize checks the demo report's medians (odd and even
// counts), extremes and ratio, and that a variant with no demo is left at
// zero.
func TestDemoSummarize(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		process, docker      []float64
		med0, med1, lo1, hi1 float64
		ratio                float64
	}{
		{"odd", []float64{4, 2, 3}, []float64{9, 6, 7}, 3, 7, 6, 9, 7.0 / 3},
		{"even", []float64{2, 4}, []float64{5, 8, 6, 7}, 3, 6.5, 5, 8, 6.5 / 3},
		{"no process demo", nil, []float64{5}, 0, 5, 5, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := slices.Clone(tc.docker)
			d := DemoReport{Variants: []DemoVariant{{Seconds: tc.process}, {Seconds: tc.docker}}}
			d.summarize()
			p, k := d.Variants[0], d.Variants[1]
			if p.MedianSeconds != tc.med0 || k.MedianSeconds != tc.med1 || k.MinSeconds != tc.lo1 || k.MaxSeconds != tc.hi1 {
				t.Errorf("medians %v, %v; docker min %v max %v; want %v, %v, %v, %v",
					p.MedianSeconds, k.MedianSeconds, k.MinSeconds, k.MaxSeconds, tc.med0, tc.med1, tc.lo1, tc.hi1)
			}
			if d.DockerOverProcess != tc.ratio {
				t.Errorf("ratio %v, want %v", d.DockerOverProcess, tc.ratio)
			}
			if !slices.Equal(d.Variants[1].Seconds, given) {
				t.Errorf("summarize changed the samples: %v, given %v", d.Variants[1].Seconds, given)
			}
		})
	}
}

// TestDemoYAML checks the demo workflow made for a variant: every agent
// and gate job in the variant's pool, gates uncached, the rest as the
// demo has it.
func TestDemoYAML(t *testing.T) {
	y, err := demoYAML("bench-demo-x")
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflow.Parse("demo.yaml", y)
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	orig, err := workflow.Parse("demo.yaml", demo.Workflow())
	if err != nil {
		t.Fatal(err)
	}
	if wf.Name != orig.Name || len(wf.Tasks) != len(orig.Tasks) || len(wf.Gates) != 2 {
		t.Fatalf("workflow %q, %d tasks, %d gates; want the demo's (%q, %d tasks, 2 gates)", wf.Name, len(wf.Tasks), len(wf.Gates),
			orig.Name, len(orig.Tasks))
	}
	for i, task := range wf.Tasks {
		if task.Pool != "bench-demo-x" || task.Prompt != orig.Tasks[i].Prompt {
			t.Errorf("task %s: pool %q, prompt changed: %v", task.ID, task.Pool, task.Prompt != orig.Tasks[i].Prompt)
		}
	}
	for _, g := range wf.Gates {
		if g.Pool != "bench-demo-x" || g.Cache == nil || *g.Cache {
			t.Errorf("gate %s: pool %q, cache %v; want the variant's pool, uncached", g.Name, g.Pool, g.Cache)
		}
	}
}
