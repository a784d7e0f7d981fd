// Command gaterunner runs quality gates for Supervisor: it pulls gate jobs
// from NATS JetStream and runs each in a sandbox. Run any number of them,
// on any host that reaches NATS (and Redis, when the fleet uses it).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/gaterunner"
	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/jobrun"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gaterunner:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gaterunner",
		Short: "Run Supervisor gate jobs from NATS JetStream",
		Long: `gaterunner pulls gate jobs for its pools, materializes the base commit plus the
node's patches, runs the gate command in a sandbox and reports its status.

Settings come from flags, then SUPERVISOR_* environment variables (--redis-url is
SUPERVISOR_REDIS_URL), then the --config file, then defaults.
On SIGTERM it stops taking jobs, lets running ones finish for --drain-timeout,
and hands back whatever is still running.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := config.Load(cmd)
			if err != nil {
				return err
			}
			log, err := config.Logger(v, "gaterunner")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			deps, closeDeps, err := jobrun.Setup(ctx, jobrun.SettingsFrom(v, log), "supervisor-gaterunner")
			if err != nil {
				return err
			}
			defer closeDeps()
			return gaterunner.New(deps, gaterunner.Config{
				Pools:        v.GetStringSlice("pools"),
				Concurrency:  v.GetInt("concurrency"),
				DrainTimeout: v.GetDuration("drain-timeout"),
				PollInterval: v.GetDuration("poll-interval"),
			}).Run(ctx)
		},
	}
	config.AddConfigFlag(cmd.Flags())
	jobrun.AddRunnerFlags(cmd.Flags())
	cmd.Flags().Duration("poll-interval", 30*time.Second, "wait before re-running a pending gate (exit 75)")
	return cmd
}
