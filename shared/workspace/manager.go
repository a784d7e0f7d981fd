// Package workspace materializes the git workspace of a job on any host.
//
// On submission, the client resolves the base commit (ResolveCommit), names
// the repository (RepoID) and uploads a bundle of its history
// (CreateBundle). On workers, gate runners and the coordinator, a Manager
// keeps one bare mirror per repository, filled from the bundle the first
// time a commit is needed, and prepares each job a fresh worktree at the
// base commit with the job's dependency patches applied (Prepare); the
// job's own change is Workspace.Diff. The coordinator integrates accepted
// patches into a branch without a working tree (ApplyToBranch) and hands
// the branch back to the user (ExportBranch, ImportBranch).
//
// Every git operation runs the git binary through package gitexec, with a
// hardened environment: no hooks, no fsmonitor, no external diff or
// filters, no user or system configuration, no inherited GIT_* variables.
package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Errors; check with errors.Is.
var (
	// ErrIntegrity means a downloaded object does not match the size or
	// SHA-256 its reference promised.
	ErrIntegrity = errors.New("object does not match its reference")
	// ErrDiffTooLarge means a workspace's patch is over DiffLimit's limit.
	ErrDiffTooLarge = errors.New("patch too large")
	// ErrConflict means a patch does not apply to the tree it was meant for.
	ErrConflict = errors.New("patch does not apply")
	// ErrBranchMoved means the branch changed while ApplyToBranch built its
	// commit; reading the new tip and retrying is safe.
	ErrBranchMoved = errors.New("branch moved concurrently")
)

// Objects is what the Manager needs from an object store;
// jetstream.ObjectStore satisfies it.
type Objects interface {
	// GetFile writes the object name to file, creating or truncating it.
	GetFile(ctx context.Context, name, file string, opts ...jetstream.GetObjectOpt) error
	// GetInfo returns the object's metadata (its size is checked before a
	// bundle is downloaded).
	GetInfo(ctx context.Context, name string, opts ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error)
}

// Manager materializes workspaces under one root directory, which may be
// shared by several processes on the host:
//
//	<root>/mirrors/<repo-id>.git     bare mirror of a repository
//	<root>/mirrors/<repo-id>.lock    flock serializing changes to the mirror
//	<root>/pool/<repo-id>/<n>/       a pooled worktree of the mirror (Workspace.Dir)
//	<root>/pool/<repo-id>/<n>.lock   flock held by the process owning the slot
//	<root>/tmp/                      downloads and registrations in progress
//
// Each slot of a pool is registered in its mirror once, as
// worktrees/pool-<n>, and serves one job at a time: Prepare empties it and
// checks the job's commit out, Close empties it again, unless the job left
// it exactly as Prepare made it (then the next job of the same checkout gets
// it as it is, see pristine). A process keeps the slots it closed (their
// flocks held) for its next jobs; a process that
// dies releases its flocks, and its slots are taken over by the next
// Prepare on the host or removed by Sweep. <root>/jobs/ held one worktree
// per job before pools; Sweep removes what is left of it.
//
// A Manager is safe for concurrent use.
type Manager struct {
	root, mirrors, pool, jobs, tmp string
	bundles, patches               Objects
	log                            *slog.Logger
	// maxBundle is the largest bundle downloaded (protocol.MaxBundleBytes;
	// tests lower it).
	maxBundle int64

	mu    sync.Mutex
	locks map[string]chan struct{} // per repository id, in-process
	idle  map[string][]*slot       // per repository id: closed slots this process holds
	known boundedSet               // repository id + "\x00" + commit: commits the mirror holds
	shape func(dir string) error   // see SetShape
}

// SetShape makes Prepare apply shape to every checkout it writes, once the
// patches are in and before the checkout is recorded, then refresh the
// worktree's index so that its stat data matches the files again. It is
// for a sandbox's own changes to a workspace (permissions for its user,
// sandbox.MakeWritable): made ahead, they leave the sandbox's runs
// nothing to change, so a job that changes nothing leaves its slot as
// Prepare made it and the slot can be handed on (PERF-55). Call it before
// the first Prepare.
func (m *Manager) SetShape(shape func(dir string) error) { m.shape = shape }

