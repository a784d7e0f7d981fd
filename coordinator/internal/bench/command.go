package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/shared/config"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/sandbox"
)

// Exit codes of supervisor-bench.
const (
	ExitOK    = 0
	ExitFault = 1  // a scenario failed
	ExitUsage = 64 // bad command line
)

// usageError marks a bad command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usage(err error) error { return usageError{err} }

// Main runs supervisor-bench with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	cmd := Command(stdout, stderr)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "supervisor-bench:", err)
	return ExitCode(err)
}

// ExitCode is the exit code of an error Command's RunE returned: ExitFault
// when a scenario failed, ExitUsage for a bad command line, ExitOK for nil.
func ExitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue) || !errors.Is(err, errRun):
		return ExitUsage
	}
	return ExitFault
}

// errRun marks a failure of the measurements themselves.
var errRun = errors.New("bench failed")

// Command is the supervisor-bench command; `coordinator bench` is the
// same command under another name.
func Command(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "supervisor-bench",
		Short: "Measure no-op nodes' throughput and latency against raw JetStream, in one run",
		Long: `bench measures, in this one process and one run, what Supervisor costs on top of
its message bus. First the bus alone, on an embedded NATS with a file-store
work-queue stream, reached through the in-memory pipe the embedded fleet's
own services use: a burst of small messages published asynchronously and
consumed with a batched pull consumer (raw, the baseline); the same burst
consumed the way workers and gate runners consume jobs, one Fetch(1) per free
slot with confirmed acks (raw-fetch1); and one message at a time to an idle
consumer (raw-serial). Then the full path, each on a fresh in-process fleet
(embedded NATS, coordinator, worker, gate runner): workflows of independent
no-op tasks whose agent is 'true' (nodes), the same with one 'true' gate per
task (gated), and a chain of no-op tasks (chain). Workflows are submitted
through the API with a bundle of a tiny git repository, as 'submit' does.

It prints each scenario's count, throughput, p50/p99 latency (publish→consume
for raw messages, ready→started for nodes) and their ratios to the raw
figures, and what the process allocated per message or node.

feedback measures the closed loop on the same fleet: one workflow of
--feedback-tasks tasks whose agent is 'supervisor-test-agent -p' (from
--bin-dir) and whose one gate, has-fix, fails until the agent, reading the
failed round's feedback, writes the file the gate looks for. Each task's
round trip runs from its failed gate.finished (attempt 1) to its node.started
(attempt 2), p50/p99, beside raw-serial. The workflow uses the aggressive
retry policy (1 s before attempt 2), which is most of the round trip, so the
part beyond the delay (node.started minus the retry's not_before) is given
too, with its ratio to raw-serial.

Then the gate engine, on a fleet of its own. cache-key generates a git
repository of --repo-files files, changes --changed-files of them, and times
--key-iterations runs of each of: 'git status --porcelain' (the reference),
the gate cache key, a cache hit from the fleet's KV store (and from Redis with
--redis-url), and the workspace integrity capture and check, each with its
ratio to git status. With --repo-sizes (e.g. 10000,100000) it does so on a
repository of each size in turn (the cache hits on the first only) and says
how the key and the integrity check grow against git status. gate-scale starts gaterunner processes (from --bin-dir,
by default this executable's directory, as 'make build' lays out bin/), each
with --concurrency 1, and measures the gate throughput of workflows of
--gate-tasks no-op tasks with one uncached 'sleep --gate-sleep' gate each, for
every count of --gate-runners, with the speed-up against linear scaling. The
runners use the process sandbox, like the in-process fleet, unless
--gate-sandbox says docker (each gate in a container of its own).
worker-scale does the same with worker processes (--worker-runners) on
workflows of --gate-tasks tasks whose agents sleep --gate-sleep, no gates.

Then sandbox measures the sandboxes' cost per gate, side by side: the process
sandbox, the Docker sandbox (as a gate runner builds and calls it), 'docker run
--rm IMAGE COMMAND' with the docker CLI, and the same docker run with the
Docker sandbox's hardening as flags, each --sandbox-runs times after 2
warm-up rounds, interleaved round-robin, with p50/p90/mean, the overhead over
the process sandbox, and the Docker variants' time split at the engine's
events. The image is --sandbox-image (built by 'make images'; nothing is
pulled), the command --sandbox-command (argv, no shell: one value is split at
white space, or repeat the flag once per argument). Without a Docker engine
the scenario is skipped, unless --scenarios names it.

go-gate times 'go vet ./...' of a tiny module with warm caches in the process
sandbox and in the Docker sandbox (supervisor/sandbox-go), --go-gate-runs times
each. demo runs the workflow 'coordinator demo' submits on a fleet with two
sets of runner processes from --bin-dir, a worker and a gate runner each: one
in the process sandbox, one in the Docker sandbox (agents in supervisor/worker
without a network, gates in supervisor/sandbox-go). It waits for the Docker
gate runner's cache warm-up (minutes the first time; the runners' data is kept
in --demo-data-dir, so once per image), runs one unmeasured demo on each, then
--demo-runs demos on each in turn, and compares the medians of their wall
times. Without a Docker engine both are skipped, unless --scenarios names them.

Last, the coordinator's cost with history. replay writes event logs of
--replay-events events of history (workflows of 10 gated tasks, finished two
hours ago, one in 20 still running), has a coordinator stop cleanly on all but
the last tenth (at most 1,000) so that a snapshot covers them, and times a
coordinator's start from New to Ready both ways in the same run: folding the
whole log (the reference) and from the snapshot plus the events after it.
scale folds such workflows into the coordinator's state, without NATS, and
reports the live heap and the process's resident memory with --scale-nodes
nodes in flight, then as finished workflows accumulate (the same counts of
finished nodes), retired as the coordinator retires them and, the reference,
kept in memory.

-o json prints the same as JSON. Never compare figures from different machines.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := config.Load(cmd)
			if err != nil {
				return usage(err)
			}
			log, err := config.Logger(v, "bench")
			if err != nil {
				return usage(err)
			}
			format := v.GetString("output")
			if format != "table" && format != "json" {
				return usage(fmt.Errorf("-o %q: want table or json", format))
			}
			var scenarios []string
			for _, s := range v.GetStringSlice("scenarios") {
				scenarios = append(scenarios, strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })...)
			}
			fleetLog := log
			if !v.GetBool("verbose") {
				fleetLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
			}
			binDir := v.GetString("bin-dir")
			if binDir == "" {
				if binDir, err = executableDir(); err != nil {
					return usage(fmt.Errorf("--bin-dir: %w", err))
				}
			}
			runners, err := cmd.Flags().GetIntSlice("gate-runners")
			if err != nil {
				return usage(fmt.Errorf("--gate-runners: %w", err))
			}
			workers, err := cmd.Flags().GetIntSlice("worker-runners")
			if err != nil {
				return usage(fmt.Errorf("--worker-runners: %w", err))
			}
			sizes, err := cmd.Flags().GetIntSlice("repo-sizes")
			if err != nil {
				return usage(fmt.Errorf("--repo-sizes: %w", err))
			}
			if len(sizes) > 0 && cmd.Flags().Changed("repo-files") {
				return usage(errors.New("--repo-files and --repo-sizes: give one of them"))
			}
			command, err := cmd.Flags().GetStringArray("sandbox-command")
			if err != nil {
				return usage(fmt.Errorf("--sandbox-command: %w", err))
			}
			cfg := Config{
				Nodes: v.GetInt("nodes"), ChainNodes: v.GetInt("chain"), RawMessages: v.GetInt("raw-messages"),
				PayloadBytes: v.GetInt("payload"), Concurrency: v.GetInt("concurrency"), Scenarios: scenarios,
				WorkDir: v.GetString("dir"), MaxWait: v.GetDuration("max-wait"),
				FleetLog: fleetLog, Progress: cmd.ErrOrStderr(),
				RepoFiles: v.GetInt("repo-files"), RepoSizes: sizes, ChangedFiles: v.GetInt("changed-files"),
				KeyIterations: v.GetInt("key-iterations"), RedisURL: v.GetString("redis-url"), Redis: jobrun.RedisOptions(v),
				GateTasks: v.GetInt("gate-tasks"), GateSleep: v.GetDuration("gate-sleep"), GateRunners: runners,
				WorkerRunners: workers, BinDir: binDir, GateSandbox: v.GetString("gate-sandbox"),
				SandboxImage: v.GetString("sandbox-image"), SandboxCommand: sandboxArgv(command),
				SandboxRuns: v.GetInt("sandbox-runs"), GoGateRuns: v.GetInt("go-gate-runs"), FeedbackTasks: v.GetInt("feedback-tasks"),
				SandboxHelper: v.GetString("sandbox-helper"),
				DemoRuns:      v.GetInt("demo-runs"), DemoDataDir: v.GetString("demo-data-dir"),
				CoordinatorNodes: v.GetInt("coordinator-nodes"),
			}
			if cfg.ReplayEvents, err = cmd.Flags().GetIntSlice("replay-events"); err != nil {
				return usage(fmt.Errorf("--replay-events: %w", err))
			}
			if cfg.ScaleNodes, err = cmd.Flags().GetIntSlice("scale-nodes"); err != nil {
				return usage(fmt.Errorf("--scale-nodes: %w", err))
			}
			if err := cfg.Validate(); err != nil {
				return usage(err)
			}
			stopProfiles, err := startProfiles(v.GetString("cpuprofile"), v.GetString("memprofile"))
			if err != nil {
				return usage(err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := Run(ctx, cfg)
			if perr := stopProfiles(); perr != nil && err == nil {
				return fmt.Errorf("%w: %w", errRun, perr)
			}
			if err != nil {
				return fmt.Errorf("%w: %w", errRun, err)
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			PrintTable(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	config.AddConfigFlag(cmd.PersistentFlags())
	fs := cmd.Flags()
	fs.Int("nodes", 200, "no-op tasks in the nodes and gated scenarios (split into workflows of at most 500)")
	fs.Int("chain", 20, "tasks in the chain scenario and the coordinator scenario's chain (at most 500)")
	fs.Int("coordinator-nodes", 5000, "no-op tasks of the coordinator scenario's burst (split into workflows of at most 500)")
	fs.Int("raw-messages", 20000, "messages in the raw burst scenarios (raw-serial sends at most 1000)")
	fs.Int("payload", 64, "size of a raw message in bytes (at least 8)")
	fs.Int("concurrency", 4, "worker and gate runner concurrency, and raw-fetch1's slots")
	fs.StringSlice("scenarios", nil, "scenarios to run (default all): "+strings.Join(Scenarios, ","))
	fs.StringP("output", "o", "table", "output format: table or json")
	fs.String("dir", "", "work directory, kept afterwards (default: a temporary directory, removed)")
	fs.Duration("max-wait", 0, "give up on a scenario after this long (default 10m)")
	fs.Bool("verbose", false, "show the fleet's logs")
	fs.String("cpuprofile", "", "write a CPU profile of the whole run (every scenario, the in-process fleets included) to this file")
	fs.String("memprofile", "", "write a heap profile (allocations since the start) to this file at the end of the run")
	fs.Int("repo-files", 10000, "files in the cache-key scenario's generated repository")
	fs.IntSlice("repo-sizes", nil, "sizes of the cache-key scenario's repositories, increasing (e.g. 10000,100000), measured in turn instead of --repo-files alone, with how each operation grows against git status")
	fs.Int("changed-files", 5, "files of that repository changed and staged, left uncommitted, before measuring")
	fs.Int("key-iterations", 20, "runs of each cache-key operation")
	fs.String("redis-url", "", "also measure a cache hit against this Redis (keys under a prefix of the bench's own, removed; a user with a role's ACL cannot write them)")
	jobrun.AddRedisSecurityFlags(fs)
	fs.Int("gate-tasks", 24, "tasks, one gate each, per gate-scale measurement")
	fs.Duration("gate-sleep", 500*time.Millisecond, "what each gate-scale gate sleeps")
	fs.IntSlice("gate-runners", []int{1, 2, 4}, "gate runner process counts gate-scale measures, increasing")
	fs.IntSlice("worker-runners", []int{1, 2, 4}, "worker process counts worker-scale measures, increasing (on --gate-tasks tasks whose agents sleep --gate-sleep)")
	fs.String("bin-dir", "", "directory holding the gaterunner and supervisor-test-agent binaries (default: this executable's directory)")
	fs.String("gate-sandbox", "process", "the gate runner processes' --sandbox: "+strings.Join(GateSandboxes, ", "))
	fs.String("sandbox-image", DefaultSandboxImage, "image of the sandbox scenario's Docker variants (built by make images; never pulled)")
	fs.StringArray("sandbox-command", DefaultSandboxCommand,
		"argv every sandbox variant runs, no shell: one value is split at white space, or repeat the flag once per argument")
	fs.Int("sandbox-runs", DefaultSandboxRuns, "runs of each sandbox variant, after 2 warm-up rounds")
	fs.String("sandbox-helper", "", "path of "+sandbox.HelperName+" for the go-gate scenario's prestarted variant (default: beside this executable)")
	fs.Int("go-gate-runs", DefaultGoGateRuns, "runs of each go-gate variant (`go vet ./...` with warm caches), after one unmeasured round")
	fs.Int("demo-runs", DefaultDemoRuns, "demos of each demo variant measured, alternating, after one unmeasured demo each")
	fs.String("demo-data-dir", "", "directory of the demo scenario's runner processes' data, kept between runs so that the Docker gate runner's cache warm-up is done once per image (default: supervisor-bench/demo in the user's cache directory)")
	fs.Int("feedback-tasks", DefaultFeedbackTasks, "tasks of the feedback scenario's workflow (at most 500)")
	fs.IntSlice("replay-events", DefaultReplayEvents, "sizes in events of the replay scenario's logs of history (e.g. 1000,10000,100000)")
	fs.IntSlice("scale-nodes", DefaultScaleNodes, "node counts of the scale scenario, increasing (e.g. 1000,10000,100000)")
	return cmd
}

// sandboxArgv turns --sandbox-command's values into an argv: a single
// value is split at white space ("sleep 0.1"); several values, from a
// repeated flag, are the arguments as given (so one may hold spaces).
func sandboxArgv(values []string) []string {
	if len(values) == 1 {
		return strings.Fields(values[0])
	}
	return values
}

// executableDir is the directory of the running executable, symbolic
// links resolved: bin/ when run as bin/supervisor-bench.
func executableDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return filepath.Dir(exe), nil
}
