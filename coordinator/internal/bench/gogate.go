package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/gaterunner"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/sandbox"
)

// The go-gate scenario (issue 13, figure 4, per gate): a Go gate in the
// Docker sandbox with its caches warm, against the same gate in the
// process sandbox with its caches warm the same way, in one run.

// Variants of the go-gate scenario.
const (
	// VariantGoProcess runs the gate in the process sandbox with the host's
	// go, its Go caches warmed by the warm-up (the reference).
	VariantGoProcess = "process-warm"
	// VariantGoDocker runs it in the Docker sandbox, in GoGateImage, on
	// the trusted layers its warm-up filled plus a throw-away layer per run.
	VariantGoDocker = "docker-warm"
	// VariantGoDockerLayers is VariantGoDocker with the image read from
	// its layers alone (sandbox.DockerOptions.ImageLayersOnly), sharing
	// its trusted layers: what serving the directories the image names in
	// its sandbox.LabelImageTrees from a copy on the host changes.
	VariantGoDockerLayers = "docker-layers"
	// VariantGoDockerPrestarted is VariantGoDocker with its containers
	// started ahead of their gate (sandbox.DockerOptions.Prestart, a gate
	// runner's default): the gate runs in a running container, through
	// the helper that waits there for its job.
	VariantGoDockerPrestarted = "docker-prestarted"
)

// Defaults of the go-gate scenario.
const (
	// GoGateImage is the Docker variant's image: the Go gates' image
	// `make images` builds.
	GoGateImage = "supervisor/sandbox-go:latest"
	// DefaultGoGateRuns is how many times each variant is measured.
	DefaultGoGateRuns = 5
	// goGateWarmups is how many unmeasured rounds run after the warm-up.
	goGateWarmups = 1
	// goGateRunTimeout bounds one run of one variant.
	goGateRunTimeout = 5 * time.Minute
)

// GoGateCommand is the gate every variant runs.
var GoGateCommand = []string{"go", "vet", "./..."}

// goGateWarmup is the caches' warm-up of both sandboxes: the gate
// runner's (gaterunner.CacheWarmup: all of std) limited to the packages
// the scenario's module imports, so that it takes seconds, not minutes.
var goGateWarmup = gaterunner.CacheWarmupOf("fmt", "strings", "testing")

// goGateEnv is the gate's environment, the warm-up's own (CacheWarmupOf):
// no toolchain download, no module proxy.
var goGateEnv = goGateWarmup.WarmEnv

// GoGateReport is the go-gate scenario's figures.
type GoGateReport struct {
	// Skipped says why the scenario did not run ("" if it did).
	Skipped string `json:"skipped,omitempty"`
	// Image is the Docker variant's image and ImageID its ID.
	Image   string `json:"image"`
	ImageID string `json:"image_id,omitempty"`
	// Command is the gate; Warmup the caches' warm-up commands.
	Command []string   `json:"command"`
	Warmup  [][]string `json:"warmup"`
	// Runs is how many times each variant was measured, after one
	// unmeasured round.
	Runs     int             `json:"runs"`
	Variants []GoGateVariant `json:"variants"`
	// DockerOverProcess is the Docker variant's p50 over the process
	// variant's: issue 13's figure 4 per gate (target: at most 1.25).
	DockerOverProcess float64 `json:"docker_over_process"`
	// DockerOverLayers is the Docker variant's p50 over the same sandbox's
	// reading the image from its layers alone.
	DockerOverLayers float64 `json:"docker_over_layers"`
	// PrestartedOverProcess is the prestarted Docker variant's p50 over
	// the process variant's: figure 4 per gate as a gate runner runs it
	// by default.
	PrestartedOverProcess float64 `json:"prestarted_over_process"`
}

// GoGateVariant is one sandbox's figures.
type GoGateVariant struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// GoVersion is what `go version` printed in the sandbox.
	GoVersion string `json:"go_version"`
	// WarmupSeconds is how long the caches' warm-up took (0: the sandbox
	// has no warm-up, see Description).
	WarmupSeconds float64 `json:"warmup_seconds"`
	Count         int     `json:"count"`
	// P50Micros and MeanMicros are the wall time per gate (the sandbox's
	// Run); CommandP50Micros is the command's own time, as the sandbox
	// measured it.
	P50Micros        float64 `json:"p50_us"`
	MeanMicros       float64 `json:"mean_us"`
	CommandP50Micros float64 `json:"command_p50_us"`

	samples, commands []time.Duration
}

// goGateVariant is one way of running the gate.
type goGateVariant struct {
	name, description string
	sb                sandbox.Sandbox
	// warm runs the caches' warm-up (nil: the sandbox has none).
	warm func(ctx context.Context) error
}

