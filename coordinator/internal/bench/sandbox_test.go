package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
)

// sandboxImage returns the image the sandbox scenario runs in the test:
// supervisor/sandbox-base:latest when make images built it, otherwise a
// tiny image the test builds FROM scratch (nothing is pulled) holding a
// static /usr/bin/true written in Go, removed when the test ends.
func sandboxImage(t *testing.T, c *client.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.ImageInspect(ctx, bench.DefaultSandboxImage); err == nil {
		return bench.DefaultSandboxImage
	}
	t.Logf("%s is not built (make images); building a tiny image with a static true", bench.DefaultSandboxImage)

	src := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":  "module benchtrue\n\ngo 1.21\n",
		"main.go": "// Command true exits 0.\npackage main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := sandboxtest.StaticBinary(ctx, src, ".", "GOWORK=off", "GOFLAGS=")
	if err != nil {
		t.Fatalf("building a static true: %v", err)
	}
	return sandboxtest.Image(t, fmt.Sprintf("supervisor-test/bench-true:%d", os.Getpid()),
		sandboxtest.File{Name: "Dockerfile", Mode: 0o644, Data: []byte("FROM scratch\nCOPY true /usr/bin/true\n")},
		sandboxtest.File{Name: "true", Mode: 0o755, Data: data})
}

// TestSandboxScenario runs the sandbox scenario with 2 runs of each
// variant against the real engine and checks that every variant ran
// every time, that the figures are consistent with each other, and that
// a container costs more than a process. It never checks speed otherwise.
func TestSandboxScenario(t *testing.T) {
	needGit(t)
	c := sandboxtest.Engine(t)
	img := sandboxImage(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Concurrency: 1, Scenarios: []string{bench.ScenarioSandbox},
		SandboxImage: img, SandboxCommand: []string{"true"}, SandboxRuns: 2,
		WorkDir: t.TempDir(), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Results) != 0 || rep.CacheKey != nil || rep.GateScale != nil {
		t.Errorf("figures of scenarios that were not selected: %+v", rep)
	}
	s := rep.Sandbox
	if s == nil {
		t.Fatal("no sandbox figures")
	}
	if s.Skipped != "" {
		t.Fatalf("skipped with an engine: %s", s.Skipped)
	}
	want := []string{bench.VariantProcess, bench.VariantDockerSandbox}
	_, cliErr := exec.LookPath("docker")
	if cliErr == nil {
		want = append(want, bench.VariantDockerRun, bench.VariantDockerRunHardened)
	} else if !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, "docker CLI is not installed") }) {
		t.Errorf("no docker CLI, but the notes %q do not say so", s.Notes)
	}
	if len(s.Variants) != len(want) {
		t.Fatalf("variants %+v, want %v", s.Variants, want)
	}
	if s.Image != img || !strings.HasPrefix(s.ImageID, "sha256:") || !slices.Equal(s.Command, []string{"true"}) ||
		s.Runs != 2 || s.Warmups != bench.SandboxWarmups || s.Reference != bench.VariantProcess {
		t.Errorf("header: image %q (%q), command %q, %d runs, %d warm-ups, reference %q", s.Image, s.ImageID, s.Command, s.Runs,
			s.Warmups, s.Reference)
	}
	if filepath.Base(s.HostCommand) != "true" || !filepath.IsAbs(s.HostCommand) {
		t.Errorf("host command %q, want the path of true", s.HostCommand)
	}
	if e := s.Engine; e == nil || e.Version == "" || e.StorageDriver == "" || e.NCPU < 1 {
		t.Errorf("engine %+v", e)
	}

	proc := s.Variant(bench.VariantProcess)
	for i, v := range s.Variants {
		if v.Name != want[i] {
			t.Errorf("variant %d is %q, want %q", i, v.Name, want[i])
		}
		if v.Count != 2 || v.Description == "" {
			t.Errorf("%s: %d samples, description %q; want 2 and one", v.Name, v.Count, v.Description)
		}
		if v.P50Micros <= 0 || v.P90Micros < v.P50Micros || v.MeanMicros <= 0 {
			t.Errorf("%s: p50 %vµs, p90 %vµs, mean %vµs; want 0 < p50 <= p90, mean > 0", v.Name, v.P50Micros, v.P90Micros, v.MeanMicros)
		}
		if !near(v.RatioToProcess, v.P50Micros/proc.P50Micros) || !near(v.OverheadMillis, (v.P50Micros-proc.P50Micros)/1e3) {
			t.Errorf("%s: ratio %v, overhead %vms; want p50/process p50 = %v and p50-process p50 = %vms", v.Name, v.RatioToProcess,
				v.OverheadMillis, v.P50Micros/proc.P50Micros, (v.P50Micros-proc.P50Micros)/1e3)
		}
		docker := v.Name != bench.VariantProcess
		if docker != (v.Phases != nil) {
			t.Errorf("%s: phases %+v", v.Name, v.Phases)
		}
		if p := v.Phases; p != nil {
			if p.Runs != 2 {
				t.Errorf("%s: the engine's events were seen for %d of 2 runs", v.Name, p.Runs)
			}
			if p.CreateToStartMicros <= 0 || p.StartToDieMicros <= 0 || p.DieToDestroyMicros <= 0 {
				t.Errorf("%s: phases %+v; want create→start, start→die and die→destroy positive", v.Name, p)
			}
			sum := p.CallToCreateMicros + p.CreateToStartMicros + p.StartToDieMicros + p.DieToDestroyMicros + p.DestroyToReturnMicros
			if p.Runs == v.Count && (sum-v.MeanMicros > 1 || v.MeanMicros-sum > 1) {
				t.Errorf("%s: phases add up to %vµs, the mean is %vµs", v.Name, sum, v.MeanMicros)
			}
		}
		sandboxed := v.Name == bench.VariantProcess || v.Name == bench.VariantDockerSandbox
		if sandboxed != (v.CommandP50Micros > 0) || v.CommandP50Micros > v.P50Micros {
			t.Errorf("%s: command p50 %vµs (wall p50 %vµs); want it for the sandboxes only, and within the wall time", v.Name,
				v.CommandP50Micros, v.P50Micros)
		}
		if strings.HasPrefix(v.Name, "docker-run") && (len(v.Argv) < 3 || v.Argv[0] != "docker" || v.Argv[len(v.Argv)-1] != "true") {
			t.Errorf("%s: argv %q", v.Name, v.Argv)
		}
	}
	if proc.RatioToProcess != 1 || proc.OverheadMillis != 0 || proc.RatioToDockerRun != 0 {
		t.Errorf("process: ratio %v, overhead %v, ratio to docker run %v; want 1, 0, none", proc.RatioToProcess, proc.OverheadMillis,
			proc.RatioToDockerRun)
	}
	ds := s.Variant(bench.VariantDockerSandbox)
	if ds.OverheadMillis <= 0 || ds.RatioToProcess <= 1 {
		t.Errorf("docker sandbox: overhead %vms (%vx) over the process sandbox; a container costs more than a process", ds.OverheadMillis,
			ds.RatioToProcess)
	}
	if run := s.Variant(bench.VariantDockerRun); run != nil {
		hardened := s.Variant(bench.VariantDockerRunHardened)
		if !near(ds.RatioToDockerRun, ds.P50Micros/run.P50Micros) || !near(ds.RatioToHardened, ds.P50Micros/hardened.P50Micros) ||
			run.RatioToDockerRun != 1 {
			t.Errorf("ratios to docker run: sandbox %v and %v, docker run %v", ds.RatioToDockerRun, ds.RatioToHardened, run.RatioToDockerRun)
		}
		if run.OverheadMillis <= 0 || hardened.OverheadMillis <= 0 {
			t.Errorf("docker runs: overheads %vms and %vms over the process sandbox", run.OverheadMillis, hardened.OverheadMillis)
		}
	}
	if s.CPUMeasured && runtime.GOOS == "linux" && proc.ChildCPUMillis+proc.BenchCPUMillis <= 0 {
		t.Errorf("process: no CPU counted (%+v)", proc)
	}

	// Nothing is left behind.
	list, err := c.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", fmt.Sprintf("%s=bench-sandbox-%d", sandbox.LabelHost, os.Getpid())))})
	if err != nil || len(list) != 0 {
		t.Errorf("containers left behind: %d (%v)", len(list), err)
	}

	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, w := range append(want, "Sandbox overhead per gate", "docker sandbox:", "CREATE→START", s.Image) {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js, &back); err != nil || back.Sandbox == nil || len(back.Sandbox.Variants) != len(want) ||
		back.Sandbox.Variants[1].Phases == nil {
		t.Errorf("JSON round trip lost the sandbox figures (%v):\n%s", err, js)
	}
}

