// Command worker runs AI coding agents for Supervisor: it pulls agent jobs
// from NATS JetStream and runs each in a sandbox. Run any number of them,
// on any host that reaches NATS (and Redis, when the fleet uses it).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/worker"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run Supervisor agent jobs from NATS JetStream",
		Long: `worker pulls agent jobs for its pools, runs one fresh agent process per job in a
sandbox with the prompt on stdin, and reports the patch it produced.

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
			log, err := config.Logger(v, "worker")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			deps, closeDeps, err := jobrun.Setup(ctx, jobrun.SettingsFrom(v, log), "supervisor-worker")
			if err != nil {
				return err
			}
			defer closeDeps()
			return worker.New(deps, worker.Config{
				Pools:        v.GetStringSlice("pools"),
				Concurrency:  v.GetInt("concurrency"),
				DrainTimeout: v.GetDuration("drain-timeout"),
			}).Run(ctx)
		},
	}
	config.AddConfigFlag(cmd.Flags())
	jobrun.AddRunnerFlags(cmd.Flags())
	return cmd
}
