package sandbox

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// pipeDrainTimeout bounds how long Run keeps reading stdout/stderr once the
// command's process group has been killed. Normally the pipes reach EOF at
// once; they stay open only if a process that left the group still holds
// them, and Run must not wait for such a process.
const pipeDrainTimeout = 2 * time.Second

// ProcessOptions configures a Process sandbox.
type ProcessOptions struct {
	// Path is the PATH of the command's environment and the list of
	// directories Argv[0] is looked up in ("" = BasePath). Operators may
	// add directories, e.g. where the Go toolchain lives. Empty and relative
	// entries are ignored.
	Path string
	// CacheDir, if set, is a persistent directory exposed to the command as
	// XDG_CACHE_HOME, so caches such as Go's build cache survive between
	// runs. It is created if missing.
	CacheDir string
	// ScratchRoot is where each run's private HOME/TMPDIR directory is
	// created and removed afterwards ("" = os.TempDir()).
	ScratchRoot string
	// RunAs, if set, is the user commands run as instead of the runner's
	// own; the runner must be root (CanSwitchUser). Each workspace is made
	// writable by that user except its .git, the scratch directory and
	// CacheDir become its own; everything else of the runner's (the
	// mirrors the worktrees' .git point to, the runner's files and
	// /proc entries) stays as the runner's umask and ownership make it:
	// not writable by that user, and the runner's environment unreadable.
	RunAs *RunAs
	// Caches configure the caches of Spec.Caches (see cache.go). A command
	// running as the runner's own user (no RunAs) could change the
	// trusted layers' files: they are protected only from another user.
	Caches CacheOptions
	// Owner identifies the runner across restarts (its host id). Every
	// run's marker then starts with a tag of it, and KillLeftovers finds
	// the processes a previous runner of that identity left behind.
	Owner string
}

// Process is the Sandbox that runs commands as local child processes, each
// in its own process group, with a minimal environment built from scratch.
// It confines what the command sees in its environment, which user it runs
// as (ProcessOptions.RunAs) and how long it and its descendants live; it is
// not an isolation boundary for the file system or network (use the Docker
// sandbox for that). See Protections for what a given Process enforces. A
// Process is safe for concurrent use.
type Process struct {
	path        string
	dirs        []string
	cacheDir    string
	scratchRoot string
	runAs       *RunAs
	tag         string // ownerTag(Owner)
	caches      *cacheStore

	cacheMu    sync.Mutex
	cacheOwned bool // cacheDir exists and belongs to runAs
}

var _ Sandbox = (*Process)(nil)

