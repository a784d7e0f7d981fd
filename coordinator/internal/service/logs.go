package service

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
)

// logTailBytes caps each log returned by the logs endpoint; fitLogs then
// shortens the tails until the whole reply fits in one NATS message.
const logTailBytes = 192 << 10

// replyHeadroom is what a reply leaves of NATS's max payload for the
// message's headers.
const replyHeadroom = 4 << 10

// logs returns the tails of a node's logs (its latest attempt's context,
// agent and gate logs), as long as they fit together in one reply.
func (s *Service) logs(ctx context.Context, req api.IDRequest) (api.LogsResponse, error) {
	var entries []api.LogEntry
	err := s.readWorkflow(ctx, req.WorkflowID, func(w *statemachine.Workflow) error {
		n := w.Nodes[req.NodeID]
		if n == nil {
			return api.NotFound("workflow %s has no node %q", w.ID, req.NodeID)
		}
		if n.Agent != nil && n.Agent.Context != "" {
			// What the agent was given: its packed context and task.
			entries = append(entries, api.LogEntry{Name: "context", Object: n.Agent.Context})
		}
		if n.Agent != nil && n.Agent.Log != "" {
			entries = append(entries, api.LogEntry{Name: "agent", Object: n.Agent.Log})
		}
		for _, g := range n.GateOrder() {
			if gr := n.Gates[g]; gr != nil && gr.Result != nil && gr.Result.Log != "" {
				entries = append(entries, api.LogEntry{Name: "gate " + g, Object: gr.Result.Log})
			}
		}
		return nil
	})
	if err != nil {
		return api.LogsResponse{}, err
	}
	logs := make([][]byte, len(entries))
	for i := range entries {
		b, err := s.bus.Logs.GetBytes(ctx, entries[i].Object)
		if err != nil {
			logs[i] = []byte(fmt.Sprintf("(log unavailable: %v)", err))
			continue
		}
		logs[i], entries[i].Size = b, int64(len(b))
	}
	return fitLogs(entries, logs, int(s.bus.NC.MaxPayload())-replyHeadroom), nil
}

// fitLogs fills each entry's Content with the tail of its log: at most
// logTailBytes, and shorter, the same for every log, until the encoded
// reply is at most limit bytes (JSON escaping can make a tail several
// times its length). A reply that cannot fit even with empty tails is
// returned so; the endpoint refuses it as too large.
func fitLogs(entries []api.LogEntry, logs [][]byte, limit int) api.LogsResponse {
	out := api.LogsResponse{Logs: entries}
	tail := logTailBytes
	for {
		for i := range entries {
			b := logs[i]
			entries[i].Truncated = len(b) > tail
			if entries[i].Truncated {
				b = b[len(b)-tail:]
			}
			entries[i].Content = string(b)
		}
		data, err := json.Marshal(out)
		if err != nil || len(data) <= limit || tail == 0 {
			return out
		}
		// Shrink in proportion to the excess, by at least a tenth.
		tail = min(tail*9/10, int(int64(tail)*int64(limit)/int64(len(data))))
	}
}
