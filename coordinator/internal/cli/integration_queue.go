package cli

import (
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// queueDetail says where a node waits in the integration queue and what
// its integration gates are tested on.
func queueDetail(q *api.QueueEntry) string {
	on := fmt.Sprintf("the branch (%d integrated)", q.Integrated)
	if len(q.Ahead) > 0 {
		on += " + " + strings.Join(q.Ahead, " + ")
	}
	var gates []string
	for _, g := range q.Gates {
		st := string(g.Status)
		if st == "" {
			st = "running"
		}
		gates = append(gates, g.Name+":"+st)
	}
	s := fmt.Sprintf("queued for integration, position %d, tested on %s", q.Position, on)
	if len(gates) > 0 {
		s += " [" + strings.Join(gates, " ") + "]"
	}
	return s
}

// integrationEvent is watch's line for an event of the integration queue.
func integrationEvent(ev eventlog.Event) string {
	switch b := ev.Body.(type) {
	case eventlog.NodeIntegrationQueued:
		return fmt.Sprintf("queued for integration (attempt %d)", b.Attempt)
	case eventlog.IntegrationDispatched:
		on := "the branch"
		if len(b.Ahead) > 0 {
			on += " + " + strings.Join(b.Ahead, " + ")
		}
		what := fmt.Sprintf("integration gate %s dispatched on %s (speculation %s)", b.Gate, on, b.Speculation)
		if b.Poll {
			what += ", a poll"
		}
		return what
	case eventlog.IntegrationFinished:
		what := fmt.Sprintf("integration gate %s %s", b.Gate, b.Result.Status)
		if b.Result.ExitCode != nil {
			what += fmt.Sprintf(" (exit %d)", *b.Result.ExitCode)
		}
		if b.Result.Cached {
			what += " (cached)"
		}
		what += " on speculation " + b.Speculation
		if b.Reason != "" {
			what += ": " + b.Reason
		}
		return what
	}
	return string(ev.Type())
}