// NewProcess returns a process sandbox configured by opts.
func NewProcess(opts ProcessOptions) *Process {
	var dirs []string
	for _, d := range filepath.SplitList(opts.Path) {
		if filepath.IsAbs(d) {
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	if len(dirs) == 0 {
		dirs = filepath.SplitList(BasePath)
	}
	cacheDir := opts.CacheDir
	if cacheDir != "" {
		if abs, err := filepath.Abs(cacheDir); err == nil {
			cacheDir = abs
		}
	}
	scratch := opts.ScratchRoot
	if scratch == "" {
		scratch = os.TempDir()
	}
	setupRunner()
	var runAs *RunAs
	if opts.RunAs != nil {
		u := *opts.RunAs
		runAs = &u
	}
	caches, err := newCacheStore(opts.Caches)
	if err != nil {
		if opts.Caches.Log != nil {
			opts.Caches.Log.Warn("sandbox: process: no persistent caches", "err", err)
		}
		caches, _ = newCacheStore(CacheOptions{Log: opts.Caches.Log})
	}
	caches.own = true
	return &Process{
		caches:      caches,
		path:        strings.Join(dirs, string(filepath.ListSeparator)),
		dirs:        dirs,
		cacheDir:    cacheDir,
		scratchRoot: scratch,
		runAs:       runAs,
		tag:         ownerTag(opts.Owner),
	}
}

// KillLeftovers kills the processes that runs of an earlier runner with
// the same ProcessOptions.Owner left behind, and returns how many it
// killed. When a runner dies, the parent-death signal kills each command
// it was running but not the command's own children; a restarted runner
// calls this once, before it takes jobs. Processes are recognized by the
// run marker in their environment, so one that erased it is missed. With
// no Owner it does nothing.
func (p *Process) KillLeftovers() int {
	if p.tag == "" {
		return 0
	}
	return killLeftovers(p.tag)
}

// Name returns "process".
func (p *Process) Name() string { return "process" }

// WritableWorkspaces reports whether runs make the workspace writable for
// the sandbox user they run as (MakeWritable).
func (p *Process) WritableWorkspaces() bool { return p.runAs != nil }

// Run executes spec.Argv directly (never through a shell) in
// Workspace/WorkingDir and waits for it to end.
//
// The command gets a fresh environment: PATH, HOME and TMPDIR (a private
// scratch directory removed after the run), LANG=C.UTF-8, TERM=dumb,
// USER=supervisor, XDG_CACHE_HOME when a CacheDir is configured, then
// spec.Env, minus PATH, HOME, USER, PYTHONPATH and LD_* (compared
// case-insensitively), which are silently dropped.
//
// SUPERVISOR_SANDBOX_RUN (RunMarkerEnv) is set to a marker of the run.
//
// The command runs in its own process group. When spec.Timeout passes or
// ctx is cancelled, the group receives SIGTERM and, KillGrace later,
// SIGKILL; TimedOut is set only for the timeout. Whatever is left of the
// group when the command exits is killed too, and so are the run's
// processes that left the group (setsid, double-forking daemons): the
// runner is their child subreaper and recognizes them by the marker or by
// the sandbox user (see sweepRun for the limits). The command itself gets
// SIGKILL if the runner dies (a parent-death signal). A cancellation
// during the run is reported in the Result, not as an error.
//
// If spec.Stdin blocks forever, the goroutine copying it is leaked, as with
// os/exec. A failing spec.Stdout or spec.Stderr stops receiving data; the
// Result tails are unaffected.
func (p *Process) Run(ctx context.Context, spec Spec) (Result, error) {
	return p.runSpec(ctx, spec, nil)
}

// runSpec is Run; warm, for a warm-up run, names the directory each cache
// of the spec is, writable.
func (p *Process) runSpec(ctx context.Context, spec Spec, warm map[string]string) (Result, error) {
	if err := validateSpec(spec); err != nil {
		return Result{}, err
	}
	dir, err := resolveWorkDir(spec.Workspace, spec.WorkingDir)
	if err != nil {
		return Result{}, err
	}
	prog, err := p.lookPath(spec.Argv[0], dir)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("sandbox: not started: %w", err)
	}
	if err := p.ensureCache(); err != nil {
		return Result{}, fmt.Errorf("%w: cache directory: %w", ErrStart, err)
	}
	scratch, err := os.MkdirTemp(p.scratchRoot, "supervisor-run-*")
	if err != nil {
		return Result{}, fmt.Errorf("%w: scratch directory: %w", ErrStart, err)
	}
	defer removeScratch(scratch)
	if p.runAs != nil {
		if err := prepareRunAs(*p.runAs, filepath.Clean(spec.Workspace), scratch); err != nil {
			return Result{}, fmt.Errorf("%w: sandbox user %s: %w", ErrStart, p.runAs, err)
		}
	}

	files, err := fileEnv(spec, "")
	if err != nil {
		return Result{}, err
	}
	cacheVars, err := p.prepareCaches(ctx, spec, scratch, warm)
	if err != nil {
		return Result{}, err
	}
	extra := spec.Env
	if spec.WorkspaceEnv != "" || len(files) > 0 || len(cacheVars) > 0 {
		extra = make(map[string]string, len(spec.Env)+1+len(files)+len(cacheVars))
		for k, v := range spec.Env {
			extra[k] = v
		}
		for k, v := range files {
			extra[k] = v
		}
		for k, v := range cacheVars {
			extra[k] = v
		}
		if spec.WorkspaceEnv != "" {
			extra[spec.WorkspaceEnv] = filepath.Clean(spec.Workspace)
		}
	}
	marker := newMarker(p.tag)
	r, err := p.start(prog, dir, p.buildEnv(scratch, marker, extra, len(spec.Caches) > 0 && p.privateCaches()), spec, marker)
	if err != nil {
		endRun(marker)
		return Result{}, err
	}
	res := r.wait(ctx, spec)
	res.Environment = "process"
	return res, nil
}

// ensureCache creates the cache directory and, with a sandbox user, gives
// it to that user (once: what a runner without one left there is taken
// over too).
func (p *Process) ensureCache() error {
	if p.cacheDir == "" {
		return nil
	}
	p.cacheMu.Lock()
	defer p.cacheMu.Unlock()
	if p.cacheOwned {
		return nil
	}
	if err := os.MkdirAll(p.cacheDir, 0o700); err != nil {
		return err
	}
	if p.runAs != nil {
		if err := chownTree(p.cacheDir, *p.runAs); err != nil {
			return fmt.Errorf("giving it to the sandbox user %s: %w", p.runAs, err)
		}
	}
	p.cacheOwned = true
	return nil
}

// validateSpec checks the parts of spec that need no file system access.
func validateSpec(spec Spec) error {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return fmt.Errorf("%w: empty argv", ErrInvalidSpec)
	}
	for i, a := range spec.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: argv[%d] contains a NUL byte", ErrInvalidSpec, i)
		}
	}
	if k := spec.WorkspaceEnv; k != "" && (strings.ContainsAny(k, "=\x00") || deniedEnv(k)) {
		return fmt.Errorf("%w: invalid workspace variable name %q", ErrInvalidSpec, k)
	}
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%w: invalid environment variable name %q", ErrInvalidSpec, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: environment variable %s contains a NUL byte", ErrInvalidSpec, k)
		}
	}
	if err := validateCaches(spec.Caches); err != nil {
		return err
	}
	switch {
	case spec.Timeout < 0:
		return fmt.Errorf("%w: negative timeout %v", ErrInvalidSpec, spec.Timeout)
	case spec.KillGrace < 0:
		return fmt.Errorf("%w: negative kill grace %v", ErrInvalidSpec, spec.KillGrace)
	case spec.OutputLimit < 0:
		return fmt.Errorf("%w: negative output limit %d", ErrInvalidSpec, spec.OutputLimit)
	}
	return nil
}

