package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"
)

// execPoll is how often a run in a prestarted container asks the engine
// whether its command is still running, besides watching its output end
// (a process the command left in the background can hold the output open).
const execPoll = 250 * time.Millisecond

// runIn runs spec's command with exec in the prestarted container ic, with
// cfg's user, environment and working directory, supervises it as run
// does a container, and removes the container (in the background: Close
// waits for it). errStale means nothing was started (the container had
// stopped).
func (p *prestarter) runIn(ctx context.Context, spec Spec, cfg *container.Config, ic *idleContainer) (Result, error) {
	d := p.d
	bg := context.WithoutCancel(ctx)
	// The removal is not the command's: the result does not wait for it.
	defer p.background(func() { p.release(ic) })
	if err := copyFiles(spec, ic.files); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrEngine, err)
	}
	env := cfg.Env
	for k, v := range cacheEnv(spec, func(c Cache) (string, bool) { return cacheTarget(c), true }) {
		env = setEnv(env, k, v)
	}
	stdin := spec.Stdin != nil
	ectx, cancel := context.WithTimeout(bg, engineTimeout)
	created, err := d.cli.ContainerExecCreate(ectx, ic.id, container.ExecOptions{
		User: cfg.User, Env: env, WorkingDir: cfg.WorkingDir, Cmd: spec.Argv,
		AttachStdin: stdin, AttachStdout: true, AttachStderr: true,
	})
	cancel()
	if err != nil {
		if cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err) {
			return Result{}, fmt.Errorf("%w: %w", errStale, err)
		}
		return Result{}, fmt.Errorf("%w: exec in container %.12s: %w", ErrEngine, ic.id, err)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("sandbox: not started: %w", err)
	}
	p.mu.Lock()
	p.running[ic.id] = cfg.Labels
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.running, ic.id)
		p.mu.Unlock()
	}()

	// The engine's oom events of the container: the only record of an
	// exec'd process killed for memory.
	evCtx, stopEvents := context.WithCancel(bg)
	defer stopEvents()
	evC, evErrC := d.cli.Events(evCtx, events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("container", ic.id), filters.Arg("event", string(events.ActionOOM)))})
	var oomMu sync.Mutex
	oom := false
	go func() {
		for {
			select {
			case <-evC:
				oomMu.Lock()
				oom = true
				oomMu.Unlock()
			case err := <-evErrC:
				_ = err // the stream ended (the run is over, or the engine went): no more events
				return
			case <-evCtx.Done():
				return
			}
		}
	}()

	// The attach starts the command, and the engine may start it even if
	// the request is abandoned: not cancellable, like a container's start.
	startedAt := time.Now()
	sctx, cancelStart := context.WithTimeout(bg, startTimeout)
	hj, err := d.cli.ContainerExecAttach(sctx, created.ID, container.ExecAttachOptions{})
	cancelStart()
	if err != nil {
		return Result{}, fmt.Errorf("%w: start exec in container %.12s: %w", ErrEngine, ic.id, err)
	}
	defer hj.Close()
	out := readStreams(spec, hj.Reader)
	copied := out.copied
	if stdin {
		go func() {
			_, _ = io.Copy(hj.Conn, spec.Stdin)
			_ = hj.CloseWrite()
		}()
	}

	exit := &containerExit{done: make(chan struct{})}
	waitCtx, cancelWait := context.WithCancel(bg)
	defer cancelWait()
	go func() {
		defer close(exit.done)
		out, next := copied, execPoll
		for {
			select {
			case <-out:
				// The output ended: the exit follows at once, as a rule.
				out, next = nil, 20*time.Millisecond
			case <-time.After(next):
			case <-waitCtx.Done():
				exit.err = waitCtx.Err()
				return
			}
			ictx, cancel := context.WithTimeout(waitCtx, engineTimeout)
			info, err := d.cli.ContainerExecInspect(ictx, created.ID)
			cancel()
			switch {
			case err != nil && waitCtx.Err() == nil:
				exit.err = err
				return
			case err == nil && !info.Running:
				exit.code = int64(info.ExitCode)
				return
			}
			if out == nil && next < execPoll {
				next *= 2
			}
		}
	}()

	// ended reports whether the command has ended, asking the engine
	// now: the polling above learns it up to execPoll late.
	ended := func() bool {
		if exit.exited() {
			return true
		}
		ictx, cancel := context.WithTimeout(bg, engineTimeout)
		defer cancel()
		info, err := d.cli.ContainerExecInspect(ictx, created.ID)
		if err != nil || info.Running {
			return false
		}
		<-exit.done // the polling sees it too
		return true
	}
	grace, timeout, stopTimer := spec.limits()
	defer stopTimer()
	var res Result
	killed := false
	select {
	case <-exit.done:
	case <-timeout:
		if !ended() {
			res.TimedOut, killed = true, true
			p.terminate(bg, ic.id, cfg.User, grace, exit)
		}
	case <-ctx.Done():
		if !ended() {
			killed = true
			p.terminate(bg, ic.id, cfg.User, grace, exit)
		}
	}
	res.StartedAt, res.Duration = startedAt, time.Since(startedAt)

	// The command has ended: so does everything it left running, at once,
	// as when a container's command ends (and its output then ends too).
	// The run returns only once nothing of it runs any more: the helper
	// kills the processes of the command's user (the job can have no
	// other) and waits for them, which is quicker than the container's
	// stop; the container follows in the background.
	select {
	case <-copied: // as a rule the output has ended already
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.killLeftovers(bg, ic.id, cfg.User); err != nil {
		// The container then: slower, and sure.
		if err := p.stop(bg, ic.id); err != nil {
			d.remove(bg, ic.id)
		}
	}
	out.finish(hj.Close, &res)
	res.Environment, res.Prestarted = ic.env, true

	res.ExitCode = -1
	if !exit.exited() {
		return res, fmt.Errorf("%w: command in container %.12s did not stop", ErrEngine, ic.id)
	}
	if exit.err != nil {
		return res, fmt.Errorf("%w: waiting for the command in container %.12s: %w", ErrEngine, ic.id, exit.err)
	}
	code := int(exit.code)
	if !killed && (code == 126 || code == 127) && (len(res.Stdout) == 0 || len(res.Stderr) == 0) {
		// The runtime's message is the exec's only output, on either
		// stream depending on the engine's version.
		if m := execFailed(append(res.Stdout, res.Stderr...), spec.Argv[0]); m != "" {
			return Result{}, fmt.Errorf("%w: %s: %s", ErrStart, spec.Argv[0], m)
		}
	}
	isOOM := func() bool {
		oomMu.Lock()
		defer oomMu.Unlock()
		return oom
	}
	res.OOMKilled = isOOM()
	// The event can come after the exit, as in run.
	for i := 0; !killed && !res.OOMKilled && code == 128+int(syscall.SIGKILL) && i < oomSettleTries; i++ {
		time.Sleep(oomSettleInterval)
		res.OOMKilled = isOOM()
	}
	res.setEnd(code, killed)
	return res, nil
}

