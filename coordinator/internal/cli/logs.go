package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

func newLogs() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logs WF NODE",
		Short: "Print a node's agent and gate logs (the latest attempt); -f follows its agent live",
		Long: `logs prints the stored logs of a node's latest attempt: its agent's and its gates'.
Each is its tail: all of them fit in one reply, so long logs are cut to their
ends, marked [tail: last N of M bytes]. --log NAME prints one of them whole
("context", "agent", or a gate's name), read from the logs bucket.
With -f it then follows the node: each event its agent's CLI reports while it runs
(a message, a tool call, the result; secrets redacted) is printed as it happens,
prefixed with the attempt, until the node is terminal (succeeded, failed, skipped,
cancelled) or Ctrl-C. Live lines are not kept: those published before -f started
are in the stored log once the round ends.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "logs")
			if err != nil {
				return err
			}
			if name := e.v.GetString("log"); name != "" {
				if e.v.GetBool("follow") {
					return exitf(ExitUsage, "--log and --follow cannot be combined")
				}
				return printOneLog(e, args[0], args[1], name)
			}
			if !e.v.GetBool("follow") {
				return e.callAPI(func(ctx context.Context, client *api.Client) error {
					return printLogs(ctx, e, client, args[0], args[1])
				})
			}
			return followLogs(e, args[0], args[1])
		},
	}
	cmd.Flags().BoolP("follow", "f", false, "follow the node's agent live until the node is terminal")
	cmd.Flags().String("log", "", `print this one log whole: "context", "agent", or a gate's name ("gate NAME" works too)`)
	return cmd
}

// printLogs prints the stored logs of node's latest attempt.
func printLogs(ctx context.Context, e *env, client *api.Client, wf, node string) error {
	logs, err := client.Logs(ctx, wf, node)
	if err != nil {
		return apiErr(err)
	}
	if len(logs) == 0 {
		fmt.Fprintf(e.out, "node %s of %s has no logs yet\n", node, wf)
		return nil
	}
	for _, l := range logs {
		tail := ""
		if l.Truncated {
			tail = fmt.Sprintf(" [tail: last %d of %d bytes; --log %q prints it whole]", len(l.Content), l.Size,
				strings.TrimPrefix(l.Name, "gate "))
		}
		fmt.Fprintf(e.out, "==> %s (%s)%s <==\n", l.Name, l.Object, tail)
		fmt.Fprint(e.out, l.Content)
		if !strings.HasSuffix(l.Content, "\n") {
			fmt.Fprintln(e.out)
		}
	}
	return nil
}

// printOneLog streams one of node's logs, whole, from the logs bucket:
// the API names its object, and no reply carries its content.
func printOneLog(e *env, wf, node, name string) error {
	ctx, stop := signalContext()
	defer stop()
	nc, client, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
	defer cancel()
	logs, err := client.Logs(rctx, wf, node)
	if err != nil {
		return apiErr(err)
	}
	var found *api.LogEntry
	names := make([]string, 0, len(logs))
	for i, l := range logs {
		names = append(names, strconv.Quote(strings.TrimPrefix(l.Name, "gate ")))
		if l.Name == name || l.Name == "gate "+name {
			found = &logs[i]
		}
	}
	if found == nil {
		if len(names) == 0 {
			return exitf(ExitUsage, "node %s of %s has no logs yet", node, wf)
		}
		return exitf(ExitUsage, "node %s of %s has no log %q; it has %s", node, wf, name, strings.Join(names, ", "))
	}
	b, err := bus.Attach(rctx, nc, e.log)
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	// Streamed: the object store sends it in chunks, whatever its size.
	obj, err := b.Logs.Get(ctx, found.Object)
	if err != nil {
		return &ExitError{Code: ExitFault, Err: fmt.Errorf("read log %s: %w", found.Object, err)}
	}
	defer obj.Close()
	if _, err := io.Copy(e.out, obj); err != nil {
		return &ExitError{Code: ExitFault, Err: fmt.Errorf("read log %s: %w", found.Object, err)}
	}
	return nil
}

// followPoll is how often logs -f asks whether the node is terminal.
const followPoll = time.Second

// followLogs prints the stored logs, then the node's live lines
// (protocol.LogSubject) until the node is terminal or the user stops it.
// It subscribes before reading the stored logs, so no line falls between.
func followLogs(e *env, wf, node string) error {
	ctx, stop := signalContext()
	defer stop()
	nc, client, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	lines := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(protocol.LogSubject(wf, node), lines)
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("follow %s/%s: %w", wf, node, err)}
	}
	defer sub.Unsubscribe() //nolint:errcheck
	call := func(f func(ctx context.Context) error) error {
		rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
		defer cancel()
		return f(rctx)
	}
	if err := call(nc.FlushWithContext); err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	if err := call(func(ctx context.Context) error { return printLogs(ctx, e, client, wf, node) }); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "==> following %s %s live (Ctrl-C to stop) <==\n", wf, node)
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-lines:
			printLine(e, m.Data)
		case <-tick.C:
			var st protocol.NodeStatus
			err := call(func(ctx context.Context) error {
				s, err := client.Status(ctx, wf)
				if err != nil {
					return apiErr(err)
				}
				for _, n := range s.Nodes {
					if n.ID == node {
						st = n.Status
						return nil
					}
				}
				return exitf(ExitUsage, "workflow %s has no node %q", wf, node)
			})
			if err != nil {
				return err
			}
			if st.Terminal() {
				drain(e, lines)
				fmt.Fprintf(e.out, "==> node %s %s <==\n", node, st)
				return nil
			}
		}
	}
}

// drain prints the live lines already received.
func drain(e *env, lines <-chan *nats.Msg) {
	for {
		select {
		case m := <-lines:
			printLine(e, m.Data)
		default:
			return
		}
	}
}

// printLine prints one live line (protocol.LogLine): "[a2 15:04:05] kind:
// text". A line that does not decode is skipped.
func printLine(e *env, data []byte) {
	var l protocol.LogLine
	if json.Unmarshal(data, &l) == nil {
		fmt.Fprintf(e.out, "[a%d %s] %s: %s\n", l.Attempt, l.Time.Local().Format(time.TimeOnly), l.Kind, l.Text)
	}
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
