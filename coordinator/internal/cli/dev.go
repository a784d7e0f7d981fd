package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/dashboard"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/coordinator/internal/tlscreds"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
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
may join it over --listen; with --tls-dir (a directory 'coordinator tls init'
wrote) they must use TLS and present a certificate of its CA.

NATS listens on 127.0.0.1 unless --listen says otherwise. On any other address
dev refuses to start without --creds DIR, a credentials set of 'coordinator
creds init DIR': the embedded server then refuses anonymous clients and gives
each role only its permissions; clients connect with --nats-nkey DIR/<role>.nk.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := load(cmd, "dev")
			if err != nil {
				return err
			}
			creds, err := devCreds(e.v.GetString("listen"), e.v.GetString("creds"))
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			if creds != "" && e.v.GetString("nats-nkey") == "" {
				// The dashboard offers operators' decisions.
				e.v.Set("nats-nkey", natsauth.KeyFile(creds, natsauth.Operator))
			}
			ctx, stop := signalContext()
			defer stop()
			lower, err := e.loadGateSources()
			if err != nil {
				return err
			}
			strategies, err := e.loadStrategies()
			if err != nil {
				return err
			}
			roleSrc, err := e.roleSource()
			if err != nil {
				return err
			}
			policies, err := e.loadRetryPolicies()
			if err != nil {
				return err
			}
			breakers, err := jobrun.BreakerPolicy(e.v)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			prices, err := e.loadPrices()
			if err != nil {
				return err
			}
			lims, err := limits(e.v)
			if err != nil {
				return err
			}
			notifier, err := e.notifier(cmd)
			if err != nil {
				return err
			}
			defer notifier.Close()
			wd, err := os.Getwd()
			if err != nil {
				return err
			}
			roots, err := e.repoRoots(wd)
			if err != nil {
				return err
			}
			ms, err := metrics.StartFrom(e.v, e.log)
			if err != nil {
				return &ExitError{Code: ExitUnavailable, Err: err}
			}
			defer ms.Close() //nolint:errcheck // shutting down
			tlsDir := e.v.GetString("tls-dir")
			var serverTLS, clientTLS, cliTLS tlsconfig.Files
			if tlsDir != "" {
				serverTLS, clientTLS, cliTLS = devTLS(tlsDir, tlscreds.NATSServer), devTLS(tlsDir, "coordinator"), devTLS(tlsDir, "cli")
			}
			st, err := startFleet(ctx, fleet.Options{Gates: lower, RetryPolicies: policies, Strategies: strategies, Roles: roleSrc, Notify: notifierOf(notifier),
				DataDir: e.v.GetString("data-dir"), Listen: e.v.GetString("listen"), ServerTLS: serverTLS,
				WorkerConcurrency: e.v.GetInt("worker-concurrency"), GateConcurrency: e.v.GetInt("gate-concurrency"),
				SandboxPath: e.v.GetString("sandbox-path"), ProcessUser: e.v.GetString("sandbox-process-user"), Breakers: breakers, Log: e.log,
				MaxFailuresPerHour: e.v.GetInt("max-failures-per-hour"), Prices: prices, RepoRoots: roots,
				Limits: lims, Creds: creds,
				RetainFinished: e.v.GetDuration("retain-finished"), SnapshotInterval: e.v.GetDuration("snapshot-interval"),
			})
			if err != nil {
				return err
			}
			submitTLS := ""
			if tlsDir != "" {
				submitTLS = fmt.Sprintf(" --nats-ca %s --nats-cert %s --nats-key %s", cliTLS.CA, cliTLS.Cert, cliTLS.Key)
			}
			if creds == "" {
				fmt.Fprintf(e.out, "supervisor dev: NATS at %s; submit with: coordinator submit FILE --repo PATH --nats %s%s\n", st.URL(), st.URL(), submitTLS)
			} else {
				fmt.Fprintf(e.out, "supervisor dev: NATS at %s, credentials required; submit with: coordinator submit FILE --repo PATH --nats %s --nats-nkey %s%s\n",
					st.URL(), st.URL(), natsauth.KeyFile(creds, natsauth.CLI), submitTLS)
			}
			if ms != nil {
				fmt.Fprintf(e.out, "supervisor dev: metrics at http://%s%s\n", ms.Addr(), metrics.Path)
			}
			stopDashboard, err := e.startDashboard(ctx, cmd, st.URL(), nil, dashboard.DefaultListen, true, bus.WithTLS(clientTLS))
			if err != nil {
				_ = st.Close()
				return err
			}
			defer stopDashboard()
			<-ctx.Done()
			return st.Close()
		},
	}
	fs := cmd.Flags()
	fs.String("data-dir", "./.supervisor-dev", "where JetStream, mirrors and workspaces live")
	fs.String("listen", "127.0.0.1:4222", "address the embedded NATS listens on (port 0 picks one); other than loopback it needs --creds")
	fs.String("tls-dir", "", "a directory 'coordinator tls init' wrote: the embedded NATS serves TLS only with DIR/tls/nats, requiring client certificates of its CA (the in-process services use DIR/tls/coordinator)")
	fs.String("creds", "", "credentials set directory (coordinator creds init DIR): the embedded NATS refuses anonymous clients and enforces each role's permissions")
	fs.Int("worker-concurrency", 2, "agents run at once by the in-process worker")
	fs.Int("gate-concurrency", 2, "gates run at once by the in-process gate runner")
	fs.String("sandbox-path", "", "PATH inside the process sandbox (default: minimal base plus the host's Go)")
	fs.String("sandbox-process-user", jobrun.ProcessUserAuto, "user the process sandbox runs commands as: auto (65534:65534 when dev runs as root and that user can enter --data-dir), off, uid:gid, uid or a user name")
	fs.StringSlice("repo-roots", nil, "directories whose repositories the coordinator may write branches and merges into "+
		"(default: the directory dev runs in)")
	jobrun.AddBreakerFlags(fs)
	addLimitFlags(fs)
	addNotifyFlags(cmd)
	addFoldFlags(cmd)
	metrics.AddFlag(fs, metrics.DefaultDev)
	addDashboardFlags(cmd, dashboard.DefaultListen, true)
	return cmd
}

