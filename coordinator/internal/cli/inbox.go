package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

func newInbox() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "List the nodes that wait for a human, across workflows",
		Long: `inbox lists every node that waits for a human decision, oldest first: its
workflow, why it waits (the escalation's reason), the attempts it used of its
budget, how long it has waited and what its candidate patch changes. Decide
with approve, reject or retry; show prints a node in full.`,
		Args: cobra.NoArgs,
		RunE: clientRunE("inbox", func(ctx context.Context, e *env, client *api.Client, _ []string) error {
			format, err := formatOf(e)
			if err != nil {
				return err
			}
			items, err := client.Inbox(ctx)
			if err != nil {
				return apiErr(err)
			}
			if format == "json" {
				return writeJSON(e.out, items)
			}
			printInbox(e.out, items, time.Now())
			return nil
		}),
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}

// formatOf is the command's -o, table or json.
func formatOf(e *env) (string, error) {
	format := e.v.GetString("output")
	if format != "table" && format != "json" {
		return "", exitf(ExitUsage, "-o %q: want table or json", format)
	}
	return format, nil
}

func printInbox(w io.Writer, items []api.InboxItem, now time.Time) {
	if len(items) == 0 {
		fmt.Fprintln(w, "nothing waits for a human")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tNODE\tATTEMPTS\tWAITING\tCHANGES\tWHY")
	for _, it := range items {
		fmt.Fprintf(tw, "%s (%s)\t%s\t%d/%d\t%s\t%s\t%s\n", it.WorkflowID, it.WorkflowName, it.NodeID, it.Attempt, it.Budget,
			now.Sub(it.Since).Round(time.Second), statLine(it.DiffStat), it.Reason)
	}
	tw.Flush()
}

func statLine(s *api.DiffStat) string {
	if s == nil {
		return "no patch"
	}
	return fmt.Sprintf("%d files +%d -%d", len(s.Files), s.Insertions, s.Deletions)
}

func newShow() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show WF NODE",
		Short: "Show a node in full: its attempts, their gates and feedback, and the candidate diff",
		Args:  cobra.ExactArgs(2),
		RunE: clientRunE("show", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			format, err := formatOf(e)
			if err != nil {
				return err
			}
			d, err := client.Show(ctx, args[0], args[1])
			if err != nil {
				return apiErr(err)
			}
			if format == "json" {
				return writeJSON(e.out, d)
			}
			printNodeDetail(e.out, d)
			return nil
		}),
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}

func printNodeDetail(w io.Writer, d api.NodeDetail) {
	n := d.Node
	fmt.Fprintf(w, "node      %s of %s\nstatus    %s (attempt %d of %d)\n", n.ID, d.WorkflowID, n.Status, n.Attempt, d.Budget)
	if n.Reason != "" {
		fmt.Fprintf(w, "reason    %s\n", n.Reason)
	}
	if d.Instructions != "" {
		fmt.Fprintf(w, "\na human task; what to do:\n%s\n", strings.TrimRight(d.Instructions, "\n"))
	}
	var prev *api.AttemptDetail // the attempt printed before
	for _, a := range d.Attempts {
		fmt.Fprintf(w, "\nattempt %d: agent %s", a.Attempt, a.AgentStatus)
		if a.Patch != nil {
			fmt.Fprintf(w, ", patch %d bytes", a.Patch.Size)
		}
		if a.Outcome != "" {
			fmt.Fprintf(w, " → %s: %s", a.Outcome, a.Reason)
		}
		fmt.Fprintln(w)
		printAttemptStart(w, a, prev)
		prev = &a
		if o := a.Output; o != nil {
			if o.Valid() {
				fmt.Fprintf(w, "  %s result %s:\n%s\n", o.Schema, o.Status, indentJSON(o.Block))
			} else {
				fmt.Fprintf(w, "  %s result not accepted: %s\n", o.Schema, o.Error)
				for _, v := range o.Violations {
					fmt.Fprintf(w, "    %s\n", v)
				}
			}
		}
		for _, g := range a.Gates {
			fmt.Fprintf(w, "  gate %-16s %s\n", g.Name, g.Status)
		}
		if len(a.Feedback) > 0 {
			fmt.Fprintf(w, "  feedback given to attempt %d:\n%s\n", a.Attempt+1, indentJSON(a.Feedback))
		}
	}
	if d.DiffStat != nil {
		fmt.Fprintf(w, "\ncandidate diff (%s):\n", statLine(d.DiffStat))
		fmt.Fprint(w, d.Diff)
		if d.DiffTruncated {
			fmt.Fprintf(w, "\n… cut at %d bytes\n", api.DiffMaxBytes)
		}
	}
}

