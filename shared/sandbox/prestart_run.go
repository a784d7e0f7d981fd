package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// helperJob is the job the helper of a container started ahead of it
// reads on its standard input (see supervisor-sandbox-helper).
type helperJob struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// helperStartFailed matches what the helper writes, as the only output of
// the run, when it cannot start the command (exit status 127 when not
// found, 126 otherwise).
var helperStartFailed = regexp.MustCompile(`^supervisor-sandbox-helper: cannot start ("(?:[^"\\]|\\.)*"): (.*)\n$`)

// runIn runs spec's command in the prestarted container ic, of the image
// imageID, with cfg's environment and working directory, supervises it as
// run does a container, and removes the container (in the background:
// Close waits for it). The container's helper, waiting for its job on its
// standard input, gets it through an attach and runs the command as the
// container's command would run: no exec. The run ends when the helper
// reports the command's end, once nothing of the job runs (PERF-75), or
// else with the container. errStale means nothing was started (the
// container had stopped).
func (p *prestarter) runIn(ctx context.Context, spec Spec, cfg *container.Config, ic *idleContainer, imageID string) (Result, error) {
	d := p.d
	bg := context.WithoutCancel(ctx)
	// The removal is not the command's: the result does not wait for it.
	// It waits for the container's exit, which the wait below sees.
	var exit *containerExit
	stopWait := func() {}
	defer func() { p.background(func() { p.releaseAfterExit(ic, exit, stopWait) }) }()
	if err := copyFiles(spec, ic.files); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrEngine, err)
	}
	env := cfg.Env
	for k, v := range cacheEnv(spec, func(c Cache) (string, bool) { return cacheTarget(c), true }) {
		env = setEnv(env, k, v)
	}
	job, err := json.Marshal(helperJob{Argv: spec.Argv, Env: env, Dir: cfg.WorkingDir})
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("sandbox: not started: %w", err)
	}
	actx, cancel := context.WithTimeout(bg, engineTimeout)
	hj, err := d.cli.ContainerAttach(actx, ic.id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	cancel()
	if err != nil {
		if cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err) {
			return Result{}, fmt.Errorf("%w: %w", errStale, err)
		}
		return Result{}, fmt.Errorf("%w: attach to container %.12s: %w", ErrEngine, ic.id, err)
	}
	defer hj.Close()
	exit, stopWait = d.waitExit(bg, ic.id)
	// A container that stopped meanwhile would never read the job, nor
	// exit again: it is stale. One that stops from now on ends the wait.
	ictx, cancel := context.WithTimeout(bg, engineTimeout)
	info, err := d.cli.ContainerInspect(ictx, ic.id)
	cancel()
	switch {
	case cerrdefs.IsNotFound(err):
		exit = nil // no exit to wait for
		return Result{}, fmt.Errorf("%w: %w", errStale, err)
	case err != nil:
		return Result{}, fmt.Errorf("%w: inspect container %.12s: %w", ErrEngine, ic.id, err)
	case info.State == nil || !info.State.Running:
		exit = nil // it has exited: its next exit never comes
		return Result{}, fmt.Errorf("%w: container %.12s is not running", errStale, ic.id)
	}
	out, reported := readHelperStreams(spec, hj.Reader)

	p.mu.Lock()
	p.running[ic.id] = cfg.Labels
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.running, ic.id)
		p.mu.Unlock()
	}()

	if exit.exited() {
		// The wait failed (or the container ended): nothing would see
		// the command end. Nothing is started.
		return Result{}, fmt.Errorf("%w: waiting for container %.12s: %v", errStale, ic.id, exit.err)
	}
	// The job's write starts the command: from here on a cancellation is
	// handled as one during the run.
	startedAt := time.Now()
	if _, err := hj.Conn.Write(append([]byte(strconv.Itoa(len(job))+"\n"), job...)); err != nil {
		// The helper never got its job, or not all of it: it runs nothing.
		d.terminate(bg, ic.id, 0, exit)
		return Result{}, fmt.Errorf("%w: %w", errStale, err)
	}
	go func() {
		if spec.Stdin != nil {
			_, _ = io.Copy(hj.Conn, spec.Stdin)
		}
		_ = hj.CloseWrite()
	}()
	res, err := d.supervise(ctx, spec, ic.id, cfg.Image, hj.Close, out, exit, reported, imageID, startedAt, func(stderr []byte) string {
		return helperFailed(stderr, spec.Argv[0])
	})
	res.Prestarted = true
	return res, err
}

// helperFailed returns why the helper could not start argv0, from what it
// writes as the run's only output ("" if that is not it).
func helperFailed(stderr []byte, argv0 string) string {
	if m := helperStartFailed.FindSubmatch(stderr); m != nil && string(m[1]) == strconv.Quote(argv0) {
		return string(m[2])
	}
	return ""
}
