// Package sandbox runs one command — an agent or a gate — confined to a
// workspace: argv only (never a shell), a minimal environment that inherits
// nothing from the host, a timeout that kills everything the command
// started, and output capped to the tail. The process implementation lives
// here; a Docker implementation satisfies the same interface.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Defaults shared by every implementation: results keep the tail of
// each stream, and a timeout kills the whole process group, gracefully first.
const (
	// DefaultOutputLimit caps each of stdout and stderr in a Result.
	DefaultOutputLimit = 64 << 10
	// DefaultKillGrace is the time between SIGTERM and SIGKILL on timeout.
	DefaultKillGrace = 5 * time.Second
	// BasePath is the PATH of the minimal environment (EV-01).
	BasePath = "/usr/local/bin:/usr/bin:/bin"
)

// Errors; check with errors.Is.
var (
	// ErrInvalidSpec means the Spec cannot be run as given (empty argv, a
	// working directory outside the workspace, …). Nothing was started.
	ErrInvalidSpec = errors.New("sandbox: invalid spec")
	// ErrStart means the command could not be started (not found, not
	// executable, engine refused). The runners treat it as a fault of the
	// gate's or task's definition, which a redelivery would not fix: the
	// gate or agent run fails.
	ErrStart = errors.New("sandbox: cannot start command")
)

// Resources limits a run where the implementation can enforce them.
type Resources struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
}

// Spec describes one run.
type Spec struct {
	// Argv is the command; Argv[0] is looked up in the sandbox's PATH.
	Argv []string
	// Workspace is the absolute host path of the workspace root.
	Workspace string
	// WorkingDir is relative to Workspace ("" = the root). It must stay
	// inside the workspace, with no symlink component.
	WorkingDir string
	// Env is added to the minimal base environment; it cannot replace
	// PATH, HOME, USER or LD_* (those are dropped).
	Env map[string]string
	// WorkspaceEnv, if set, names a variable the sandbox sets to the
	// workspace root as the command sees it (the host path in the process
	// sandbox, /workspace in a container), overriding Env.
	WorkspaceEnv string
	// Files are host files the command may read, outside the workspace:
	// each one's Env variable is set to its path as the command sees it
	// (the host path in the process sandbox; a read-only mount under
	// ContainerFiles in a container).
	Files []File
	// Caches are directories the command's tools may keep caches in: each
	// starts with the trusted content of that cache (what the sandbox's
	// warm-up and an operator put there, never what a command wrote), and
	// whatever the command writes there is thrown away with the run (see
	// cache.go).
	Caches []Cache
	// Stdin, if set, is fed to the command's standard input.
	Stdin io.Reader
	// Timeout bounds the run; 0 means no timeout (the context still applies).
	Timeout time.Duration
	// KillGrace is the wait between SIGTERM and SIGKILL (0 = DefaultKillGrace).
	KillGrace time.Duration
	// OutputLimit caps each stream in the Result (0 = DefaultOutputLimit).
	OutputLimit int
	// Stdout and Stderr, if set, receive the full streams as they arrive
	// (for log artifacts and live logs), in addition to the capped tails.
	Stdout io.Writer
	Stderr io.Writer

	// Image, Resources, Network and Labels are for container sandboxes; the
	// process sandbox ignores them.
	Image     string
	Resources Resources
	// Network lists host:port pairs the command may reach; empty = none.
	Network []string
	Labels  map[string]string
}

// File is a host file given to a command to read (Spec.Files).
type File struct {
	// HostPath is the file's absolute path as the runner sees it.
	HostPath string
	// Env names the variable that carries the file's path.
	Env string
}

// ContainerFiles is where a container sandbox mounts Spec.Files.
const ContainerFiles = "/run/supervisor"

// fileEnv checks spec.Files and returns each one's variable and the path
// the command sees, given where the files are mounted ("" = the host
// paths themselves).
func fileEnv(spec Spec, mountDir string) (map[string]string, error) {
	out := make(map[string]string, len(spec.Files))
	for i, f := range spec.Files {
		switch {
		case f.Env == "" || strings.ContainsAny(f.Env, "=\x00") || deniedEnv(f.Env):
			return nil, fmt.Errorf("%w: file %d: invalid variable name %q", ErrInvalidSpec, i, f.Env)
		case !filepath.IsAbs(f.HostPath):
			return nil, fmt.Errorf("%w: file %s: %q is not an absolute path", ErrInvalidSpec, f.Env, f.HostPath)
		}
		if mountDir == "" {
			out[f.Env] = filepath.Clean(f.HostPath)
		} else {
			out[f.Env] = path.Join(mountDir, fmt.Sprintf("%d-%s", i, filepath.Base(f.HostPath)))
		}
	}
	return out, nil
}

// limits returns what bounds a run of s: its kill grace (DefaultKillGrace
// if unset) and a channel that fires once its timeout has passed (nil
// without a timeout), with the function releasing the channel's timer.
func (s Spec) limits() (grace time.Duration, timeout <-chan time.Time, stop func()) {
	grace = s.KillGrace
	if grace == 0 {
		grace = DefaultKillGrace
	}
	if s.Timeout <= 0 {
		return grace, nil, func() {}
	}
	t := time.NewTimer(s.Timeout)
	return grace, t.C, func() { t.Stop() }
}

// Result is what a run produced. A non-zero exit is a Result, not an error.
type Result struct {
	// ExitCode is the command's exit status, or -1 if it was killed.
	ExitCode int
	// TimedOut is true when the run was killed because Timeout passed.
	TimedOut bool
	// Signal names the signal that ended the command, if one did.
	Signal string
	// OOMKilled is true when the kernel killed a process of the run because
	// it exceeded the memory limit (container sandboxes only). Runners
	// report it as a resource error, distinct from a failing gate or agent:
	// the command did not fail on its own, it ran out of the memory the
	// sandbox allowed.
	OOMKilled bool
	// Stdout and Stderr are the last OutputLimit bytes of each stream.
	Stdout []byte
	Stderr []byte
	// StdoutTruncated and StderrTruncated report that bytes were dropped.
	StdoutTruncated bool
	StderrTruncated bool
	// StartedAt and Duration are when the command started and how long it
	// ran (in a container, by the engine's clock: start-up excluded).
	StartedAt time.Time
	Duration  time.Duration
	// Environment says, for reports and audits, where the command ran:
	// "process", or "docker IMAGE@ID" with the image's ID as the engine
	// had it.
	Environment string
	// Prestarted is true when the command ran in a container
	// the Docker sandbox had started ahead of it (DockerOptions.Prestart).
	Prestarted bool
}

// Sandbox runs commands. Run returns an error only when the command could
// not be run at all (ErrInvalidSpec, ErrStart, context cancelled before
// start); how the command itself ended is in the Result.
type Sandbox interface {
	Run(ctx context.Context, spec Spec) (Result, error)
	// Name identifies the implementation ("process", "docker").
	Name() string
}
