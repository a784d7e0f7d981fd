package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestDemoScenarioMachinery runs the demo scenario (issue 13, figure 4 at
// the demo level) with its second set of runner processes in the process
// sandbox too (bench.DemoOnProcessOnly: what is checked is the scenario,
// not Docker's cost, and no Docker engine is needed) and checks that the
// report is consistent: each set ran its measured demo, every agent round
// on its own worker and every gate on its own gate runner, and the ratio
// is that of the medians. (TestDemoYAML checks the gates are uncached.)
// It never checks speed.
func TestDemoScenarioMachinery(t *testing.T) {
	needGit(t)
	if _, err := exec.LookPath("go"); err != nil {
		testkit.Missing(t, "go (the demo's gates run it): "+err.Error())
	}
	binDir := t.TempDir()
	buildInto(t, binDir, "worker", "./cmd/worker", bench.WorkerBinary)
	buildInto(t, binDir, "worker", "./cmd/supervisor-test-agent", bench.TestAgentBinary)
	buildInto(t, binDir, "gaterunner", "./cmd/gaterunner", bench.GateRunnerBinary)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	data := t.TempDir()
	sets := []string{bench.VariantDemoProcess, bench.VariantDemoProcess + "-2"}
	shareGoBuildCache(t, data, sets...)
	cfg := bench.Config{Concurrency: 1, Scenarios: []string{bench.ScenarioDemo}, DemoRuns: 1, DemoDataDir: data,
		BinDir: binDir, WorkDir: t.TempDir(), FleetLog: quiet(), Progress: &progress}
	bench.DemoOnProcessOnly(&cfg)
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	d := rep.Demo
	if d == nil || d.Skipped != "" || len(rep.Results) != 0 || rep.GoGate != nil {
		t.Fatalf("demo figures %+v, results %d, go-gate %+v; want the demo figures alone", d, len(rep.Results), rep.GoGate)
	}
	if d.Workflow != "greet-demo" || d.Tasks != 3 || d.Runs != 1 || d.DataDir != data || len(d.Variants) != 2 {
		t.Fatalf("header: workflow %q, %d tasks, %d runs, data %q, %d variants", d.Workflow, d.Tasks, d.Runs, d.DataDir, len(d.Variants))
	}
	for i, name := range sets {
		v := d.Variants[i]
		if v.Name != name || v.Pool != "bench-demo-"+name || v.Description == "" || v.WarmupSeconds != 0 {
			t.Errorf("variant %d: %q, pool %q, warm-up %v, description %q", i, v.Name, v.Pool, v.WarmupSeconds, v.Description)
		}
		if len(v.Seconds) != 1 || v.Seconds[0] <= 0 {
			t.Fatalf("%s: demo times %v, want one positive", name, v.Seconds)
		}
		if v.MinSeconds != v.Seconds[0] || v.MedianSeconds != v.Seconds[0] || v.MaxSeconds != v.Seconds[0] {
			t.Errorf("%s: min %v, median %v, max %v of %v", name, v.MinSeconds, v.MedianSeconds, v.MaxSeconds, v.Seconds)
		}
		// The machine was busy during the demo (a Linux /proc/stat).
		if len(v.CPUSeconds) != 1 || v.CPUSeconds[0] <= 0 || v.MedianCPUSeconds != v.CPUSeconds[0] {
			t.Errorf("%s: CPU %v, median %v; want one positive, its own median", name, v.CPUSeconds, v.MedianCPUSeconds)
		}
		if v.AgentRunP50Micros <= 0 || v.GateRunP50Micros <= 0 || v.GateLatencyP50Micros <= 0 {
			t.Errorf("%s: agent run p50 %vµs, gate run p50 %vµs, gate latency p50 %vµs; want all positive",
				name, v.AgentRunP50Micros, v.GateRunP50Micros, v.GateLatencyP50Micros)
		}
		// The measured demo: at least one agent round and two gates (vet,
		// test) a task, all started by this set's runners.
		worker, gates := "bench-demo-"+name+"-worker", "bench-demo-"+name+"-gates"
		if len(v.AgentHosts) != 1 || v.AgentHosts[worker] < d.Tasks {
			t.Errorf("%s: agent rounds by runner %v, want at least %d, all by %s", name, v.AgentHosts, d.Tasks, worker)
		}
		if len(v.GateHosts) != 1 || v.GateHosts[gates] < 2*d.Tasks {
			t.Errorf("%s: gate runs by runner %v, want at least %d, all by %s", name, v.GateHosts, 2*d.Tasks, gates)
		}
	}
	if !near(d.DockerOverProcess, d.Variants[1].MedianSeconds/d.Variants[0].MedianSeconds) {
		t.Errorf("ratio %v, want %v", d.DockerOverProcess, d.Variants[1].MedianSeconds/d.Variants[0].MedianSeconds)
	}
	// The runners' data is kept where the scenario says.
	for _, name := range []string{"bench-demo-process-worker", "bench-demo-process-2-gates"} {
		if fi, err := os.Stat(filepath.Join(data, name)); err != nil || !fi.IsDir() {
			t.Errorf("no data directory of %s in %s: %v", name, data, err)
		}
	}

	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, w := range []string{"The demo workflow per sandbox", "greet-demo", "figure 4, the demo", "process-2", data, "busy CPU time"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js, &back); err != nil || back.Demo == nil || len(back.Demo.Variants) != 2 || len(back.Demo.Variants[1].Seconds) != 1 {
		t.Errorf("JSON round trip lost the demo figures (%v):\n%s", err, js)
	}
}

// shareGoBuildCache points the Go build cache of the demo's
// process-sandboxed gate runners (their data directory's cache/go-build,
// the sandbox's XDG_CACHE_HOME) at this test's own, whose standard
// library the test's builds compiled: neither set compiles it cold for
// its unmeasured demo. That compile (a minute or more on two cores, for
// each set) is the sandbox's cost, not the scenario's machinery, which is
// what the test checks.
func shareGoBuildCache(t *testing.T, data string, variants ...string) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	goCache := strings.TrimSpace(string(out))
	if err != nil || goCache == "" || goCache == "off" {
		t.Logf("the demo's gates compile with a cold Go build cache (go env GOCACHE: %q, %v)", goCache, err)
		return
	}
	for _, v := range variants {
		dir := filepath.Join(data, "bench-demo-"+v+"-gates", "cache")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(goCache, filepath.Join(dir, "go-build")); err != nil {
			t.Fatal(err)
		}
	}
}
