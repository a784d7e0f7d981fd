package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// Merging's patience.
const (
	// mergeLockTTL is the merge lock's lease time; it is renewed while the
	// merge runs.
	mergeLockTTL = 30 * time.Second
	// mergeLockWait is the default of Options.MergeLockWait.
	mergeLockWait = 20 * time.Second
	// mergeMoves is how many times a merge is rebuilt when the target
	// moves under it before it gives up until the next decision.
	mergeMoves = 3
)

// MergeLockKey is the state-store key of the lock that serializes merges
// into branch of repository repoID across the fleet.
func MergeLockKey(repoID, branch string) string { return "merge/" + repoID + "/" + branch }

// mergeFailure is a merge that cannot succeed as requested: it is
// recorded as workflow.merge_failed, with the conflicting paths if any,
// rather than tried again.
type mergeFailure struct {
	reason    string
	conflicts []string
}

func (f *mergeFailure) Error() string { return f.reason }

// merge carries out a Merge effect outside the state's lock: the
// workflow's branch is merged into the target branch of the submitting
// repository, and the outcome is appended. A failure that may pass (the
// lock held by another merge for too long, the target moving, the state
// store unreachable) is returned and the merge is decided again later.
func (e *Engine) merge(ctx context.Context, wf string, x statemachine.Merge) (bool, error) {
	var in integration
	e.Read(func(s *statemachine.State) {
		w, _ := s.Workflow(wf)
		in = snapshot(w, "")
	})
	in.history = e.history(wf)
	sctx, span := e.startSpan(ctx, wf, SpanMerge)
	res, err := e.integ.merge(sctx, e.store, e.opts.ID, e.opts.MergeLockWait, in, x)
	telemetry.End(span, err)
	var f *mergeFailure
	if err != nil && !errors.As(err, &f) {
		return false, err
	}
	var ev statemachine.Append
	e.Read(func(s *statemachine.State) {
		w, _ := s.Workflow(wf)
		if f != nil {
			ev = statemachine.MergeFailedEvent(w, x, f.reason, f.conflicts, e.opts.Now())
		} else {
			ev = statemachine.MergedEvent(w, x, res.Commit, res.FastForward, res.UpToDate, e.opts.Now())
		}
	})
	if f != nil {
		e.log.WarnContext(sctx, "merge failed", "workflow", wf, "into", x.Into, "reason", f.reason)
	} else {
		e.log.InfoContext(sctx, "workflow merged", "workflow", wf, "into", x.Into, "commit", res.Commit,
			"fast_forward", res.FastForward, "up_to_date", res.UpToDate)
	}
	return e.append(ctx, ev.Event, ev.MsgID)
}

// merge merges x.Commit into x.Into of the submitting repository, holding
// the fleet-wide lock of that repository and branch. A merge that cannot
// succeed is a *mergeFailure.
func (in *integrator) merge(ctx context.Context, store state.Locks, owner string, wait time.Duration, w integration, x statemachine.Merge) (workspace.MergeResult, error) {
	var none workspace.MergeResult
	if w.repoPath == "" {
		return none, &mergeFailure{reason: "the submission recorded no repository path (the coordinator writes only into " +
			"repositories under its repo roots, --repo-roots): fetch the result branch (coordinator watch --repo) and merge it there with git"}
	}
	if err := in.roots.Check(w.repoPath); err != nil {
		return none, &mergeFailure{reason: fmt.Sprintf("the coordinator writes branches only into repositories its configuration "+
			"allows: %v; fetch the result branch (coordinator watch --repo) and merge it there with git", err)}
	}
	if _, err := os.Stat(filepath.Join(w.repoPath, ".git")); err != nil {
		return none, &mergeFailure{reason: fmt.Sprintf("the submitting repository %s is not visible from this coordinator: "+
			"fetch the result bundle (coordinator watch --repo) and merge %s there with git", w.repoPath, w.branch)}
	}
	if _, err := workspace.ResolveCommit(ctx, w.repoPath, x.Commit); err != nil {
		// Not delivered (the branch was checked out, or the repository
		// appeared later): deliver it now.
		if err := in.deliver(ctx, w); err != nil {
			return none, err
		}
		if _, err := workspace.ResolveCommit(ctx, w.repoPath, x.Commit); err != nil {
			return none, &mergeFailure{reason: fmt.Sprintf("the workflow's commit %s is not in %s and could not be "+
				"delivered there (is branch %s checked out?)", x.Commit, w.repoPath, w.branch)}
		}
	}

	held, lctx, err := holdMergeLock(ctx, store, MergeLockKey(w.repo.ID, x.Into), owner+"/"+w.wf, wait, in)
	if err != nil {
		return none, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = held.Release(rctx)
	}()
	opts := workspace.MergeOptions{Message: x.Message, Date: x.Date}
	for range mergeMoves {
		res, err := workspace.MergeIntoBranch(lctx, w.repoPath, x.Into, x.Commit, opts)
		var ce *workspace.MergeConflictError
		switch {
		case err == nil:
			return res, nil
		case errors.As(err, &ce):
			return none, &mergeFailure{reason: fmt.Sprintf("merge conflict: %s and %s both change %d path(s)",
				w.branch, x.Into, len(ce.Paths)), conflicts: ce.Paths}
		case errors.Is(err, workspace.ErrBranchMoved):
			continue // someone else moved the target: merge on its new tip
		case lctx.Err() != nil:
			if lease.Lost(lctx) {
				return none, fmt.Errorf("engine: merge %s into %s: the merge lock was lost: %w", w.wf, x.Into, err)
			}
			return none, err
		}
		// Anything else (local changes in the target's checkout that the
		// merge would overwrite, a missing target, a commit git cannot
		// merge) stays so until someone changes the repository.
		return none, &mergeFailure{reason: err.Error()}
	}
	return none, fmt.Errorf("engine: merge %s into %s: the branch moved %d times while the merge was built; will try again",
		w.wf, x.Into, mergeMoves)
}

// holdMergeLock takes the merge lock key, waiting up to wait while
// another merge holds it.
func holdMergeLock(ctx context.Context, store state.Locks, key, owner string, wait time.Duration, in *integrator) (*lease.Held, context.Context, error) {
	deadline := time.Now().Add(wait)
	for {
		held, lctx, err := lease.Hold(ctx, store, key, owner, mergeLockTTL, in.log)
		if err == nil {
			return held, lctx, nil
		}
		if !errors.Is(err, state.ErrLocked) || time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("engine: merge lock %s: %w", key, err)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
