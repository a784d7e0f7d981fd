package cli

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

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/engine"
	"github.com/supervisorhq/supervisor/gaterunner"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/worker"
)

func newDev() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process: embedded NATS, coordinator, a worker and a gate runner",
		Long: `dev is the embedded default: one process with nothing else installed. It embeds
nats-server with JetStream (files under --data-dir), keeps locks, cache and
breakers in a JetStream KV bucket, and runs the coordinator, one worker and one
gate runner in-process (the same code as the separate binaries). Submit work to it
from another terminal with 'coordinator submit'. Other workers and gate runners
may join it over --listen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := load(cmd, "dev")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			lower, err := e.loadGateSources()
			if err != nil {
				return err
			}
			st, err := startStack(ctx, stackOptions{Gates: lower,
				DataDir: e.v.GetString("data-dir"), Listen: e.v.GetString("listen"),
				WorkerConcurrency: e.v.GetInt("worker-concurrency"), GateConcurrency: e.v.GetInt("gate-concurrency"),
				SandboxPath: e.v.GetString("sandbox-path"), Log: e.log,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "supervisor dev: NATS at %s; submit with: coordinator submit FILE --repo PATH --nats %s\n", st.URL(), st.URL())
			<-ctx.Done()
			return st.Close()
		},
	}
	fs := cmd.Flags()
	fs.String("data-dir", "./.supervisor-dev", "where JetStream, mirrors and workspaces live")
	fs.String("listen", "127.0.0.1:4222", "address the embedded NATS listens on (port 0 picks one)")
	fs.Int("worker-concurrency", 2, "agents run at once by the in-process worker")
	fs.Int("gate-concurrency", 2, "gates run at once by the in-process gate runner")
	fs.String("sandbox-path", "", "PATH inside the process sandbox (default: minimal base plus the host's Go)")
	return cmd
}

// stackOptions configures an in-process fleet.
type stackOptions struct {
	DataDir           string
	Listen            string
	WorkerConcurrency int
	GateConcurrency   int
	SandboxPath       string
	// AckWait overrides the jobs' ack wait (tests and benchmarks).
	AckWait time.Duration
	// Tick overrides the scheduler's re-check period.
	Tick time.Duration
	// NoRunners starts only NATS and the coordinator.
	NoRunners bool
	// Gates are the built-in and user gates workflows may refer to.
	Gates *gates.Set
	Log   *slog.Logger
}

// stack is the embedded default running in this process.
type stack struct {
	srv    *embedded.Server
	bus    *bus.Bus
	store  state.Store
	engine *engine.Engine
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// startStack starts embedded NATS, the KV state store, the coordinator and
// (unless NoRunners) one worker and one gate runner, and waits until the
// coordinator is ready.
func startStack(ctx context.Context, o stackOptions) (*stack, error) {
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	host, port, err := splitHostPort(o.Listen)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--listen %q: %w", o.Listen, err)}
	}
	srv, err := embedded.Start(embedded.Options{Host: host, Port: port, StoreDir: filepath.Join(dataDir, "jetstream")})
	if err != nil {
		return nil, &ExitError{Code: ExitUnavailable, Err: err}
	}
	s := &stack{srv: srv}
	cfg := bus.Config{AckWait: o.AckWait}
	s.bus, err = bus.Open(ctx, srv.URL(), "supervisor-dev", cfg, o.Log)
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	s.store, err = kvstate.New(ctx, s.bus.JS)
	if err != nil {
		s.bus.Close()
		srv.Shutdown()
		return nil, err
	}
	s.engine, err = engine.New(s.bus, s.store, engine.Options{
		DataDir: filepath.Join(dataDir, "coordinator"), ID: "dev", Log: o.Log, Tick: o.Tick, LeaderTTL: 6 * time.Second,
		Gates: o.Gates,
	})
	if err != nil {
		s.closeConns()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.goRun("coordinator", func() error { return s.engine.Run(runCtx) })
	if !o.NoRunners {
		deps, err := jobrun.LocalDeps(jobrun.Settings{DataDir: filepath.Join(dataDir, "runner"), SandboxPath: o.SandboxPath, Host: "dev"},
			s.bus, s.store, o.Log)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		wk := worker.New(deps, worker.Config{Concurrency: max(o.WorkerConcurrency, 1), DrainTimeout: 10 * time.Second})
		gr := gaterunner.New(deps, gaterunner.Config{Concurrency: max(o.GateConcurrency, 1), DrainTimeout: 10 * time.Second})
		s.goRun("worker", func() error { return wk.Run(runCtx) })
		s.goRun("gaterunner", func() error { return gr.Run(runCtx) })
	}
	select {
	case <-s.engine.Ready():
		return s, nil
	case <-ctx.Done():
		_ = s.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		_ = s.Close()
		return nil, errors.New("dev: the coordinator did not become ready within 60s")
	}
}

func (s *stack) goRun(name string, f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
			s.mu.Unlock()
		}
	}()
}

// URL is the embedded NATS server's client URL.
func (s *stack) URL() string { return s.srv.URL() }

func (s *stack) closeConns() {
	if s.store != nil {
		s.store.Close()
	}
	s.bus.Close()
	s.srv.Shutdown()
}

// Close stops everything, letting in-flight jobs drain.
func (s *stack) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.closeConns()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
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
