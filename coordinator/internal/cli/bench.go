package cli

import (
	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
)

// newBench is `coordinator bench`: the benchmark (the same command as the
// supervisor-bench binary) built into the coordinator's command line, as
// River builds `river bench` into its CLI. It runs an in-process fleet of
// its own and connects to nothing given by --nats.
func newBench() *cobra.Command {
	cmd := bench.Command(nil, nil)
	cmd.Use = "bench"
	cmd.Short = "Measure Supervisor against references taken in the same run (raw JetStream, git status, docker run)"
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := run(c, args); err != nil {
			return &ExitError{Code: bench.ExitCode(err), Err: err}
		}
		return nil
	}
	return cmd
}
