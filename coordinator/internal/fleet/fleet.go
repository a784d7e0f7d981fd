// Package fleet runs the embedded default in one process: NATS with
// JetStream embedded, the JetStream-KV state store, the coordinator (engine
// and API), and optionally one worker and one gate runner — the same
// packages the separate binaries run. `coordinator dev` and `demo`, the
// benchmark and tests start their fleets with it.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/engine"
	"github.com/supervisorhq/supervisor/coordinator/internal/pricing"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/gaterunner"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
	"github.com/supervisorhq/supervisor/worker"
)

// ErrBadListen is in the chain of Start's error for an unusable Listen.
var ErrBadListen = errors.New("bad listen address")

// ErrNATS is in the chain of Start's error when the embedded NATS server
// cannot start.
var ErrNATS = errors.New("embedded NATS did not start")

// Options configures an in-process fleet.
type Options struct {
	// DataDir holds JetStream's files, the coordinator's mirrors and the
	// runners' workspaces.
	DataDir string
	// Listen is the embedded NATS server's address (port 0 picks one).
	Listen string
	// ServerTLS, if it names a certificate and key, makes the embedded
	// NATS server accept TLS connections only, with that certificate, and
	// (with a CA) only from clients presenting a certificate the CA
	// signed. The fleet's own services need none: they connect through
	// the server's in-memory pipe (bus.InProcess), which carries no TLS.
	ServerTLS         tlsconfig.Files
	WorkerConcurrency int
	GateConcurrency   int
	// SandboxPath is PATH inside the runners' process sandbox ("" = the
	// default).
	SandboxPath string
	// ProcessUser is who the process sandbox runs commands as
	// (jobrun.Settings.ProcessUser; "" = auto).
	ProcessUser string
	// AckWait overrides the jobs' ack wait.
	AckWait time.Duration
	// Tick overrides the coordinator's re-decide period.
	Tick time.Duration
	// NoRunners starts only NATS and the coordinator.
	NoRunners bool
	// Gates are the built-in and user gates workflows may refer to.
	Gates *gates.Set
	// Strategies are the context strategies workflows may name.
	Strategies *contextpack.Catalogue
	// Roles resolves the role catalogue of each submission (nil: none).
	Roles service.RoleSource
	// RetryPolicies are the operator's named retry policies.
	RetryPolicies map[string]protocol.RetryPolicy
	// Notify, if set, is told of escalations and humans' decisions.
	Notify engine.Notifier
	// MaxFailuresPerHour pauses the fleet past this many failed agent
	// rounds within an hour (engine.Options).
	MaxFailuresPerHour int
	// RetainFinished and SnapshotInterval are the engine's (engine.Options;
	// 0: their defaults).
	RetainFinished, SnapshotInterval time.Duration
	// Breakers is the circuit breakers' policy of the runners and the
	// coordinator (zero fields: the defaults).
	Breakers state.BreakerPolicy
	// Prices estimate the cost of agent runs whose CLI reported none.
	Prices pricing.Table
	// RepoRoots are where the coordinator may write submitting
	// repositories' branches and merges (none when empty).
	RepoRoots reporoots.Roots
	// Limits bound the API's requests and the work in flight (the zero
	// value: none).
	Limits service.Limits
	// Creds, if set, is the directory of a credentials set (`coordinator
	// creds init`): the embedded server then refuses anonymous clients and
	// gives each role only its permissions, and the coordinator, the worker
	// and the gate runner connect each with their own role's key.
	Creds string
	Log   *slog.Logger
}

// Fleet is the embedded default running in this process.
type Fleet struct {
	srv   *embedded.Server
	bus   *bus.Bus
	store state.Store
	// runnerBuses are the in-process runners' own connections (with
	// Creds), closed with the fleet.
	runnerBuses []*bus.Bus
	engine      *engine.Engine
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	mu          sync.Mutex
	errs        []error
	log         *slog.Logger
	// unsetMetrics stops this fleet's scrape-time metrics.
	unsetMetrics []func()
}

