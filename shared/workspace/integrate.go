package workspace

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// checkBranch validates a branch name and returns its full ref. A name
// protocol.CheckBranchName accepts (git's rules, in Go) needs no process
// (PERF-67); any other is put to git check-ref-format (once per name), so
// a name is only ever refused by git.
func checkBranch(ctx context.Context, branch string) (string, error) {
	ref := "refs/heads/" + branch
	if branch == "" || strings.HasPrefix(branch, "-") || branch == "HEAD" {
		return "", fmt.Errorf("workspace: invalid branch name %q", branch)
	}
	if protocol.CheckBranchName(branch) == nil || validBranches.has(ref) {
		return ref, nil
	}
	if _, err := (gitexec.Runner{}).Text(ctx, "check-ref-format", ref); err != nil {
		return "", fmt.Errorf("workspace: invalid branch name %q", branch)
	}
	validBranches.add(ref)
	return ref, nil
}

// validBranches are refs check-ref-format accepted.
var validBranches = boundedSet{max: 4096}

// ApplyToBranch applies patch, a binary patch as Workspace.Diff makes, to
// the tip of refs/heads/<branch> in the repository at gitDir (bare or not),
// or to baseCommit if the branch does not exist yet, and moves the branch
// to a new commit with message. No working tree is used or touched: the
// patch is applied to a temporary index. It returns the branch's new tip.
//
// A patch that does not apply returns an error wrapping ErrConflict; if the
// branch moved while the commit was built, the error wraps ErrBranchMoved.
// An empty patch (or one that changes nothing) makes no commit: the branch
// is created at baseCommit if missing and its tip is returned.
//
// The commit has the hardened runner's fixed identity and, with CommitDate,
// a fixed date: the same patch on the same parent with the same message
// and date then always makes the same commit, wherever it is applied.
func ApplyToBranch(ctx context.Context, gitDir, branch, baseCommit string, patch []byte, message string, opts ...CommitOption) (string, error) {
	var co commitOptions
	for _, o := range opts {
		o(&co)
	}
	ref, err := checkBranch(ctx, branch)
	if err != nil {
		return "", err
	}
	g := gitexec.Runner{GitDir: gitDir}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("workspace: apply to branch %s of %s: %w", branch, gitDir, err)
	}

	old, err := g.Text(ctx, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	exists := err == nil
	if err != nil && gitexec.ExitCode(err) != 1 {
		return fail(err)
	}
	parent := old
	if !exists {
		if parent, err = resolveCommit(ctx, g, baseCommit); err != nil {
			return fail(fmt.Errorf("base %s: %w", baseCommit, err))
		}
	}
	if len(bytes.TrimSpace(patch)) == 0 {
		if !exists {
			if err := createOrUpdateRef(ctx, g, ref, parent, "", false); err != nil {
				return fail(err)
			}
		}
		return parent, nil
	}

	tmp, err := os.MkdirTemp("", "supervisor-index-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	gi := g
	gi.Env = []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}
	if _, err := gi.Text(ctx, "read-tree", parent); err != nil {
		return fail(fmt.Errorf("read tree of %s: %w", parent, err))
	}
	if _, err := gi.OutputStdin(ctx, bytes.NewReader(patch), "apply", "--cached", "--binary", "--whitespace=nowarn"); err != nil {
		if gitexec.ExitCode(err) == 1 {
			return fail(fmt.Errorf("%w on %s: %w", ErrConflict, parent, err))
		}
		return fail(fmt.Errorf("apply patch on %s: %w", parent, err))
	}
	tree, err := gi.Text(ctx, "write-tree")
	if err != nil {
		return fail(err)
	}
	parentTree, err := g.Text(ctx, "rev-parse", "--verify", parent+"^{tree}")
	if err != nil {
		return fail(err)
	}
	if tree == parentTree {
		if !exists {
			if err := createOrUpdateRef(ctx, g, ref, parent, "", false); err != nil {
				return fail(err)
			}
		}
		return parent, nil
	}
	if message == "" {
		message = "supervisor: apply patch"
	}
	gc := g
	if !co.date.IsZero() {
		date := fmt.Sprintf("%d +0000", co.date.Unix())
		gc.Env = []string{"GIT_AUTHOR_DATE=" + date, "GIT_COMMITTER_DATE=" + date}
	}
	out, err := gc.OutputStdin(ctx, strings.NewReader(message), "commit-tree", tree, "-p", parent)
	if err != nil {
		return fail(err)
	}
	commit := strings.TrimSpace(string(out))
	if err := createOrUpdateRef(ctx, g, ref, commit, old, exists); err != nil {
		return fail(err)
	}
	return commit, nil
}

// CommitOption configures the commit ApplyToBranch makes.
type CommitOption func(*commitOptions)

type commitOptions struct{ date time.Time }

// CommitDate sets the commit's author and committer date (to the second).
func CommitDate(t time.Time) CommitOption { return func(o *commitOptions) { o.date = t } }

// createOrUpdateRef sets ref to commit if it still has the value old
// (exists) or still does not exist (!exists), atomically.
func createOrUpdateRef(ctx context.Context, g gitexec.Runner, ref, commit, old string, exists bool) error {
	line := fmt.Sprintf("create %s %s\n", ref, commit)
	if exists {
		line = fmt.Sprintf("update %s %s %s\n", ref, commit, old)
	}
	if _, err := g.OutputStdin(ctx, strings.NewReader(line), "update-ref", "--stdin"); err != nil {
		if exists {
			return fmt.Errorf("%w: move %s from %s to %s: %w", ErrBranchMoved, ref, old, commit, err)
		}
		return fmt.Errorf("%w: create %s at %s: %w", ErrBranchMoved, ref, commit, err)
	}
	return nil
}

