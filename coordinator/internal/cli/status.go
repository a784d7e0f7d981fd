package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

func newStatus() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [WF]",
		Short: "Show one workflow with its nodes and gates, or list all workflows",
		Long: `status without an argument lists every workflow. With a workflow id it shows its
nodes and gates and exits 0 if the workflow succeeded, 2 if it failed, 3 if it
was cancelled, 4 if it is still running and 5 if it needs attention (a node
waits for a human: coordinator inbox). -o json prints the API's JSON.`,
		Args: cobra.MaximumNArgs(1),
		RunE: clientRunE("status", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			format := e.v.GetString("output")
			if format != "table" && format != "json" {
				return exitf(ExitUsage, "-o %q: want table or json", format)
			}
			if len(args) == 0 {
				list, err := client.List(ctx)
				if err != nil {
					return apiErr(err)
				}
				if format == "json" {
					return writeJSON(e.out, list.Workflows)
				}
				printList(e.out, list.Workflows)
				printFleet(e.out, list.Fleet)
				return nil
			}
			s, err := client.Status(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			if format == "json" {
				if err := writeJSON(e.out, s); err != nil {
					return err
				}
			} else {
				printWorkflow(e.out, s)
			}
			return statusExit(s.Status)
		}),
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}

// nodeWait says which job of a node a runner holds back on an open circuit
// breaker, and until when ("" if none).
func nodeWait(n api.NodeSummary) string {
	if w := n.Waiting; w != nil {
		return fmt.Sprintf("waiting on breaker %s until %s", w.Scope, w.Until.Local().Format(time.TimeOnly))
	}
	for _, g := range n.Gates {
		if w := g.Waiting; w != nil {
			return fmt.Sprintf("gate %s waiting on breaker %s until %s", g.Name, w.Scope, w.Until.Local().Format(time.TimeOnly))
		}
	}
	return ""
}

func statusExit(s protocol.WorkflowStatus) error {
	switch s {
	case protocol.WorkflowSucceeded:
		return nil
	case protocol.WorkflowFailed:
		return &ExitError{Code: ExitFailed}
	case protocol.WorkflowCancelled:
		return &ExitError{Code: ExitCancelled}
	case protocol.WorkflowNeedsAttention:
		return &ExitError{Code: ExitNeedsAttention}
	default:
		return &ExitError{Code: ExitRunning}
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printList(w io.Writer, list []api.WorkflowSummary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tNAME\tSTATUS\tNODES\tSUBMITTED\tBRANCH")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Name, s.Status, counts(s.Counts),
			s.SubmittedAt.Local().Format(time.DateTime), s.Branch)
	}
	tw.Flush()
}

