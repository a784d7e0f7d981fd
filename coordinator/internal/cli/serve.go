package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/coordinator/internal/engine"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state/backends"
)

func newServe() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the coordinator service against an existing NATS (and Redis)",
		Long: `serve runs the coordinator: the DAG scheduler, the event log, gate fan-out and
fan-in, integration of accepted patches, and the sup.api.* micro service the CLI
talks to. Several may run; one leads (a lock in the state store) and the others
stand by. On restart it rebuilds its state from the event log and carries on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := load(cmd, "coordinator")
			if err != nil {
				return err
			}
			if err := e.checkDashboardFlags(false); err != nil {
				return err
			}
			leaderTTL := e.v.GetDuration("leader-ttl")
			if leaderTTL < 3*time.Second {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--leader-ttl %s: want 3s or more", leaderTTL)}
			}
			ctx, stop := signalContext()
			defer stop()
			ms, err := metrics.StartFrom(e.v, e.log)
			if err != nil {
				return &ExitError{Code: ExitUnavailable, Err: err}
			}
			defer ms.Close() //nolint:errcheck // shutting down
			bcfg, err := serviceBusConfig(e.v)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			b, err := bus.Open(ctx, e.v.GetString("nats"), "supervisor-coordinator", bcfg, e.log, e.nkey(natsauth.Coordinator),
				bus.WithTLS(jobrun.NATSTLS(e.v)))
			if err != nil {
				return connectErr(err)
			}
			defer b.Close()
			store, err := backends.Open(ctx, e.v.GetString("redis-url"), b.JS, e.v.GetInt("replicas"), e.log, jobrun.RedisOptions(e.v)...)
			if err != nil {
				return &ExitError{Code: ExitUnavailable, Err: err}
			}
			defer store.Close()
			dataDir, err := filepath.Abs(e.v.GetString("data-dir"))
			if err != nil {
				return err
			}
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
			roots, err := e.repoRoots("")
			if err != nil {
				return err
			}
			lims, err := limits(e.v)
			if err != nil {
				return err
			}
			id := jobrun.HostName(e.v.GetString("id"))
			notifier, err := e.notifier(cmd)
			if err != nil {
				return err
			}
			defer notifier.Close()
			prices, err := e.loadPrices()
			if err != nil {
				return err
			}
			eng, err := engine.New(b, store, engine.Options{DataDir: dataDir, ID: id, LeaderTTL: leaderTTL, Log: e.log, Notify: notifierOf(notifier),
				MaxFailuresPerHour: e.v.GetInt("max-failures-per-hour"), Prices: prices, RepoRoots: roots,
				RetainFinished: e.v.GetDuration("retain-finished"), SnapshotInterval: e.v.GetDuration("snapshot-interval")})
			if err != nil {
				return err
			}
			defer fleet.CoordinatorMetrics(b, eng)()
			svc := service.New(eng, b, service.Options{ID: id, Gates: lower, RetryPolicies: policies, Strategies: strategies, Roles: roleSrc,
				Breakers: store, BreakerPolicy: breakers, Log: e.log, RepoRoots: roots, Limits: lims})
			stopDashboard, err := e.startDashboard(ctx, cmd, "", b.NC, "", false)
			if err != nil {
				return err
			}
			defer stopDashboard()
			e.log.Info("coordinator starting", "nats", bus.RedactURL(e.v.GetString("nats")), "state", store.Backend(), "data_dir", dataDir)
			if err := eng.Run(ctx, svc.Serve); err != nil && ctx.Err() == nil {
				return fmt.Errorf("coordinator stopped: %w", err)
			}
			return nil
		},
	}
	addServiceFlags(cmd)
	metrics.AddFlag(cmd.Flags(), metrics.DefaultCoordinator)
	addDashboardFlags(cmd, "", false)
	return cmd
}

// repoRoots reads --repo-roots; with none given, the roots are def's
// directory ("" : none).
func (e *env) repoRoots(def string) (reporoots.Roots, error) {
	dirs := e.v.GetStringSlice("repo-roots")
	if len(dirs) == 0 && def != "" {
		dirs = []string{def}
	}
	for i, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return reporoots.Roots{}, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--repo-roots %s: %w", d, err)}
		}
		dirs[i] = abs
	}
	roots, err := reporoots.New(dirs)
	if err != nil {
		return reporoots.Roots{}, &ExitError{Code: ExitUsage, Err: err}
	}
	return roots, nil
}

// addServiceFlags adds the flags of commands that run the coordinator.
func addServiceFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.String("redis-url", "", "Redis URL (redis:// or rediss://, with the ACL user: rediss://coordinator@redis:6380/0) for locks, cache and breakers (empty: JetStream KV)")
	jobrun.AddRedisSecurityFlags(fs)
	fs.Int("replicas", 1, "replicas of JetStream streams and buckets (3 on a cluster)")
	fs.Duration("ack-wait", 30e9, "time a job may go without a heartbeat before it is redelivered")
	fs.Int("max-deliver", 5, "deliveries of a job before it is dead-lettered")
	fs.Duration("artifact-ttl", 7*24*time.Hour, "how long bundles, patches and logs are kept in the object store")
	fs.String("events-max-bytes", jobrun.FormatBytes(bus.DefaultEventsMaxBytes),
		"cap of the event log (stream "+protocol.StreamEvents+"); when full, appends are refused, never old events dropped (bytes, or e.g. 512MiB, 4GiB)")
	for _, b := range []string{protocol.BucketBundles, protocol.BucketPatches, protocol.BucketLogs} {
		name := strings.TrimPrefix(b, "sup-")
		fs.String(name+"-max-bytes", jobrun.FormatBytes(bus.DefaultArtifactQuotas[b]),
			"quota of the object-store bucket "+b+"; when full, new objects are refused until --artifact-ttl frees room (bytes, or e.g. 512MiB, 4GiB)")
	}
	fs.String("data-dir", "./.supervisor-data", "directory for the coordinator's integration mirrors")
	fs.String("id", "", "this coordinator's identity for the leader lock (default hostname-pid)")
	fs.Duration("leader-ttl", engine.DefaultLeaderTTL, "time to live of the leader lease: a standby coordinator takes over "+
		"about this long after the leader dies (at least 3s)")
	fs.StringSlice("repo-roots", nil, "directories whose repositories the coordinator may write branches and merges into "+
		"(a submission's repo_path must lie under one; default: none)")
	jobrun.AddBreakerFlags(fs)
	addLimitFlags(fs)
	addNotifyFlags(cmd)
	addFoldFlags(cmd)
}

// serviceBusConfig reads the coordinator's JetStream parameters: the
// runners' (jobrun.BusConfig) and the event log's cap.
func serviceBusConfig(v *viper.Viper) (bus.Config, error) {
	cfg := jobrun.BusConfig(v)
	n, err := jobrun.ParseBytes(v.GetString("events-max-bytes"))
	if err != nil || n <= 0 {
		return bus.Config{}, fmt.Errorf("--events-max-bytes %q: want a positive size, e.g. 1GiB", v.GetString("events-max-bytes"))
	}
	cfg.EventsMaxBytes = n
	for _, q := range []struct {
		flag string
		dst  *int64
	}{{"bundles-max-bytes", &cfg.BundlesMaxBytes}, {"patches-max-bytes", &cfg.PatchesMaxBytes}, {"logs-max-bytes", &cfg.LogsMaxBytes}} {
		n, err := jobrun.ParseBytes(v.GetString(q.flag))
		if err != nil || n <= 0 {
			return bus.Config{}, fmt.Errorf("--%s %q: want a positive size, e.g. 2GiB", q.flag, v.GetString(q.flag))
		}
		*q.dst = n
	}
	return cfg, nil
}
