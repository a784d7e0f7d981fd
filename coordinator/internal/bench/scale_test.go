package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
)

// checkScale checks a scale-out report (gate-scale or worker-scale) is
// complete and consistent: counts, windows, ratios to the first run and to
// the sleep-bound ideal. It never checks speed.
func checkScale(t *testing.T, gs *bench.ScaleOutReport, kind string, counts []int, tasks int, sleep float64) {
	t.Helper()
	if gs == nil {
		t.Fatalf("no %s scale figures", kind)
	}
	if gs.Kind != kind || gs.Tasks != tasks || gs.SleepSeconds != sleep || gs.RunnerConcurrency != 1 || gs.NumCPU <= 0 ||
		len(gs.Runs) != len(counts) || gs.Sandbox != "process" {
		t.Fatalf("%s scale header %+v", kind, gs)
	}
	if !strings.Contains(gs.Note, "CPUs") {
		t.Errorf("note %q does not give the CPUs", gs.Note)
	}
	base := gs.Runs[0]
	for i, run := range gs.Runs {
		want := counts[i]
		if run.Runners != want || run.Jobs != tasks || len(run.JobsPerRunner) != want {
			t.Errorf("run %d: %d runners, %d jobs, per runner %v; want %d, %d, %d entries", i, run.Runners, run.Jobs, run.JobsPerRunner,
				want, tasks, want)
		}
		sum := 0
		for _, n := range run.JobsPerRunner {
			sum += n
		}
		if sum != run.Jobs {
			t.Errorf("run %d: jobs per runner %v add up to %d, want %d", i, run.JobsPerRunner, sum, run.Jobs)
		}
		if run.WindowSeconds <= 0 || run.WallSeconds <= 0 || !near(run.Throughput, float64(run.Jobs)/run.WindowSeconds) {
			t.Errorf("run %d: window %v, wall %v, throughput %v", i, run.WindowSeconds, run.WallSeconds, run.Throughput)
		}
		if !near(run.IdealThroughput, float64(run.Runners)/sleep) || !near(run.OfIdeal, run.Throughput/run.IdealThroughput) {
			t.Errorf("run %d: ideal %v (%v of it)", i, run.IdealThroughput, run.OfIdeal)
		}
		speedup := run.Throughput / base.Throughput
		linear := float64(run.Runners) / float64(base.Runners)
		if !near(run.Speedup, speedup) || !near(run.Linear, linear) || !near(run.OfLinear, speedup/linear) {
			t.Errorf("run %d: speed-up %v, linear %v, of linear %v; want %v, %v, %v", i, run.Speedup, run.Linear, run.OfLinear,
				speedup, linear, speedup/linear)
		}
		overhead := (float64(run.Runners)*run.WindowSeconds/float64(run.Jobs) - sleep) * 1e3
		if !near(run.OverheadPerJobMillis, overhead) {
			t.Errorf("run %d: overhead per job %vms, want %v", i, run.OverheadPerJobMillis, overhead)
		}
		if run.JobRunP50Micros <= 0 || run.JobLatencyP50Micros <= 0 {
			t.Errorf("run %d: job run p50 %vµs, latency p50 %vµs; want both positive", i, run.JobRunP50Micros, run.JobLatencyP50Micros)
		}
		// Each job ran at least its sleep.
		if run.JobRunP50Micros < sleep*1e6 {
			t.Errorf("run %d: job run p50 %vµs is under the %vs sleep", i, run.JobRunP50Micros, sleep)
		}
	}
	if base.Speedup != 1 || base.OfLinear != 1 {
		t.Errorf("1 runner: speed-up %v (%v of linear) to itself, want 1", base.Speedup, base.OfLinear)
	}
}

// TestWorkerScaleTiny runs worker-scale with 1 and 2 worker processes on
// 4 sleeping agents and checks the report is complete and consistent,
// never timing.
func TestWorkerScaleTiny(t *testing.T) {
	needGit(t)
	binDir := buildBinary(t, "worker", "./cmd/worker", bench.WorkerBinary)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Concurrency: 2, Scenarios: []string{bench.ScenarioWorkerScale},
		GateTasks: 4, GateSleep: 100 * time.Millisecond, WorkerRunners: []int{1, 2}, BinDir: binDir,
		WorkDir: t.TempDir(), FleetLog: quiet(), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if rep.GateScale != nil || rep.CacheKey != nil {
		t.Errorf("gate-scale or cache-key figures without their scenarios")
	}
	checkScale(t, rep.WorkerScale, "agent", []int{1, 2}, 4, 0.1)
	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, want := range []string{bench.ScenarioWorkerScale, "AGENTS", "2 runners:", "of linear", "node ready→started"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js, &back); err != nil || back.WorkerScale == nil || len(back.WorkerScale.Runs) != 2 {
		t.Errorf("JSON round trip lost the worker-scale figures (%v):\n%s", err, js)
	}
}
