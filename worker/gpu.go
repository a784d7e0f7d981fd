package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// GPU labels and pools.
//
// A worker has GPUs when nvidia-smi (looked up on its PATH) lists some, or
// when --labels declares them (gpus=N, and gpu=MODEL for the model); the
// declaration wins over detection. A worker with GPUs advertises them (in
// its log and started reports), passes them to its containers (a device
// request for N GPUs of the NVIDIA driver: the engine's host needs the
// NVIDIA container toolkit) and takes jobs from the GPU pools only, plus
// the pools --pools names explicitly. A worker without GPUs refuses to
// start on a GPU pool. Tasks that need a GPU say pool: gpu in the
// workflow.
const (
	// LabelGPUs is the number of GPUs.
	LabelGPUs = "gpus"
	// LabelGPU is the GPU model (the first GPU's, or the distinct models
	// joined with "+").
	LabelGPU = "gpu"
	// DefaultGPUPool is the pool of tasks that need a GPU.
	DefaultGPUPool = "gpu"

	// nvidiaSMITimeout bounds the detection.
	nvidiaSMITimeout = 10 * time.Second
)

// ParseLabels parses k=v entries (each may hold several, comma-separated).
func ParseLabels(entries []string) (map[string]string, error) {
	labels := map[string]string{}
	for _, e := range entries {
		for _, kv := range strings.Split(e, ",") {
			kv = strings.TrimSpace(kv)
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if !ok || k == "" {
				return nil, fmt.Errorf("label %q: want key=value", kv)
			}
			labels[k] = v
		}
	}
	if _, err := GPUCount(labels); err != nil {
		return nil, err
	}
	return labels, nil
}

// GPUCount reads the gpus label (0 if absent).
func GPUCount(labels map[string]string) (int, error) {
	s, ok := labels[LabelGPUs]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("label %s=%q: want a number of GPUs", LabelGPUs, s)
	}
	return n, nil
}

// DetectGPUs asks nvidia-smi, found on PATH, for the GPUs of this machine:
// their number and model. No nvidia-smi means no GPUs (and no error).
func DetectGPUs(ctx context.Context) (int, string, error) {
	bin, err := exec.LookPath("nvidia-smi")
	if errors.Is(err, exec.ErrNotFound) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, nvidiaSMITimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--query-gpu=name", "--format=csv,noheader").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return 0, "", fmt.Errorf("%s: %w: %s", bin, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return 0, "", fmt.Errorf("%s: %w", bin, err)
	}
	var models []string
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		name := strings.TrimSpace(line)
		if name == "" {
			continue
		}
		n++
		seen := false
		for _, m := range models {
			seen = seen || m == name
		}
		if !seen {
			models = append(models, name)
		}
	}
	return n, strings.Join(models, "+"), nil
}

// ResolveLabels returns the worker's labels: declared (--labels), plus
// gpus and gpu from DetectGPUs unless gpus is declared. A failing
// nvidia-smi is logged and means no GPUs.
func ResolveLabels(ctx context.Context, declared []string, log *slog.Logger) (map[string]string, error) {
	labels, err := ParseLabels(declared)
	if err != nil {
		return nil, err
	}
	if _, ok := labels[LabelGPUs]; ok {
		return labels, nil
	}
	n, model, err := DetectGPUs(ctx)
	if err != nil {
		log.Warn("GPU detection failed; assuming no GPUs (declare them with --labels gpus=N,gpu=MODEL)", "err", err)
		return labels, nil
	}
	if n > 0 {
		labels[LabelGPUs] = strconv.Itoa(n)
		if _, ok := labels[LabelGPU]; !ok && model != "" {
			labels[LabelGPU] = model
		}
	}
	return labels, nil
}

// ResolvePools returns the pools a worker with gpus GPUs consumes: with
// GPUs, gpuPools plus the explicit ones; without, the explicit ones (or
// the default pool), none of which may be a GPU pool.
func ResolvePools(explicit []string, gpus int, gpuPools []string) ([]string, error) {
	var pools []string
	add := func(p string) {
		for _, q := range pools {
			if q == p {
				return
			}
		}
		pools = append(pools, p)
	}
	if gpus > 0 {
		for _, p := range gpuPools {
			add(p)
		}
		for _, p := range explicit {
			add(p)
		}
		if len(pools) == 0 {
			return nil, errors.New("a worker with GPUs needs at least one pool (--gpu-pools or --pools)")
		}
		return pools, nil
	}
	for _, p := range explicit {
		add(p)
	}
	if len(pools) == 0 {
		pools = []string{defaultPool}
	}
	for _, p := range pools {
		for _, g := range gpuPools {
			if p == g {
				return nil, fmt.Errorf("pool %q is for tasks that need a GPU, and this worker has none "+
					"(nvidia-smi found none; declare GPUs with --labels %s=N,%s=MODEL, or leave the pool to GPU workers)",
					p, LabelGPUs, LabelGPU)
			}
		}
	}
	return pools, nil
}
