package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

func newGate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gate",
		Short: "Inspect and re-run gates",
	}
	cmd.AddCommand(newGateResults(), newGateRerun())
	return cmd
}

func newGateResults() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "results WF [NODE]",
		Short: "Show each gate's outcome: status, attempt, duration, cached or not, output tail, log",
		Args:  cobra.RangeArgs(1, 2),
		RunE: clientRunE("gate", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			s, err := client.Status(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			rows := gateRows(s, args[1:])
			if len(args) == 2 && len(rows) == 0 {
				if !hasNode(s, args[1]) {
					return exitf(ExitFault, "workflow %s has no node %q", s.ID, args[1])
				}
			}
			switch e.v.GetString("output") {
			case "json":
				return writeJSON(e.out, rows)
			case "table":
				printGateRows(e.out, rows, e.v.GetInt("tail"))
				return nil
			default:
				return exitf(ExitUsage, "-o %q: want table or json", e.v.GetString("output"))
			}
		}),
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	cmd.Flags().Int("tail", 15, "output lines shown for each gate that did not pass (table format)")
	return cmd
}

// GateRow is one gate of one node in `gate results`.
type GateRow struct {
	Node string `json:"node"`
	api.GateSummary
}

func hasNode(s api.WorkflowSummary, id string) bool {
	for _, n := range s.Nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

func gateRows(s api.WorkflowSummary, only []string) []GateRow {
	var rows []GateRow
	for _, n := range s.Nodes {
		if len(only) > 0 && n.ID != only[0] {
			continue
		}
		for _, g := range n.Gates {
			rows = append(rows, GateRow{Node: n.ID, GateSummary: g})
		}
	}
	return rows
}

func printGateRows(w io.Writer, rows []GateRow, tail int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGATE\tSTATUS\tATTEMPT\tDURATION\tCACHED\tEXIT\tHOST\tLOG")
	for _, r := range rows {
		st := string(r.Status)
		if st == "" {
			st = "waiting"
		}
		exit := "-"
		if r.ExitCode != nil {
			exit = fmt.Sprint(*r.ExitCode)
		}
		cached := "no"
		switch {
		case r.Cached:
			cached = "yes"
		case r.CacheDisabled != "":
			cached = "off"
		}
		dur := "-"
		if r.DurationMillis > 0 {
			dur = (time.Duration(r.DurationMillis) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Node, r.Name, st, r.Attempt, dur, cached, exit, r.Host, r.Log)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Status == "" || r.Status == "passed" || r.Status == "skipped" && r.Error == "" {
			continue
		}
		fmt.Fprintf(w, "\n--- %s / %s: %s\n", r.Node, r.Name, r.Status)
		if r.IntegrityViolation {
			fmt.Fprintf(w, "integrity violation: %s\n", strings.Join(r.Violations, ", "))
		}
		if r.CacheDisabled != "" {
			fmt.Fprintf(w, "cache off: %s\n", r.CacheDisabled)
		}
		if r.Error != "" {
			fmt.Fprintln(w, r.Error)
		}
		fmt.Fprintln(w, lastLines(r.Output, tail))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if n > 0 && len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines; `coordinator logs` has everything)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func newGateRerun() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rerun WF [NODE]",
		Short: "Run a node's gates again (all gating or gate-failed nodes without NODE)",
		Long: `rerun runs gates again: every gate of NODE, or only --gate, or the gates of every
node that is gating or failed on its gates. A node that failed on its gates is
reopened: it goes back to gating and the dependents it caused to be skipped go
back to pending, so a workflow a flaky gate failed can still succeed. Gates run
in their dependency layers, and a passing gate is served from the cache unless
--no-cache is given.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: clientRunE("gate", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			req := api.GateRerunRequest{WorkflowID: args[0], Gate: e.v.GetString("gate"), NoCache: e.v.GetBool("no-cache")}
			if len(args) == 2 {
				req.NodeID = args[1]
			}
			s, err := client.GateRerun(ctx, req)
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintf(e.out, "workflow %s %s; gates re-running:\n", s.ID, s.Status)
			var rows []GateRow
			for _, r := range gateRows(s, args[1:]) {
				if r.Status == "" {
					rows = append(rows, r)
				}
			}
			printGateRows(e.out, rows, 0)
			return nil
		}),
	}
	cmd.Flags().String("gate", "", "only this gate")
	cmd.Flags().Bool("no-cache", false, "run even if a cached passing result exists")
	return cmd
}
