package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
	"github.com/supervisorhq/supervisor/coordinator/internal/cli"
)

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestRunTiny runs every scenario at a tiny size and checks that the
// report is complete and consistent. It never asserts on speed.
func TestRunTiny(t *testing.T) {
	needGit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Nodes: 5, ChainNodes: 3, RawMessages: 20, PayloadBytes: 64, Concurrency: 2,
		WorkDir: t.TempDir(), StartFleet: cli.BenchFleet(quiet()), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}

	want := map[string]int{
		bench.ScenarioRaw: 20, bench.ScenarioRawFetch1: 20, bench.ScenarioRawSerial: 20,
		bench.ScenarioNodes: 5, bench.ScenarioGated: 5, bench.ScenarioChain: 3,
	}
	if len(rep.Results) != len(bench.Scenarios) {
		t.Fatalf("got %d results, want %d", len(rep.Results), len(bench.Scenarios))
	}
	byName := map[string]bench.Result{}
	for i, res := range rep.Results {
		if res.Scenario != bench.Scenarios[i] {
			t.Errorf("result %d is %q, want %q (scenarios run in order)", i, res.Scenario, bench.Scenarios[i])
		}
		byName[res.Scenario] = res
	}
	raw := byName[bench.ScenarioRaw]
	for _, res := range rep.Results {
		name := res.Scenario
		if res.Count != want[name] {
			t.Errorf("%s: count %d, want %d", name, res.Count, want[name])
		}
		if res.WallSeconds <= 0 || res.Throughput <= 0 {
			t.Errorf("%s: wall %vs, throughput %v/s; want both positive", name, res.WallSeconds, res.Throughput)
		}
		if got := float64(res.Count) / res.WallSeconds; !near(got, res.Throughput) {
			t.Errorf("%s: throughput %v, but count/wall is %v", name, res.Throughput, got)
		}
		if res.LatencyP50Micros <= 0 || res.LatencyP99Micros < res.LatencyP50Micros {
			t.Errorf("%s: p50 %vµs, p99 %vµs; want 0 < p50 <= p99", name, res.LatencyP50Micros, res.LatencyP99Micros)
		}
		if !near(res.ThroughputRatio, res.Throughput/raw.Throughput) {
			t.Errorf("%s: throughput ratio %v, want %v", name, res.ThroughputRatio, res.Throughput/raw.Throughput)
		}
		ref, ok := byName[res.LatencyReference]
		if !ok {
			t.Errorf("%s: latency reference %q is not among the results", name, res.LatencyReference)
		} else if !near(res.LatencyRatio, res.LatencyP50Micros/ref.LatencyP50Micros) {
			t.Errorf("%s: latency ratio %v, want %v", name, res.LatencyRatio, res.LatencyP50Micros/ref.LatencyP50Micros)
		}
		if res.Memory.TotalAllocBytes == 0 || res.Memory.Mallocs == 0 || res.Memory.AllocBytesPerOp <= 0 || res.Memory.AllocsPerOp <= 0 {
			t.Errorf("%s: memory %+v; want allocations counted", name, res.Memory)
		}
		if res.Description == "" || res.Latency == "" {
			t.Errorf("%s: description %q, latency %q; want both", name, res.Description, res.Latency)
		}
	}
	if raw.ThroughputRatio != 1 || raw.LatencyRatio != 1 {
		t.Errorf("raw: ratios %v and %v to itself, want 1", raw.ThroughputRatio, raw.LatencyRatio)
	}
	if ref := byName[bench.ScenarioChain].LatencyReference; ref != bench.ScenarioRawSerial {
		t.Errorf("chain's latency reference is %q, want %q", ref, bench.ScenarioRawSerial)
	}
	for _, name := range []string{bench.ScenarioNodes, bench.ScenarioGated, bench.ScenarioChain} {
		res := byName[name]
		if res.Unit != "node" || res.Workflows != 1 || res.TurnaroundP50Micros <= 0 {
			t.Errorf("%s: unit %q, %d workflows, turnaround p50 %vµs; want node, 1, positive", name, res.Unit, res.Workflows, res.TurnaroundP50Micros)
		}
	}
	if g := byName[bench.ScenarioGated]; g.GateLatencyP50Micros <= 0 {
		t.Errorf("gated: gate latency p50 %vµs, want positive", g.GateLatencyP50Micros)
	}
	if n := byName[bench.ScenarioNodes]; n.GateLatencyP50Micros != 0 {
		t.Errorf("nodes: gate latency p50 %vµs without gates", n.GateLatencyP50Micros)
	}
	if rep.NumCPU <= 0 || rep.GoVersion == "" || rep.Baseline != bench.ScenarioRaw || rep.TotalSeconds <= 0 {
		t.Errorf("report header %+v incomplete", rep)
	}

	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, name := range bench.Scenarios {
		if !strings.Contains(table.String(), name) {
			t.Errorf("table lacks scenario %s:\n%s", name, table.String())
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestCommandJSON runs `coordinator bench` on a subset with -o json.
func TestCommandJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"bench", "--scenarios", "raw,raw-serial", "--raw-messages", "30", "--payload", "16",
		"--dir", t.TempDir(), "-o", "json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 2 || rep.Results[0].Scenario != bench.ScenarioRaw || rep.Results[1].Scenario != bench.ScenarioRawSerial {
		t.Fatalf("results %+v; want raw and raw-serial", rep.Results)
	}
	if rep.Results[0].Count != 30 || rep.Results[1].Count != 30 || rep.PayloadBytes != 16 {
		t.Errorf("counts %d and %d, payload %d; want 30, 30, 16", rep.Results[0].Count, rep.Results[1].Count, rep.PayloadBytes)
	}
	if rep.Results[1].ThroughputRatio <= 0 || rep.Results[1].LatencyRatio != 1 {
		t.Errorf("raw-serial ratios %v and %v; want a positive throughput ratio and latency ratio 1",
			rep.Results[1].ThroughputRatio, rep.Results[1].LatencyRatio)
	}
}

func TestCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--scenarios", "raw,nope"},
		{"bench", "--chain", "501", "--scenarios", "chain"},
		{"bench", "--payload", "4"},
		{"bench", "--concurrency", "0"},
		{"bench", "-o", "yaml"},
	} {
		var out, errOut bytes.Buffer
		if code := cli.Main(args, &out, &errOut); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d (usage)\nstderr: %s", args, code, cli.ExitUsage, errOut.String())
		}
	}
}

func TestValidate(t *testing.T) {
	ok := bench.Config{Nodes: 1, ChainNodes: 1, RawMessages: 1, PayloadBytes: 8, Concurrency: 1,
		StartFleet: cli.BenchFleet(quiet())}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	rawOnly := bench.Config{RawMessages: 1, PayloadBytes: 8, Concurrency: 1, Scenarios: []string{bench.ScenarioRaw}}
	if err := rawOnly.Validate(); err != nil {
		t.Errorf("raw-only config without a fleet rejected: %v", err)
	}
	noFleet := ok
	noFleet.StartFleet = nil
	if err := noFleet.Validate(); err == nil {
		t.Error("full-path scenarios without a fleet starter accepted")
	}
	noNodes := ok
	noNodes.Nodes = 0
	if err := noNodes.Validate(); err == nil {
		t.Error("zero nodes accepted")
	}
}