// Start starts embedded NATS, the KV state store, the coordinator and
// (unless NoRunners) one worker and one gate runner, and waits until the
// coordinator is ready.
func Start(ctx context.Context, o Options) (*Fleet, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	host, port, err := splitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBadListen, o.Listen, err)
	}
	var users natsauth.Users
	if o.Creds != "" {
		if users, err = natsauth.LoadUsers(o.Creds); err != nil {
			return nil, err
		}
	}
	eo := embedded.Options{Host: host, Port: port, StoreDir: filepath.Join(dataDir, "jetstream"), Users: users}
	if !o.ServerTLS.IsZero() {
		if eo.TLS, err = o.ServerTLS.Server(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNATS, err)
		}
	}
	srv, err := embedded.Start(eo)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNATS, err)
	}
	f := &Fleet{srv: srv, log: o.Log}
	f.bus, err = bus.Open(ctx, srv.URL(), "supervisor-dev", bus.Config{AckWait: o.AckWait}, o.Log, o.nkey(natsauth.Coordinator),
		bus.InProcess(srv))
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	f.store, err = kvstate.New(ctx, f.bus.JS)
	if err != nil {
		f.bus.Close()
		srv.Shutdown()
		return nil, err
	}
	f.engine, err = engine.New(f.bus, f.store, engine.Options{
		DataDir: filepath.Join(dataDir, "coordinator"), ID: "dev", Log: o.Log, Tick: o.Tick, LeaderTTL: 10 * time.Second,
		Notify: o.Notify, MaxFailuresPerHour: o.MaxFailuresPerHour, Prices: o.Prices, RepoRoots: o.RepoRoots,
		RetainFinished: o.RetainFinished, SnapshotInterval: o.SnapshotInterval,
	})
	if err != nil {
		f.closeConns()
		return nil, err
	}
	svc := service.New(f.engine, f.bus, service.Options{ID: "dev", Gates: o.Gates, RetryPolicies: o.RetryPolicies, Strategies: o.Strategies, Roles: o.Roles,
		Breakers: f.store, BreakerPolicy: o.Breakers, Log: o.Log, RepoRoots: o.RepoRoots, Limits: o.Limits})
	f.unsetMetrics = coordinatorMetrics(f.bus, f.engine)
	runCtx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.goRun("coordinator", func() error { return f.engine.Run(runCtx, svc.Serve) })
	if !o.NoRunners {
		wdeps, err := f.runnerDeps(ctx, o, natsauth.Worker, dataDir)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		gdeps, err := f.runnerDeps(ctx, o, natsauth.GateRunner, dataDir)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		wk := worker.New(wdeps, worker.Config{Concurrency: max(o.WorkerConcurrency, 1), DrainTimeout: 10 * time.Second})
		gr := gaterunner.New(gdeps, gaterunner.Config{Concurrency: max(o.GateConcurrency, 1), DrainTimeout: 10 * time.Second})
		f.goRun("worker", func() error { return wk.Run(runCtx) })
		f.goRun("gaterunner", func() error { return gr.Run(runCtx) })
	}
	select {
	case <-f.engine.Ready():
		return f, nil
	case <-ctx.Done():
		_ = f.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		_ = f.Close()
		return nil, errors.New("fleet: the coordinator did not become ready within 60s")
	}
}

// nkey is the connection option of role's key in o.Creds (none without).
func (o Options) nkey(role natsauth.Role) bus.ConnectOption {
	if o.Creds == "" {
		return bus.WithNkey("", role)
	}
	return bus.WithNkey(natsauth.KeyFile(o.Creds, role), role)
}

// runnerDeps builds an in-process runner's dependencies. Without Creds
// both runners share the coordinator's connection and store; with them
// each has its own connection as role, and binds the state bucket the
// coordinator created.
func (f *Fleet) runnerDeps(ctx context.Context, o Options, role natsauth.Role, dataDir string) (jobrun.Deps, error) {
	s := jobrun.Settings{DataDir: filepath.Join(dataDir, "runner"), SandboxPath: o.SandboxPath, Host: "dev",
		ProcessUser: o.ProcessUser, Breakers: o.Breakers}
	if o.Creds == "" {
		return jobrun.LocalDeps(s, f.bus, f.store, o.Log)
	}
	s.DataDir = filepath.Join(dataDir, string(role))
	b, err := bus.Open(ctx, f.srv.URL(), "supervisor-dev-"+string(role), bus.Config{AckWait: o.AckWait}, o.Log, o.nkey(role),
		bus.InProcess(f.srv))
	if err != nil {
		return jobrun.Deps{}, err
	}
	f.runnerBuses = append(f.runnerBuses, b)
	store, err := kvstate.Attach(ctx, b.JS)
	if err != nil {
		return jobrun.Deps{}, err
	}
	return jobrun.LocalDeps(s, b, store, o.Log)
}

func (f *Fleet) goRun(name string, fn func() error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := fn(); err != nil {
			// Said at once: a dev session otherwise learns of it only at
			// Close, from requests nobody answers meanwhile.
			f.log.Error("fleet: "+name+" stopped", "err", err)
			f.mu.Lock()
			f.errs = append(f.errs, fmt.Errorf("%s: %w", name, err))
			f.mu.Unlock()
		}
	}()
}

// InProcessConn opens a connection to the embedded NATS server through an
// in-memory pipe, for clients in this process (bus.InProcess(f)).
func (f *Fleet) InProcessConn() (net.Conn, error) { return f.srv.InProcessConn() }

// URL is the embedded NATS server's client URL (tls:// when it serves TLS).
func (f *Fleet) URL() string { return f.srv.URL() }

func (f *Fleet) closeConns() {
	if f.store != nil {
		f.store.Close()
	}
	for _, b := range f.runnerBuses {
		b.Close()
	}
	f.bus.Close()
	f.srv.Shutdown()
}

// Close stops everything, letting in-flight jobs drain, and returns what
// stopped with an error.
func (f *Fleet) Close() error {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	for _, unset := range f.unsetMetrics {
		unset()
	}
	f.closeConns()
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, port, nil
}

// coordinatorMetrics makes this process's metrics report the job queue of
// b's JetStream and eng's snapshot at scrape time (coordinator serve does
// the same); the returned functions stop it.
func coordinatorMetrics(b *bus.Bus, eng *engine.Engine) []func() {
	return []func(){metrics.SetJobQueue(b.JS), metrics.SetCoordinator(eng)}
}

// CoordinatorMetrics is coordinatorMetrics for coordinator serve.
func CoordinatorMetrics(b *bus.Bus, eng *engine.Engine) (unset func()) {
	fns := coordinatorMetrics(b, eng)
	return func() {
		for _, f := range fns {
			f()
		}
	}
}
