package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

func newLogs() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logs WF NODE",
		Short: "Print a node's agent and gate logs (the latest attempt)",
		Args:  cobra.ExactArgs(2),
		RunE: clientRunE("logs", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			logs, err := client.Logs(ctx, args[0], args[1])
			if err != nil {
				return apiErr(err)
			}
			if len(logs) == 0 {
				fmt.Fprintf(e.out, "node %s of %s has no logs yet\n", args[1], args[0])
				return nil
			}
			for _, l := range logs {
				tail := ""
				if l.Truncated {
					tail = " [tail]"
				}
				fmt.Fprintf(e.out, "==> %s (%s)%s <==\n", l.Name, l.Object, tail)
				fmt.Fprint(e.out, l.Content)
				if !strings.HasSuffix(l.Content, "\n") {
					fmt.Fprintln(e.out)
				}
			}
			return nil
		}),
	}
	return cmd
}

func newCancel() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel WF",
		Short: "Cancel a running workflow: its unfinished nodes are cancelled and running jobs stopped",
		Args:  cobra.ExactArgs(1),
		RunE: clientRunE("cancel", func(ctx context.Context, e *env, client *api.Client, args []string) error {
			s, err := client.Cancel(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintf(e.out, "workflow %s %s\n", s.ID, s.Status)
			return nil
		}),
	}
	return cmd
}
