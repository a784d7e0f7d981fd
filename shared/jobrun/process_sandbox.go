package jobrun

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/supervisorhq/supervisor/shared/sandbox"
)

// Values of Settings.ProcessUser (--sandbox-process-user) besides a user.
const (
	// ProcessUserAuto runs commands as sandbox.DefaultRunAs when the
	// runner is root and that user can reach the data directory, and as
	// the runner's own user otherwise, with a warning saying why.
	ProcessUserAuto = "auto"
	// ProcessUserOff runs commands as the runner's own user.
	ProcessUserOff = "off"
)

// processSB is the process sandbox with what the log says of it.
type processSB struct {
	*sandbox.Process
	path string
	user string   // who commands run as
	off  []string // protections off
	why  string   // "name: why; …" of those off
}

// warn logs msg once, as one WARN line that names who commands run as and,
// if any protection of the process sandbox is off, which and why.
func (sb processSB) warn(log *slog.Logger, msg string, args ...any) {
	args = append(args, "path", sb.path, "user", sb.user)
	if sb.why != "" {
		msg += "; PROTECTIONS OFF: " + sb.why
	}
	log.Warn(msg, args...)
}

// processSandbox builds the process sandbox of s for runner host, and
// kills what commands of a previous runner of that host left running
// (sandbox.Process.KillLeftovers). Who commands run as
// follows s.ProcessUser: auto (or "") picks sandbox.DefaultRunAs when the
// runner is root and that user can enter the data directory, else the
// runner's own user (the reason is among the protections off); off is the
// runner's own user; any other value is a user that must be usable, or
// the runner refuses to start.
func processSandbox(s Settings, dataDir, host string, log *slog.Logger) (processSB, error) {
	path := s.SandboxPath
	if path == "" {
		path = DefaultSandboxPath()
	}
	scratch := filepath.Join(dataDir, "scratch")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return processSB{}, err
	}
	runAs, userOff, err := processRunAs(s.ProcessUser, dataDir, scratch)
	if err != nil {
		return processSB{}, err
	}
	p := sandbox.NewProcess(sandbox.ProcessOptions{
		Path:        path,
		CacheDir:    filepath.Join(dataDir, "cache"),
		ScratchRoot: scratch,
		RunAs:       runAs,
		Caches:      s.cacheOptions(dataDir, log, true),
		// Runners sharing a host id differ by their data directory.
		Owner: host + "\x00" + dataDir,
	})
	if n := p.KillLeftovers(); n > 0 {
		log.Warn("sandbox: process: killed processes a previous run of this runner left behind", "host", host, "count", n)
	}
	if len(s.Caches.Warmup) > 0 {
		go func() { _ = p.WarmCaches(context.Background()) }() // gates run meanwhile, with colder caches
	}
	sb := processSB{Process: p, path: path, user: "the runner's own"}
	if runAs != nil {
		sb.user = runAs.String()
		for _, dir := range filepath.SplitList(path) {
			if err := runAs.CanReach(dir); err != nil && filepath.IsAbs(dir) {
				if _, statErr := os.Stat(dir); statErr == nil {
					log.Warn("sandbox: process: a PATH directory is out of the sandbox user's reach: its tools will not run", "dir", dir, "err", err)
				}
			}
		}
	}
	ps := p.Protections()
	for i, pr := range ps {
		if pr.Name == sandbox.ProtectUser && pr.Off != "" && userOff != "" {
			ps[i].Off = userOff
		}
		if ps[i].Off != "" {
			sb.off = append(sb.off, pr.Name)
		}
	}
	sb.why = sandbox.OffProtections(ps)
	return sb, nil
}

// processRunAs decides who the process sandbox runs commands as (nil: the
// runner's own user, for the reason returned).
func processRunAs(setting, dataDir, scratch string) (*sandbox.RunAs, string, error) {
	setting = strings.TrimSpace(setting)
	reach := func(u sandbox.RunAs) error {
		dirs := []string{dataDir, scratch}
		if pool := filepath.Join(dataDir, "workspaces", "pool"); dirExists(pool) {
			dirs = append(dirs, pool)
		}
		for _, d := range dirs {
			if err := u.CanReach(d); err != nil {
				return err
			}
		}
		return nil
	}
	switch strings.ToLower(setting) {
	case ProcessUserOff:
		return nil, "--sandbox-process-user=off: commands run as the runner's own user", nil
	case "", ProcessUserAuto:
		if err := sandbox.CanSwitchUser(); err != nil {
			return nil, err.Error() + ", so commands run as its own user: they can write its mirrors and signal it", nil
		}
		u := sandbox.DefaultRunAs
		if err := reach(u); err != nil {
			return nil, fmt.Sprintf("the data directory is out of the default sandbox user's reach (%v), so commands run as root: "+
				"give --data-dir a path every user can enter, or set --sandbox-process-user", err), nil
		}
		return &u, "", nil
	}
	u, err := sandbox.ParseRunAs(setting)
	if err != nil {
		return nil, "", fmt.Errorf("--sandbox-process-user: %w", err)
	}
	if err := sandbox.CanSwitchUser(); err != nil {
		return nil, "", fmt.Errorf("--sandbox-process-user %s: %w; only a root runner can run commands as another user (use auto or off)", setting, err)
	}
	if err := reach(u); err != nil {
		return nil, "", fmt.Errorf("--sandbox-process-user %s: the data directory is out of its reach: %w", setting, err)
	}
	return &u, "", nil
}

// dirExists reports whether dir is an existing directory.
func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}
