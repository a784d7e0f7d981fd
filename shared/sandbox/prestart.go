package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/strslice"
)

// Containers started ahead of their job (PERF-63).
//
// Starting a container is most of what a short command costs in the Docker
// sandbox (a quarter to a third of a second on an engine with
// fuse-overlayfs). With DockerOptions.Prestart, as a run in a workspace
// starts in a container started ahead (else once the run ends), the
// sandbox creates and starts the container of that workspace's next run in
// the background, so that a run that follows at once finds it ready (a
// workspace may have more than one waiting, the rest started once the
// sandbox is quiet: PERF-80, prestart_queue.go): the same image, user,
// mounts (the workspace and its .git, the image's directories, fresh
// throw-away cache layers), network and limits, with the
// helper (supervisor-sandbox-helper, mounted read-only) as its command and
// first process, in place of the container's init, waiting for its job on
// its standard input.
// The next run in that workspace whose container would be the same (a key
// over all of that, with the identity of the workspace directory and of
// its .git) attaches to the container and writes the job (argv,
// environment, working directory); the helper runs the command, kills
// what it left once it has ended, and reports its status, with which the
// run ends (PERF-75); the helper then exits and the container ends with
// it. The container is removed afterwards as usual: every
// command still gets a container of its own, which nothing ran in before
// it. A run whose container would differ (another image or image ID, other
// limits, a new trusted cache layer, a workspace directory or .git
// replaced by another file) runs in a new container, as without the
// option, and the workspace's idle ones are removed. An idle container that
// no run took within prestartIdle is removed.
//
// What the helper in between changes, and how each is kept:
//
//   - The helper is the container's init: the engine's SIGTERM reaches it
//     and it passes it to the command; the SIGKILL after the grace ends
//     the whole container, as for any container. It reaps what ends, and
//     when the command has ended it exits with its status, and the kernel
//     kills what the command left running, as when a container's command
//     ends under the init. It runs as the job's user (it has no
//     capabilities to switch users), but as the first process it receives
//     only the signals it handles, and kill(-1) never reaches it.
//   - A command that cannot be started is reported by the helper, alone on
//     standard error with status 126 or 127: ErrStart, as before.
//   - Spec.Files are copied into a directory of the container's own,
//     mounted read-only at ContainerFiles under the same names.
//   - The environment is the job's, sent with it, over the image's; the
//     container itself is created without one of the job's.
//   - A container's labels cannot change once it exists, so the job's own
//     (Spec.Labels) are not on it; RunLabels gives them while it runs.
//   - The container is removed in the background after the run (Close
//     waits for it); its processes are dead by then.

// LabelPrestarted marks a container started ahead of its job ("1").
const LabelPrestarted = "supervisor.prestarted"

// HelperName is the file name of the helper binary (see
// DockerOptions.Helper).
const HelperName = "supervisor-sandbox-helper"

// helperTarget is where a prestarted container sees the helper.
const helperTarget = "/run/" + HelperName

const (
	// prestartIdle is how long a prestarted container waits for its job
	// before it is removed.
	prestartIdle = 10 * time.Minute
)

// helperTasks is how many of a prestarted container's tasks its helper
// may take (its threads), on top of the job's process limit.
const helperTasks = 8

// DefaultPrestartMax is how many containers started ahead may wait for a
// job at once when DockerOptions.PrestartMax is 0.
const DefaultPrestartMax = 16

// prestarter keeps the idle containers of a Docker sandbox, one per
// workspace at most.
type prestarter struct {
	d      *Docker
	helper string // the helper binary, as the runner sees it
	max    int    // the most idle containers at once
	dir    string // where files directories are made ("" = os.TempDir())
	// ctx ends with close: creates under way stop.
	ctx    context.Context
	cancel context.CancelFunc
	warned sync.Once // a create failed (logged once as a warning)

	depth int // the most idle containers of one workspace

	mu sync.Mutex
	// idle holds each workspace's idle containers (by its root), oldest
	// first, all of one key.
	idle    map[string][]*idleContainer
	running map[string]map[string]string
	closed  bool
	wg      sync.WaitGroup
	// active counts the runs under way; refills are the workspaces whose
	// idle containers are topped up to depth once none has run for
	// refillQuiet, which quiet (when set) waits for.
	active  int
	refills map[string]refill
	quiet   *time.Timer
}

// idleContainer is a container started ahead of its job; its fields are
// valid once ready is closed, and only if err is nil.
type idleContainer struct {
	ready    chan struct{}
	err      error
	key      string
	id       string
	created  time.Time
	deadline time.Time
	files    string   // its files directory, as the runner sees it
	caches   cacheRun // its throw-away cache layers
}

