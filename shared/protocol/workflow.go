package protocol

import "time"

// WorkflowSpec is a validated workflow in its wire form: what the
// coordinator stores in the workflow.submitted event. The YAML a user writes
// is parsed and validated into this shape by the coordinator.
type WorkflowSpec struct {
	Name string `json:"name"`
	// Tasks are the DAG's nodes, in the order they were declared.
	Tasks []TaskSpec `json:"tasks"`
	// Gates are the gate definitions tasks refer to by name.
	Gates []GateSpec `json:"gates,omitempty"`
}

// TaskSpec is one node of a workflow.
type TaskSpec struct {
	ID string `json:"id"`
	// Command is the agent's argv (adapters are already expanded).
	Command []string `json:"command"`
	// Adapter names the agent adapter the command came from, if any.
	Adapter        string            `json:"adapter,omitempty"`
	Prompt         string            `json:"prompt"`
	DependsOn      []string          `json:"depends_on,omitempty"`
	Gates          []string          `json:"gates,omitempty"`
	Pool           string            `json:"pool"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds"`
}

// GateSpec is one gate definition.
type GateSpec struct {
	Name           string            `json:"name"`
	Command        []string          `json:"command"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	DependsOn      []string          `json:"depends_on,omitempty"`
	Pool           string            `json:"pool"`
	Env            map[string]string `json:"env,omitempty"`
	WorkingDir     string            `json:"working_dir,omitempty"`
}

// NodeStatus is the state of one DAG node (DESIGN decision 1).
type NodeStatus string

// Node statuses.
const (
	NodePending   NodeStatus = "pending"
	NodeReady     NodeStatus = "ready"
	NodeRunning   NodeStatus = "running"
	NodeGating    NodeStatus = "gating"
	NodeSucceeded NodeStatus = "succeeded"
	NodeFailed    NodeStatus = "failed"
	NodeEscalated NodeStatus = "escalated"
	NodeSkipped   NodeStatus = "skipped"
	NodeCancelled NodeStatus = "cancelled"
)

// Terminal reports whether a node in this status will not change again.
func (s NodeStatus) Terminal() bool {
	switch s {
	case NodeSucceeded, NodeFailed, NodeEscalated, NodeSkipped, NodeCancelled:
		return true
	}
	return false
}

// WorkflowStatus is the state of a workflow.
type WorkflowStatus string

// Workflow statuses.
const (
	WorkflowRunning        WorkflowStatus = "running"
	WorkflowNeedsAttention WorkflowStatus = "needs_attention"
	WorkflowSucceeded      WorkflowStatus = "succeeded"
	WorkflowFailed         WorkflowStatus = "failed"
	WorkflowCancelled      WorkflowStatus = "cancelled"
)

// Terminal reports whether a workflow in this status will not change again.
func (s WorkflowStatus) Terminal() bool {
	switch s {
	case WorkflowSucceeded, WorkflowFailed, WorkflowCancelled:
		return true
	}
	return false
}

// EventType names a state change in the events stream.
type EventType string

// Event types. Every state change the coordinator makes is one of these.
const (
	EvWorkflowSubmitted EventType = "workflow.submitted"
	EvWorkflowFinished  EventType = "workflow.finished"
	EvWorkflowCancelled EventType = "workflow.cancel_requested"
	EvNodeReady         EventType = "node.ready"
	EvNodeStarted       EventType = "node.started"
	EvNodeAgentDone     EventType = "node.agent_done"
	EvNodeFinished      EventType = "node.finished"
	EvNodeIntegrated    EventType = "node.integrated"
	EvGateDispatched    EventType = "gate.dispatched"
	EvGateStarted       EventType = "gate.started"
	EvGateFinished      EventType = "gate.finished"
)

// Event is one entry of the events stream, on subject EventSubject(WorkflowID).
// The coordinator's state is a fold of these events.
type Event struct {
	V          int       `json:"v"`
	Type       EventType `json:"type"`
	WorkflowID string    `json:"workflow_id"`
	Time       time.Time `json:"time"`
	NodeID     string    `json:"node_id,omitempty"`
	Gate       string    `json:"gate,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`

	// workflow.submitted
	Workflow *WorkflowSpec `json:"workflow,omitempty"`
	Repo     *RepoRef      `json:"repo,omitempty"`
	// RepoPath is the repository path on the submitting host.
	RepoPath string `json:"repo_path,omitempty"`
	// Source is the file name the workflow was submitted from.
	Source string `json:"source,omitempty"`

	// node.* and workflow.finished: the new status.
	NodeStatus     NodeStatus     `json:"node_status,omitempty"`
	WorkflowStatus WorkflowStatus `json:"workflow_status,omitempty"`

	// node.started, gate.started
	LeaseToken uint64 `json:"lease_token,omitempty"`
	Host       string `json:"host,omitempty"`
	// LatencyMicros is the ready→started latency of a started job.
	LatencyMicros int64 `json:"latency_us,omitempty"`

	// node.agent_done
	Agent *AgentResult `json:"agent,omitempty"`
	// gate.finished
	GateResult *GateResult `json:"gate_result,omitempty"`

	// node.integrated: the branch and the commit it now points at.
	Branch string `json:"branch,omitempty"`
	Commit string `json:"commit,omitempty"`

	// Reason explains failures, skips and cancellations.
	Reason string `json:"reason,omitempty"`
}
