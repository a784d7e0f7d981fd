package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// fakeNvidiaSMI puts an nvidia-smi script on PATH (first) that checks its
// arguments, records that it ran, and prints out (or fails with code and
// out on stderr). It returns the file whose existence says it ran.
func fakeNvidiaSMI(t *testing.T, out string, code int) string {
	t.Helper()
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	stream := ""
	if code != 0 {
		stream = " >&2"
	}
	script := "#!/bin/sh\n" +
		"touch '" + ran + "'\n" +
		`if [ "$*" != "--query-gpu=name --format=csv,noheader" ]; then echo "unexpected arguments: $*" >&2; exit 2; fi` + "\n" +
		"printf '%s'" + " '" + out + "'" + stream + "\n" +
		"exit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return ran
}

func TestDetectGPUs(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	t.Run("two", func(t *testing.T) {
		fakeNvidiaSMI(t, "NVIDIA A100-SXM4-80GB\nNVIDIA A100-SXM4-80GB\n", 0)
		n, model, err := DetectGPUs(ctx)
		if err != nil || n != 2 || model != "NVIDIA A100-SXM4-80GB" {
			t.Fatalf("DetectGPUs = %d, %q, %v", n, model, err)
		}
		labels, err := ResolveLabels(ctx, []string{"zone=eu-west", "tier=spot"}, log)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"zone": "eu-west", "tier": "spot", "gpus": "2", "gpu": "NVIDIA A100-SXM4-80GB"}
		if len(labels) != len(want) {
			t.Errorf("labels %v, want %v", labels, want)
		}
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, labels[k], v)
			}
		}
	})
	t.Run("mixed", func(t *testing.T) {
		fakeNvidiaSMI(t, "Tesla T4\nNVIDIA L4\nTesla T4\n", 0)
		if n, model, err := DetectGPUs(ctx); err != nil || n != 3 || model != "Tesla T4+NVIDIA L4" {
			t.Fatalf("DetectGPUs = %d, %q, %v", n, model, err)
		}
	})
	t.Run("declared wins", func(t *testing.T) {
		ran := fakeNvidiaSMI(t, "Tesla T4\n", 0)
		labels, err := ResolveLabels(ctx, []string{"gpus=1,gpu=H100"}, log)
		if err != nil || labels["gpus"] != "1" || labels["gpu"] != "H100" {
			t.Fatalf("labels %v, %v", labels, err)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Error("nvidia-smi ran although GPUs were declared")
		}
		// Declaring none turns a GPU machine into a plain worker.
		if labels, _ := ResolveLabels(ctx, []string{"gpus=0"}, log); labels["gpus"] != "0" {
			t.Errorf("gpus=0: %v", labels)
		}
	})
	t.Run("failing", func(t *testing.T) {
		fakeNvidiaSMI(t, "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver", 9)
		if _, _, err := DetectGPUs(ctx); err == nil || !strings.Contains(err.Error(), "could not communicate") {
			t.Errorf("DetectGPUs: %v", err)
		}
		labels, err := ResolveLabels(ctx, nil, log)
		if err != nil || len(labels) != 0 {
			t.Errorf("ResolveLabels with a failing nvidia-smi: %v, %v", labels, err)
		}
	})
	t.Run("none", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		if n, model, err := DetectGPUs(ctx); err != nil || n != 0 || model != "" {
			t.Errorf("without nvidia-smi: %d, %q, %v", n, model, err)
		}
		fakeNvidiaSMI(t, "", 0) // a driver with no GPU
		if n, _, err := DetectGPUs(ctx); err != nil || n != 0 {
			t.Errorf("no GPU listed: %d, %v", n, err)
		}
	})
}

func TestParseLabels(t *testing.T) {
	labels, err := ParseLabels([]string{"a=1, b = 2", "c=", "a=3"})
	if err != nil || labels["a"] != "3" || labels["b"] != "2" || labels["c"] != "" || len(labels) != 3 {
		t.Errorf("ParseLabels = %v, %v", labels, err)
	}
	for _, bad := range []string{"novalue", "=x", "gpus=two", "gpus=-1"} {
		if _, err := ParseLabels([]string{bad}); err == nil {
			t.Errorf("ParseLabels(%q) accepted", bad)
		}
	}
}

