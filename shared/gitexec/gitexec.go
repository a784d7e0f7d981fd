// Package gitexec runs the git binary hardened against its host and against
// the repository it works on.
//
// Every invocation is an argv (never a shell) with:
//
//   - no GIT_* variable of the host (GIT_DIR, GIT_CONFIG_PARAMETERS,
//     GIT_EXEC_PATH, … could redirect git or inject configuration);
//   - no system or global configuration (GIT_CONFIG_NOSYSTEM=1,
//     GIT_CONFIG_GLOBAL=/dev/null), so nothing in HOME or XDG_CONFIG_HOME
//     applies;
//   - no prompts (GIT_TERMINAL_PROMPT=0) and no optional locks
//     (GIT_OPTIONAL_LOCKS=0 and --no-optional-locks: `git status` never
//     rewrites the index as a side effect);
//   - -c flags, which override the repository's own configuration, turning
//     off everything that could run a program git does not ship (hooks,
//     fsmonitor, LFS filters) or make a result depend on the host or on
//     stale index bits (global ignore and attributes files, the untracked
//     cache, the split index, relaxed stat checks, submodule recursion,
//     automatic gc and maintenance), plus a fixed committer identity.
//
// External diff drivers and textconv filters cannot be switched off by
// configuration (diff.external set to "" makes git try to run ""): commands
// that produce diffs must pass --no-ext-diff --no-textconv themselves.
package gitexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// MaxStderr caps the git standard error kept and quoted in an Error.
const MaxStderr = 4 << 10

// waitDelay bounds how long a run waits for git's output pipes to close
// once git has exited or the context is done: a guard against a process
// git left holding them, not a deadline for git. It is generous because
// the goroutines reading the pipes may not run for a while on a loaded
// machine (one second failed a `git rev-parse` under the race detector on
// two busy cores).
const waitDelay = 5 * time.Second

// ErrOutputLimit is in the chain of an Error when git wrote more than
// Runner.MaxOutput bytes to standard output.
var ErrOutputLimit = errors.New("git output limit exceeded")

// Runner describes how to run git; the zero value runs it in the current
// directory, discovering the repository from there. A Runner holds no
// state: copy it and change a field to run git differently.
type Runner struct {
	// Dir is the working directory of git ("" = the current one).
	Dir string
	// GitDir and WorkTree, if set, are passed as --git-dir / --work-tree,
	// so git never discovers the repository from a (possibly rewritten)
	// .git entry.
	GitDir   string
	WorkTree string
	// Env is added to the hardened environment, as KEY=VALUE. A GIT_*
	// key must be one of those that locate the repository, its index and
	// objects, or set commit identities and dates (see allowedEnv):
	// anything else is refused, so Env cannot undo the hardening.
	Env []string
	// Binary is the git executable ("" = "git", looked up in PATH).
	Binary string
	// MaxOutput, if positive, caps git's standard output: past it git is
	// stopped and the run fails with ErrOutputLimit.
	MaxOutput int
}

// Output runs git with args (without the leading "git") and returns its
// standard output. Standard input is empty.
func (r Runner) Output(ctx context.Context, args ...string) ([]byte, error) {
	return r.OutputStdin(ctx, nil, args...)
}

// OutputStdin is Output with stdin as git's standard input (nil = empty).
func (r Runner) OutputStdin(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	env, err := hardenedEnv(r.Env)
	if err != nil {
		return nil, &Error{Args: args, ExitCode: -1, Err: err}
	}
	argv := make([]string, 0, len(hardenedFlags)+2+len(args))
	argv = append(argv, hardenedFlags...)
	if r.GitDir != "" {
		argv = append(argv, "--git-dir="+r.GitDir)
	}
	if r.WorkTree != "" {
		argv = append(argv, "--work-tree="+r.WorkTree)
	}
	argv = append(argv, args...)
	bin := r.Binary
	if bin == "" {
		bin = "git"
	}

	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Dir = r.Dir
	cmd.Env = env
	cmd.Stdin = stdin
	cmd.WaitDelay = waitDelay
	stdout := &limitedBuffer{max: r.MaxOutput}
	stderr := &limitedBuffer{max: MaxStderr, discard: true}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		gerr := &Error{Args: args, ExitCode: -1, Stderr: stderr.text(), Err: err}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			gerr.ExitCode = exit.ExitCode()
		}
		if ctx.Err() != nil {
			gerr.Err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if stdout.overflow {
			gerr.Err = fmt.Errorf("%w: more than %d bytes", ErrOutputLimit, r.MaxOutput)
		} else {
			gerr.Stdout = stdout.Bytes()
		}
		return nil, gerr
	}
	return stdout.Bytes(), nil
}

