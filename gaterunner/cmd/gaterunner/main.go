// Command gaterunner runs quality gates for Supervisor: it pulls gate jobs
// from NATS JetStream and runs each in a sandbox. Run any number of them,
// on any host that reaches NATS (and Redis, when the fleet uses it).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/gaterunner"
	"github.com/supervisorhq/supervisor/shared/gatecache"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/metrics"
)

func main() {
	cmd := jobrun.Command("gaterunner", "Run Supervisor gate jobs from NATS JetStream",
		`gaterunner pulls gate jobs for its pools, materializes the base commit plus the
node's patches, runs the gate command in a sandbox (through the fleet's gate
cache, with a workspace integrity check around it) and reports its status. A
pending gate (exit 75) is reported and acknowledged; the coordinator schedules
its next poll.

The sandbox is Docker wherever the engine answers (--sandbox auto), else the
process sandbox with a loud warning. Gate containers never have a network.

A review gate's reviewers are agent CLIs: each gets the provider keys its
adapter's allow-list names (the config file's credentials section, as the
worker's), from --secrets-file (KEY=VALUE lines, mode 0600) or else this
process's environment; their values are scrubbed from logs and reports.

Settings come from flags, then SUPERVISOR_* environment variables (--redis-url is
SUPERVISOR_REDIS_URL), then the --config file, then defaults.
On SIGTERM it stops taking jobs, lets running ones finish for --drain-timeout,
and hands back whatever is still running.`,
		jobrun.Profile{Resources: gaterunner.DefaultResources, MetricsListen: metrics.DefaultGateRunner,
			Prepare: func(v *viper.Viper, s *jobrun.Settings) error {
				if v.GetBool("cache-warmup") {
					s.Caches = gaterunner.CacheWarmup()
				}
				return nil
			}},
		func(ctx context.Context, deps jobrun.Deps, v *viper.Viper) error {
			var creds map[string][]string
			if v.IsSet("credentials") {
				creds = v.GetStringMapStringSlice("credentials")
			}
			return gaterunner.New(deps, gaterunner.Config{
				Pools:        v.GetStringSlice("pools"),
				Concurrency:  v.GetInt("concurrency"),
				DrainTimeout: v.GetDuration("drain-timeout"),
				CacheTTL:     v.GetDuration("cache-ttl"),
				Credentials:  creds,
				SecretsFile:  v.GetString("secrets-file"),
			}).Run(ctx)
		})
	cmd.Flags().String("secrets-file", "", "KEY=VALUE file of provider keys for review gates' reviewers (mode 0600 or stricter)")
	cmd.Flags().Bool("cache-warmup", true, "warm the gates' Go caches once per sandbox image (go build std, then go vet and go test of a generated package importing all of std, with no repository code) into read-only trusted layers under --data-dir/sandbox-cache")
	cmd.Flags().Duration("cache-ttl", gatecache.DefaultTTL, "how long a passing gate result stays in the fleet's gate cache")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gaterunner:", err)
		os.Exit(1)
	}
}