// NewManager returns a Manager rooted at root (created if missing) that
// downloads bundles and patches from the given object stores (BucketBundles
// and BucketPatches). patches may be nil if no workspace will need any.
// log may be nil.
func NewManager(root string, bundles, patches Objects, log *slog.Logger) (*Manager, error) {
	if bundles == nil {
		return nil, errors.New("workspace: NewManager: bundles store is required")
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("workspace: git binary: %w", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace: root %s: %w", root, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		root:      abs,
		mirrors:   filepath.Join(abs, "mirrors"),
		pool:      filepath.Join(abs, "pool"),
		jobs:      filepath.Join(abs, "jobs"),
		tmp:       filepath.Join(abs, "tmp"),
		bundles:   bundles,
		patches:   patches,
		log:       log,
		maxBundle: protocol.MaxBundleBytes,
		locks:     make(map[string]chan struct{}),
		idle:      make(map[string][]*slot),
		known:     boundedSet{max: 4096},
	}
	for _, dir := range []string{m.mirrors, m.pool, m.tmp} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("workspace: root %s: %w", abs, err)
		}
	}
	return m, nil
}

// Root returns the Manager's absolute root directory.
func (m *Manager) Root() string { return m.root }

var repoIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func validateRepo(repo protocol.RepoRef) error {
	if !repoIDRE.MatchString(repo.ID) || strings.Contains(repo.ID, "..") {
		return fmt.Errorf("workspace: invalid repository id %q", repo.ID)
	}
	if !isObjectID(repo.BaseCommit) {
		return fmt.Errorf("workspace: repository %s: base commit %q is not a full lowercase hex object id", repo.ID, repo.BaseCommit)
	}
	return nil
}

func (m *Manager) mirrorPath(id string) string { return filepath.Join(m.mirrors, id+".git") }

// lockMirror serializes changes to one mirror: goroutines of this process
// queue on a channel, processes on the host on a flock. The returned
// function releases both.
func (m *Manager) lockMirror(ctx context.Context, id string) (func(), error) {
	m.mu.Lock()
	ch, ok := m.locks[id]
	if !ok {
		ch = make(chan struct{}, 1)
		m.locks[id] = ch
	}
	m.mu.Unlock()

	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("lock mirror %s: %w", id, ctx.Err())
	}
	f, err := lockFile(ctx, filepath.Join(m.mirrors, id+".lock"))
	if err != nil {
		<-ch
		return nil, fmt.Errorf("lock mirror %s: %w", id, err)
	}
	return func() {
		f.Close()
		<-ch
	}, nil
}

// Mirror makes sure the host's mirror of repo contains repo.BaseCommit,
// downloading the repository's bundle only if it does not, and returns the
// mirror's git directory. A commit the Manager found in the mirror once is
// not looked for again while the mirror's directory exists: mirrors only
// grow (commits are pinned by refs, gc is off). It is safe to call
// concurrently, from any number of goroutines and processes sharing the
// root.
func (m *Manager) Mirror(ctx context.Context, repo protocol.RepoRef) (string, error) {
	if err := validateRepo(repo); err != nil {
		return "", err
	}
	if m.knows(repo) {
		if fi, err := os.Stat(m.mirrorPath(repo.ID)); err == nil && fi.IsDir() {
			return m.mirrorPath(repo.ID), nil
		}
		m.forget(repo)
	}
	return m.checkMirror(ctx, repo)
}

// checkMirror is Mirror without trusting what the Manager remembers.
func (m *Manager) checkMirror(ctx context.Context, repo protocol.RepoRef) (string, error) {
	unlock, err := m.lockMirror(ctx, repo.ID)
	if err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	defer unlock()
	dir, err := m.ensureMirror(ctx, repo)
	if err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	return dir, nil
}

