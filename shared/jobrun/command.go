package jobrun

import (
	"cmp"
	"context"
	"fmt"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// Serve listens for cancellation announcements and pulls jobs with h until
// ctx ends, then drains (see bus.Pull). Workers and gate runners both run
// through it.
func Serve(ctx context.Context, deps Deps, cancels *Cancels, opts bus.PullOptions, h bus.Handler) error {
	sub, err := cancels.Watch(deps.Bus.NC)
	if err != nil {
		return fmt.Errorf("watch cancellations: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the connection closes next
	// NATS answers a denied subscription asynchronously, before the flush's
	// answer: a role that may not hear cancellations fails here, at start.
	if err := deps.Bus.NC.Flush(); err != nil {
		return fmt.Errorf("watch cancellations: %w", err)
	}
	if err := bus.Denied(deps.Bus.NC); err != nil {
		return fmt.Errorf("watch cancellations: %w", err)
	}
	opts.Log = deps.Log
	defer openSlots(opts)()
	deps.Log.Info("pulling jobs", "kind", opts.Kind, "pools", strings.Join(opts.Pools, ","),
		"concurrency", opts.Concurrency, "host", deps.Host, "sandbox", deps.Sandbox.Name(), "labels", FormatLabels(deps.Labels))
	// The runner is announced until it has drained: Pull returns then.
	stopAnnouncing := deps.Presence.Announce(opts.Kind, opts.Pools, opts.Concurrency)
	err = deps.Bus.Pull(ctx, opts, h)
	stopAnnouncing()
	deps.Log.Info("stopped pulling jobs", "kind", opts.Kind)
	return err
}

// RunFunc runs a runner binary's work with its dependencies and settings.
type RunFunc func(ctx context.Context, deps Deps, v *viper.Viper) error

// Command builds a runner binary's root command: the shared flags (the
// sandbox's with p's defaults), the settings loaded flags > SUPERVISOR_*
// env > --config file > defaults, a logger, tracing (--trace-exporter),
// NATS, the state store and the sandbox, and a context that SIGINT or
// SIGTERM cancels so the runner drains.
func Command(name, short, long string, p Profile, run RunFunc) *cobra.Command {
	cmd := &cobra.Command{
		Use:          name,
		Short:        short,
		Long:         long,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := config.Load(cmd)
			if err != nil {
				return err
			}
			log, err := config.Logger(v, name)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			shutdown, err := SetupTracing(ctx, v, "supervisor-"+name, log)
			if err != nil {
				return err
			}
			defer shutdown()
			s, err := SettingsFrom(v, log, p)
			if err != nil {
				return err
			}
			s.Role = natsauth.Role(name)
			ms, err := metrics.StartFrom(v, log)
			if err != nil {
				return err
			}
			defer ms.Close() //nolint:errcheck // shutting down
			if p.Prepare != nil {
				if err := p.Prepare(v, &s); err != nil {
					return err
				}
			}
			deps, closeDeps, err := Setup(ctx, s, "supervisor-"+name)
			if err != nil {
				return err
			}
			defer closeDeps()
			return run(ctx, deps, v)
		},
	}
	config.AddConfigFlag(cmd.Flags())
	AddRunnerFlags(cmd.Flags())
	AddSandboxFlags(cmd.Flags(), p)
	telemetry.AddFlags(cmd.Flags())
	metrics.AddFlag(cmd.Flags(), cmp.Or(p.MetricsListen, metrics.Off))
	return cmd
}

// FormatLabels writes labels as k=v,k=v sorted by key ("" for none).
func FormatLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}