// runGoGate measures the go-gate scenario. eng is the engine the sandbox
// probe found (its skip reason, if any, skips this scenario too).
func (r *runner) runGoGate(ctx context.Context, eng *sandboxEngine) (*GoGateReport, error) {
	rep := &GoGateReport{Image: GoGateImage, Command: slices.Clone(GoGateCommand), Warmup: goGateWarmup.Warmup, Runs: r.cfg.GoGateRuns}
	if eng.skip != "" {
		rep.Skipped = eng.skip
		r.progress("%s: skipped: %s", ScenarioGoGate, eng.skip)
		return rep, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	id, err := eng.docker.ImageDigest(ctx, GoGateImage)
	if err != nil {
		return nil, fmt.Errorf("the image %s is not on this host: build it with `make images` (images are never pulled): %w", GoGateImage, err)
	}
	rep.ImageID = id
	if _, err := exec.LookPath("go"); err != nil {
		return nil, fmt.Errorf("the process variant runs the host's go: %w", err)
	}

	base := filepath.Join(r.dir, "go-gate")
	if err := os.RemoveAll(base); err != nil { // a kept --dir from an earlier run
		return nil, err
	}
	ws := filepath.Join(base, "workspace")
	if err := makeGoWorkspace(ctx, ws); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	helper, err := sandbox.FindHelper(r.cfg.SandboxHelper)
	if err != nil {
		return nil, fmt.Errorf("the %s variant needs %s (make build puts it beside the coordinator): %w", VariantGoDockerPrestarted, sandbox.HelperName, err)
	}
	variants, closeAll, err := goGateVariants(ctx, filepath.Join(base, "data"), helper)
	if err != nil {
		return nil, err
	}
	defer closeAll()

	results := make([]GoGateVariant, len(variants))
	for i, v := range variants {
		results[i] = GoGateVariant{Name: v.name, Description: v.description}
		if v.warm != nil {
			r.progress("%s: %s: warming its caches (%d commands)", ScenarioGoGate, v.name, len(goGateWarmup.Warmup))
			t0 := time.Now()
			if err := v.warm(ctx); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", v.name, err)
			}
			results[i].WarmupSeconds = time.Since(t0).Seconds()
		}
		out, _, err := runGoGateOnce(ctx, v.sb, ws, []string{"go", "version"})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		results[i].GoVersion = strings.TrimSpace(out)
	}
	r.progress("%s: %d unmeasured and %d measured rounds of `%s`", ScenarioGoGate, goGateWarmups, r.cfg.GoGateRuns, strings.Join(GoGateCommand, " "))
	for round := 0; round < goGateWarmups+r.cfg.GoGateRuns; round++ {
		for k := range variants {
			i := (round + k) % len(variants) // no variant always runs first
			t0 := time.Now()
			_, took, err := runGoGateOnce(ctx, variants[i].sb, ws, GoGateCommand)
			wall := time.Since(t0)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", variants[i].name, round+1, err)
			}
			if round >= goGateWarmups {
				results[i].samples = append(results[i].samples, wall)
				results[i].commands = append(results[i].commands, took)
			}
		}
	}
	for i := range results {
		v := &results[i]
		v.Count = len(v.samples)
		v.P50Micros, _, v.MeanMicros = sampleStats(v.samples)
		v.CommandP50Micros, _, _ = sampleStats(v.commands)
		r.progress("%s: %s: p50 %s", ScenarioGoGate, v.Name, dur(v.P50Micros))
	}
	rep.Variants = results
	rep.DockerOverProcess = ratioTo(results[1].P50Micros, results[0].P50Micros)
	rep.DockerOverLayers = ratioTo(results[1].P50Micros, results[2].P50Micros)
	rep.PrestartedOverProcess = ratioTo(results[3].P50Micros, results[0].P50Micros)
	return rep, nil
}

