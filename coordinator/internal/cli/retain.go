package cli

import (
	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/engine"
)

// addFoldFlags adds the flags of the commands that run a coordinator
// about what it keeps in memory and how it restarts (PERF-30, PERF-33).
func addFoldFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.Duration("retain-finished", engine.DefaultRetainFinished, "how long a finished workflow (nothing pending, such as a "+
		"requested merge) stays in memory before it is retired to a summary; status, show, logs and the list still answer for it, "+
		"reading it back from the event log (negative: never retire)")
	fs.Duration("snapshot-interval", engine.DefaultSnapshotInterval, "how often the leader writes a snapshot of its state to the "+
		"sup-snapshots object store when the event log has moved (it also writes one when it stops cleanly); a restart folds only "+
		"the events after the newest snapshot (negative: no snapshots, a restart folds the whole log)")
}