// resolveWorkDir returns the absolute working directory for workspace and
// rel, which must be an existing directory inside the workspace reached
// without following any symlink below the workspace root.
func resolveWorkDir(workspace, rel string) (string, error) {
	if !filepath.IsAbs(workspace) {
		return "", fmt.Errorf("%w: workspace %q is not an absolute path", ErrInvalidSpec, workspace)
	}
	root := filepath.Clean(workspace)
	fi, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("%w: workspace: %w", ErrInvalidSpec, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: workspace %q is not a directory", ErrInvalidSpec, root)
	}
	if rel == "" {
		return root, nil
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: working directory %q is not a relative path inside the workspace", ErrInvalidSpec, rel)
	}
	dir := root
	for _, part := range strings.Split(filepath.Clean(rel), string(filepath.Separator)) {
		if part == "." {
			continue
		}
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		if err != nil {
			return "", fmt.Errorf("%w: working directory %q: %w", ErrInvalidSpec, rel, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%w: working directory %q has a symlink component %q", ErrInvalidSpec, rel, part)
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%w: working directory %q: %q is not a directory", ErrInvalidSpec, rel, part)
		}
	}
	return dir, nil
}

// lookPath resolves name like a shell would with the sandbox's PATH: a name
// containing a slash is used as is (relative to dir); otherwise the first
// executable regular file in the PATH directories wins. The host's PATH is
// never consulted.
func (p *Process) lookPath(name, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if err := checkExecutable(name); err != nil {
			return "", fmt.Errorf("%w: %w", ErrStart, err)
		}
		return name, nil
	}
	for _, d := range p.dirs {
		candidate := filepath.Join(d, name)
		if checkExecutable(candidate) == nil {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("%w: %q not found in sandbox PATH %q", ErrStart, name, p.path)
}

// checkExecutable reports why path cannot be executed, if it visibly can't.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: %w", path, fs.ErrPermission)
	}
	return nil
}

