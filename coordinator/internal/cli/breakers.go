package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

func newBreakers() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "breakers",
		Short: "List the fleet's circuit breakers (reset one with breakers reset SCOPE)",
		Long: `breakers lists the circuit breakers with something on record, which the runners
keep in the state store for the whole fleet: one per agent command and model
(agent:claude:opus), per gate (gate:NAME:DIGEST of its command) and per
repository (repo:ID). Each shows its state, the failures within the window, when
it opened and until when it holds jobs back. A breaker opens after
--breaker-failures failures within --breaker-window (5 in 5m by default); open,
it holds the jobs of its scope back, unrun, for --breaker-cool-down (5m), then
lets one through as a probe: its success closes the breaker, its failure opens
it again. 'breakers reset SCOPE' closes one at once.`,
		Args: cobra.NoArgs,
		RunE: clientRunE("breakers", func(ctx context.Context, e *env, client *api.Client, _ []string) error {
			format, err := formatOf(e)
			if err != nil {
				return err
			}
			resp, err := client.Breakers(ctx)
			if err != nil {
				return apiErr(err)
			}
			if format == "json" {
				return writeJSON(e.out, resp)
			}
			printBreakers(e.out, resp)
			return nil
		}),
	}
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	cmd.AddCommand(newBreakerReset())
	return cmd
}

func newBreakerReset() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset SCOPE",
		Short: "Close a circuit breaker and forget its failures",
		Long: `reset closes the circuit breaker of SCOPE (as 'coordinator breakers' names it)
and forgets its failures: the jobs it held back run as soon as their runners
ask again (within 30 s). Who reset it (--as, default the OS user) is logged by
the coordinator. A scope with nothing on record is an error.`,
		Args: cobra.ExactArgs(1),
		RunE: clientRunE("breakers", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			by := e.v.GetString("as")
			if by == "" {
				by = currentUser()
			}
			resp, err := client.BreakerReset(ctx, api.BreakerResetRequest{Scope: args[0], By: by})
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintf(e.out, "%s: closed (was %s)\n", args[0], describeBreaker(resp.Was))
			return nil
		}),
	}
	cmd.Flags().String("as", "", "who resets it (default: the OS user)")
	return cmd
}

func printBreakers(w io.Writer, resp api.BreakersResponse) {
	p := resp.Policy
	policy := fmt.Sprintf("%d failures within %s open a breaker; %s later one job probes",
		p.Failures, seconds(p.WindowSeconds), seconds(p.CoolDownSeconds))
	if len(resp.Breakers) == 0 {
		fmt.Fprintf(w, "no circuit breaker has anything on record (%s)\n", policy)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tSTATE\tFAILURES\tOPENED\tUNTIL")
	for _, b := range resp.Breakers {
		st := b.State
		if b.ProbeDue {
			st += " (probe due)"
		}
		failures := "-"
		if b.State == "closed" {
			failures = fmt.Sprintf("%d/%d", b.Failures, p.Failures)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Scope, st, failures, clock(b.OpenedAt), clock(b.Until))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", policy)
}

// describeBreaker says in a few words what a breaker was.
func describeBreaker(b api.BreakerInfo) string {
	switch b.State {
	case "open":
		return "open since " + clock(b.OpenedAt)
	case "half_open":
		return "half-open, its probe out since " + clock(b.ProbeStartedAt)
	}
	return fmt.Sprintf("closed with %d recent failures", b.Failures)
}

// clock is a time of day in local time, "-" for none.
func clock(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.TimeOnly)
}

func seconds(s float64) string { return (time.Duration(s * float64(time.Second))).String() }
