package gatecache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// gitCmd runs the git binary with argv (never a shell) and a hardened
// environment, following shared/workspace: every GIT_* variable of the host
// is dropped, system and global configuration are ignored, prompts are
// disabled, optional locks are off (so no command here ever rewrites the
// workspace's index behind our back, seed C20), and -c flags turn off
// everything that could run a program git does not ship (hooks, fsmonitor,
// LFS filters) or make the result depend on the host or on stale index
// bits (global ignore and attributes files, untracked cache, split index,
// relaxed stat checks, automatic gc).
type gitCmd struct {
	// dir is the process's working directory.
	dir string
	// gitDir and workTree, if set, are passed as --git-dir / --work-tree.
	gitDir   string
	workTree string
	// env is appended to the hardened environment (GIT_INDEX_FILE, …).
	env []string
}

// emptyHooksDir is the directory core.hooksPath points at: created once per
// process, empty, so no hook ever runs.
var emptyHooksDir = sync.OnceValues(func() (string, error) {
	return os.MkdirTemp("", "supervisor-gatecache-nohooks-")
})

// maxStderr caps the git stderr quoted in an error.
const maxStderr = 2 << 10

// hardenedConfig are the -c flags every git invocation gets.
func hardenedConfig(hooks string) []string {
	return []string{
		"-c", "core.fsmonitor=false",
		"-c", "core.hooksPath=" + hooks,
		"-c", "core.excludesFile=/dev/null",
		"-c", "core.attributesFile=/dev/null",
		"-c", "core.untrackedCache=false",
		"-c", "core.splitIndex=false",
		"-c", "core.checkStat=default",
		"-c", "core.trustctime=true",
		"-c", "core.ignoreStat=false",
		"-c", "filter.lfs.smudge=",
		"-c", "filter.lfs.clean=",
		"-c", "filter.lfs.process=",
		"-c", "filter.lfs.required=false",
		"-c", "submodule.recurse=false",
		"-c", "gc.auto=0",
		"-c", "maintenance.auto=false",
		"-c", "user.name=Supervisor",
		"-c", "user.email=supervisor@localhost",
	}
}

// output runs git and returns its standard output.
func (g gitCmd) output(ctx context.Context, args ...string) ([]byte, error) {
	hooks, err := emptyHooksDir()
	if err != nil {
		return nil, fmt.Errorf("create empty git hooks directory: %w", err)
	}
	argv := hardenedConfig(hooks)
	if g.gitDir != "" {
		argv = append(argv, "--git-dir="+g.gitDir)
	}
	if g.workTree != "" {
		argv = append(argv, "--work-tree="+g.workTree)
	}
	argv = append(argv, args...)

	cmd := exec.CommandContext(ctx, "git", argv...)
	cmd.Dir = g.dir
	cmd.Env = gitEnv(g.env)
	cmd.Stdin = nil
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &gitError{cmd: subcommand(args), stderr: capStderr(stderr.Bytes()), err: err}
	}
	return stdout.Bytes(), nil
}

// run runs git and returns its standard output, trimmed.
func (g gitCmd) run(ctx context.Context, args ...string) (string, error) {
	out, err := g.output(ctx, args...)
	return strings.TrimSpace(string(out)), err
}

// gitEnv is the host environment minus every GIT_* variable, plus the
// variables that keep git away from system and user configuration, from
// the terminal and from optional index writes, plus extra.
func gitEnv(extra []string) []string {
	host := os.Environ()
	env := make([]string, 0, len(host)+4+len(extra))
	for _, kv := range host {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
	)
	return append(env, extra...)
}

// subcommand names the git command for errors.
func subcommand(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func capStderr(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > maxStderr {
		s = s[:maxStderr] + " …(truncated)"
	}
	return s
}

// gitError is a failed git invocation.
type gitError struct {
	cmd    string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("git %s: %v", e.cmd, e.err)
	}
	return fmt.Sprintf("git %s: %v: %s", e.cmd, e.err, e.stderr)
}

func (e *gitError) Unwrap() error { return e.err }

// copyFile copies src to dst and gives dst src's modification time, so
// git's racy-entry check (an entry whose mtime is not older than the index
// file is re-read by content) works on the copy exactly as on the original.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chtimes(dst, info.ModTime(), info.ModTime())
}

// isNotExist reports whether err means a path does not exist.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