// FindHelper returns the path of the helper prestarted containers run:
// helper if set, else HelperName beside the running executable; an error
// says why there is none there.
func FindHelper(helper string) (string, error) {
	if helper == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("sandbox: prestart: no helper given and no executable path: %w", err)
		}
		helper = filepath.Join(filepath.Dir(exe), HelperName)
	}
	fi, err := os.Stat(helper)
	if err != nil {
		return "", fmt.Errorf("sandbox: prestart: helper: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("sandbox: prestart: helper %s is not an executable file", helper)
	}
	return helper, nil
}

// newPrestarter checks the helper and returns the prestarter of d, which
// keeps at most max idle containers (0: DefaultPrestartMax), at most depth
// of them for one workspace (0: DefaultPrestartDepth).
func newPrestarter(d *Docker, helper string, max, depth int) (*prestarter, error) {
	helper, err := FindHelper(helper)
	if err != nil {
		return nil, err
	}
	if max < 0 {
		return nil, fmt.Errorf("sandbox: prestart: at most %d containers waiting: must not be negative", max)
	}
	if max == 0 {
		max = DefaultPrestartMax
	}
	if depth < 0 {
		return nil, fmt.Errorf("sandbox: prestart: %d containers waiting per workspace: must not be negative", depth)
	}
	if depth == 0 {
		depth = DefaultPrestartDepth
	}
	p := &prestarter{d: d, helper: helper, max: max, depth: depth, idle: map[string][]*idleContainer{},
		running: map[string]map[string]string{}, refills: map[string]refill{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	switch {
	case d.caches.dir != "":
		// Under the cache directory, which a runner in a container has
		// mapped to the engine's host (PathMaps): a copy of the helper,
		// and the files directories beside the throw-away layers.
		p.dir = filepath.Join(d.caches.dir, "runs")
		copied, err := copyHelper(helper, filepath.Join(d.caches.dir, "helper"))
		if err != nil {
			return nil, fmt.Errorf("sandbox: prestart: %w", err)
		}
		p.helper = copied
	case len(d.maps) > 0:
		return nil, errors.New("sandbox: prestart: a runner in a container needs a cache directory to share the helper with the engine")
	}
	return p, nil
}

// copyHelper copies the helper into dir under a name of its content's
// hash (so that runners of different versions sharing dir never replace
// each other's) and returns the copy's path.
func copyHelper(src, dir string) (string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("helper: %w", err)
	}
	sum := sha256.Sum256(b)
	dst := filepath.Join(dir, HelperName+"-"+hex.EncodeToString(sum[:8]))
	if fi, err := os.Stat(dst); err == nil && fi.Size() == int64(len(b)) {
		return dst, nil
	}
	if err := replaceFile(dst, b, 0o755); err != nil {
		return "", fmt.Errorf("helper: %w", err)
	}
	return dst, nil
}

// replaceFile writes data to path with mode perm, creating its directory
// if need be: into a new file beside it, then renamed over it, so that
// whoever opens or mounts path sees either the old file or the whole new
// one.
func replaceFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// prestartKey is everything a prestarted container was made with that a
// run's command could tell apart; two runs with the same key would get the
// same container.
type prestartKey struct {
	Image, ImageID, User string
	Network              string
	Host                 *container.HostConfig
	Caches               []cacheLayout
	Workspace, Git       fileID
}

// cacheLayout is how one cache would be mounted.
type cacheLayout struct {
	Target string
	Lowers []string `json:",omitempty"`
	// LowerIDs are the layers' directories themselves: a warm-up that
	// publishes a new layer puts another directory at the same path.
	LowerIDs []fileID `json:",omitempty"`
	Tmpfs    bool     `json:",omitempty"`
}

// fileID identifies a file (a bind mount holds on to its inode).
type fileID struct{ Dev, Ino uint64 }

// key returns the key of the container of spec, whose configuration
// without its files and caches is cfg and host.
func (p *prestarter) key(spec Spec, cfg *container.Config, host *container.HostConfig, imageID string) (string, error) {
	k := prestartKey{Image: cfg.Image, ImageID: imageID, User: cfg.User, Network: cfg.Labels[LabelNetwork], Host: host}
	root := filepath.Clean(spec.Workspace)
	var err error
	// The root as the mount sees it (a symlink followed); .git as it is
	// (the sandbox refuses a symlinked one).
	if k.Workspace, err = statID(root, os.Stat); err != nil {
		return "", err
	}
	if k.Git, err = statID(filepath.Join(root, ".git"), os.Lstat); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	for _, c := range spec.Caches {
		l := cacheLayout{Target: cacheTarget(c)}
		if p.d.caches.dir == "" {
			l.Tmpfs = true
		} else {
			l.Lowers = p.d.caches.lowers(envKey(imageID), c)
			for _, dir := range l.Lowers {
				id, err := statID(dir, os.Stat)
				if err != nil {
					return "", err
				}
				l.LowerIDs = append(l.LowerIDs, id)
			}
		}
		k.Caches = append(k.Caches, l)
	}
	b, err := json.Marshal(k)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// statID returns the identity of the file at p, as stat sees it.
func statID(p string, stat func(string) (os.FileInfo, error)) (fileID, error) {
	fi, err := stat(p)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("sandbox: no inode for %s", p)
	}
	return fileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil //nolint:unconvert // Dev is not uint64 everywhere
}

// withoutFiles returns a copy of host without the mounts of Spec.Files,
// with its own Mounts and Tmpfs.
func withoutFiles(host *container.HostConfig) *container.HostConfig {
	c := *host
	c.Mounts = make([]mount.Mount, 0, len(host.Mounts))
	for _, m := range host.Mounts {
		if path.Dir(m.Target) != ContainerFiles {
			c.Mounts = append(c.Mounts, m)
		}
	}
	c.Tmpfs = make(map[string]string, len(host.Tmpfs))
	for k, v := range host.Tmpfs {
		c.Tmpfs[k] = v
	}
	return &c
}

// run runs spec, whose container configuration is cfg and host (image
// directories included, caches not yet), in the workspace's prestarted
// container if it has one that fits, else in a new one. The workspace's
// next container is started as the command starts in a prestarted one,
// else once the run has ended (and again then if the run changed what
// the key covers).
func (p *prestarter) run(ctx context.Context, spec Spec, cfg *container.Config, host *container.HostConfig,
	imageID string, fixPerms bool) (Result, error) {
	d := p.d
	if imageID == "" {
		id, err := d.ImageDigest(ctx, cfg.Image)
		if err != nil {
			return Result{}, err
		}
		imageID = id
	}
	p.begin()
	defer p.end()
	base := withoutFiles(host)
	key, kerr := p.key(spec, cfg, base, imageID)
	root := filepath.Clean(spec.Workspace)
	var ic *idleContainer
	left := 0
	if kerr == nil {
		ic, left = p.take(ctx, spec, key)
	}
	if fixPerms {
		if err := MakeWritable(root); err != nil {
			if ic != nil {
				p.discard(ic)
			}
			return Result{}, fmt.Errorf("%w: making the workspace writable for %s: %w", ErrStart, cfg.User, err)
		}
	}
	var res Result
	err := errStale
	startedNext := ""
	if ic != nil {
		// A job that comes as soon as this one ends (a node's next gate)
		// should find a container ready instead of waiting for its
		// start. With another one waiting, the workspace is topped up
		// once the sandbox is quiet, so that no container's start competes
		// with this run for the CPU (PERF-80); else its next container is
		// started now, beside this run, whose own is running already.
		if spec.Timeout > 0 && ctx.Err() == nil {
			if left == 0 {
				p.start(spec, cfg, base, imageID, key)
			}
			p.wantRefill(spec, cfg, base, imageID, key)
			startedNext = key
		}
		res, err = p.runIn(ctx, spec, cfg, ic, imageID)
	}
	if errors.Is(err, errStale) {
		caches, cerr := d.addCaches(ctx, spec, cfg, host, nil, imageID)
		if cerr != nil {
			return Result{}, cerr
		}
		res, err = d.run(ctx, spec, cfg, host)
		caches.cleanup()
	}
	if kerr == nil && spec.Timeout > 0 && ctx.Err() == nil && !errors.Is(err, ErrInvalidSpec) {
		// The key again: the run may have changed what it covers (a new
		// .git), and a key taken before the container's create never
		// matches a container made from anything else.
		if key, kerr = p.key(spec, cfg, base, imageID); kerr == nil && key != startedNext {
			p.start(spec, cfg, base, imageID, key)
			p.wantRefill(spec, cfg, base, imageID, key)
		}
	}
	return res, err
}

// errStale means a prestarted container could not take the run (it had
// stopped), and nothing was started in it.
var errStale = errors.New("sandbox: prestarted container unusable")

// take returns the workspace's oldest prestarted container if it fits key
// and spec's timeout, waiting for one still being started, and how many
// of the workspace's stay waiting; nil otherwise. A container that does
// not fit is removed, and with it those waiting that are not of key.
func (p *prestarter) take(ctx context.Context, spec Spec, key string) (*idleContainer, int) {
	root := filepath.Clean(spec.Workspace)
	var drop []*idleContainer
	p.mu.Lock()
	q := p.idle[root]
	if len(q) == 0 {
		p.mu.Unlock()
		return nil, 0
	}
	ic := q[0]
	q = slices.Clone(q[1:])
	if ic.key != key {
		drop, q = q, nil
	}
	p.setQueue(root, q)
	left := len(q)
	p.mu.Unlock()
	for _, c := range drop {
		p.discard(c)
	}
	select {
	case <-ic.ready:
	case <-ctx.Done():
		p.discard(ic)
		return nil, left
	}
	if ic.err != nil {
		return nil, left // cleaned up by start
	}
	fits := ic.key == key && time.Since(ic.created) < prestartIdle && spec.Timeout > 0 &&
		!time.Now().Add(startTimeout+spec.Timeout).After(ic.deadline)
	if !fits {
		p.discard(ic)
		return nil, left
	}
	return ic, left
}

// start creates and starts, in the background, a container of spec's
// workspace after those it has waiting, which it replaces if they are of
// another key; it also removes the containers that waited too long, and
// the oldest beyond the sandbox's and the workspace's bounds.
func (p *prestarter) start(spec Spec, cfg *container.Config, base *container.HostConfig, imageID, key string) {
	root := filepath.Clean(spec.Workspace)
	ic := &idleContainer{ready: make(chan struct{}), key: key, created: time.Now()}
	ic.deadline = ic.created.Add(prestartIdle + startTimeout + spec.Timeout)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	q, drop := split(p.idle[root], func(c *idleContainer) bool { return c.key != key })
	if len(q) >= p.depth {
		drop = append(drop, q[:len(q)-p.depth+1]...)
		q = q[len(q)-p.depth+1:]
	}
	p.setQueue(root, append(q, ic))
	drop = append(drop, p.trim()...)
	p.wg.Add(1)
	p.mu.Unlock()
	for _, c := range drop {
		p.discard(c)
	}
	// What create reads of the spec, copied: the caller may reuse its own.
	own := Spec{Workspace: spec.Workspace, Caches: slices.Clone(spec.Caches), Timeout: spec.Timeout}
	go func() {
		defer p.wg.Done()
		defer close(ic.ready)
		ic.err = p.create(own, cfg, base, imageID, ic)
		if ic.err != nil {
			log := p.d.caches.log
			warned := false
			p.warned.Do(func() {
				warned = true
				log.Warn("sandbox: cannot start a container ahead of its job (its commands start their own container; later failures are logged at debug level)",
					"workspace", root, "err", ic.err)
			})
			if !warned {
				log.Debug("sandbox: cannot start a container ahead of its job", "workspace", root, "err", ic.err)
			}
			return
		}
		// Removed if no run takes it in time.
		time.AfterFunc(prestartIdle, func() {
			p.mu.Lock()
			q, gone := split(p.idle[root], func(c *idleContainer) bool { return c == ic })
			stale := len(gone) > 0
			if stale {
				p.setQueue(root, q)
			}
			p.mu.Unlock()
			if stale {
				p.discard(ic)
			}
		})
	}()
}

// create creates and starts ic's container: cfg and base as for spec's
// run, with its own files directory and throw-away cache layers, in the
// helper waiting for its job as its command, no environment of the job
// and no job labels.
func (p *prestarter) create(spec Spec, cfg *container.Config, base *container.HostConfig, imageID string, ic *idleContainer) error {
	d := p.d
	ctx, cancel := context.WithTimeout(p.ctx, startTimeout)
	defer cancel()
	files, err := os.MkdirTemp(p.dir, "files-")
	if err != nil {
		return fmt.Errorf("files directory: %w", err)
	}
	if err := os.Chmod(files, 0o755); err != nil {
		_ = os.RemoveAll(files)
		return fmt.Errorf("files directory: %w", err)
	}
	labels := map[string]string{
		LabelSandbox: "1", LabelHost: d.host, LabelPrestarted: "1",
		LabelDeadline: strconv.FormatInt(ic.deadline.Unix(), 10),
	}
	if n := cfg.Labels[LabelNetwork]; n != "" {
		labels[LabelNetwork] = n
	}
	// The helper waits for the job on its standard input, which stays
	// open until the job's attach closes it.
	c := &container.Config{
		User: cfg.User, Image: cfg.Image, WorkingDir: ContainerWorkspace, Labels: labels,
		Cmd: strslice.StrSlice{helperTarget, "job"}, Entrypoint: strslice.StrSlice{},
		OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	}
	h := withoutFiles(base)
	// The helper is the container's init: the first process, out of reach
	// of kill(-1) from the job. Its threads are not the job's: the process
	// limit is raised by as many.
	noInit := false
	h.Init = &noInit
	if h.PidsLimit != nil && *h.PidsLimit > 0 {
		n := *h.PidsLimit + helperTasks
		h.PidsLimit = &n
	}
	h.Mounts = append(h.Mounts,
		mount.Mount{Type: mount.TypeBind, Source: d.HostPath(files), Target: ContainerFiles, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: d.HostPath(p.helper), Target: helperTarget, ReadOnly: true})
	// The caches' throw-away layers belong to the job's user.
	caches, err := d.addCaches(ctx, spec, c, h, nil, imageID)
	if err != nil {
		_ = os.RemoveAll(files)
		return err
	}
	c.Env = nil // the cache variables are the job's, with the rest
	cleanup := func() {
		caches.cleanup()
		_ = os.RemoveAll(files)
	}
	id, err := d.create(ctx, c, h)
	if err != nil {
		cleanup()
		return fmt.Errorf("create: %w", err)
	}
	bg := context.WithoutCancel(ctx)
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		d.remove(bg, id)
		cleanup()
		return fmt.Errorf("start: %w", err)
	}
	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil || info.State == nil || !info.State.Running {
		d.remove(bg, id)
		cleanup()
		return fmt.Errorf("started container %.12s is not running (%v)", id, err)
	}
	if info.Image != imageID {
		// The tag moved since the key was taken.
		d.remove(bg, id)
		cleanup()
		return fmt.Errorf("image %s is %s now, not %s", cfg.Image, info.Image, imageID)
	}
	ic.id, ic.files, ic.caches = id, files, caches
	return nil
}