// goGateVariants builds the sandboxes as a gate runner builds them
// (jobrun.SelectSandbox), each with Go's caches and the scenario's
// warm-up; the Docker ones share their data directory, so the later ones
// find the trusted layers the first's warm-up filled. helper is the
// prestarted variant's.
func goGateVariants(ctx context.Context, dataDir, helper string) ([]goGateVariant, func(), error) {
	caches := goGateWarmup
	docker := jobrun.Settings{Sandbox: jobrun.SandboxDocker, Caches: caches,
		Docker: jobrun.DockerSettings{Image: GoGateImage, Resources: gaterunner.DefaultResources}}
	proc, d, closeAll, err := selectSandboxes(ctx,
		jobrun.Settings{Sandbox: jobrun.SandboxProcess, Caches: caches}, filepath.Join(dataDir, "process"),
		docker, filepath.Join(dataDir, "docker"))
	if err != nil {
		return nil, nil, err
	}
	docker.Docker.ImageLayersOnly = true
	layers, err := jobrun.SelectSandbox(ctx, docker, filepath.Join(dataDir, "docker"), sandboxHost(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("docker sandbox: %w", err)
	}
	closeSandboxes := closeAll
	closeAll = func() { closeSandboxes(); layers.Close() }
	dl, ok := layers.Sandbox.(*sandbox.Docker)
	if !ok {
		closeAll()
		return nil, nil, fmt.Errorf("docker sandbox: got the %s sandbox", layers.Sandbox.Name())
	}
	docker.Docker.ImageLayersOnly = false
	docker.Docker.Prestart, docker.Docker.Helper = true, helper
	pre, err := jobrun.SelectSandbox(ctx, docker, filepath.Join(dataDir, "docker"), sandboxHost(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("docker sandbox: %w", err)
	}
	closeThree := closeAll
	closeAll = func() { closeThree(); pre.Close() }
	dp, ok := pre.Sandbox.(*sandbox.Docker)
	if !ok {
		closeAll()
		return nil, nil, fmt.Errorf("docker sandbox: got the %s sandbox", pre.Sandbox.Name())
	}
	p, ok := proc.(*sandbox.Process)
	if !ok {
		closeAll()
		return nil, nil, fmt.Errorf("process sandbox: got the %s sandbox", proc.Name())
	}
	process := goGateVariant{name: VariantGoProcess, sb: p, warm: p.WarmCaches,
		description: "the process sandbox (as a gate runner's --sandbox process) with the host's go, running as a sandbox user on the trusted layers the warm-up filled"}
	if !p.WritableWorkspaces() {
		// No sandbox user: no trusted layers, and no warm-up (as in the
		// Compose fleet's process-sandboxed runners).
		process.warm = nil
		process.description = "the process sandbox (as a gate runner's --sandbox process) with the host's go, running as the runner's own user: " +
			"Go's build cache is the runner's shared one, warmed by the unmeasured round (no trusted layers, no warm-up)"
	}
	return []goGateVariant{
		process,
		{name: VariantGoDocker, sb: d, warm: func(ctx context.Context) error { return d.WarmCaches(ctx, GoGateImage) },
			description: "the Docker sandbox (as a gate runner's --sandbox docker) in " + GoGateImage + ", on the trusted layers the warm-up filled; " +
				"the directories the image names in its " + sandbox.LabelImageTrees + " label served from a read-only copy on the host"},
		{name: VariantGoDockerLayers, sb: dl, warm: func(ctx context.Context) error { return dl.WarmCaches(ctx, GoGateImage) },
			description: "the same, with the image read from its layers alone (--sandbox-image-layers-only)"},
		{name: VariantGoDockerPrestarted, sb: dp, warm: func(ctx context.Context) error { return dp.WarmCaches(ctx, GoGateImage) },
			description: "the same as " + VariantGoDocker + ", with each gate's container started ahead of it and the gate run in it by its helper (--sandbox-prestart, a gate runner's default)"},
	}, closeAll, nil
}

// runGoGateOnce runs argv as a gate with Go's caches in the workspace ws
// and returns its output and the command's own duration; a command that
// does not succeed is an error.
func runGoGateOnce(ctx context.Context, sb sandbox.Sandbox, ws string, argv []string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, goGateRunTimeout)
	defer cancel()
	var out bytes.Buffer
	spec := gateSpec(argv, ws, sandboxHost())
	spec.Stdout, spec.Stderr = &out, &out
	spec.Caches = gaterunner.GoCaches
	for k, v := range goGateEnv {
		spec.Env[k] = v
	}
	res, err := sb.Run(ctx, spec)
	if err != nil {
		return "", 0, err
	}
	if res.ExitCode != 0 || res.TimedOut || res.Signal != "" {
		return "", 0, fmt.Errorf("`%s` did not succeed in the %s sandbox (exit %d, signal %q, timed out %v): %s",
			strings.Join(argv, " "), sb.Name(), res.ExitCode, res.Signal, res.TimedOut, bytes.TrimSpace(out.Bytes()))
	}
	return out.String(), res.Duration, nil
}

// makeGoWorkspace creates the gate's workspace: a git repository holding a
// Go module of one package that imports fmt and strings, with a test.
func makeGoWorkspace(ctx context.Context, dir string) error {
	return commitFiles(ctx, dir, map[string]string{
		"go.mod": "module example.com/gogate\n\ngo 1.21\n",
		"greet/greet.go": "// Package greet greets.\npackage greet\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\n" +
			"// Hello greets name.\nfunc Hello(name string) string {\n\treturn fmt.Sprintf(\"hello, %s\", strings.TrimSpace(name))\n}\n",
		"greet/greet_test.go": "package greet\n\nimport \"testing\"\n\n" +
			"func TestHello(t *testing.T) {\n\tif got := Hello(\" gate \"); got != \"hello, gate\" {\n\t\tt.Fatalf(\"Hello = %q\", got)\n\t}\n}\n",
	}, "bench: go module")
}
