package workspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// Errors of MergeIntoBranch besides ErrBranchMoved; check with errors.Is.
var (
	// ErrMergeConflict means the two branches change the same lines (or
	// a file one deletes); the error is a *MergeConflictError.
	ErrMergeConflict = errors.New("merge conflict")
	// ErrLocalChanges means the target branch is checked out in a
	// worktree whose uncommitted changes (or untracked files) the merge
	// would overwrite; git's message, in the error, names them.
	ErrLocalChanges = errors.New("the checkout has local changes the merge would overwrite")
	// ErrNoBranch means the target branch does not exist.
	ErrNoBranch = errors.New("no such branch")
	// ErrNoCommit means the commit to merge is not in the repository.
	ErrNoCommit = errors.New("commit not in the repository")
)

// MergeConflictError lists the paths a merge conflicts on.
type MergeConflictError struct {
	Target, Commit string
	// Paths are the conflicting paths, sorted, each once.
	Paths []string
}

func (e *MergeConflictError) Error() string {
	return fmt.Sprintf("merging %s into %s conflicts in %d path(s): %s", e.Commit, e.Target, len(e.Paths),
		strings.Join(e.Paths, ", "))
}

// Unwrap makes errors.Is(err, ErrMergeConflict) true.
func (e *MergeConflictError) Unwrap() error { return ErrMergeConflict }

// MergeResult is what MergeIntoBranch did.
type MergeResult struct {
	// Old is the target's tip before, Commit after.
	Old, Commit string
	// FastForward is set when the target only moved forward to the
	// merged commit; UpToDate when it already contained it (nothing
	// changed). Otherwise Commit is a new merge commit.
	FastForward, UpToDate bool
}

// MergeOptions configures the merge commit MergeIntoBranch makes.
type MergeOptions struct {
	// Message is the merge commit's message.
	Message string
	// Date, if set, is the merge commit's author and committer date (to
	// the second): the same merge on the same tips then makes the same
	// commit wherever and however often it is made.
	Date time.Time

	// beforeUpdate, if set, runs just before the branch is moved (tests
	// move the branch there to race the compare-and-swap).
	beforeUpdate func()
}

// MergeIntoBranch merges commit into refs/heads/<target> of the repository
// at repoPath: a fast-forward when target is an ancestor of commit,
// nothing when commit is already in target, otherwise a merge commit
// (first parent the target's tip, second commit) of the tree
// `git merge-tree --write-tree` computes, made with plumbing. A target no
// worktree has checked out is moved with a compare-and-swap on the tip it
// had when the merge began, touching no working tree, index or HEAD. A
// target checked out in a worktree moves as `git merge` would move it
// there: that worktree's HEAD, index and files fast-forward to the result
// (`git merge --ff-only`), and git refuses, changing nothing, when that
// would overwrite local changes (ErrLocalChanges).
//
// A conflict returns a *MergeConflictError (errors.Is ErrMergeConflict)
// naming the conflicting paths, and changes no ref; a target that moved
// meanwhile returns ErrBranchMoved and changes nothing either (merging
// again is safe). A missing target is ErrNoBranch, and a commit the
// repository lacks ErrNoCommit.
func MergeIntoBranch(ctx context.Context, repoPath, target, commit string, opts MergeOptions) (MergeResult, error) {
	ref, err := checkBranch(ctx, target)
	if err != nil {
		return MergeResult{}, err
	}
	if !isObjectID(commit) {
		return MergeResult{}, fmt.Errorf("workspace: merge into %s: %q is not a full commit id", target, commit)
	}
	g, err := openRepo(ctx, repoPath)
	if err != nil {
		return MergeResult{}, err
	}
	fail := func(err error) (MergeResult, error) {
		return MergeResult{}, fmt.Errorf("workspace: merge %s into %s of %s: %w", commit, target, repoPath, err)
	}
	wt, err := checkedOutIn(ctx, g, ref)
	if err != nil {
		return fail(err)
	}
	old, err := g.Text(ctx, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		if gitexec.ExitCode(err) == 1 {
			return fail(fmt.Errorf("%w %s", ErrNoBranch, target))
		}
		return fail(err)
	}
	if _, err := g.Text(ctx, "cat-file", "-e", commit+"^{commit}"); err != nil {
		return fail(ErrNoCommit)
	}
	res := MergeResult{Old: old}
	if ok, err := isAncestor(ctx, g, commit, old); err != nil {
		return fail(err)
	} else if ok {
		res.Commit, res.UpToDate = old, true
		return res, nil
	}
	next := commit
	if ok, err := isAncestor(ctx, g, old, commit); err != nil {
		return fail(err)
	} else if ok {
		res.FastForward = true
	} else {
		tree, err := mergeTree(ctx, g, target, old, commit)
		if err != nil {
			return fail(err)
		}
		gc := g
		if !opts.Date.IsZero() {
			date := fmt.Sprintf("%d +0000", opts.Date.Unix())
			gc.Env = []string{"GIT_AUTHOR_DATE=" + date, "GIT_COMMITTER_DATE=" + date}
		}
		msg := opts.Message
		if msg == "" {
			msg = fmt.Sprintf("Merge %s into %s\n", commit, target)
		}
		out, err := gc.OutputStdin(ctx, strings.NewReader(msg), "commit-tree", tree, "-p", old, "-p", commit)
		if err != nil {
			return fail(fmt.Errorf("merge commit: %w", err))
		}
		next = strings.TrimSpace(string(out))
	}
	if opts.beforeUpdate != nil {
		opts.beforeUpdate()
	}
	if wt != "" {
		if err := fastForwardCheckout(ctx, wt, old, next); err != nil {
			return fail(err)
		}
	} else if err := createOrUpdateRef(ctx, g, ref, next, old, true); err != nil {
		return fail(err)
	}
	res.Commit = next
	return res, nil
}