// ExportBranch writes to outFile a git bundle of refs/heads/<branch> of the
// repository at gitDir, with its whole history.
func ExportBranch(ctx context.Context, gitDir, branch, outFile string) error {
	ref, err := checkBranch(ctx, branch)
	if err != nil {
		return err
	}
	g := gitexec.Runner{GitDir: gitDir}
	out, err := filepath.Abs(outFile)
	if err != nil {
		return fmt.Errorf("workspace: export branch %s of %s: %w", branch, gitDir, err)
	}
	// One process (PERF-67): a bundle of one whole branch has no
	// prerequisites, so there is nothing for bundle verify to find that
	// every fetch from it does not check again; a missing branch is
	// looked for only to explain a failure.
	if _, err := g.Text(ctx, "bundle", "create", "--quiet", out, ref); err != nil {
		if _, rerr := g.Text(ctx, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); rerr != nil {
			return fmt.Errorf("workspace: export branch %s of %s: no such branch: %w", branch, gitDir, err)
		}
		return fmt.Errorf("workspace: export branch %s of %s: %w", branch, gitDir, err)
	}
	return nil
}

// ImportOption is an option of ImportBranch.
type ImportOption func(*importOptions)

type importOptions struct{ tip string }

// KnownTip tells ImportBranch the commit the bundle's branch is at, for a
// repository that should already have it (a workflow that landed nothing
// ends at the base commit it was submitted from): the branch is pointed at
// it with update-ref, without reading the bundle (PERF-67), the same
// outcome as the fetch for a fraction of its work. If the repository lacks
// the commit, the bundle is fetched; but update-ref looks for it first,
// and a partial clone looks for a missing object at its remote, so give
// only a commit the repository is meant to have.
func KnownTip(commit string) ImportOption {
	return func(o *importOptions) { o.tip = commit }
}

// ImportBranch fetches refs/heads/<branch> from bundleFile (as ExportBranch
// makes) into the repository at repoPath as refs/heads/<branch>, creating
// it or overwriting it (the previous value stays in the branch's reflog if
// the repository keeps one); with KnownTip, a commit the repository has is
// set with update-ref instead. A symbolic ref at the branch's name is
// replaced, never followed. The working tree, the index and HEAD are never
// touched; a branch checked out in any worktree of the repository is
// refused.
func ImportBranch(ctx context.Context, repoPath, bundleFile, branch string, opts ...ImportOption) error {
	var o importOptions
	for _, opt := range opts {
		opt(&o)
	}
	ref, err := checkBranch(ctx, branch)
	if err != nil {
		return err
	}
	// The worktree listing is the first git process (PERF-67): only when
	// it fails is the repository checked, to say what is wrong with it.
	abs, err := filepath.Abs(repoPath)
	if err != nil {
		return fmt.Errorf("workspace: import branch %s into %s: %w", branch, repoPath, err)
	}
	g := gitexec.Runner{Dir: abs}
	list, err := g.Text(ctx, "worktree", "list", "--porcelain")
	if err != nil {
		if _, oerr := openRepo(ctx, repoPath); oerr != nil {
			return oerr
		}
		return fmt.Errorf("workspace: import branch %s into %s: %w", branch, repoPath, err)
	}
	sc := bufio.NewScanner(strings.NewReader(list))
	worktree := ""
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "worktree "); ok {
			worktree = p
		}
		if line == "branch "+ref {
			return fmt.Errorf("workspace: import branch %s into %s: the branch is checked out in %s", branch, repoPath, worktree)
		}
	}
	if isObjectID(o.tip) && strings.Trim(o.tip, "0") != "" {
		// update-ref refuses an object the repository lacks, and a
		// branch pointed at anything but a commit (the null id, which
		// would delete the branch, is never given to it); --no-deref
		// replaces a symbolic ref rather than moving what it names.
		if _, err := g.Text(ctx, "update-ref", "--no-deref", "-m", "supervisor: import "+branch, ref, o.tip); err == nil {
			return nil
		}
	}
	bundle, err := filepath.Abs(bundleFile)
	if err == nil {
		_, err = os.Stat(bundle)
	}
	if err != nil {
		return fmt.Errorf("workspace: import branch %s into %s: bundle: %w", branch, repoPath, err)
	}
	// A fetch into a symbolic ref would move the branch it names (perhaps
	// the checked-out one): the symbolic ref is removed first, so it is
	// replaced, as update-ref --no-deref replaces it above.
	if _, err := g.Text(ctx, "symbolic-ref", "-q", ref); err == nil {
		if _, err := g.Text(ctx, "update-ref", "--no-deref", "-d", ref); err != nil {
			return fmt.Errorf("workspace: import branch %s into %s: remove the symbolic ref: %w", branch, repoPath, err)
		}
	}
	if _, err := g.Text(ctx, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules",
		bundle, "+"+ref+":"+ref); err != nil {
		return fmt.Errorf("workspace: import branch %s from %s into %s: %w", branch, bundleFile, repoPath, err)
	}
	return nil
}