// Text runs git like Output and returns its standard output with leading
// and trailing white space removed.
func (r Runner) Text(ctx context.Context, args ...string) (string, error) {
	out, err := r.Output(ctx, args...)
	return strings.TrimSpace(string(out)), err
}

// Error is a failed git invocation.
type Error struct {
	// Args are the arguments the caller gave (not the hardening flags).
	Args []string
	// ExitCode is git's exit status, or -1 if git did not exit normally
	// (not started, killed, stopped at the output limit).
	ExitCode int
	// Stderr is git's standard error, trimmed and capped at MaxStderr.
	Stderr string
	// Stdout is what git wrote to standard output before it failed (some
	// commands, such as merge-tree, report through their exit status and
	// output both); nil past the output limit.
	Stdout []byte
	// Err is the cause: an *exec.ExitError, the context's error, an error
	// starting git, or ErrOutputLimit.
	Err error
}

// Error returns "git ARGS: CAUSE: STDERR".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("git")
	for _, a := range e.Args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") || !strconv.CanBackquote(a) {
			a = strconv.Quote(a)
		}
		b.WriteString(a)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ExitCode returns the exit status of the failed git invocation in err's
// chain, or -1 if there is none or git did not exit normally.
func ExitCode(err error) int {
	var gerr *Error
	if errors.As(err, &gerr) {
		return gerr.ExitCode
	}
	return -1
}

// hardenedFlags are the options every invocation gets before the caller's
// arguments. core.hooksPath points at the null device: no hook can be
// found under it, and there is no directory anyone could populate.
var hardenedFlags = []string{
	"--no-optional-locks",
	"-c", "core.fsmonitor=false",
	"-c", "core.hooksPath=" + os.DevNull,
	"-c", "core.excludesFile=" + os.DevNull,
	"-c", "core.attributesFile=" + os.DevNull,
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
	"-c", "status.submoduleSummary=false",
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	"-c", "user.name=Supervisor",
	"-c", "user.email=supervisor@localhost",
}

// allowedEnv are the GIT_* variables Runner.Env may set.
var allowedEnv = map[string]bool{
	"GIT_DIR":                          true,
	"GIT_WORK_TREE":                    true,
	"GIT_COMMON_DIR":                   true,
	"GIT_INDEX_FILE":                   true,
	"GIT_OBJECT_DIRECTORY":             true,
	"GIT_ALTERNATE_OBJECT_DIRECTORIES": true,
	"GIT_AUTHOR_NAME":                  true,
	"GIT_AUTHOR_EMAIL":                 true,
	"GIT_AUTHOR_DATE":                  true,
	"GIT_COMMITTER_NAME":               true,
	"GIT_COMMITTER_EMAIL":              true,
	"GIT_COMMITTER_DATE":               true,
}

// hardenedEnv is the host environment minus every GIT_* variable, plus the
// variables that keep git away from system and user configuration, from
// the terminal and from optional index writes, plus extra.
func hardenedEnv(extra []string) ([]string, error) {
	for _, kv := range extra {
		key, _, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("gitexec: environment entry %q is not KEY=VALUE", kv)
		}
		if strings.HasPrefix(key, "GIT_") && !allowedEnv[key] {
			return nil, fmt.Errorf("gitexec: environment variable %s may not be set", key)
		}
	}
	host := os.Environ()
	env := make([]string, 0, len(host)+4+len(extra))
	for _, kv := range host {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
	)
	return append(env, extra...), nil
}

// errOverflow stops exec's copy of git's output at the limit.
var errOverflow = errors.New("output limit exceeded")

// limitedBuffer keeps at most max bytes (max <= 0: no limit). Past the
// limit a write fails, which stops exec's copy and so git (SIGPIPE), or,
// with discard, the excess is dropped. Either way overflow is set.
//
// The buffer is a named field, not embedded: an embedded bytes.Buffer
// would promote ReadFrom, and io.Copy (which exec uses) would call it and
// bypass Write and so the limit.
type limitedBuffer struct {
	buf      bytes.Buffer
	max      int
	discard  bool
	overflow bool
}

// Write implements io.Writer.
func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.max > 0 && b.buf.Len()+len(p) > b.max {
		b.overflow = true
		if b.discard {
			b.buf.Write(p[:max(0, b.max-b.buf.Len())])
			return len(p), nil
		}
		return 0, errOverflow
	}
	return b.buf.Write(p)
}

// Bytes returns the bytes kept.
func (b *limitedBuffer) Bytes() []byte { return b.buf.Bytes() }

// text is the buffer trimmed, marked if bytes were dropped.
func (b *limitedBuffer) text() string {
	s := strings.TrimSpace(b.buf.String())
	if b.overflow {
		s += " …(truncated)"
	}
	return s
}
