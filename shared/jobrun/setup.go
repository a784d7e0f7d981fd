package jobrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/egress"
	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/backends"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// Sandbox modes, the --sandbox setting.
const (
	// SandboxAuto uses the Docker sandbox when the engine answers and has
	// the default image, and otherwise falls back to the process sandbox
	// with a loud warning.
	SandboxAuto = "auto"
	// SandboxDocker uses the Docker sandbox and refuses to start without it.
	SandboxDocker = "docker"
	// SandboxProcess forces the process sandbox (no container isolation).
	SandboxProcess = "process"
)

// DefaultSandboxImage is the default image of the Docker sandbox. Images
// are built on each runner host (make images) and never pulled.
const DefaultSandboxImage = "supervisor/sandbox-base:latest"

// engineCheckTimeout bounds asking the engine whether it is usable at start.
const engineCheckTimeout = 10 * time.Second

// Settings are the connection and host settings every runner binary takes.
type Settings struct {
	NATSURL string
	// NATSTLS are the TLS files of the connection to NATS (none: TLS only
	// with a tls:// URL).
	NATSTLS tlsconfig.Files
	// NATSNkey is the file of the runner's NATS nkey (--nats-nkey; ""
	// connects without credentials), for Role.
	NATSNkey string
	// Role is the runner's NATS role (natsauth.Worker or GateRunner).
	Role     natsauth.Role
	RedisURL string
	// Redis are the TLS and password settings of the connection to Redis.
	Redis []redisstate.Option
	// DataDir holds the mirror cache, job workspaces and sandbox caches.
	DataDir string
	// SandboxPath is the PATH inside the process sandbox; empty means the
	// minimal base plus the directory of the host's `go`, if any.
	SandboxPath string
	// ProcessUser is who the process sandbox runs commands as: "" or
	// ProcessUserAuto, ProcessUserOff, or a user for sandbox.ParseRunAs
	// (see processSandbox).
	ProcessUser string
	// Host is the runner's identity ("" = RunnerHost's default).
	Host string
	Bus  bus.Config
	Log  *slog.Logger

	// Sandbox is SandboxAuto, SandboxDocker or SandboxProcess. Empty means
	// SandboxProcess: the zero Settings of embedded uses (coordinator dev,
	// tests) keep the process sandbox; the binaries' --sandbox flag
	// defaults to auto.
	Sandbox string
	// Docker configures the Docker sandbox.
	Docker DockerSettings
	// Egress, if set, gives the runner's commands (agents) a way out
	// through the egress proxy; nil means they never get a network.
	Egress *EgressSettings
	// Labels describe the runner (the worker's --labels and detected GPUs);
	// they are advertised in its started reports.
	Labels map[string]string
	// GPUs, when positive, are requested for every Docker container.
	GPUs int
	// Breakers is the circuit breakers' policy (zero fields: the defaults).
	Breakers state.BreakerPolicy
	// Caches are the warm-up of the sandbox's caches (sandbox.CacheOptions:
	// Warmup, WarmFiles, WarmCaches, WarmEnv); their directory is always
	// CacheDir(DataDir) and their log the runner's.
	Caches sandbox.CacheOptions
}

// CacheDir returns where a runner with data directory dataDir keeps its
// sandbox's caches: trusted layers, operator seeds, throw-away layers.
func CacheDir(dataDir string) string { return filepath.Join(dataDir, "sandbox-cache") }

// cacheOptions are s.Caches with the runner's directory and log. The
// process sandbox gets the directory only with a warm-up to fill it (the
// gate runner binary): without one (the embedded fleet of coordinator dev
// and demo) its gates keep the shared cache of the process sandbox.
func (s Settings) cacheOptions(dataDir string, log *slog.Logger, process bool) sandbox.CacheOptions {
	c := s.Caches
	c.Log = log
	if !process || len(c.Warmup) > 0 {
		c.Dir = CacheDir(dataDir)
	}
	return c
}

