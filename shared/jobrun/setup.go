package jobrun

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/backends"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// Settings are the connection and host settings every runner binary takes.
type Settings struct {
	NATSURL  string
	RedisURL string
	// DataDir holds the mirror cache, job workspaces and sandbox caches.
	DataDir string
	// SandboxPath is the PATH inside the process sandbox; empty means the
	// minimal base plus the directory of the host's `go`, if any.
	SandboxPath string
	Host        string
	Bus         bus.Config
	Log         *slog.Logger
}

// Setup connects to NATS and the state store and prepares the workspace
// manager and sandbox. Close releases them.
func Setup(ctx context.Context, s Settings, name string) (Deps, func(), error) {
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	b, err := bus.Open(ctx, s.NATSURL, name, s.Bus, log)
	if err != nil {
		return Deps{}, nil, err
	}
	store, err := backends.Open(ctx, s.RedisURL, b.JS, s.Bus.Replicas)
	if err != nil {
		b.Close()
		return Deps{}, nil, err
	}
	deps, err := LocalDeps(s, b, store, log)
	if err != nil {
		store.Close()
		b.Close()
		return Deps{}, nil, err
	}
	return deps, func() { store.Close(); b.Close() }, nil
}

// LocalDeps builds Deps on an existing bus and store (used in-process by
// the embedded default).
func LocalDeps(s Settings, b *bus.Bus, store state.Store, log *slog.Logger) (Deps, error) {
	if s.DataDir == "" {
		return Deps{}, fmt.Errorf("a data directory is required")
	}
	dataDir, err := filepath.Abs(s.DataDir)
	if err != nil {
		return Deps{}, err
	}
	ws, err := workspace.NewManager(filepath.Join(dataDir, "workspaces"), b.Bundles, b.Patches, log)
	if err != nil {
		return Deps{}, err
	}
	path := s.SandboxPath
	if path == "" {
		path = DefaultSandboxPath()
	}
	sb := sandbox.NewProcess(sandbox.ProcessOptions{
		Path:        path,
		CacheDir:    filepath.Join(dataDir, "cache"),
		ScratchRoot: filepath.Join(dataDir, "scratch"),
	})
	if err := os.MkdirAll(filepath.Join(dataDir, "scratch"), 0o755); err != nil {
		return Deps{}, err
	}
	log.Warn("running commands in the process sandbox: no container isolation", "path", path)
	return Deps{Bus: b, Store: store, Workspaces: ws, Sandbox: sb, Host: HostName(s.Host), Log: log}, nil
}

// DefaultSandboxPath is the minimal base PATH plus the directory of the
// host's Go toolchain, so Go gates work in the process sandbox.
func DefaultSandboxPath() string {
	path := sandbox.BasePath
	if goBin, err := exec.LookPath("go"); err == nil {
		if dir, err := filepath.EvalSymlinks(filepath.Dir(goBin)); err == nil && !strings.Contains(":"+path+":", ":"+dir+":") {
			path = dir + ":" + path
		}
	}
	return path
}
