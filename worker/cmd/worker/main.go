// Command worker runs AI coding agents for Supervisor: it pulls agent jobs
// from NATS JetStream and runs each in a sandbox. Run any number of them,
// on any host that reaches NATS (and Redis, when the fleet uses it).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/worker"
)

func main() {
	cmd := jobrun.Command("worker", "Run Supervisor agent jobs from NATS JetStream",
		`worker pulls agent jobs for its pools, runs one fresh agent process per job in a
sandbox with the prompt on stdin, and reports the patch it produced.

Settings come from flags, then SUPERVISOR_* environment variables (--redis-url is
SUPERVISOR_REDIS_URL), then the --config file, then defaults.
On SIGTERM it stops taking jobs, lets running ones finish for --drain-timeout,
and hands back whatever is still running.`,
		func(ctx context.Context, deps jobrun.Deps, v *viper.Viper) error {
			return worker.New(deps, worker.Config{
				Pools:        v.GetStringSlice("pools"),
				Concurrency:  v.GetInt("concurrency"),
				DrainTimeout: v.GetDuration("drain-timeout"),
			}).Run(ctx)
		})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