func counts(c map[string]int) string {
	var parts []string
	for _, st := range []protocol.NodeStatus{protocol.NodeSucceeded, protocol.NodeRunning, protocol.NodeGating,
		protocol.NodeIntegrating, protocol.NodeReady, protocol.NodeRetrying, protocol.NodeEscalated, protocol.NodePending, protocol.NodeFailed,
		protocol.NodeSkipped, protocol.NodeCancelled} {
		if n := c[string(st)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, ", ")
}

// printFleet says whether the fleet is paused, and how to end it.
func printFleet(w io.Writer, f api.FleetStatus) {
	if !f.Paused {
		return
	}
	since := ""
	if f.Since != nil {
		since = " since " + f.Since.Local().Format(time.DateTime)
	}
	fmt.Fprintf(w, "\nthe fleet is paused%s: %s; no new agent round starts until `coordinator resume`\n", since, f.Reason)
}

func printWorkflow(w io.Writer, s api.WorkflowSummary) {
	fmt.Fprintf(w, "workflow  %s (%s)\nstatus    %s\n", s.ID, s.Name, s.Status)
	if s.FleetPaused != "" {
		fmt.Fprintf(w, "fleet     paused: %s (coordinator resume)\n", s.FleetPaused)
	}
	if s.Reason != "" {
		fmt.Fprintf(w, "reason    %s\n", s.Reason)
	}
	fmt.Fprintf(w, "base      %s\nbranch    %s", short(s.BaseCommit), s.Branch)
	if s.Head != "" {
		fmt.Fprintf(w, " at %s", short(s.Head))
	}
	fmt.Fprintln(w)
	if line := mergeLine(s); line != "" {
		fmt.Fprintf(w, "merge     %s\n", line)
	}
	if s.TraceID != "" {
		fmt.Fprintf(w, "trace     %s\n", s.TraceID)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nNODE\tSTATUS\tATTEMPT\tHOST\tGATES\tDETAIL")
	for _, n := range s.Nodes {
		var gates []string
		for _, g := range n.Gates {
			st := string(g.Status)
			if st == "" {
				st = "waiting"
			}
			gates = append(gates, g.Name+":"+st)
		}
		detail := n.Reason
		if n.Commit != "" {
			detail = "commit " + short(n.Commit)
		}
		if n.RetryAt != nil {
			detail = fmt.Sprintf("attempt %d at %s: %s", n.Attempt+1, n.RetryAt.Local().Format(time.TimeOnly), n.Reason)
		}
		if wait := nodeWait(n); wait != "" {
			detail = wait
		}
		if len(n.WaitingForFiles) > 0 {
			detail = "waiting for files held by " + strings.Join(n.WaitingForFiles, ", ")
		}
		if q := n.Integration; q != nil {
			detail = queueDetail(q)
		}
		if extra := outputDetail(n); extra != "" {
			detail = strings.TrimPrefix(detail+"; "+extra, "; ")
		}
		attempt := fmt.Sprint(n.Attempt)
		if n.MaxAttempts > 1 && n.Attempt > 0 {
			attempt = fmt.Sprintf("%d/%d", n.Attempt, n.MaxAttempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Status, attempt, n.Host, strings.Join(gates, " "), detail)
	}
	tw.Flush()
	printSpend(w, s)
}

// printSpend lists what each node's agent runs and reviewers used and the
// workflow's total, when any run reported.
func printSpend(w io.Writer, s api.WorkflowSummary) {
	if s.Spend == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nNODE\tLAST RUN\tRUNS\tTOKENS IN/OUT\tCOST")
	for _, n := range s.Nodes {
		if n.Spend == nil {
			continue
		}
		last := ""
		if r := n.LastRun; r != nil {
			last = strings.TrimSpace(strings.Join([]string{r.Adapter, r.Model}, " "))
			if r.Turns > 0 {
				last += fmt.Sprintf(", %d turns", r.Turns)
			}
			if r.SessionID != "" {
				last += ", session " + r.SessionID
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\n", n.ID, last, n.Runs, n.Usage.Input, n.Usage.Output, costText(*n.Spend, n.MaxCostUSD))
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d/%d\t%s\n", s.Runs, s.Usage.Input, s.Usage.Output, costText(*s.Spend, s.MaxCostUSD))
	tw.Flush()
}

// costText is a spend's cost: "$0.0241", "~$0.0100" when estimated, with
// the runs of unknown cost, the budget, and the review gates' reviewers'
// part of it, if any.
func costText(sp api.Spend, budget float64) string {
	t := fmt.Sprintf("$%.4f", sp.CostUSD)
	if sp.CostEstimated {
		t = "~" + t
	}
	if sp.CostUnknownRuns > 0 {
		t += fmt.Sprintf(" (+%d runs of unknown cost)", sp.CostUnknownRuns)
	}
	if budget > 0 {
		t += fmt.Sprintf(" of $%.2f", budget)
	}
	if r := sp.ReviewSpend; r != nil {
		t += fmt.Sprintf(", reviewers %d runs $%.4f", r.Runs, r.CostUSD)
		if r.CostUnknownRuns > 0 {
			t += fmt.Sprintf(" (+%d of unknown cost)", r.CostUnknownRuns)
		}
	}
	return t
}

// outputDetail says, in a few words, what a node's plan added and how its
// review came out.
func outputDetail(n api.NodeSummary) string {
	var parts []string
	if n.Expanded > 0 {
		parts = append(parts, fmt.Sprintf("plan added %d nodes", n.Expanded))
	}
	if o := n.Output; o != nil && o.Schema == "review" {
		verdict := o.Status
		if !o.Valid() {
			verdict = "no valid block"
		}
		parts = append(parts, "review: "+verdict)
	}
	return strings.Join(parts, "; ")
}