// execFailed returns why the runtime could not start argv0 with exec, from
// what it writes as the exec's only output ("" if that is not it).
func execFailed(out []byte, argv0 string) string {
	s := strings.TrimSpace(string(out))
	const prefix = "OCI runtime exec failed: exec failed: "
	if !strings.HasPrefix(s, prefix) || strings.Contains(s, "\n") || !strings.Contains(s, "exec: "+strconv.Quote(argv0)+":") {
		return ""
	}
	return strings.TrimPrefix(s, prefix)
}

// terminate sends SIGTERM to every process of the command's user in the
// container (the helper's signal mode, run with exec as that user: the
// container's init and the idle helper run as root, out of its reach)
// and, if the command has not ended after grace, SIGKILL to the whole
// container; it returns once the command has ended or the engine stopped
// answering.
func (p *prestarter) terminate(ctx context.Context, id, user string, grace time.Duration, exit *containerExit) {
	if exit.exited() {
		return
	}
	c, cancel := context.WithTimeout(ctx, engineTimeout)
	sig, err := p.d.cli.ContainerExecCreate(c, id, container.ExecOptions{User: user, Cmd: []string{helperTarget, "signal"}})
	if err == nil {
		err = p.d.cli.ContainerExecStart(c, sig.ID, container.ExecStartOptions{Detach: true})
	}
	cancel()
	if err == nil {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-exit.done:
			return
		case <-t.C:
		}
	}
	c, cancel = context.WithTimeout(ctx, engineTimeout)
	_ = p.d.cli.ContainerKill(c, id, "SIGKILL")
	cancel()
	select {
	case <-exit.done:
	case <-time.After(engineTimeout):
	}
}

// killLeftovers kills, with the helper's kill mode run as user, every
// process of user in container id, and waits until none is left; an error
// if it could not say so.
func (p *prestarter) killLeftovers(ctx context.Context, id, user string) error {
	c, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	ex, err := p.d.cli.ContainerExecCreate(c, id, container.ExecOptions{User: user, Cmd: []string{helperTarget, "kill"},
		AttachStdout: true, AttachStderr: true})
	if err != nil {
		return err
	}
	hj, err := p.d.cli.ContainerExecAttach(c, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, hj.Reader)
	hj.Close()
	for {
		info, err := p.d.cli.ContainerExecInspect(c, ex.ID)
		switch {
		case err != nil:
			return err
		case !info.Running && info.ExitCode == 0:
			return nil
		case !info.Running:
			return fmt.Errorf("helper kill: exit %d: %s", info.ExitCode, bytes.TrimSpace(out.Bytes()))
		}
		select {
		case <-c.Done():
			return c.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stop kills every process of container id and waits until it is no
// longer running.
func (p *prestarter) stop(ctx context.Context, id string) error {
	c, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if err := p.d.cli.ContainerKill(c, id, "SIGKILL"); err != nil && !cerrdefs.IsConflict(err) && !cerrdefs.IsNotFound(err) {
		return err
	}
	waitC, errC := p.d.cli.ContainerWait(c, id, container.WaitConditionNotRunning)
	select {
	case <-waitC:
		return nil
	case err := <-errC:
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		return err
	}
}
