package eventlog

import (
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// eventV1 is the version-1 encoding of an event: one flat record holding
// every type's fields. Logs written before version 2 hold these; they are
// read, never written.
type eventV1 struct {
	V              int                     `json:"v"`
	Type           Type                    `json:"type"`
	WorkflowID     string                  `json:"workflow_id"`
	Time           time.Time               `json:"time"`
	NodeID         string                  `json:"node_id,omitempty"`
	Gate           string                  `json:"gate,omitempty"`
	Attempt        int                     `json:"attempt,omitempty"`
	Workflow       *protocol.WorkflowSpec  `json:"workflow,omitempty"`
	Repo           *protocol.RepoRef       `json:"repo,omitempty"`
	RepoPath       string                  `json:"repo_path,omitempty"`
	Source         string                  `json:"source,omitempty"`
	NodeStatus     protocol.NodeStatus     `json:"node_status,omitempty"`
	WorkflowStatus protocol.WorkflowStatus `json:"workflow_status,omitempty"`
	LeaseToken     uint64                  `json:"lease_token,omitempty"`
	Host           string                  `json:"host,omitempty"`
	LatencyMicros  int64                   `json:"latency_us,omitempty"`
	Agent          *protocol.AgentResult   `json:"agent,omitempty"`
	GateResult     *protocol.GateResult    `json:"gate_result,omitempty"`
	Branch         string                  `json:"branch,omitempty"`
	Commit         string                  `json:"commit,omitempty"`
	Reason         string                  `json:"reason,omitempty"`
	NoCache        bool                    `json:"no_cache,omitempty"`
	Poll           bool                    `json:"poll,omitempty"`
	Round          int                     `json:"round,omitempty"`
	GateChange     *GateChange             `json:"gate_change,omitempty"`
}

// decodeEventV1 reads a version-1 event into its typed form.
func decodeEventV1(data []byte) (Event, error) {
	var o eventV1
	if err := strictUnmarshal(data, &o); err != nil {
		return Event{}, fmt.Errorf("decode version-1 event: %w", err)
	}
	ev := Event{WorkflowID: o.WorkflowID, NodeID: o.NodeID, Time: o.Time}
	switch o.Type {
	case TypeWorkflowSubmitted:
		b := WorkflowSubmitted{Workflow: o.Workflow, RepoPath: o.RepoPath, Source: o.Source}
		if o.Repo != nil {
			b.Repo = *o.Repo
		}
		ev.Body = b
	case TypeWorkflowCancelled:
		ev.Body = WorkflowCancelRequested{}
	case TypeWorkflowFinished:
		ev.Body = WorkflowFinished{Status: o.WorkflowStatus, Branch: o.Branch, Commit: o.Commit, Reason: o.Reason}
	case TypeNodeReady:
		ev.Body = NodeReady{Attempt: o.Attempt}
	case TypeNodeStarted:
		ev.Body = NodeStarted{Attempt: o.Attempt, LeaseToken: o.LeaseToken, Host: o.Host, LatencyMicros: o.LatencyMicros}
	case TypeNodeAgentDone:
		ev.Body = NodeAgentDone{Attempt: o.Attempt, LeaseToken: o.LeaseToken, Host: o.Host, Result: o.Agent}
	case TypeNodeFinished:
		ev.Body = NodeFinished{Attempt: o.Attempt, Status: o.NodeStatus, Reason: o.Reason}
	case TypeNodeReopened:
		ev.Body = NodeReopened{Attempt: o.Attempt, Reason: o.Reason}
	case TypeNodeIntegrated:
		ev.Body = NodeIntegrated{Attempt: o.Attempt, Branch: o.Branch, Commit: o.Commit}
	case TypeNodeGatesChanged:
		if o.GateChange == nil {
			return Event{}, fmt.Errorf("decode version-1 %s event for %s/%s: no gate_change", o.Type, o.WorkflowID, o.NodeID)
		}
		ev.Body = NodeGatesChanged{Attempt: o.Attempt, Change: *o.GateChange}
	case TypeGateDispatched:
		ev.Body = GateDispatched{Gate: o.Gate, Attempt: o.Attempt, Round: o.Round, Poll: o.Poll, NoCache: o.NoCache}
	case TypeGateStarted:
		ev.Body = GateStarted{Gate: o.Gate, Attempt: o.Attempt, LeaseToken: o.LeaseToken, Host: o.Host, LatencyMicros: o.LatencyMicros}
	case TypeGateFinished:
		ev.Body = GateFinished{Gate: o.Gate, Attempt: o.Attempt, Round: o.Round, LeaseToken: o.LeaseToken, Host: o.Host,
			Result: o.GateResult, Reason: o.Reason}
	case TypeGateRerun:
		ev.Body = GateRerunRequested{Gate: o.Gate, Attempt: o.Attempt, Round: o.Round, NoCache: o.NoCache}
	default:
		return Event{}, fmt.Errorf("decode version-1 event: %w %q", ErrUnknownType, o.Type)
	}
	if err := ev.check(); err != nil {
		return Event{}, err
	}
	return ev, nil
}