// mergeTree writes the tree of merging theirs into ours and returns it,
// or a *MergeConflictError naming the conflicting paths.
func mergeTree(ctx context.Context, g gitexec.Runner, target, ours, theirs string) (string, error) {
	out, err := g.Output(ctx, "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs)
	var gerr *gitexec.Error
	if errors.As(err, &gerr) {
		out = gerr.Stdout // exit 1: the tree, then the conflicting paths
	}
	fields := strings.Split(string(out), "\x00")
	switch {
	case err == nil:
		if !isObjectID(fields[0]) {
			return "", fmt.Errorf("merge-tree printed %q, not a tree id", fields[0])
		}
		return fields[0], nil
	case gitexec.ExitCode(err) == 1 && isObjectID(fields[0]):
		seen := map[string]bool{}
		var paths []string
		for _, p := range fields[1:] {
			if p != "" && !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
		slices.Sort(paths)
		return "", &MergeConflictError{Target: target, Commit: theirs, Paths: paths}
	}
	return "", fmt.Errorf("merge-tree: %w", err)
}

// isAncestor reports whether a is an ancestor of (or the same as) b.
func isAncestor(ctx context.Context, g gitexec.Runner, a, b string) (bool, error) {
	_, err := g.Text(ctx, "merge-base", "--is-ancestor", a, b)
	switch {
	case err == nil:
		return true, nil
	case gitexec.ExitCode(err) == 1:
		return false, nil
	}
	return false, fmt.Errorf("merge-base --is-ancestor %s %s: %w", a, b, err)
}

// fastForwardCheckout moves the branch checked out in worktree wt from
// old to next, with its index and files, as `git merge --ff-only` does:
// git checks that no local change would be lost and changes nothing if
// one would. A HEAD that is no longer old is ErrBranchMoved.
func fastForwardCheckout(ctx context.Context, wt, old, next string) error {
	w := gitexec.Runner{Dir: wt}
	head, err := w.Text(ctx, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return fmt.Errorf("checkout %s: %w", wt, err)
	}
	if head != old {
		return fmt.Errorf("%w: checked out in %s at %s, not %s", ErrBranchMoved, wt, head, old)
	}
	if _, err := w.Text(ctx, "merge", "--ff-only", "--quiet", "--no-stat", next); err != nil {
		var gerr *gitexec.Error
		if errors.As(err, &gerr) {
			msg := gerr.Stderr + "\n" + string(gerr.Stdout)
			switch {
			case strings.Contains(msg, "would be overwritten"), strings.Contains(msg, "would be removed"):
				return fmt.Errorf("%w (checked out in %s): %s", ErrLocalChanges, wt, strings.TrimSpace(msg))
			case strings.Contains(strings.ToLower(msg), "not possible to fast-forward"):
				return fmt.Errorf("%w: checked out in %s, it moved during the merge", ErrBranchMoved, wt)
			}
		}
		return fmt.Errorf("fast-forward the checkout in %s: %w", wt, err)
	}
	return nil
}

// checkedOutIn returns the worktree ref is checked out in, "" if none.
func checkedOutIn(ctx context.Context, g gitexec.Runner, ref string) (string, error) {
	list, err := g.Text(ctx, "worktree", "list", "--porcelain")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(list))
	worktree, bare := "", false
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "worktree "); ok {
			worktree, bare = p, false
		}
		if line == "bare" {
			bare = true
		}
		if line == "branch "+ref && !bare {
			return worktree, nil
		}
	}
	return "", sc.Err()
}

// CurrentBranch returns the branch rev names in the repository at
// repoPath: for "HEAD", the branch checked out there; for a branch name or
// refs/heads/… ref, that branch. It returns "" for anything else (a
// detached HEAD, a commit id, a tag).
func CurrentBranch(ctx context.Context, repoPath, rev string) (string, error) {
	g, err := openRepo(ctx, repoPath)
	if err != nil {
		return "", err
	}
	if rev == "" || strings.HasPrefix(rev, "-") {
		return "", nil
	}
	var full string
	if rev == "HEAD" {
		full, err = g.Text(ctx, "symbolic-ref", "--quiet", "HEAD")
		if gitexec.ExitCode(err) == 1 {
			return "", nil // detached
		}
	} else {
		full, err = g.Text(ctx, "rev-parse", "--verify", "--quiet", "--symbolic-full-name", rev)
		if gitexec.ExitCode(err) == 1 {
			return "", nil
		}
	}
	if err != nil {
		return "", fmt.Errorf("workspace: branch of %q in %s: %w", rev, repoPath, err)
	}
	branch, ok := strings.CutPrefix(full, "refs/heads/")
	if !ok {
		return "", nil
	}
	return branch, nil
}