// DockerSettings configure the Docker sandbox (sandbox.DockerOptions).
type DockerSettings struct {
	// Image is the default image ("" = none: every spec must name one).
	Image string
	// User is the uid:gid commands run as ("" = automatic).
	User string
	// Path is PATH inside containers ("" = sandbox.BasePath).
	Path string
	// Resources are the default limits of a container.
	Resources sandbox.Resources
	// ImageLayersOnly is sandbox.DockerOptions.ImageLayersOnly.
	ImageLayersOnly bool
	// Prestart, PrestartMax, PrestartDepth and Helper are
	// sandbox.DockerOptions' fields of those names; a missing helper
	// turns Prestart off with a warning.
	Prestart      bool
	PrestartMax   int
	PrestartDepth int
	Helper        string
}

// EgressSettings configure the egress proxy of a Docker sandbox.
type EgressSettings struct {
	// Allow is the allow-list (host:port or *.domain:port); empty means
	// commands get no network at all, and no proxy runs.
	Allow []string
	// Port is the proxy's port (0 = any free port).
	Port int
	// Network is the internal Docker network ("" = egress.NetworkName of
	// the runner's identity, created if missing).
	Network string
}

// Setup connects to NATS and the state store and prepares the workspace
// manager and sandbox. Close releases them.
func Setup(ctx context.Context, s Settings, name string) (Deps, func(), error) {
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	b, err := bus.Open(ctx, s.NATSURL, name, s.Bus, log, bus.WithNkey(s.NATSNkey, s.Role), bus.WithTLS(s.NATSTLS))
	if err != nil {
		return Deps{}, nil, err
	}
	var store state.Store
	if s.NATSNkey != "" {
		// The runner's role may not create the state bucket: the
		// coordinator does, right after the streams.
		store, err = attachState(ctx, s.RedisURL, b, log, s.Redis...)
	} else {
		store, err = backends.Open(ctx, s.RedisURL, b.JS, s.Bus.Replicas, log, s.Redis...)
	}
	if err != nil {
		b.Close()
		return Deps{}, nil, err
	}
	deps, closeDeps, err := NewDeps(ctx, s, b, store, log)
	if err != nil {
		store.Close()
		b.Close()
		return Deps{}, nil, err
	}
	return deps, func() { closeDeps(); store.Close(); b.Close() }, nil
}