// deniedEnv reports whether a spec.Env name may not override the base.
func deniedEnv(name string) bool {
	u := strings.ToUpper(name)
	switch u {
	case "PATH", "HOME", "USER", "PYTHONPATH":
		return true
	}
	return strings.HasPrefix(u, "LD_")
}

// buildEnv returns the command's environment, sorted by name. A run with
// caches of its own (private) gets XDG_CACHE_HOME in its scratch
// directory, thrown away with it, instead of the shared CacheDir.
func (p *Process) buildEnv(scratch, marker string, extra map[string]string, private bool) []string {
	env := map[string]string{
		"PATH":   p.path,
		"HOME":   scratch,
		"TMPDIR": scratch,
		"LANG":   "C.UTF-8",
		"TERM":   "dumb",
		"USER":   "supervisor",
	}
	switch {
	case private:
		env["XDG_CACHE_HOME"] = filepath.Join(scratch, ".cache")
	case p.cacheDir != "":
		env["XDG_CACHE_HOME"] = p.cacheDir
	}
	for k, v := range extra {
		if !deniedEnv(k) {
			env[k] = v
		}
	}
	env[RunMarkerEnv] = marker
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// removeScratch deletes a run's scratch directory, making read-only
// directories writable first if needed (Go's module cache, for instance,
// is read-only).
func removeScratch(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// run is one started command.
type run struct {
	cmd       *exec.Cmd
	pgid      int
	marker    string // RunMarkerEnv of the run
	runAs     *RunAs
	startedAt time.Time
	stdout    *TailBuffer
	stderr    *TailBuffer
	readers   []*os.File     // parent ends of stdout and stderr
	stdinW    *os.File       // parent end of stdin, nil if none
	copying   sync.WaitGroup // stdout and stderr copiers
	exited    chan struct{}  // closed once the child has exited (not reaped)
}

// start launches prog with its standard streams wired to pipes owned by
// Run, so that waiting for the process never depends on who else holds
// them.
func (p *Process) start(prog, dir string, env []string, spec Spec, marker string) (*run, error) {
	r := &run{
		marker: marker,
		runAs:  p.runAs,
		stdout: NewTailBuffer(spec.OutputLimit),
		stderr: NewTailBuffer(spec.OutputLimit),
		exited: make(chan struct{}),
	}
	var childEnds []*os.File
	closeAll := func(files []*os.File) {
		for _, f := range files {
			f.Close()
		}
	}
	fail := func(what string, err error) (*run, error) {
		closeAll(childEnds)
		closeAll(r.readers)
		if r.stdinW != nil {
			r.stdinW.Close()
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrStart, what, err)
	}

	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if p.runAs != nil {
		attr.Credential = p.runAs.credential()
	}
	cmd := &exec.Cmd{
		Path:        prog,
		Args:        spec.Argv,
		Env:         env,
		Dir:         dir,
		SysProcAttr: attr,
	}
	if spec.Stdin != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			return fail("stdin pipe", err)
		}
		childEnds = append(childEnds, pr)
		r.stdinW = pw
		cmd.Stdin = pr
	}
	// Tee writes to the caller's writers are serialized: spec.Stdout and
	// spec.Stderr are often the same writer.
	var teeMu sync.Mutex
	outputs := []struct {
		tail *TailBuffer
		sink io.Writer
		dst  *io.Writer
	}{
		{r.stdout, spec.Stdout, &cmd.Stdout},
		{r.stderr, spec.Stderr, &cmd.Stderr},
	}
	var writers []io.Writer
	for _, o := range outputs {
		pr, pw, err := os.Pipe()
		if err != nil {
			return fail("output pipe", err)
		}
		r.readers = append(r.readers, pr)
		childEnds = append(childEnds, pw)
		*o.dst = pw
		writers = append(writers, &teeWriter{tail: o.tail, sink: o.sink, mu: &teeMu})
	}

	r.startedAt = time.Now()
	if err := startLocked(cmd, marker, r.exited); err != nil {
		return fail(spec.Argv[0], err)
	}
	closeAll(childEnds)
	r.cmd = cmd
	r.pgid = cmd.Process.Pid

	for i, rd := range r.readers {
		r.copying.Add(1)
		go func(w io.Writer, rd *os.File) {
			defer r.copying.Done()
			_, _ = io.Copy(w, rd)
		}(writers[i], rd)
	}
	if r.stdinW != nil {
		go func(w *os.File, src io.Reader) {
			_, _ = io.Copy(w, src)
			w.Close()
		}(r.stdinW, spec.Stdin)
	}
	go func() {
		waitExited(r.pgid)
		close(r.exited)
	}()
	return r, nil
}

