package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestGoGateScenario runs the go-gate scenario (issue 13, figure 4 per
// gate) once per sandbox against the real engine and the host's go, and
// checks that the report is consistent: both sandboxes warmed their
// caches, ran the gate and said which go they have, and the ratio is the
// ratio of the p50s. It never checks speed.
func TestGoGateScenario(t *testing.T) {
	needGit(t)
	c := sandboxtest.Engine(t)
	if _, err := c.ImageInspect(context.Background(), bench.GoGateImage); err != nil {
		testkit.Missing(t, "the image "+bench.GoGateImage+" (make images): "+err.Error())
	}
	if _, err := exec.LookPath("go"); err != nil {
		testkit.Missing(t, "go: "+err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{Concurrency: 1, Scenarios: []string{bench.ScenarioGoGate}, GoGateRuns: 1,
		WorkDir: t.TempDir(), Progress: &progress, SandboxHelper: sandboxtest.Helper(t)})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	g := rep.GoGate
	if g == nil || g.Skipped != "" || rep.Sandbox != nil || len(rep.Results) != 0 {
		t.Fatalf("go-gate figures %+v, sandbox %+v, results %d; want the go-gate figures alone", g, rep.Sandbox, len(rep.Results))
	}
	if g.Image != bench.GoGateImage || !strings.HasPrefix(g.ImageID, "sha256:") || g.Runs != 1 ||
		strings.Join(g.Command, " ") != "go vet ./..." || len(g.Warmup) == 0 {
		t.Errorf("header: image %q (%q), %d runs, command %q, warm-up %q", g.Image, g.ImageID, g.Runs, g.Command, g.Warmup)
	}
	want := []string{bench.VariantGoProcess, bench.VariantGoDocker, bench.VariantGoDockerLayers, bench.VariantGoDockerPrestarted}
	if len(g.Variants) != len(want) {
		t.Fatalf("variants %+v, want %v", g.Variants, want)
	}
	for i, v := range g.Variants {
		if v.Name != want[i] || v.Description == "" || v.Count != 1 {
			t.Errorf("variant %d: %q, %d runs, description %q; want %q, 1 run, one", i, v.Name, v.Count, v.Description, want[i])
		}
		if !strings.HasPrefix(v.GoVersion, "go version go") {
			t.Errorf("%s: go version %q", v.Name, v.GoVersion)
		}
		if v.WarmupSeconds < 0 || (v.Name != bench.VariantGoProcess && v.WarmupSeconds == 0) || v.P50Micros <= 0 || v.MeanMicros <= 0 || v.CommandP50Micros <= 0 || v.CommandP50Micros > v.P50Micros {
			t.Errorf("%s: warm-up %vs, p50 %vµs, mean %vµs, command p50 %vµs; want all positive (the process sandbox's warm-up may be none), the command within the wall time",
				v.Name, v.WarmupSeconds, v.P50Micros, v.MeanMicros, v.CommandP50Micros)
		}
	}
	if !near(g.DockerOverProcess, g.Variants[1].P50Micros/g.Variants[0].P50Micros) {
		t.Errorf("docker over process %v; want %v", g.DockerOverProcess, g.Variants[1].P50Micros/g.Variants[0].P50Micros)
	}
	if !near(g.DockerOverLayers, g.Variants[1].P50Micros/g.Variants[2].P50Micros) {
		t.Errorf("docker over layers %v; want %v", g.DockerOverLayers, g.Variants[1].P50Micros/g.Variants[2].P50Micros)
	}
	if !near(g.PrestartedOverProcess, g.Variants[3].P50Micros/g.Variants[0].P50Micros) {
		t.Errorf("prestarted over process %v; want %v", g.PrestartedOverProcess, g.Variants[3].P50Micros/g.Variants[0].P50Micros)
	}

	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, w := range append(want, "A Go gate with warm caches", "figure 4", "go vet ./...") {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js, &back); err != nil || back.GoGate == nil || len(back.GoGate.Variants) != len(want) ||
		back.GoGate.DockerOverProcess != g.DockerOverProcess || back.GoGate.PrestartedOverProcess != g.PrestartedOverProcess {
		t.Errorf("JSON round trip lost the go-gate figures (%v):\n%s", err, js)
	}
}