// discard removes a prestarted container (once it is started, if it is
// still being started) in the background.
func (p *prestarter) discard(ic *idleContainer) {
	p.background(func() {
		<-ic.ready
		if ic.err == nil {
			p.release(ic)
		}
	})
}

// background runs f in a goroutine close waits for, or, once close has
// begun, right away.
func (p *prestarter) background(f func()) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		f()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// exitWait bounds how long the removal of a container whose job has ended
// waits for the container's exit.
const exitWait = 5 * time.Second

// releaseAfterExit releases ic once exit, the wait for its container's
// exit (nil: none), has seen it or exitWait has passed, and then ends the
// wait with stopWait. A run ends on the helper's report (PERF-75), a moment
// before the helper exits: removing the container at once would make the
// engine kill it, one more runtime process (runc kill) and engine event a
// job for nothing (PERF-77).
func (p *prestarter) releaseAfterExit(ic *idleContainer, exit *containerExit, stopWait func()) {
	if exit != nil {
		t := time.NewTimer(exitWait)
		select {
		case <-exit.done:
		case <-t.C:
		case <-p.ctx.Done():
		}
		t.Stop()
	}
	stopWait()
	p.release(ic)
}

// release removes ic's container, its files directory and its cache layers.
func (p *prestarter) release(ic *idleContainer) {
	p.d.remove(context.Background(), ic.id)
	ic.caches.cleanup()
	_ = os.RemoveAll(ic.files)
}

