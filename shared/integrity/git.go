package integrity

import (
	"context"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// maxGitOutput caps what one git invocation may write to standard output;
// beyond it the command fails (and the scan with it).
const maxGitOutput = 256 << 20

// gitRunner runs git (through package gitexec, which drops the host's GIT_*
// variables, ignores system and global configuration, turns prompts and
// optional locks off and disables hooks, fsmonitor, LFS filters and the
// untracked cache) against one work tree with the repository named
// explicitly (--git-dir, --work-tree), so nothing a gate writes in the work
// tree (a rewritten .git file, a nested repository) redirects git. This
// package relies in particular on:
//
//   - GIT_OPTIONAL_LOCKS=0 / --no-optional-locks: `git status` never
//     refreshes the index, so our own scans leave .git untouched and cannot
//     cause a false "git" violation;
//   - core.untrackedCache=false: the untracked cache trusts directory
//     mtimes, which a gate can forge with utimes to hide a new file;
//   - submodules are ignored (--ignore-submodules=all on status), so git
//     never runs a nested git against configuration inside the work tree.
type gitRunner struct {
	bin      string
	gitDir   string
	workTree string
	timeout  time.Duration
}

// output runs git with args, bounded by the runner's timeout and by
// maxGitOutput, and returns its standard output.
func (g gitRunner) output(ctx context.Context, args ...string) ([]byte, error) {
	if g.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	r := gitexec.Runner{
		Dir:       g.workTree,
		GitDir:    g.gitDir,
		WorkTree:  g.workTree,
		Binary:    g.bin,
		MaxOutput: maxGitOutput,
	}
	return r.Output(ctx, args...)
}

// status runs the porcelain v1 status the integrity check is built on
// (WI-07): every untracked file listed one by one, ignored paths listed
// with a whole ignored directory as one "dir/" entry.
func (g gitRunner) status(ctx context.Context) ([]StatusEntry, error) {
	out, err := g.output(ctx, "status", "--porcelain=v1", "-z", "--untracked-files=all",
		"--ignored=matching", "--ignore-submodules=all")
	if err != nil {
		return nil, err
	}
	return ParseStatusZ(out)
}

// lsFiles lists every path in the index, clean ones included.
func (g gitRunner) lsFiles(ctx context.Context) ([]string, error) {
	out, err := g.output(ctx, "ls-files", "-z", "--cached")
	if err != nil {
		return nil, err
	}
	return parseNulList(out)
}