func TestResolvePools(t *testing.T) {
	gpu := []string{"gpu"}
	for _, c := range []struct {
		explicit []string
		gpus     int
		gpuPools []string
		want     string
		err      string
	}{
		{nil, 0, gpu, "default", ""},
		{[]string{"a", "b", "a"}, 0, gpu, "a,b", ""},
		{nil, 2, gpu, "gpu", ""},
		{[]string{"default"}, 2, gpu, "gpu,default", ""},
		{[]string{"gpu", "x"}, 1, gpu, "gpu,x", ""},
		{nil, 1, []string{"gpu", "gpu-big"}, "gpu,gpu-big", ""},
		{[]string{"gpu"}, 0, gpu, "", `pool "gpu" is for tasks that need a GPU, and this worker has none`},
		{[]string{"default", "gpu-big"}, 0, []string{"gpu", "gpu-big"}, "", `pool "gpu-big"`},
		{nil, 1, []string{}, "", "needs at least one pool"},
		{[]string{"gpu"}, 0, []string{}, "gpu", ""}, // no GPU pools configured
	} {
		got, err := ResolvePools(c.explicit, c.gpus, c.gpuPools)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ResolvePools(%v, %d, %v) = %v, %v; want error %q", c.explicit, c.gpus, c.gpuPools, got, err, c.err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != c.want {
			t.Errorf("ResolvePools(%v, %d, %v) = %v, %v; want %s", c.explicit, c.gpus, c.gpuPools, got, err, c.want)
		}
	}
}

// A job in pool gpu waits while only a worker without GPUs runs (which
// refuses the pool when asked), and the GPU worker takes it; the GPU
// worker leaves the default pool to the other one.
func TestGPURouting(t *testing.T) {
	h := newHarness(t, bus.Config{})

	// A worker without GPUs refuses the gpu pool at start.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := New(h.workerDeps(nil), Config{Pools: []string{"default", DefaultGPUPool}}).Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `pool "gpu" is for tasks that need a GPU`) {
		t.Fatalf("a worker without GPUs on the gpu pool: Run = %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not fail at start")
	}

	plain, _ := h.startWorker(Config{})
	job := h.agentJob("train", 1, "@write model.txt\ntrained\n@end\n")
	job.Pool = DefaultGPUPool
	h.publish(job)
	h.NoReports(3 * time.Second)

	gpuHost, _ := h.startWorkerWith(Config{}, map[string]string{"gpus": "2", "gpu": "NVIDIA A100-SXM4-80GB"})
	s := h.expectStarted(job, 15*time.Second)
	if s.Host != gpuHost {
		t.Fatalf("the gpu job started on %s, want the GPU worker %s", s.Host, gpuHost)
	}
	if s.Labels["gpus"] != "2" || s.Labels["gpu"] != "NVIDIA A100-SXM4-80GB" {
		t.Errorf("started report labels %v", s.Labels)
	}
	if r := h.expectResult(job, 30*time.Second); r.Status != protocol.AgentSucceeded || r.Host != gpuHost {
		t.Fatalf("gpu job result: %+v", r)
	}

	// A default-pool job goes to the plain worker: the GPU worker only
	// consumes the GPU pools (no --pools given).
	other := h.agentJob("docs", 1, "@write docs.txt\ndocs\n@end\n")
	h.publish(other)
	if s := h.expectStarted(other, 15*time.Second); s.Host != plain || len(s.Labels) != 0 {
		t.Fatalf("the default job started on %s with labels %v, want %s and none", s.Host, s.Labels, plain)
	}
	if r := h.expectResult(other, 30*time.Second); r.Status != protocol.AgentSucceeded {
		t.Fatalf("default job result: %+v", r)
	}
}