// ensureMirror is Mirror for a caller holding the mirror lock.
func (m *Manager) ensureMirror(ctx context.Context, repo protocol.RepoRef) (string, error) {
	dir := m.mirrorPath(repo.ID)
	if fi, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := m.initMirror(ctx, repo, dir); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", fmt.Errorf("mirror %s: %w", repo.ID, err)
	} else if fi.Mode().Perm() != mirrorMode {
		// A mirror made before mirrors were readable by the process
		// sandbox's user.
		if err := os.Chmod(dir, mirrorMode); err != nil {
			return "", fmt.Errorf("mirror %s: %w", repo.ID, err)
		}
	}
	g := gitexec.Runner{GitDir: dir}
	if hasCommit(ctx, g, repo.BaseCommit) {
		m.remember(repo)
		return dir, nil
	}
	if repo.Bundle == "" {
		return "", fmt.Errorf("mirror %s lacks commit %s and the job names no bundle", repo.ID, repo.BaseCommit)
	}

	info, err := m.bundles.GetInfo(ctx, repo.Bundle)
	if err != nil {
		return "", fmt.Errorf("mirror %s: look up bundle %q for commit %s: %w", repo.ID, repo.Bundle, repo.BaseCommit, err)
	}
	if int64(info.Size) > m.maxBundle {
		return "", fmt.Errorf("mirror %s: %s", repo.ID, protocol.BundleTooLarge(repo.Bundle, int64(info.Size)))
	}
	file, err := m.tempFile("bundle-")
	if err != nil {
		return "", fmt.Errorf("mirror %s: %w", repo.ID, err)
	}
	defer os.Remove(file)
	start := time.Now()
	if err := m.bundles.GetFile(ctx, repo.Bundle, file); err != nil {
		return "", fmt.Errorf("mirror %s: download bundle %q for commit %s: %w", repo.ID, repo.Bundle, repo.BaseCommit, err)
	}
	// Keep the bundle's refs (and so its objects) under a namespace of their
	// own; a ref on the base commit itself survives whatever the bundle named.
	refspec := "+refs/*:refs/supervisor/bundles/" + repo.BaseCommit + "/*"
	if _, err := g.Text(ctx, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules", file, refspec); err != nil {
		return "", fmt.Errorf("mirror %s: fetch bundle %q for commit %s: %w", repo.ID, repo.Bundle, repo.BaseCommit, err)
	}
	if !hasCommit(ctx, g, repo.BaseCommit) {
		return "", fmt.Errorf("mirror %s: bundle %q does not contain commit %s", repo.ID, repo.Bundle, repo.BaseCommit)
	}
	if _, err := g.Text(ctx, "update-ref", "refs/supervisor/base/"+repo.BaseCommit, repo.BaseCommit); err != nil {
		return "", fmt.Errorf("mirror %s: pin commit %s: %w", repo.ID, repo.BaseCommit, err)
	}
	m.remember(repo)
	m.log.InfoContext(ctx, "workspace: mirror updated from bundle", "repo", repo.ID, "commit", repo.BaseCommit,
		"bundle", repo.Bundle, "bytes", info.Size, "took", time.Since(start))
	return dir, nil
}

