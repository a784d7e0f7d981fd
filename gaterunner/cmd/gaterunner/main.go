// Command gaterunner runs quality gates for Supervisor: it pulls gate jobs
// from NATS JetStream and runs each in a sandbox. Run any number of them,
// on any host that reaches NATS (and Redis, when the fleet uses it).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/gaterunner"
	"github.com/supervisorhq/supervisor/shared/jobrun"
)

func main() {
	cmd := jobrun.Command("gaterunner", "Run Supervisor gate jobs from NATS JetStream",
		`gaterunner pulls gate jobs for its pools, materializes the base commit plus the
node's patches, runs the gate command in a sandbox and reports its status.

Settings come from flags, then SUPERVISOR_* environment variables (--redis-url is
SUPERVISOR_REDIS_URL), then the --config file, then defaults.
On SIGTERM it stops taking jobs, lets running ones finish for --drain-timeout,
and hands back whatever is still running.`,
		func(ctx context.Context, deps jobrun.Deps, v *viper.Viper) error {
			return gaterunner.New(deps, gaterunner.Config{
				Pools:        v.GetStringSlice("pools"),
				Concurrency:  v.GetInt("concurrency"),
				DrainTimeout: v.GetDuration("drain-timeout"),
				PollInterval: v.GetDuration("poll-interval"),
			}).Run(ctx)
		})
	cmd.Flags().Duration("poll-interval", 30*time.Second, "wait before re-running a pending gate (exit 75)")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gaterunner:", err)
		os.Exit(1)
	}
}