// startLocked starts cmd from a goroutine locked to its OS thread, which
// stays alive until exited is closed: the kernel sends the parent-death
// signal when the thread that forked the child exits, not the process,
// and Go ends a thread whose goroutine exits while locked to it. It holds
// runner.forking for reading until the command runs its own program (so
// a sweep never sees it without its marker) and registers its pid.
func startLocked(cmd *exec.Cmd, marker string, exited <-chan struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		runner.forking.RLock()
		err := cmd.Start()
		if err == nil {
			setRunPid(marker, cmd.Process.Pid)
		}
		runner.forking.RUnlock()
		started <- err
		if err != nil {
			return
		}
		<-exited
	}()
	return <-started
}

// wait supervises the run until the command has exited, its process group
// is gone and its output is collected.
func (r *run) wait(ctx context.Context, spec Spec) Result {
	grace, timeout, stopTimer := spec.limits()
	defer stopTimer()

	var res Result
	select {
	case <-r.exited:
	case <-timeout:
		res.TimedOut = !r.hasExited()
		r.terminate(grace)
	case <-ctx.Done():
		r.terminate(grace)
	}
	res.Duration = time.Since(r.startedAt)
	// The child has exited but is not reaped yet, so its pid still names
	// our process group: kill whatever the command left running in it.
	_ = syscall.Kill(-r.pgid, syscall.SIGKILL)
	_ = r.cmd.Wait() // the exit status is read from ProcessState below
	// Processes of the run that left its group are the runner's children
	// now (it is their subreaper): find and kill them, and reap them.
	sweepRun(r.marker, r.pgid, r.runAs)

	// With the group dead the pipes reach EOF; only a process that escaped
	// the group could keep them open, so stop reading after a while.
	drained := make(chan struct{})
	go func() {
		r.copying.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(pipeDrainTimeout):
	}
	for _, rd := range r.readers {
		rd.Close()
	}
	<-drained
	if r.stdinW != nil {
		r.stdinW.Close()
	}

	res.StartedAt = r.startedAt
	res.ExitCode = -1
	if st := r.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Exited():
				res.ExitCode = ws.ExitStatus()
			case ws.Signaled():
				res.Signal = signalName(ws.Signal())
			}
		}
	}
	res.Stdout, res.StdoutTruncated = r.stdout.Bytes(), r.stdout.Truncated()
	res.Stderr, res.StderrTruncated = r.stderr.Bytes(), r.stderr.Truncated()
	return res
}

// hasExited reports whether the command has already exited.
func (r *run) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// terminate sends SIGTERM to the process group and, if the command has not
// exited after grace, SIGKILL; it returns once the command has exited.
func (r *run) terminate(grace time.Duration) {
	if r.hasExited() {
		return
	}
	_ = syscall.Kill(-r.pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-r.exited:
	case <-t.C:
		_ = syscall.Kill(-r.pgid, syscall.SIGKILL)
		<-r.exited
	}
}

// waitExited blocks until the child pid has exited, without reaping it
// (waitid with WNOWAIT), so that its pid — and thus its process group ID —
// cannot be reused while Run still signals the group. On an unexpected
// error it returns early; the caller then reaps as usual.
func waitExited(pid int) {
	const pPID = 1     // P_PID in <sys/wait.h>
	var info [128]byte // siginfo_t; contents unused
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}