// initMirror creates an empty bare mirror at dir, atomically: it is built
// beside dir and renamed into place, so a crash leaves no half mirror.
func (m *Manager) initMirror(ctx context.Context, repo protocol.RepoRef, dir string) error {
	tmp, err := os.MkdirTemp(m.mirrors, ".init-"+repo.ID+"-")
	if err != nil {
		return fmt.Errorf("create mirror %s: %w", repo.ID, err)
	}
	defer os.RemoveAll(tmp)
	format := "sha1"
	if len(repo.BaseCommit) == 64 {
		format = "sha256"
	}
	if _, err := (gitexec.Runner{}).Text(ctx, "init", "--quiet", "--bare", "--template=", "--object-format="+format, tmp); err != nil {
		return fmt.Errorf("create mirror %s: %w", repo.ID, err)
	}
	// Agents may run git in their worktrees without our flags: make sure
	// that never garbage-collects the shared mirror behind our back.
	g := gitexec.Runner{GitDir: tmp}
	for _, kv := range [][2]string{{"gc.auto", "0"}, {"maintenance.auto", "false"}, {"core.logAllRefUpdates", "false"}} {
		if _, err := g.Text(ctx, "config", kv[0], kv[1]); err != nil {
			return fmt.Errorf("create mirror %s: %w", repo.ID, err)
		}
	}
	// Readable, not writable, by others: the process sandbox may run
	// commands as another user, whose git reads the mirror through the
	// worktree's .git and must never change it.
	if err := os.Chmod(tmp, mirrorMode); err != nil {
		return fmt.Errorf("create mirror %s: %w", repo.ID, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("create mirror %s: %w", repo.ID, err)
	}
	return nil
}

// mirrorMode is the permission of a mirror's git directory; what git
// creates in it follows the process's umask.
const mirrorMode = 0o755

func hasCommit(ctx context.Context, g gitexec.Runner, sha string) bool {
	_, err := g.Text(ctx, "cat-file", "-e", sha+"^{commit}")
	return err == nil
}

// tempFile returns the name of a new empty file under the root's tmp/.
func (m *Manager) tempFile(prefix string) (string, error) {
	f, err := os.CreateTemp(m.tmp, prefix)
	if err != nil {
		return "", err
	}
	name := f.Name()
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// fetchPatch downloads a patch to a temporary file and checks its size and
// digest against ref. The caller removes the file.
func (m *Manager) fetchPatch(ctx context.Context, ref protocol.PatchRef) (string, error) {
	if m.patches == nil {
		return "", fmt.Errorf("patch %q: the Manager has no patches store", ref.Object)
	}
	if ref.Size > protocol.MaxPatchBytes {
		// Never downloaded: no worker uploads one, and no coordinator
		// gates one (protocol.MaxPatchBytes).
		return "", fmt.Errorf("%w: patch %q of node %s: %s", ErrIntegrity, ref.Object, ref.NodeID, protocol.PatchTooLarge(ref.Size))
	}
	file, err := m.tempFile("patch-")
	if err != nil {
		return "", fmt.Errorf("patch %q: %w", ref.Object, err)
	}
	if err := m.patches.GetFile(ctx, ref.Object, file); err != nil {
		os.Remove(file)
		return "", fmt.Errorf("download patch %q of node %s: %w", ref.Object, ref.NodeID, err)
	}
	f, err := os.Open(file)
	if err != nil {
		os.Remove(file)
		return "", fmt.Errorf("patch %q: %w", ref.Object, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	f.Close()
	if err != nil {
		os.Remove(file)
		return "", fmt.Errorf("patch %q: %w", ref.Object, err)
	}
	if n != ref.Size {
		os.Remove(file)
		return "", fmt.Errorf("%w: patch %q of node %s is %d bytes, want %d", ErrIntegrity, ref.Object, ref.NodeID, n, ref.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(sum, ref.SHA256) {
		os.Remove(file)
		return "", fmt.Errorf("%w: patch %q of node %s has SHA-256 %s, want %s", ErrIntegrity, ref.Object, ref.NodeID, sum, ref.SHA256)
	}
	return file, nil
}

// Prepare materializes a fresh workspace for a job: a worktree of the
// repository's mirror, detached at repo.BaseCommit, with patches applied in
// order (each verified against its size and SHA-256, ErrIntegrity
// otherwise; one that does not apply yields ErrConflict) and, if there were
// any, committed as a single "supervisor: dependencies" commit, which
// becomes Workspace.Base. The worktree is a slot of the mirror's pool that
// no other job uses meanwhile, in this process or another: emptied of
// everything the previous job left (files, index, HEAD, refs and logs of
// the worktree) and checked out afresh with one `git read-tree`, or, when
// the previous job in it was of the same checkout and left it exactly as
// Prepare made it, handed on as it is (PERF-55). The caller must Close the
// workspace.
func (m *Manager) Prepare(ctx context.Context, repo protocol.RepoRef, patches []protocol.PatchRef, jobID string) (_ *Workspace, err error) {
	if err := validateRepo(repo); err != nil {
		return nil, err
	}
	// Download and verify the patches first: a bad one costs no worktree.
	files := make([]string, 0, len(patches))
	defer func() {
		for _, f := range files {
			os.Remove(f)
		}
	}()
	for _, p := range patches {
		f, err := m.fetchPatch(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("workspace: prepare job %s: %w", jobID, err)
		}
		files = append(files, f)
	}

	state := pristineState(repo.BaseCommit, patches)
	ws, err := m.checkout(ctx, repo, state)
	if err != nil {
		return nil, fmt.Errorf("workspace: prepare job %s: %w", jobID, err)
	}
	if ws.rec != nil {
		m.log.DebugContext(ctx, "workspace: prepared in a slot kept as it was", "job", jobID, "dir", ws.Dir, "repo", repo.ID, "base", ws.Base)
		return ws, nil
	}
	defer func() {
		if err != nil {
			if cerr := ws.Close(); cerr != nil {
				m.log.WarnContext(ctx, "workspace: cleanup after failed prepare", "job", jobID, "dir", ws.Dir, "err", cerr)
			}
		}
	}()
	g := ws.git()
	applied := 0
	var body strings.Builder
	for i, p := range patches {
		if p.Size == 0 {
			continue
		}
		if _, err := g.Text(ctx, "apply", "--binary", "--index", "--whitespace=nowarn", files[i]); err != nil {
			var gerr *gitexec.Error
			if gitexec.ExitCode(err) == 1 && errors.As(err, &gerr) {
				err = &PatchConflictError{NodeID: p.NodeID, Object: p.Object, Before: nodesOf(patches[:i]), Detail: gerr.Stderr, err: err}
			}
			return nil, fmt.Errorf("workspace: prepare job %s: apply patch %q of node %s on %s: %w", jobID, p.Object, p.NodeID, repo.BaseCommit, err)
		}
		applied++
		fmt.Fprintf(&body, "%s: %s\n", p.NodeID, p.Object)
	}
	if applied > 0 {
		base, err := ws.commitIndex(ctx, "supervisor: dependencies\n\n"+body.String())
		if err != nil {
			return nil, fmt.Errorf("workspace: prepare job %s: commit dependency patches: %w", jobID, err)
		}
		ws.Base = base
	}
	if m.shape != nil {
		if err := m.shape(ws.Dir); err != nil {
			return nil, fmt.Errorf("workspace: prepare job %s: %w", jobID, err)
		}
		if _, err := g.Text(ctx, "update-index", "-q", "--refresh"); err != nil {
			return nil, fmt.Errorf("workspace: prepare job %s: refresh the index: %w", jobID, err)
		}
	}
	if racyFrom, err := mtimeOf(filepath.Join(ws.slot.admin, "index")); err == nil {
		ws.snap = takeSnapshot(ws.Dir, racyFrom)
	}
	ws.rec = recordPristine(ws, state)
	m.log.DebugContext(ctx, "workspace: prepared", "job", jobID, "dir", ws.Dir, "repo", repo.ID, "base", ws.Base, "patches", applied)
	return ws, nil
}

// checkout takes a slot of the repository's pool, empties it and checks
// out repo.BaseCommit in it; a slot kept as a Prepare of the same state
// left it, and still exactly so, is handed out as it is instead (its
// Workspace's rec set). A slot that cannot be emptied is given up and
// the next one tried. When the mirror was only remembered to hold the
// commit and either step fails, the mirror is checked (and filled from the
// bundle if need be) and the slot tried once more.
func (m *Manager) checkout(ctx context.Context, repo protocol.RepoRef, state string) (*Workspace, error) {
	mirror, remembered, err := m.mirrorOf(ctx, repo)
	if err != nil {
		return nil, err
	}
	skip := map[int]bool{}
	for {
		s, err := m.takeSlot(repo.ID, mirror, skip, state)
		if err != nil {
			return nil, err
		}
		if k := s.kept; k != nil {
			s.kept = nil
			if k.state == state && k.holds(s) {
				return &Workspace{Dir: s.dir, Base: k.base, m: m, slot: s, snap: k.snap, rec: k}, nil
			}
		}
		ws := &Workspace{Dir: s.dir, Base: repo.BaseCommit, m: m, slot: s}
		emptied, err := m.fill(ctx, ws, repo.BaseCommit)
		if err != nil && remembered {
			m.forget(repo)
			remembered = false
			if _, merr := m.checkMirror(ctx, repo); merr != nil {
				s.release()
				return nil, merr
			}
			emptied, err = m.fill(ctx, ws, repo.BaseCommit)
		}
		switch {
		case err == nil:
			return ws, nil
		case emptied:
			ws.Close() //nolint:errcheck // reported by the next Prepare that takes the slot
			return nil, fmt.Errorf("check out %s of %s: %w", repo.BaseCommit, repo.ID, err)
		}
		s.release()
		m.log.WarnContext(ctx, "workspace: cannot empty a pool slot; trying another", "slot", s.dir, "err", err)
		skip[s.n] = true
		if len(skip) >= maxSlotFailures {
			return nil, err
		}
	}
}

// fill empties the workspace's slot and checks commit out in it; emptied
// says whether the slot was emptied.
func (m *Manager) fill(ctx context.Context, ws *Workspace, commit string) (emptied bool, err error) {
	if err := m.empty(ws.slot); err != nil {
		return false, err
	}
	return true, ws.reset(ctx, commit)
}

// mirrorOf returns the mirror's git directory and whether it was only
// remembered to hold repo.BaseCommit (see Mirror), without looking at the
// mirror then: a checkout that fails tells.
func (m *Manager) mirrorOf(ctx context.Context, repo protocol.RepoRef) (string, bool, error) {
	if m.knows(repo) {
		return m.mirrorPath(repo.ID), true, nil
	}
	dir, err := m.checkMirror(ctx, repo)
	return dir, false, err
}

// knows reports whether repo's mirror was found to hold repo.BaseCommit.
func (m *Manager) knows(repo protocol.RepoRef) bool {
	return m.known.has(repo.ID + "\x00" + repo.BaseCommit)
}

// remember records that repo's mirror holds repo.BaseCommit.
func (m *Manager) remember(repo protocol.RepoRef) {
	m.known.add(repo.ID + "\x00" + repo.BaseCommit)
}

// forget drops what remember recorded.
func (m *Manager) forget(repo protocol.RepoRef) {
	m.known.remove(repo.ID + "\x00" + repo.BaseCommit)
}

// pruneWorktrees drops the mirror's registrations of worktrees whose
// directory is gone (pool slots are locked and never dropped).
func (m *Manager) pruneWorktrees(ctx context.Context, id string) error {
	unlock, err := m.lockMirror(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := (gitexec.Runner{GitDir: m.mirrorPath(id)}).Text(ctx, "worktree", "prune"); err != nil {
		return fmt.Errorf("prune worktrees of mirror %s: %w", id, err)
	}
	return nil
}

// Sweep removes what crashed processes left behind: pool slots no process
// holds whose directory is older than olderThan (their files and their
// registration in the mirror; the next Prepare makes them again), job
// directories of the layout before pools, stale downloads and half-created
// mirrors; then it prunes the mirrors' registrations of worktrees whose
// directory is gone. Slots and workspaces held by any live process are
// never touched.
func (m *Manager) Sweep(ctx context.Context, olderThan time.Duration) error {
	cutoff := time.Now().Add(-olderThan)
	old := func(e os.DirEntry) bool {
		info, err := e.Info()
		return err == nil && info.ModTime().Before(cutoff)
	}
	var errs []error
	removed := 0

	n, err := m.sweepPool(ctx, old)
	removed += n
	if err != nil {
		errs = append(errs, err)
	}
	n, err = m.sweepJobs(ctx, old)
	removed += n
	if err != nil {
		errs = append(errs, err)
	}

	if entries, err := os.ReadDir(m.tmp); err == nil {
		for _, e := range entries {
			if old(e) {
				if err := removeAll(filepath.Join(m.tmp, e.Name())); err != nil {
					errs = append(errs, fmt.Errorf("workspace: sweep: %w", err))
				}
			}
		}
	}

	entries, err := os.ReadDir(m.mirrors)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("workspace: sweep %s: %w", m.mirrors, err))...)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir() && strings.HasPrefix(name, ".init-") && old(e):
			if err := removeAll(filepath.Join(m.mirrors, name)); err != nil {
				errs = append(errs, fmt.Errorf("workspace: sweep: %w", err))
			}
		case e.IsDir() && strings.HasSuffix(name, ".git"):
			if err := m.pruneWorktrees(ctx, strings.TrimSuffix(name, ".git")); err != nil {
				errs = append(errs, fmt.Errorf("workspace: sweep: %w", err))
			}
		}
	}
	if removed > 0 {
		m.log.Info("workspace: swept abandoned workspaces", "removed", removed, "root", m.root)
	}
	return errors.Join(errs...)
}

// sweepPool removes the pool slots no process holds whose directory is
// old. Their lock files stay: removing a lock file another process may
// have just opened would let two processes hold the same slot.
func (m *Manager) sweepPool(ctx context.Context, old func(os.DirEntry) bool) (int, error) {
	repos, err := os.ReadDir(m.pool)
	if err != nil {
		return 0, fmt.Errorf("workspace: sweep %s: %w", m.pool, err)
	}
	var errs []error
	removed := 0
	for _, r := range repos {
		if !r.IsDir() || !repoIDRE.MatchString(r.Name()) {
			continue
		}
		entries, err := os.ReadDir(m.poolDir(r.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("workspace: sweep: %w", err))
			continue
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return removed, fmt.Errorf("workspace: sweep: %w", err)
			}
			n, err := strconv.Atoi(e.Name())
			if err != nil || n < 0 || !old(e) {
				continue
			}
			s := m.newSlot(r.Name(), m.mirrorPath(r.Name()), n)
			lock, ok, err := tryLockFile(s.lockPath)
			if err != nil {
				errs = append(errs, fmt.Errorf("workspace: sweep: %w", err))
				continue
			}
			if !ok {
				continue // held by a live process
			}
			if err := s.unregister(); err != nil {
				errs = append(errs, fmt.Errorf("workspace: sweep slot %s: %w", s.dir, err))
			} else {
				removed++
			}
			lock.Close()
		}
	}
	return removed, errors.Join(errs...)
}

// sweepJobs removes the job directories of the layout before pools whose
// workspace is not in use, with their lock files.
func (m *Manager) sweepJobs(ctx context.Context, old func(os.DirEntry) bool) (int, error) {
	entries, err := os.ReadDir(m.jobs)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("workspace: sweep %s: %w", m.jobs, err)
	}
	var errs []error
	removed := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("workspace: sweep: %w", err)
		}
		path := filepath.Join(m.jobs, e.Name())
		var dir, lockPath string
		switch {
		case e.IsDir():
			dir, lockPath = path, path+".lock"
		case strings.HasSuffix(e.Name(), ".lock"):
			dir, lockPath = strings.TrimSuffix(path, ".lock"), path
			if _, err := os.Lstat(dir); err == nil {
				continue // handled with its directory
			}
		default:
			continue
		}
		if !old(e) {
			continue
		}
		lock, ok, err := tryLockFile(lockPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("workspace: sweep: %w", err))
			continue
		}
		if !ok {
			continue // in use
		}
		if err := removeAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("workspace: sweep %s: %w", dir, err))
		} else {
			os.Remove(lockPath)
			removed++
		}
		lock.Close()
	}
	return removed, errors.Join(errs...)
}