// printAttemptStart prints who retried attempt a and their note, and the
// feedback it received, unless that is what was printed just above as the
// feedback prev (the attempt printed before it, nil for none) gave it.
func printAttemptStart(w io.Writer, a api.AttemptDetail, prev *api.AttemptDetail) {
	switch {
	case a.RetriedBy != "" && a.RetryNote != "":
		fmt.Fprintf(w, "  retried by %s with a note: %s\n", a.RetriedBy, a.RetryNote)
	case a.RetriedBy != "":
		fmt.Fprintf(w, "  retried by %s\n", a.RetriedBy)
	}
	if len(a.ReceivedFeedback) > 0 && (prev == nil || prev.Attempt != a.Attempt-1 || !bytes.Equal(a.ReceivedFeedback, prev.Feedback)) {
		fmt.Fprintf(w, "  feedback received:\n%s\n", indentJSON(a.ReceivedFeedback))
	}
}

func indentJSON(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "    " + string(raw)
	}
	b, _ := json.MarshalIndent(v, "    ", "  ")
	return "    " + string(b)
}

// decisionCmd builds approve, reject and retry.
func decisionCmd(use, short, long string, call func(c *api.Client, ctx context.Context, req api.DecisionRequest) (api.WorkflowSummary, error),
	flags func(*cobra.Command)) *cobra.Command {
	name := strings.Fields(use)[0]
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Args: cobra.ExactArgs(2),
		RunE: clientRunE(name, func(ctx context.Context, e *env, client *api.Client, args []string) error {
			req := api.DecisionRequest{WorkflowID: args[0], NodeID: args[1], By: e.v.GetString("as"),
				Note: e.v.GetString("note"), Reason: e.v.GetString("reason"), Attempts: e.v.GetInt("attempts"),
				AcceptConfig: e.v.GetBool("accept-config")}
			if req.By == "" {
				req.By = currentUser()
			}
			if name == "reject" && strings.TrimSpace(req.Reason) == "" {
				return exitf(ExitUsage, "reject needs --reason")
			}
			s, err := call(client, ctx, req)
			if err != nil {
				return apiErr(err)
			}
			for _, n := range s.Nodes {
				if n.ID == req.NodeID {
					fmt.Fprintf(e.out, "%s %s: %s %s\n", s.ID, n.ID, n.Status, n.Reason)
				}
			}
			fmt.Fprintf(e.out, "workflow %s is %s\n", s.ID, s.Status)
			return nil
		}),
	}
	cmd.Flags().String("as", "", "who decides (default: the OS user)")
	flags(cmd)
	return cmd
}

func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "operator"
}

func newApprove() *cobra.Command {
	return decisionCmd("approve WF NODE", "Accept an escalated node's latest patch despite its failed gates",
		`approve integrates the escalated node's latest patch onto the workflow's branch
and the workflow goes on. A node whose gates found an integrity violation cannot
be approved. A patch that changes Supervisor's trusted configuration (.supervisor/:
gates, roles, templates, context) is approved only with --accept-config, which
records the files accepted; read them first (coordinator show). Who approved
(--as, default the OS user) and when is recorded.`,
		(*api.Client).Approve, func(c *cobra.Command) {
			c.Flags().String("note", "", "a note recorded with the approval")
			c.Flags().Bool("accept-config", false, "accept the patch's changes to .supervisor/ (trusted configuration)")
		})
}

func newReject() *cobra.Command {
	return decisionCmd("reject WF NODE --reason TEXT", "Fail an escalated node; its dependents are skipped",
		`reject fails the escalated node with the reason given; the nodes that depend on
it are skipped, and the workflow fails once nothing else runs.`,
		(*api.Client).Reject, func(c *cobra.Command) { c.Flags().String("reason", "", "why (required)") })
}

func newRetry() *cobra.Command {
	return decisionCmd("retry WF NODE", "Grant an escalated node more attempts, with a note for the agent",
		`retry grants the escalated node more rounds (--attempts, default the task's
max_attempts) and starts the next at once. Its agent gets the failed round's
feedback and, with --note, the note, marked as coming from the operator.`,
		(*api.Client).Retry, func(c *cobra.Command) {
			c.Flags().String("note", "", "a note the agent gets in its next round")
			c.Flags().Int("attempts", 0, "how many more rounds (default: the task's max_attempts)")
		})
}

func newResume() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "End a fleet-wide pause of new agent rounds",
		Long: `When more agent rounds fail within an hour than the coordinator allows
(--max-failures-per-hour, default 10), no new agent round starts anywhere until
an operator looks and resumes. status says so. resume ends the pause, recorded
with who (--as, default the OS user), and the failures before it no longer
count.`,
		Args: cobra.NoArgs,
		RunE: clientRunE("resume", func(ctx context.Context, e *env, client *api.Client, _ []string) error {
			by := e.v.GetString("as")
			if by == "" {
				by = currentUser()
			}
			f, err := client.Resume(ctx, by)
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintf(e.out, "the fleet runs again (resumed by %s; %d failed rounds in the last hour before)\n", by, f.FailuresLastHour)
			return nil
		}),
	}
	cmd.Flags().String("as", "", "who resumes (default: the OS user)")
	return cmd
}
