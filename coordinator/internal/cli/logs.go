package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newLogs() *cobra.Command {
	return &cobra.Command{
		Use:   "logs WF NODE",
		Short: "Print a node's agent and gate logs (the latest attempt)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "logs")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			nc, client, err := e.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
			defer cancel()
			logs, err := client.Logs(rctx, args[0], args[1])
			if err != nil {
				return apiErr(err)
			}
			if len(logs) == 0 {
				fmt.Fprintf(e.out, "node %s of %s has no logs yet\n", args[1], args[0])
				return nil
			}
			for _, l := range logs {
				fmt.Fprintf(e.out, "==> %s (%s)%s <==\n", l.Name, l.Object, map[bool]string{true: " [tail]"}[l.Truncated])
				fmt.Fprint(e.out, l.Content)
				if !strings.HasSuffix(l.Content, "\n") {
					fmt.Fprintln(e.out)
				}
			}
			return nil
		},
	}
}

func newCancel() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel WF",
		Short: "Cancel a running workflow: its unfinished nodes are cancelled and running jobs stopped",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "cancel")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			nc, client, err := e.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
			defer cancel()
			s, err := client.Cancel(rctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintf(e.out, "workflow %s %s\n", s.ID, s.Status)
			return nil
		},
	}
}