// devTLS names the files of name in a 'coordinator tls init' directory.
func devTLS(dir, name string) tlsconfig.Files {
	d := tlscreds.TLSDir(dir, name)
	return tlsconfig.Files{CA: filepath.Join(d, "ca.crt"), Cert: filepath.Join(d, name+".crt"), Key: filepath.Join(d, name+".key")}
}

// devCreds checks dev's --listen against --creds: NATS on an address
// other hosts reach needs credentials, or anyone there could submit work,
// read every log and pose as a runner. It returns the absolute --creds.
func devCreds(listen, creds string) (string, error) {
	if creds != "" {
		abs, err := filepath.Abs(creds)
		if err != nil {
			return "", fmt.Errorf("--creds %s: %w", creds, err)
		}
		if _, err := natsauth.LoadUsers(abs); err != nil {
			return "", fmt.Errorf("--creds: %w", err)
		}
		return abs, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %w", listen, err)
	}
	if loopback(host) {
		return "", nil
	}
	return "", fmt.Errorf("--listen %s: NATS would be reachable from other hosts without credentials, so anyone there could "+
		"submit work, read every log and pose as a runner; make a credentials set with `coordinator creds init DIR` "+
		"and give it with --creds DIR (or listen on 127.0.0.1)", listen)
}

// loopback reports whether host names only this machine: a loopback IP or
// "localhost". An empty host means every interface.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// startFleet starts the embedded default, with start-up failures as exit
// codes: a bad --listen is a usage error, NATS not starting unavailable.
func startFleet(ctx context.Context, o fleet.Options) (*fleet.Fleet, error) {
	f, err := fleet.Start(ctx, o)
	switch {
	case errors.Is(err, fleet.ErrBadListen):
		return nil, &ExitError{Code: ExitUsage, Err: err}
	case errors.Is(err, fleet.ErrNATS):
		return nil, &ExitError{Code: ExitUnavailable, Err: err}
	}
	return f, err
}