// close removes every prestarted container and waits for those being
// started or removed.
func (p *prestarter) close() {
	p.cancel()
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = map[string][]*idleContainer{}
	if p.quiet != nil {
		p.quiet.Stop()
	}
	p.mu.Unlock()
	for _, q := range idle {
		for _, ic := range q {
			p.discard(ic)
		}
	}
	p.wg.Wait()
}

// copyFiles copies spec.Files into dir under the names fileEnv gives them
// below ContainerFiles, readable by anyone.
func copyFiles(spec Spec, dir string) error {
	names, err := fileEnv(spec, ContainerFiles)
	if err != nil {
		return err
	}
	for _, f := range spec.Files {
		dst := filepath.Join(dir, path.Base(names[f.Env]))
		if err := copyFile(f.HostPath, dst); err != nil {
			return fmt.Errorf("%w: file %s: %w", ErrStart, f.Env, err)
		}
	}
	return nil
}

// RunLabels returns the labels (Spec.Labels, named as on a container) of
// the run going on in container id if it was started ahead of its job, and
// nil otherwise: such a container does not carry its job's labels. The
// egress proxy uses it to name the job behind a connection. The map is
// the sandbox's: read it, never change it.
func (d *Docker) RunLabels(id string) map[string]string {
	p := d.pre
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running[id]
}
