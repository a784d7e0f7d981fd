package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// busAndFullPath are the scenarios TestRunTiny runs; TestGateEngineTiny
// runs the others.
var busAndFullPath = []string{bench.ScenarioRaw, bench.ScenarioRawFetch1, bench.ScenarioRawSerial,
	bench.ScenarioNodes, bench.ScenarioGated, bench.ScenarioChain}

// TestRunTiny runs every bus and full-path scenario at a tiny size and
// checks that the report is complete and consistent. It never asserts on
// speed.
func TestRunTiny(t *testing.T) {
	needGit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Nodes: 5, ChainNodes: 3, RawMessages: 20, PayloadBytes: 64, Concurrency: 2, Scenarios: busAndFullPath,
		WorkDir: t.TempDir(), FleetLog: quiet(), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}

	want := map[string]int{
		bench.ScenarioRaw: 20, bench.ScenarioRawFetch1: 20, bench.ScenarioRawSerial: 20,
		bench.ScenarioNodes: 5, bench.ScenarioGated: 5, bench.ScenarioChain: 3,
	}
	if len(rep.Results) != len(busAndFullPath) {
		t.Fatalf("got %d results, want %d", len(rep.Results), len(busAndFullPath))
	}
	if rep.CacheKey != nil || rep.GateScale != nil {
		t.Errorf("gate engine figures without their scenarios: %+v, %+v", rep.CacheKey, rep.GateScale)
	}
	byName := map[string]bench.Result{}
	for i, res := range rep.Results {
		if res.Scenario != busAndFullPath[i] {
			t.Errorf("result %d is %q, want %q (scenarios run in order)", i, res.Scenario, busAndFullPath[i])
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
	for _, name := range busAndFullPath {
		if !strings.Contains(table.String(), name) {
			t.Errorf("table lacks scenario %s:\n%s", name, table.String())
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestCommandJSON runs supervisor-bench on a subset with -o json.
func TestCommandJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := bench.Main([]string{"--scenarios", "raw,raw-serial", "--raw-messages", "30", "--payload", "16",
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
		{"--scenarios", "raw,nope"},
		{"--chain", "501", "--scenarios", "chain"},
		{"--payload", "4"},
		{"--concurrency", "0"},
		{"-o", "yaml"},
		{"--scenarios", "cache-key", "--repo-files", "0"},
		{"--scenarios", "cache-key", "--repo-files", "10", "--changed-files", "11"},
		{"--scenarios", "gate-scale", "--bin-dir", t.TempDir()},
		{"--scenarios", "gate-scale", "--gate-runners", "2,1"},
		{"--scenarios", "gate-scale", "--gate-sleep", "0s"},
		{"--scenarios", "gate-scale", "--gate-sandbox", "vm"},
		{"--scenarios", "sandbox", "--sandbox-runs", "0"},
		{"--scenarios", "sandbox", "--sandbox-command", " "},
		{"--scenarios", "sandbox", "--sandbox-image", ""},
		{"--scenarios", "feedback", "--feedback-tasks", "0", "--bin-dir", fakeBinDir(t)},
		{"--scenarios", "feedback", "--feedback-tasks", "501", "--bin-dir", fakeBinDir(t)},
	} {
		var out, errOut bytes.Buffer
		if code := bench.Main(args, &out, &errOut); code != bench.ExitUsage {
			t.Errorf("%v: exit %d, want %d (usage)\nstderr: %s", args, code, bench.ExitUsage, errOut.String())
		}
	}
}

// TestMissingGateRunner checks that gate-scale names the missing binary
// and how to get it.
func TestMissingGateRunner(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	code := bench.Main([]string{"--scenarios", "gate-scale", "--bin-dir", dir}, &out, &errOut)
	msg := errOut.String()
	if code != bench.ExitUsage || !strings.Contains(msg, filepath.Join(dir, "gaterunner")) || !strings.Contains(msg, "make build") {
		t.Errorf("exit %d, stderr %q; want usage naming %s and make build", code, msg, filepath.Join(dir, "gaterunner"))
	}
}

// TestMissingTestAgent checks that feedback names the missing agent and
// how to get it.
func TestMissingTestAgent(t *testing.T) {
	dir := fakeBinDir(t, bench.GateRunnerBinary)
	var out, errOut bytes.Buffer
	code := bench.Main([]string{"--scenarios", "feedback", "--bin-dir", dir}, &out, &errOut)
	msg := errOut.String()
	want := filepath.Join(dir, bench.TestAgentBinary)
	if code != bench.ExitUsage || !strings.Contains(msg, want) || !strings.Contains(msg, "make build") {
		t.Errorf("exit %d, stderr %q; want usage naming %s and make build", code, msg, want)
	}
}

// fakeBinDir is a directory with executables of those names (by default
// gaterunner and supervisor-test-agent), enough for Validate.
func fakeBinDir(t *testing.T, names ...string) string {
	if len(names) == 0 {
		names = []string{bench.GateRunnerBinary, bench.TestAgentBinary, bench.WorkerBinary, sandbox.HelperName}
	}
	dir := t.TempDir()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestValidate(t *testing.T) {
	ok := bench.Config{Nodes: 1, ChainNodes: 1, RawMessages: 1, PayloadBytes: 8, Concurrency: 1,
		RepoFiles: 10, ChangedFiles: 1, KeyIterations: 1,
		GateTasks: 4, GateSleep: time.Second, GateRunners: []int{1, 2, 4}, BinDir: fakeBinDir(t),
		SandboxImage: bench.DefaultSandboxImage, SandboxCommand: []string{"true"}, SandboxRuns: 1, GoGateRuns: 1, FeedbackTasks: 2,
		CoordinatorNodes: 1, WorkerRunners: []int{1, 2}, ReplayEvents: []int{1000}, ScaleNodes: []int{10, 20}, DemoRuns: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for name, mutate := range map[string]func(*bench.Config){
		"no gaterunner":           func(c *bench.Config) { c.BinDir = fakeBinDir(t, bench.TestAgentBinary, bench.WorkerBinary) },
		"no test agent":           func(c *bench.Config) { c.BinDir = fakeBinDir(t, bench.GateRunnerBinary, bench.WorkerBinary) },
		"no worker":               func(c *bench.Config) { c.BinDir = fakeBinDir(t, bench.GateRunnerBinary, bench.TestAgentBinary) },
		"no worker counts":        func(c *bench.Config) { c.WorkerRunners = nil },
		"workers not increasing":  func(c *bench.Config) { c.WorkerRunners = []int{2, 1} },
		"no feedback tasks":       func(c *bench.Config) { c.FeedbackTasks = 0 },
		"no coordinator nodes":    func(c *bench.Config) { c.CoordinatorNodes = 0 },
		"too many feedback tasks": func(c *bench.Config) { c.FeedbackTasks = bench.MaxTasksPerWorkflow + 1 },
		"no bin dir":              func(c *bench.Config) { c.BinDir = "" },
		"runners not increasing":  func(c *bench.Config) { c.GateRunners = []int{1, 1} },
		"no runner counts":        func(c *bench.Config) { c.GateRunners = nil },
		"zero runners":            func(c *bench.Config) { c.GateRunners = []int{0, 1} },
		"too many gate tasks":     func(c *bench.Config) { c.GateTasks = bench.MaxTasksPerWorkflow + 1 },
		"no sleep":                func(c *bench.Config) { c.GateSleep = 0 },
		"no repository files":     func(c *bench.Config) { c.RepoFiles = 0 },
		"more changed than files": func(c *bench.Config) { c.ChangedFiles = 11 },
		"no key iterations":       func(c *bench.Config) { c.KeyIterations = 0 },
		"sizes not increasing":    func(c *bench.Config) { c.RepoSizes = []int{20, 20} },
		"a size of 0":             func(c *bench.Config) { c.RepoSizes = []int{0, 10} },
		"more changed than size":  func(c *bench.Config) { c.RepoSizes = []int{10, 20}; c.ChangedFiles = 11 },
		"unknown sandbox":         func(c *bench.Config) { c.GateSandbox = "vm" },
		"no sandbox runs":         func(c *bench.Config) { c.SandboxRuns = 0 },
		"no go-gate runs":         func(c *bench.Config) { c.GoGateRuns = 0 },
		"no demo runs":            func(c *bench.Config) { c.DemoRuns = 0 },
		"demo without a worker": func(c *bench.Config) {
			c.Scenarios = []string{bench.ScenarioDemo}
			c.BinDir = fakeBinDir(t, bench.GateRunnerBinary, bench.TestAgentBinary)
		},
		"demo without the sandbox helper": func(c *bench.Config) {
			c.Scenarios = []string{bench.ScenarioDemo}
			c.BinDir = fakeBinDir(t, bench.GateRunnerBinary, bench.WorkerBinary, bench.TestAgentBinary)
		},
		"demo without a test agent": func(c *bench.Config) {
			c.Scenarios = []string{bench.ScenarioDemo}
			c.BinDir = fakeBinDir(t, bench.GateRunnerBinary, bench.WorkerBinary)
		},
		"no sandbox image":       func(c *bench.Config) { c.SandboxImage = "" },
		"no sandbox command":     func(c *bench.Config) { c.SandboxCommand = nil },
		"empty sandbox argv[0]":  func(c *bench.Config) { c.SandboxCommand = []string{"", "x"} },
		"no replay sizes":        func(c *bench.Config) { c.ReplayEvents = nil },
		"a tiny replay log":      func(c *bench.Config) { c.ReplayEvents = []int{99} },
		"no scale sizes":         func(c *bench.Config) { c.ScaleNodes = nil },
		"scale not increasing":   func(c *bench.Config) { c.ScaleNodes = []int{20, 10} },
		"scale below a workflow": func(c *bench.Config) { c.ScaleNodes = []int{5} },
	} {
		bad := ok
		mutate(&bad)
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	sizes := ok
	sizes.RepoFiles, sizes.RepoSizes = 0, []int{10, 100} // the sizes replace RepoFiles
	if err := sizes.Validate(); err != nil {
		t.Errorf("repository sizes 10,100 rejected: %v", err)
	}
	noGateScale := ok
	noGateScale.BinDir = ""
	noGateScale.Scenarios = []string{bench.ScenarioCacheKey}
	if err := noGateScale.Validate(); err != nil {
		t.Errorf("cache-key alone needs no gaterunner, but: %v", err)
	}
	rawOnly := bench.Config{RawMessages: 1, PayloadBytes: 8, Concurrency: 1, Scenarios: []string{bench.ScenarioRaw}}
	if err := rawOnly.Validate(); err != nil {
		t.Errorf("raw-only config rejected: %v", err)
	}
	noNodes := ok
	noNodes.Nodes = 0
	if err := noNodes.Validate(); err == nil {
		t.Error("zero nodes accepted")
	}
}

// buildGateRunner builds the gaterunner binary into a directory of the
// test's own and returns the directory.
func buildGateRunner(t *testing.T) string {
	t.Helper()
	return buildBinary(t, "gaterunner", "./cmd/gaterunner", bench.GateRunnerBinary)
}

// buildBinary builds package pkg of the monorepo's module into a
// directory of the test's own, as name, and returns the directory.
func buildBinary(t *testing.T, module, pkg, name string) string {
	t.Helper()
	dir := t.TempDir()
	buildInto(t, dir, module, pkg, name)
	return dir
}

// buildInto builds pkg of the monorepo's module as dir/name.
func buildInto(t *testing.T, dir, module, pkg, name string) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	gowork := strings.TrimSpace(string(out))
	if err != nil || gowork == "" || gowork == "off" {
		t.Skipf("not in the go.work monorepo (go env GOWORK: %q, %v)", gowork, err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
	cmd.Dir = filepath.Join(filepath.Dir(gowork), module)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
}

// testRedis returns a Redis URL when one is at hand (SUPERVISOR_TEST_REDIS_URL
// or a redis-server to start), else "".
func testRedis(t *testing.T) string {
	if os.Getenv("SUPERVISOR_TEST_REDIS_URL") == "" {
		if _, err := exec.LookPath("redis-server"); err != nil {
			return ""
		}
	}
	return testkit.Redis(t)
}

// TestGateEngineTiny runs the gate engine's scenarios at a tiny size: two
// repositories of 100 and 200 files with 2 iterations, and 4 tasks of a
// 0.1 s sleep gate with 1 and 2 gate runner processes. It checks that the
// report is complete and consistent, never timing.
func TestGateEngineTiny(t *testing.T) {
	needGit(t)
	binDir := buildGateRunner(t)
	redisURL := testRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Concurrency: 2, Scenarios: []string{bench.ScenarioCacheKey, bench.ScenarioGateScale},
		RepoSizes: []int{100, 200}, ChangedFiles: 3, KeyIterations: 2, RedisURL: redisURL,
		GateTasks: 4, GateSleep: 100 * time.Millisecond, GateRunners: []int{1, 2}, BinDir: binDir,
		WorkDir: t.TempDir(), FleetLog: quiet(), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Results) != 0 {
		t.Errorf("%d bus or full-path results without their scenarios", len(rep.Results))
	}

	ck := rep.CacheKey
	if ck == nil {
		t.Fatal("no cache-key figures")
	}
	if ck.Iterations != 2 || ck.Reference != bench.OpGitStatus || ck.EntryBytes <= 0 {
		t.Errorf("cache-key header: %d iterations, reference %q, entry %d bytes", ck.Iterations, ck.Reference, ck.EntryBytes)
	}
	if len(ck.Sizes) != 2 {
		t.Fatalf("%d sizes, want 2", len(ck.Sizes))
	}
	// The inline figures are the first size's, as when one size ran.
	if ck.Files != 100 || ck.Key != ck.Sizes[0].Key || len(ck.Ops) != len(ck.Sizes[0].Ops) {
		t.Errorf("inline figures (%d files, key %s) are not the first size's (%d files, key %s)", ck.Files, ck.Key, ck.Sizes[0].Files, ck.Sizes[0].Key)
	}
	hitOps := []string{bench.OpGitStatus, bench.OpComputeKey, bench.OpCacheHitKV}
	if redisURL != "" {
		hitOps = append(hitOps, bench.OpCacheHitRedis)
	}
	hitOps = append(hitOps, bench.OpIntegrity)
	for i, files := range []int{100, 200} {
		wantOps := []string{bench.OpGitStatus, bench.OpComputeKey, bench.OpIntegrity}
		if i == 0 {
			wantOps = hitOps // the cache hits on the first size only
		}
		checkKeySize(t, &ck.Sizes[i], files, 3, wantOps)
	}
	if ck.Sizes[0].Tree == ck.Sizes[1].Tree {
		t.Errorf("two repositories of different sizes have the same tree %s", ck.Sizes[0].Tree)
	}
	if len(ck.Growth) != 3 {
		t.Fatalf("growth %+v; want git-status, compute-key and integrity", ck.Growth)
	}
	for i, g := range ck.Growth {
		small, big := ck.Sizes[0].Op(g.Op), ck.Sizes[1].Op(g.Op)
		if small == nil || big == nil || g.Op != []string{bench.OpGitStatus, bench.OpComputeKey, bench.OpIntegrity}[i] {
			t.Fatalf("growth %d of %q", i, g.Op)
		}
		if g.FromFiles != 100 || g.ToFiles != 200 || !near(g.P50, big.P50Micros/small.P50Micros) ||
			!near(g.CPU, big.Memory.CPUPerOpMicros/small.Memory.CPUPerOpMicros) || g.RatioFrom != small.Ratio || g.RatioTo != big.Ratio {
			t.Errorf("growth %+v inconsistent with %+v and %+v", g, small, big)
		}
	}

	checkScale(t, rep.GateScale, "gate", []int{1, 2}, 4, 0.1)

	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, want := range append(hitOps, bench.ScenarioCacheKey, "repository of 100 files", "repository of 200 files",
		"Growth from 100 to 200 files", "against git-status's growth", "computed in Go", bench.ScenarioGateScale, "2 runners:", "of linear", "CPUs") {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js, &back); err != nil || back.CacheKey == nil || back.GateScale == nil ||
		len(back.GateScale.Runs) != 2 || len(back.CacheKey.Ops) != len(hitOps) || back.CacheKey.Files != 100 ||
		len(back.CacheKey.Sizes) != 2 || len(back.CacheKey.Growth) != 3 {
		t.Errorf("JSON round trip lost the gate engine figures (%v):\n%s", err, js)
	}
}

// checkKeySize checks one repository size's cache-key figures: the
// operations in order, each consistent, the key computed in Go.
func checkKeySize(t *testing.T, sz *bench.CacheKeySize, files, changed int, wantOps []string) {
	t.Helper()
	if sz.Files != files || sz.ChangedFiles != changed || sz.GenerateSeconds <= 0 {
		t.Errorf("size %d: %d files, %d changed, generated in %vs", files, sz.Files, sz.ChangedFiles, sz.GenerateSeconds)
	}
	if len(sz.Ops) != len(wantOps) {
		t.Fatalf("size %d: operations %+v, want %v", files, sz.Ops, wantOps)
	}
	ref := sz.Op(bench.OpGitStatus)
	for i, op := range sz.Ops {
		if op.Name != wantOps[i] {
			t.Errorf("size %d: operation %d is %q, want %q", files, i, op.Name, wantOps[i])
		}
		if op.Count != 2 || op.WallSeconds <= 0 || op.Description == "" {
			t.Errorf("size %d: %s: count %d, wall %v, description %q", files, op.Name, op.Count, op.WallSeconds, op.Description)
		}
		if op.P50Micros <= 0 || op.P99Micros < op.P50Micros || op.MeanMicros <= 0 {
			t.Errorf("size %d: %s: p50 %v, p99 %v, mean %v; want 0 < p50 <= p99, mean > 0", files, op.Name, op.P50Micros, op.P99Micros, op.MeanMicros)
		}
		if !near(op.Ratio, op.P50Micros/ref.P50Micros) {
			t.Errorf("size %d: %s: ratio %v, want p50/git-status p50 = %v", files, op.Name, op.Ratio, op.P50Micros/ref.P50Micros)
		}
		if op.Memory.Mallocs == 0 || op.Memory.AllocsPerOp <= 0 {
			t.Errorf("size %d: %s: memory %+v; want allocations counted", files, op.Name, op.Memory)
		}
	}
	if ref.Ratio != 1 {
		t.Errorf("size %d: git-status ratio to itself %v, want 1", files, ref.Ratio)
	}
	if len(sz.Key) != 64 || len(sz.Tree) < 40 || sz.KeyGitPath != "" {
		t.Errorf("size %d: key %q, tree %q, computed by git because %q", files, sz.Key, sz.Tree, sz.KeyGitPath)
	}
	if sz.IntegrityFiles < files || sz.IntegrityHashed < files || sz.IntegrityCaptureP50Micros <= 0 || sz.IntegrityCheckP50Micros <= 0 {
		t.Errorf("size %d: integrity: %d files, %d hashed, capture %vµs, check %vµs", files, sz.IntegrityFiles, sz.IntegrityHashed,
			sz.IntegrityCaptureP50Micros, sz.IntegrityCheckP50Micros)
	}
}

// TestFeedbackTiny runs the feedback scenario with 12 tasks beside
// raw-serial (more failed first rounds than the fleet-wide pause's default
// of 10 an hour, which the bench's fleet turns off), and checks that every task went round once as meant (its
// gate failed, was retried with the feedback, passed, never from the
// cache) and that the report is complete and consistent. It never asserts
// on speed; only that the round trip holds the retry policy's delay.
func TestFeedbackTiny(t *testing.T) {
	needGit(t)
	binDir := buildBinary(t, "worker", "./cmd/supervisor-test-agent", bench.TestAgentBinary)
	const tasks = 12
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		RawMessages: 20, PayloadBytes: 64, Concurrency: 2, FeedbackTasks: tasks, BinDir: binDir,
		Scenarios: []string{bench.ScenarioRawSerial, bench.ScenarioFeedback},
		WorkDir:   t.TempDir(), FleetLog: quiet(), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Results) != 2 || rep.Results[0].Scenario != bench.ScenarioRawSerial || rep.Results[1].Scenario != bench.ScenarioFeedback {
		t.Fatalf("results %+v; want raw-serial, then feedback", rep.Results)
	}
	serial, res := rep.Results[0], rep.Results[1]
	if rep.FeedbackTasks != tasks || res.Count != tasks || res.Unit != "node" || res.Workflows != 1 || res.Description == "" || res.Latency == "" {
		t.Errorf("feedback header: %d tasks in the report; result %+v", rep.FeedbackTasks, res)
	}
	fb := res.Feedback
	if fb == nil {
		t.Fatal("no feedback figures")
	}
	if serial.Feedback != nil {
		t.Errorf("raw-serial has feedback figures %+v", serial.Feedback)
	}
	if fb.RetryPolicy != bench.FeedbackRetryPolicy || fb.DelayMillis != 1000 || fb.Jitter != 0 {
		t.Errorf("policy %q, delay %vms, jitter %v; want aggressive, 1000, 0", fb.RetryPolicy, fb.DelayMillis, fb.Jitter)
	}
	if fb.Retries != tasks || fb.GateResults != 2*tasks || fb.CachedGates != 0 || fb.DistinctKeys != tasks {
		t.Errorf("%d retries, %d gate results, %d cached, %d distinct keys; want %d, %d, 0, %d",
			fb.Retries, fb.GateResults, fb.CachedGates, fb.DistinctKeys, tasks, 2*tasks, tasks)
	}
	// The delay is scheduled as not_before = the decision's time + 1 s,
	// both in the log, so it is exact; the round trip holds it.
	if fb.ScheduledDelayP50Micros != 1e6 || fb.ScheduledDelayP99Micros != 1e6 {
		t.Errorf("scheduled delay p50 %vµs, p99 %vµs; want 1s exactly", fb.ScheduledDelayP50Micros, fb.ScheduledDelayP99Micros)
	}
	if res.LatencyP50Micros < 1e6 || res.LatencyP99Micros < res.LatencyP50Micros {
		t.Errorf("round trip p50 %vµs, p99 %vµs; want 1s <= p50 <= p99", res.LatencyP50Micros, res.LatencyP99Micros)
	}
	if fb.BeyondDelayP50Micros <= 0 || fb.BeyondDelayP99Micros < fb.BeyondDelayP50Micros || fb.BeyondDelayP50Micros >= res.LatencyP50Micros {
		t.Errorf("beyond the delay p50 %vµs, p99 %vµs (round trip p50 %vµs)", fb.BeyondDelayP50Micros, fb.BeyondDelayP99Micros, res.LatencyP50Micros)
	}
	if fb.DecideP50Micros < 0 || fb.WakeP50Micros < 0 || fb.DispatchP50Micros <= 0 {
		t.Errorf("decide %vµs, wake %vµs, dispatch %vµs; want none negative, dispatch positive", fb.DecideP50Micros, fb.WakeP50Micros, fb.DispatchP50Micros)
	}
	if res.LatencyReference != bench.ScenarioRawSerial || !near(res.LatencyRatio, res.LatencyP50Micros/serial.LatencyP50Micros) ||
		!near(fb.BeyondDelayRatio, fb.BeyondDelayP50Micros/serial.LatencyP50Micros) {
		t.Errorf("reference %q, ratios %v and %v; want raw-serial, p50s over raw-serial's %vµs", res.LatencyReference,
			res.LatencyRatio, fb.BeyondDelayRatio, serial.LatencyP50Micros)
	}
	if res.Memory.Mallocs == 0 || res.WallSeconds <= 0 || !near(res.Throughput, tasks/res.WallSeconds) {
		t.Errorf("memory %+v, wall %vs, throughput %v", res.Memory, res.WallSeconds, res.Throughput)
	}

	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, want := range []string{"Feedback round trip (feedback)", "retry policy aggressive", "BEYOND DELAY", "0 from the cache"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js, &back); err != nil || len(back.Results) != 2 || back.Results[1].Feedback == nil ||
		*back.Results[1].Feedback != *fb {
		t.Errorf("JSON round trip lost the feedback figures (%v):\n%s", err, js)
	}
}

// TestCommandRepoSizesAndFiles: --repo-sizes replaces --repo-files; both
// at once is a usage error, before anything runs.
func TestCommandRepoSizesAndFiles(t *testing.T) {
	var out, errb bytes.Buffer
	code := bench.Main([]string{"--scenarios", "cache-key", "--repo-files", "5", "--repo-sizes", "10,20", "--dir", t.TempDir()}, &out, &errb)
	if code != bench.ExitUsage || !strings.Contains(errb.String(), "give one of them") {
		t.Fatalf("--repo-files with --repo-sizes: exit %d, %q; want a usage error", code, errb.String())
	}
	if out.Len() != 0 {
		t.Errorf("something ran:\n%s", out.String())
	}
}