// TestSandboxMissingImage checks that a missing image fails the scenario
// at once, saying how to build it, and that nothing is pulled.
func TestSandboxMissingImage(t *testing.T) {
	c := sandboxtest.Engine(t)
	missing := fmt.Sprintf("supervisor-test/never-built:%d", os.Getpid())
	var out, errOut bytes.Buffer
	code := bench.Main([]string{"--scenarios", "raw,sandbox", "--raw-messages", "10", "--sandbox-image", missing,
		"--sandbox-runs", "1", "--dir", t.TempDir()}, &out, &errOut)
	if msg := errOut.String(); code != bench.ExitFault || !strings.Contains(msg, "make images") || !strings.Contains(msg, missing) {
		t.Errorf("exit %d, stderr %q; want a fault naming %s and make images", code, msg, missing)
	}
	if strings.Contains(errOut.String(), "bench: raw:") || out.Len() > 0 {
		t.Errorf("other scenarios ran before the image was checked:\nstdout %s\nstderr %s", out.String(), errOut.String())
	}
	if _, err := c.ImageInspect(context.Background(), missing); err == nil {
		t.Errorf("%s exists: was it pulled?", missing)
	}
}

// TestSandboxNoEngine points the scenario at a socket where no engine
// answers: asked for by name it is an error, as part of all scenarios it
// is skipped (see the internal test).
func TestSandboxNoEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-engine.sock"))
	_, err := bench.Run(context.Background(), bench.Config{Concurrency: 1, Scenarios: []string{bench.ScenarioSandbox},
		SandboxImage: bench.DefaultSandboxImage, SandboxCommand: []string{"true"}, SandboxRuns: 1, WorkDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "no Docker engine answers") {
		t.Errorf("Run: %v; want an error saying no Docker engine answers", err)
	}
}
