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
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/worker"
)

func main() {
	profile := jobrun.Profile{
		Resources: worker.DefaultResources,
		Egress:    true,
		// Port 9102: docs/metrics.md.
		MetricsListen: metrics.DefaultWorker,
		Prepare: func(v *viper.Viper, s *jobrun.Settings) error {
			labels, err := worker.ResolveLabels(context.Background(), jobrun.StringList(v, "labels"), s.Log)
			if err != nil {
				return fmt.Errorf("--labels: %w", err)
			}
			gpus, _ := worker.GPUCount(labels)
			s.Labels, s.GPUs = labels, gpus
			s.Log.Info("worker labels", "labels", jobrun.FormatLabels(labels))
			return nil
		},
	}
	cmd := jobrun.Command("worker", "Run Supervisor agent jobs from NATS JetStream",
		`worker pulls agent jobs for its pools, runs one fresh agent process per job in a
sandbox with the prompt on stdin, and reports the patch it produced.

The sandbox is Docker wherever the engine answers (--sandbox auto), else the
process sandbox with a loud warning. In Docker, agents reach the network only
through the worker's egress proxy, and only the --egress-allow destinations;
every refused connection is logged as "egress denied" with its host.

GPUs: a worker with GPUs (found with nvidia-smi, or declared with --labels
gpus=N,gpu=MODEL) takes jobs from the GPU pools (--gpu-pools, default gpu)
plus those --pools names, and gives its containers the GPUs; a worker without
GPUs refuses a GPU pool. Tasks that need a GPU set pool: gpu in the workflow.

Provider keys: an agent gets the variables its adapter's allow-list names
(the config file's credentials section, adapter: [NAMES]; by default each
CLI's own: ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN for
claude-code, OPENAI_API_KEY, CODEX_API_KEY for codex, GEMINI_API_KEY,
GOOGLE_API_KEY, GOOGLE_APPLICATION_CREDENTIALS for gemini), from --secrets-file
(KEY=VALUE lines, mode 0600) or else this process's environment. Their values
are scrubbed from logs, live lines and reports.

Settings come from flags, then SUPERVISOR_* environment variables (--redis-url is
SUPERVISOR_REDIS_URL), then the --config file, then defaults.
On SIGTERM it stops taking jobs, lets running ones finish for --drain-timeout,
and hands back whatever is still running.`,
		profile,
		func(ctx context.Context, deps jobrun.Deps, v *viper.Viper) error {
			var pools []string
			if v.IsSet("pools") {
				pools = jobrun.StringList(v, "pools")
			}
			var creds map[string][]string
			if v.IsSet("credentials") {
				creds = v.GetStringMapStringSlice("credentials")
			}
			return worker.New(deps, worker.Config{
				Pools:        pools,
				GPUPools:     jobrun.StringList(v, "gpu-pools"),
				Concurrency:  v.GetInt("concurrency"),
				DrainTimeout: v.GetDuration("drain-timeout"),
				Credentials:  creds,
				SecretsFile:  v.GetString("secrets-file"),
			}).Run(ctx)
		})
	cmd.Flags().StringSlice("labels", nil, "labels of this worker, key=value,... (gpus=N,gpu=MODEL declares GPUs; default: detected with nvidia-smi)")
	cmd.Flags().String("secrets-file", "", "KEY=VALUE file of provider keys for agents (mode 0600 or stricter)")
	cmd.Flags().StringSlice("gpu-pools", []string{worker.DefaultGPUPool}, "pools of tasks that need a GPU: a worker with GPUs takes them, one without refuses them")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
