package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Workspace is one job's checkout, made by Manager.Prepare. Its methods are
// safe for concurrent use.
type Workspace struct {
	// Dir is the absolute path of the worktree the job runs in.
	Dir string
	// Base is the commit the job's change is measured against: the base
	// commit, or the commit of the dependency patches applied on it.
	Base string

	m    *Manager
	slot *slot // the pool slot the workspace is in
	// snap is the worktree as Prepare left it, so Diff knows without git
	// that nothing changed (nil: always ask git).
	snap *snapshot
	// rec is the slot as Prepare left it, so Close knows whether the slot
	// may go back to the pool without being emptied (nil: emptied).
	rec *pristine

	mu     sync.Mutex
	closed bool
}

// git runs in the worktree with the repository named explicitly (the
// slot's registration in the mirror), so nothing the job writes in Dir (a
// rewritten .git file, a nested repository) changes which repository or
// configuration git uses.
func (w *Workspace) git() gitexec.Runner {
	return gitexec.Runner{Dir: w.Dir, GitDir: w.slot.admin, WorkTree: w.Dir}
}

// reset detaches the emptied slot's HEAD at commit and checks commit out
// with one git process, which writes the index and every file of its tree.
func (w *Workspace) reset(ctx context.Context, commit string) error {
	if err := writeNew(filepath.Join(w.slot.admin, "HEAD"), commit+"\n"); err != nil {
		return err
	}
	os.Remove(filepath.Join(w.slot.admin, "index"))
	_, err := w.git().Text(ctx, "read-tree", "--reset", "-u", commit)
	return err
}

// GitDir is the worktree's git directory: its registration in the mirror,
// holding its HEAD and index.
func (w *Workspace) GitDir() string { return w.slot.admin }

// CommonDir is the git directory the worktree shares with the mirror:
// objects, configuration and info/.
func (w *Workspace) CommonDir() string { return w.slot.mirror }

// Git returns a runner of git in the workspace, its repository named
// explicitly as the workspace's own operations run it.
func (w *Workspace) Git() gitexec.Runner { return w.git() }

// commitIndex commits the index on top of HEAD and moves the detached HEAD
// to the new commit, with plumbing only (no hooks, no signing).
func (w *Workspace) commitIndex(ctx context.Context, message string) (string, error) {
	g := w.git()
	head, err := g.Text(ctx, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", err
	}
	tree, err := g.Text(ctx, "write-tree")
	if err != nil {
		return "", err
	}
	commit, err := g.OutputStdin(ctx, strings.NewReader(message), "commit-tree", tree, "-p", head)
	if err != nil {
		return "", err
	}
	sha := strings.TrimSpace(string(commit))
	if _, err := g.Text(ctx, "update-ref", "--no-deref", "-m", "supervisor: dependencies", "HEAD", sha, head); err != nil {
		return "", err
	}
	return sha, nil
}

// Diff returns everything the job changed relative to Base as a binary
// patch that git apply accepts: modified, deleted and new files (untracked
// files included, ignored ones excluded per .gitignore), binary content
// included, commits the job made included. A workspace without changes
// yields an empty patch. When every file is as Prepare left it (compared
// by type, size, inode, modification time and execute bit, and by content
// for files written in the same tick of the file system's clock as the
// index, see snapshot), the patch is empty and no git runs; otherwise Diff
// stages the whole worktree in the workspace's index as a side effect.
func (w *Workspace) Diff(ctx context.Context) ([]byte, error) {
	return w.DiffLimit(ctx, 0)
}

// DiffLimit is Diff that stops git once the patch is over limit bytes
// (0: no limit) and fails with ErrDiffTooLarge, so a huge change is never
// held in memory.
func (w *Workspace) DiffLimit(ctx context.Context, limit int) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, fmt.Errorf("workspace: diff %s: workspace is closed", w.Dir)
	}
	if w.snap != nil && w.snap.unchanged(w.Dir) {
		return nil, nil
	}
	g := w.git()
	if limit > 0 {
		g.MaxOutput = limit
	}
	if _, err := g.Text(ctx, "add", "--all"); err != nil {
		return nil, fmt.Errorf("workspace: diff %s: %w", w.Dir, err)
	}
	patch, err := g.Output(ctx, "diff-index", "--cached", "--patch", "--binary", "--full-index",
		"--no-ext-diff", "--no-textconv", "--no-color", w.Base, "--")
	if errors.Is(err, gitexec.ErrOutputLimit) {
		return nil, fmt.Errorf("workspace: diff %s against %s: %w: over %d bytes", w.Dir, w.Base, ErrDiffTooLarge, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace: diff %s against %s: %w", w.Dir, w.Base, err)
	}
	return patch, nil
}

// ApplyWork applies a patch to the workspace without committing it, on
// top of Base: a retry starts from the previous attempt's work, and Diff
// then holds that work and what the agent adds. The patch is checked
// against its size and SHA-256 (ErrIntegrity); one that does not apply
// is ErrConflict.
func (w *Workspace) ApplyWork(ctx context.Context, ref protocol.PatchRef) error {
	if ref.Size == 0 {
		return nil
	}
	file, err := w.m.fetchPatch(ctx, ref)
	if err != nil {
		return fmt.Errorf("workspace: start from %s: %w", ref.Object, err)
	}
	defer os.Remove(file)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("workspace: start from %s: workspace is closed", ref.Object)
	}
	w.snap = nil // the work is a change the next Diff must find
	if _, err := w.git().Text(ctx, "apply", "--binary", "--index", "--whitespace=nowarn", file); err != nil {
		if gitexec.ExitCode(err) == 1 {
			err = fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return fmt.Errorf("workspace: start from patch %q of node %s on %s: %w", ref.Object, ref.NodeID, w.Base, err)
	}
	return nil
}

// Close empties the workspace's slot (the job's files, the worktree's
// index, HEAD, refs and logs) and keeps it for the Manager's next job; a
// slot still exactly as Prepare left it (see pristine) is kept without
// being emptied, for the next job of the same checkout. A
// slot that cannot be emptied is given up to the host (the next Prepare
// that takes it, or Sweep, tries again). Close is idempotent; only the
// first call does the work.
func (w *Workspace) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.rec != nil && w.rec.holds(w.slot) {
		w.slot.kept = w.rec // nothing of the job's is in it (PERF-55)
		w.m.putSlot(w.slot)
		return nil
	}
	if err := w.m.empty(w.slot); err != nil {
		w.slot.release()
		return fmt.Errorf("workspace: close %s: %w", w.Dir, err)
	}
	w.m.putSlot(w.slot)
	return nil
}
