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
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

func newFleet() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "List the workers and gate runners seen recently, what they take and what they run",
		Long: `fleet lists the workers and gate runners that announced themselves within the
last ` + protocol.RunnerTTL.String() + ` (each renews its entry every ` + protocol.RunnerAnnounceInterval.String() + ` and when a job starts or
ends, and removes it when it stops cleanly): kind, host, pools, busy/slots, the
jobs running now, jobs succeeded and failed since it started, a gate runner's
gate cache hits/misses, sandbox, labels (GPUs among them), version and when it
was last seen. -o json prints the API's answer.`,
		Args: cobra.NoArgs,
		RunE: clientRunE("fleet", func(ctx context.Context, e *env, client *api.Client, _ []string) error {
			format, err := formatOf(e)
			if err != nil {
				return err
			}
			resp, err := client.Fleet(ctx)
			if err != nil {
				return apiErr(err)
			}
			if format == "json" {
				return writeJSON(e.out, resp)
			}
			printRunners(e.out, resp, time.Now())
			return nil
		}),
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}

// printRunners writes the fleet as a table, one runner a line with its
// current jobs (workflow/node[:gate]#attempt and how long it has run)
// last, then the gate cache's totals.
func printRunners(w io.Writer, resp api.FleetResponse, now time.Time) {
	if len(resp.Runners) == 0 {
		fmt.Fprintf(w, "no worker or gate runner announced itself within the last %s\n", protocol.RunnerTTL)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tHOST\tPOOLS\tBUSY\tOK\tFAILED\tCACHE HIT/MISS\tSANDBOX\tLABELS\tVERSION\tUP\tSEEN\tRUNNING")
	for _, r := range resp.Runners {
		cache := "-"
		if r.Kind == protocol.KindGate {
			cache = fmt.Sprintf("%d/%d", r.Stats.CacheHits, r.Stats.CacheMisses)
		}
		jobs := make([]string, 0, len(r.Jobs))
		for _, j := range r.Jobs {
			what := j.WorkflowID + "/" + j.NodeID
			if j.Gate != "" {
				what += ":" + j.Gate
			}
			jobs = append(jobs, fmt.Sprintf("%s#%d (%s)", what, j.Attempt, age(now, j.StartedAt)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", kindName(r.Kind), r.Host,
			strings.Join(r.Pools, ","), r.Busy, r.Slots, r.Stats.Succeeded, r.Stats.Failed, cache, sandboxColumn(r),
			dash(jobrun.FormatLabels(r.Labels)), dash(r.Version), age(now, r.StartedAt), age(now, r.SeenAt),
			dash(strings.Join(jobs, ", ")))
	}
	tw.Flush()
	if lookups := resp.CacheHits + resp.CacheMisses; lookups > 0 {
		fmt.Fprintf(w, "\ngate cache: %d hits, %d misses (%.0f%% hits)\n", resp.CacheHits, resp.CacheMisses,
			100*float64(resp.CacheHits)/float64(lookups))
	}
}

// kindName is how the table names a runner's kind.
func kindName(k protocol.JobKind) string {
	switch k {
	case protocol.KindAgent:
		return "worker"
	case protocol.KindGate:
		return "gaterunner"
	}
	return string(k)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age is how long before now t was, to the second ("0s" for a future t).
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return max(now.Sub(t), 0).Round(time.Second).String()
}

// sandboxColumn is a runner's sandbox, with the process sandbox's
// protections that are off: "process (off: sandbox-user)".
func sandboxColumn(r protocol.RunnerInfo) string {
	if len(r.SandboxOff) == 0 {
		return dash(r.Sandbox)
	}
	return dash(r.Sandbox) + " (off: " + strings.Join(r.SandboxOff, ",") + ")"
}