// attachState binds the state store, waiting with back-off while the
// coordinator has not created its bucket yet.
func attachState(ctx context.Context, redisURL string, b *bus.Bus, log *slog.Logger, opts ...redisstate.Option) (state.Store, error) {
	delay := time.Duration(0)
	for {
		store, err := backends.Attach(ctx, redisURL, b.JS, opts...)
		if err == nil {
			return store, nil
		}
		if d := bus.Denied(b.NC); d != nil {
			return nil, fmt.Errorf("state store: %w", d)
		}
		// Not there yet, or JetStream cannot answer yet (a cluster
		// forming or electing a leader): both pass. Redis's errors do not
		// come here: its own connect waits as long as it should.
		if !backends.Waitable(err) {
			return nil, err
		}
		delay = bus.DefaultBackoff.Next(delay)
		log.Info("waiting for the coordinator to create the state bucket", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
}

// LocalDeps builds Deps on an existing bus and store (used in-process by
// the embedded default). It is NewDeps for settings that need no clean-up:
// with a Docker sandbox, the engine client and egress proxy it opens live
// as long as the process.
func LocalDeps(s Settings, b *bus.Bus, store state.Store, log *slog.Logger) (Deps, error) {
	deps, _, err := NewDeps(context.Background(), s, b, store, log)
	return deps, err
}

// writableWorkspaces is a sandbox whose runs make the workspace writable
// for another user (sandbox.MakeWritable) when it is not already.
type writableWorkspaces interface {
	WritableWorkspaces() bool
}

// LeftoverAge is how old what dead runners left in the data directory
// must be for NewDeps to remove it (workspace.Manager.Sweep).
const LeftoverAge = time.Hour

// NewDeps builds Deps on an existing bus and store: the workspace manager,
// the runner's identity and the sandbox s.Sandbox selects (see
// SelectSandbox). The returned function releases what the sandbox holds.
func NewDeps(ctx context.Context, s Settings, b *bus.Bus, store state.Store, log *slog.Logger) (Deps, func(), error) {
	if log == nil {
		log = slog.Default()
	}
	if s.DataDir == "" {
		return Deps{}, nil, fmt.Errorf("a data directory is required")
	}
	dataDir, err := filepath.Abs(s.DataDir)
	if err != nil {
		return Deps{}, nil, err
	}
	ws, err := workspace.NewManager(filepath.Join(dataDir, "workspaces"), b.Bundles, b.Patches, log)
	if err != nil {
		return Deps{}, nil, err
	}
	// What runners that died on this data directory left: their pool
	// slots, half downloads, workspaces of the layout before pools. Slots
	// another live runner holds are never touched.
	if err := ws.Sweep(ctx, LeftoverAge); err != nil {
		log.Warn("workspace: cannot remove everything earlier runs left", "err", err)
	}
	host := RunnerHost(s.Host, dataDir)
	sel, err := SelectSandbox(ctx, s, dataDir, host, log)
	if err != nil {
		return Deps{}, nil, err
	}
	if w, ok := sel.Sandbox.(writableWorkspaces); ok && w.WritableWorkspaces() {
		ws.SetShape(sandbox.MakeWritable) // made ahead, so an unchanged slot stays so (PERF-55)
	}
	var labels map[string]string
	if len(s.Labels) > 0 {
		labels = make(map[string]string, len(s.Labels))
		for k, v := range s.Labels {
			labels[k] = v
		}
	}
	presence := NewPresence(b.Runners, host, labels, sel.Sandbox.Name(), log)
	presence.SetSandboxOff(sel.Off)
	return Deps{Bus: b, Store: store, Workspaces: ws, Sandbox: sel.Sandbox, Host: host, Labels: labels,
		Network: sel.Network, Breakers: s.Breakers, Presence: presence,
		Log: log}, sel.Close, nil
}

// Selected is the sandbox SelectSandbox chose.
type Selected struct {
	Sandbox sandbox.Sandbox
	// Network is the allow-list commands get as Spec.Network: the egress
	// proxy's, when one runs; empty otherwise.
	Network []string
	// Fallback says why auto fell back to the process sandbox ("" if it
	// did not).
	Fallback string
	// Off lists the process sandbox's protections that are not in force
	// (sandbox.Protection names; empty with Docker).
	Off []string
	// Close releases the engine client and stops the egress proxy.
	Close func()
}

// SelectSandbox builds the sandbox s.Sandbox asks for:
//
//   - process: the process sandbox, with a warning that nothing is
//     isolated.
//   - docker: the Docker sandbox; it is an error if the engine does not
//     answer or lacks the default image (images are never pulled).
//   - auto: the Docker sandbox if it is usable as for docker, otherwise
//     the process sandbox with a loud warning naming why.
//
// With Docker it first removes the containers a previous instance of this
// runner (host) left behind and, when s.Egress has an allow-list, starts
// the egress proxy on its internal network (egress.StartGateway).
func SelectSandbox(ctx context.Context, s Settings, dataDir, host string, log *slog.Logger) (Selected, error) {
	mode := s.Sandbox
	if mode == "" {
		mode = SandboxProcess
	}
	switch mode {
	case SandboxProcess:
		sb, err := processSandbox(s, dataDir, host, log)
		if err != nil {
			return Selected{}, err
		}
		sb.warn(log, "sandbox: process: commands run as plain processes of this host, with no file-system or network isolation")
		warnUnrestricted(s, log)
		return Selected{Sandbox: sb.Process, Off: sb.off, Close: func() { _ = sb.Close() }}, nil
	case SandboxAuto, SandboxDocker:
	default:
		return Selected{}, fmt.Errorf("sandbox %q: want %s, %s or %s", mode, SandboxAuto, SandboxDocker, SandboxProcess)
	}

	maps, err := sandbox.PathMapsFromEnv(dataDir)
	if err != nil {
		return Selected{}, err
	}
	opts := sandbox.DockerOptions{
		Image: s.Docker.Image, Host: host, User: s.Docker.User, Path: s.Docker.Path,
		Resources: s.Docker.Resources, PathMaps: maps, GPUs: s.GPUs, ImageLayersOnly: s.Docker.ImageLayersOnly,
		Caches: s.cacheOptions(dataDir, log, false),
	}
	base, why := usableDocker(ctx, opts)
	if why != nil {
		if mode == SandboxDocker {
			return Selected{}, fmt.Errorf("sandbox docker: %w", why)
		}
		sb, err := processSandbox(s, dataDir, host, log)
		if err != nil {
			return Selected{}, err
		}
		sb.warn(log, "!!! NO SANDBOX ISOLATION: the Docker sandbox is unusable, falling back to the process sandbox: "+
			"agents and gates run as plain processes of this host, with no file-system or network isolation "+
			"(--sandbox=docker refuses to start instead; --sandbox=process chooses this knowingly)",
			"reason", why.Error())
		warnUnrestricted(s, log)
		return Selected{Sandbox: sb.Process, Fallback: why.Error(), Off: sb.off, Close: func() { _ = sb.Close() }}, nil
	}

	if n, err := base.RemoveOrphans(ctx, host); err != nil {
		log.Warn("sandbox: cannot remove containers left by a previous run", "host", host, "err", err)
	} else if n > 0 {
		log.Warn("sandbox: removed containers left by a previous run of this runner", "host", host, "count", n)
	}

	stopSweep := sweepExpired(base, log)

	if s.Docker.Prestart {
		helper, err := sandbox.FindHelper(s.Docker.Helper)
		if err != nil {
			log.Warn("sandbox: containers are not started ahead of their jobs", "err", err)
		} else {
			opts.Prestart, opts.PrestartMax, opts.PrestartDepth, opts.Helper = true, s.Docker.PrestartMax, s.Docker.PrestartDepth, helper
		}
	}
	// The egress proxy names the job behind a connection from the
	// container's labels, or, for a container started ahead of its job,
	// from the sandbox (set once it exists).
	var built atomic.Pointer[sandbox.Docker]
	runLabels := func(id string) map[string]string {
		if d := built.Load(); d != nil {
			return d.RunLabels(id)
		}
		return nil
	}
	var gw *egress.Gateway
	var network []string
	if s.Egress != nil {
		if len(s.Egress.Allow) == 0 {
			log.Info("egress: empty allow-list: commands get no network")
		} else {
			gw, err = egress.StartGateway(ctx, egress.GatewayOptions{
				Client: base.Client(), Network: s.Egress.Network, Host: host, Port: s.Egress.Port,
				Proxy: egress.Options{Allow: s.Egress.Allow, Log: log}, RunLabels: runLabels,
			})
			if err != nil {
				stopSweep()
				_ = base.Close()
				return Selected{}, fmt.Errorf("egress proxy: %w", err)
			}
			opts.EgressNetwork, opts.EgressProxy = gw.Network.Name, gw.URL
			network = gw.Allowed()
			log.Info("egress: proxy listening for agent containers", "proxy", gw.URL, "network", gw.Network.Name,
				"allow", strings.Join(network, ","))
		}
	}
	d, err := sandbox.NewDocker(ctx, opts)
	if err != nil && opts.Prestart {
		log.Warn("sandbox: containers are not started ahead of their jobs", "err", err)
		opts.Prestart = false
		d, err = sandbox.NewDocker(ctx, opts)
	}
	if err != nil {
		if gw != nil {
			_ = gw.Close()
		}
		stopSweep()
		_ = base.Close()
		return Selected{}, err
	}
	built.Store(d)
	if len(s.Caches.Warmup) > 0 {
		// In the background: gates run meanwhile, with colder caches.
		go func() {
			if err := d.WarmCaches(context.WithoutCancel(ctx), ""); err != nil {
				log.Warn("sandbox: cache warm-up", "err", err)
			}
		}()
	}
	res := d.Resources()
	log.Info("sandbox: docker", "image", opts.Image, "host", host, "memory", res.MemoryBytes, "cpus", res.CPUs,
		"pids", res.Pids, "gpus", s.GPUs, "prestart", opts.Prestart, "prestart_max", opts.PrestartMax, "prestart_depth", opts.PrestartDepth)
	return Selected{Sandbox: d, Network: network, Close: func() {
		if gw != nil {
			if err := gw.Close(); err != nil {
				log.Warn("egress: stopping the proxy", "err", err)
			}
		}
		stopSweep()
		_ = d.Close()
		_ = base.Close()
	}}, nil
}

// Sweeps of containers that outlived their runner (see sweepExpired).
const (
	// expiredSweepInterval is how often a runner looks for them.
	expiredSweepInterval = time.Minute
	// expiredGrace is how long past its deadline a container must be: its
	// own runner kills it at the deadline and removes it right after.
	expiredGrace = 2 * time.Minute
)

// sweepExpired removes, now and every expiredSweepInterval until the
// returned stop is called, the sandbox containers of any runner on this
// engine that are past their deadline: their runner died (a kill -9, a
// lost host, a scaled-down replica whose host id never comes back) and
// nothing else would stop or remove them. It logs each one with the runner
// that started it.
func sweepExpired(d *sandbox.Docker, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	sweep := func() {
		cctx, ccancel := context.WithTimeout(ctx, engineCheckTimeout)
		defer ccancel()
		removed, err := d.RemoveExpired(cctx, expiredGrace)
		for _, c := range removed {
			log.Warn("sandbox: removed a container that outlived its runner", "container", c.ID[:min(12, len(c.ID))],
				"runner", c.Host, "deadline", c.Deadline.UTC().Format(time.RFC3339))
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("sandbox: sweeping containers past their deadline", "err", err)
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(expiredSweepInterval)
		defer t.Stop()
		for {
			sweep()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// usableDocker opens the Docker sandbox and checks that the engine answers
// and has the default image; the error says why it is unusable.
func usableDocker(ctx context.Context, opts sandbox.DockerOptions) (*sandbox.Docker, error) {
	d, err := sandbox.NewDocker(ctx, opts)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, engineCheckTimeout)
	defer cancel()
	if err := d.Available(cctx); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("the Docker engine does not answer (DOCKER_HOST=%q): %w", os.Getenv("DOCKER_HOST"), err)
	}
	if opts.Image != "" {
		if _, err := d.ImageDigest(cctx, opts.Image); err != nil {
			_ = d.Close()
			if errors.Is(err, sandbox.ErrInvalidSpec) {
				return nil, err
			}
			return nil, fmt.Errorf("the sandbox image %s is not on this host (images are never pulled: build them with `make images`): %w",
				opts.Image, err)
		}
	}
	return d, nil
}

// warnUnrestricted warns that the process sandbox does not enforce an
// egress allow-list.
func warnUnrestricted(s Settings, log *slog.Logger) {
	if s.Egress != nil && len(s.Egress.Allow) > 0 {
		log.Warn("egress: the process sandbox cannot restrict the network: commands reach everything this host reaches")
	}
}

// RunnerHost returns a runner's identity: given, or the host name and a
// hash of the runner's data directory ("build-7-3f2a9c1e"). It is stable
// across restarts, so a restarted runner removes the containers its
// crashed predecessor left (sandbox RemoveOrphans); the data directory
// tells apart runners sharing a host, which must never share one anyway
// (two runners on one host need different --data-dir, or distinct
// --host-id).
func RunnerHost(given, dataDir string) string {
	if given != "" {
		return given
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "host"
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	sum := sha256.Sum256([]byte(dataDir))
	return h + "-" + hex.EncodeToString(sum[:])[:8]
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
