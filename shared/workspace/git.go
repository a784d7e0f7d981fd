package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// gitCmd runs the git binary with argv (never a shell) and a hardened
// environment: every GIT_* variable of the host is dropped, system and
// global configuration are ignored, prompts are disabled, and -c flags turn
// off everything that could run a program git does not ship (hooks,
// fsmonitor, LFS filters) or make results depend on the host (global ignore
// and attributes files, automatic gc). External diff drivers and textconv
// are disabled per command with --no-ext-diff --no-textconv: setting
// diff.external to the empty string would make git try to run "".
type gitCmd struct {
	// dir is the process's working directory ("" = the current one).
	dir string
	// gitDir and workTree, if set, are passed as --git-dir / --work-tree, so
	// git never discovers the repository from a (possibly rewritten) .git.
	gitDir   string
	workTree string
	// env is appended to the hardened environment (e.g. GIT_INDEX_FILE).
	env []string
}

// emptyHooksDir is the directory core.hooksPath points at: created once per
// process, empty, so no hook ever runs.
var emptyHooksDir = sync.OnceValues(func() (string, error) {
	return os.MkdirTemp("", "supervisor-git-nohooks-")
})

// maxStderr caps the git stderr quoted in an error.
const maxStderr = 4 << 10

// run runs git and returns its standard output, trimmed.
func (g gitCmd) run(ctx context.Context, args ...string) (string, error) {
	out, err := g.output(ctx, nil, args...)
	return strings.TrimSpace(string(out)), err
}

// output runs git with stdin (nil = empty) and returns its standard output.
func (g gitCmd) output(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	var stdout bytes.Buffer
	err := g.exec(ctx, stdin, &stdout, args...)
	return stdout.Bytes(), err
}

// exec runs git, writing its standard output to stdout.
func (g gitCmd) exec(ctx context.Context, stdin io.Reader, stdout io.Writer, args ...string) error {
	hooks, err := emptyHooksDir()
	if err != nil {
		return fmt.Errorf("create empty git hooks directory: %w", err)
	}
	argv := []string{
		"-c", "core.fsmonitor=false",
		"-c", "core.hooksPath=" + hooks,
		"-c", "core.excludesFile=/dev/null",
		"-c", "core.attributesFile=/dev/null",
		"-c", "filter.lfs.smudge=",
		"-c", "filter.lfs.clean=",
		"-c", "filter.lfs.process=",
		"-c", "filter.lfs.required=false",
		"-c", "gc.auto=0",
		"-c", "maintenance.auto=false",
		"-c", "user.name=Supervisor",
		"-c", "user.email=supervisor@localhost",
	}
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
	cmd.Stdin = stdin
	cmd.Stdout = stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		gerr := &gitError{cmd: subcommand(args), code: -1, stderr: capStderr(stderr.Bytes()), err: err}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			gerr.code = exit.ExitCode()
		}
		if ctx.Err() != nil {
			gerr.err = ctx.Err()
		}
		return gerr
	}
	return nil
}

// gitEnv is the host environment minus every GIT_* variable, plus the
// variables that keep git away from system and user configuration and from
// the terminal, plus extra.
func gitEnv(extra []string) []string {
	host := os.Environ()
	env := make([]string, 0, len(host)+3+len(extra))
	for _, kv := range host {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
	)
	return append(env, extra...)
}

// subcommand names the git command for errors: "fetch", "worktree add", ….
func subcommand(args []string) string {
	if len(args) == 0 {
		return ""
	}
	switch args[0] {
	case "worktree", "bundle":
		if len(args) > 1 {
			return args[0] + " " + args[1]
		}
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
	cmd    string // git subcommand
	code   int    // exit code, -1 if git did not exit normally
	stderr string // git's standard error, trimmed
	err    error  // the exec error or the context's error
}

func (e *gitError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("git %s: %v", e.cmd, e.err)
	}
	return fmt.Sprintf("git %s: %v: %s", e.cmd, e.err, e.stderr)
}

func (e *gitError) Unwrap() error { return e.err }

// gitExitCode returns the exit code of a failed git invocation in err's
// chain, or -1.
func gitExitCode(err error) int {
	var gerr *gitError
	if errors.As(err, &gerr) {
		return gerr.code
	}
	return -1
}

// isObjectID reports whether s is a full lowercase hex object id (SHA-1 or
// SHA-256).
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// removeAll removes path like os.RemoveAll, first making directories that a
// job made read-only writable again if needed. Symbolic links are never
// followed.
func removeAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	chmodDirs(path)
	return os.RemoveAll(path)
}

// chmodDirs gives the owner full access to root and every directory below
// it, so their entries can be listed and removed.
func chmodDirs(root string) {
	info, err := os.Lstat(root)
	if err != nil || !info.IsDir() {
		return
	}
	_ = os.Chmod(root, 0o700)
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.Type()&fs.ModeType == fs.ModeDir {
			chmodDirs(filepath.Join(root, e.Name()))
		}
	}
}
