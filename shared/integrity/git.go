package integrity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// maxGitOutput caps what one git invocation may write to standard output;
// beyond it the command fails (and the scan with it).
const maxGitOutput = 256 << 20

// maxGitStderr caps the git stderr quoted in an error.
const maxGitStderr = 2 << 10

// gitRunner runs the git binary (argv, never a shell) against one work tree
// with the repository named explicitly (--git-dir, --work-tree), so nothing
// a gate writes in the work tree (a rewritten .git file, a nested
// repository) redirects git. The environment is hardened like the workspace
// package's: every GIT_* variable of the host is dropped, system and global
// configuration are ignored, prompts are off, and -c flags disable
// everything that could run a program git does not ship (hooks, fsmonitor,
// LFS filters) or make the result depend on the host. In addition:
//
//   - GIT_OPTIONAL_LOCKS=0 / --no-optional-locks: `git status` never
//     refreshes the index, so our own scans leave .git untouched and cannot
//     cause a false "git" violation (spec §30 C20);
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

func (g gitRunner) output(ctx context.Context, args ...string) ([]byte, error) {
	if g.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	argv := []string{
		"--no-optional-locks",
		"-c", "core.fsmonitor=false",
		"-c", "core.untrackedCache=false",
		"-c", "core.hooksPath=" + os.DevNull,
		"-c", "core.excludesFile=" + os.DevNull,
		"-c", "core.attributesFile=" + os.DevNull,
		"-c", "filter.lfs.smudge=",
		"-c", "filter.lfs.clean=",
		"-c", "filter.lfs.process=",
		"-c", "filter.lfs.required=false",
		"-c", "gc.auto=0",
		"-c", "maintenance.auto=false",
		"-c", "status.submoduleSummary=false",
		"--git-dir=" + g.gitDir,
		"--work-tree=" + g.workTree,
	}
	argv = append(argv, args...)
	bin := g.bin
	if bin == "" {
		bin = "git"
	}
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Dir = g.workTree
	cmd.Env = gitEnv()
	cmd.WaitDelay = time.Second
	stdout := &limitedBuffer{max: maxGitOutput}
	stderr := &limitedBuffer{max: maxGitStderr, discard: true}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if stdout.overflow {
			err = fmt.Errorf("output exceeds %d bytes", maxGitOutput)
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("git %s: %w: %s", args[0], err, msg)
		}
		return nil, fmt.Errorf("git %s: %w", args[0], err)
	}
	return stdout.Bytes(), nil
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

// gitEnv is the host environment minus every GIT_* variable, plus the
// variables that keep git away from system and user configuration, from the
// terminal and from optional index writes.
func gitEnv() []string {
	host := os.Environ()
	env := make([]string, 0, len(host)+4)
	for _, kv := range host {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
	)
}

// limitedBuffer keeps at most max bytes. Past the limit a write fails,
// which stops exec's copy and so the child (SIGPIPE), or, with discard, the
// excess is silently dropped.
type limitedBuffer struct {
	bytes.Buffer
	max      int
	discard  bool
	overflow bool
}

var errOverflow = errors.New("output limit exceeded")

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		if b.discard {
			b.Buffer.Write(p[:max(0, b.max-b.Len())])
			return len(p), nil
		}
		b.overflow = true
		return 0, errOverflow
	}
	return b.Buffer.Write(p)
}
