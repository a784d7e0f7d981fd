package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
)

// TestCoordinatorTiny runs the coordinator scenario (no workers: the
// responder answers every agent job) at a tiny size beside raw and
// raw-serial, and checks its two rows are complete and compared with the
// right references. It never asserts on speed.
func TestCoordinatorTiny(t *testing.T) {
	needGit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		CoordinatorNodes: 7, ChainNodes: 3, RawMessages: 20, PayloadBytes: 64, Concurrency: 2,
		Scenarios: []string{bench.ScenarioRaw, bench.ScenarioRawSerial, bench.ScenarioCoordinator},
		WorkDir:   t.TempDir(), FleetLog: quiet(), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	byName := map[string]bench.Result{}
	for _, res := range rep.Results {
		byName[res.Scenario] = res
	}
	for _, c := range []struct {
		name, ref string
		count     int
	}{
		{bench.ScenarioCoordinator, bench.ScenarioRaw, 7},
		{bench.ScenarioCoordinator + "-chain", bench.ScenarioRawSerial, 3},
	} {
		res, ok := byName[c.name]
		if !ok {
			t.Fatalf("no %s row in %+v", c.name, rep.Results)
		}
		if res.Count != c.count || res.Unit != "node" || res.Workflows != 1 {
			t.Errorf("%s: count %d unit %q workflows %d; want %d node 1", c.name, res.Count, res.Unit, res.Workflows, c.count)
		}
		if res.LatencyReference != c.ref || !near(res.LatencyRatio, res.LatencyP50Micros/byName[c.ref].LatencyP50Micros) {
			t.Errorf("%s: latency reference %q ratio %v; want %q and p50 over its p50", c.name, res.LatencyReference, res.LatencyRatio, c.ref)
		}
		if !near(res.ThroughputRatio, res.Throughput/byName[bench.ScenarioRaw].Throughput) {
			t.Errorf("%s: throughput ratio %v, want over raw's", c.name, res.ThroughputRatio)
		}
		if res.LatencyP50Micros <= 0 || res.LatencyP99Micros < res.LatencyP50Micros || res.TurnaroundP50Micros <= 0 {
			t.Errorf("%s: p50 %v p99 %v turnaround %v; want 0 < p50 <= p99 and a turnaround", c.name,
				res.LatencyP50Micros, res.LatencyP99Micros, res.TurnaroundP50Micros)
		}
		if res.Memory.CPUPerOpMicros <= 0 || res.Description == "" {
			t.Errorf("%s: CPU per node %vµs, description %q; want both", c.name, res.Memory.CPUPerOpMicros, res.Description)
		}
	}
}

// TestProfiles checks that --cpuprofile and --memprofile write profiles.
func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	var out, errOut bytes.Buffer
	code := bench.Main([]string{"--scenarios", "raw", "--raw-messages", "50", "--dir", filepath.Join(dir, "work"),
		"--cpuprofile", cpu, "--memprofile", mem, "-o", "json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v", err)
	}
	for _, f := range []string{cpu, mem} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("profile: %v", err)
		}
		// pprof files are gzip-compressed protocol buffers.
		if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
			t.Errorf("%s is not a gzip-compressed profile (%d bytes)", f, len(data))
		}
	}
	code = bench.Main([]string{"--scenarios", "raw", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "cpu.prof")}, &out, &errOut)
	if code != bench.ExitUsage {
		t.Errorf("an unwritable --cpuprofile: exit %d, want %d", code, bench.ExitUsage)
	}
}
