// Package eventlog is the coordinator's event log on the wire: one typed
// body per event type in a versioned envelope, encoded as JSON on subject
// protocol.EventSubject(workflow) of stream protocol.StreamEvents, and
// decoded strictly. The coordinator's state is a fold of these events.
package eventlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"time"

	json "github.com/goccy/go-json"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Version is the version of the event log's encoding. Version 2 is an
// envelope (type, workflow, node, time) around one typed body per event
// type; version 1 was a single flat record holding every type's fields.
// Decode reads both, so logs written before version 2 still replay.
const Version = 2

// ErrUnknownType is in the chain of a Decode error for an event
// type this build does not know.
var ErrUnknownType = errors.New("unknown event type")

// Type names a state change in the event log.
type Type string

// Event types. Every state change the coordinator makes is one of these.
const (
	TypeWorkflowSubmitted Type = "workflow.submitted"
	TypeWorkflowFinished  Type = "workflow.finished"
	TypeWorkflowCancelled Type = "workflow.cancel_requested"
	TypeNodeReady         Type = "node.ready"
	TypeNodeStarted       Type = "node.started"
	TypeNodeAgentDone     Type = "node.agent_done"
	TypeNodeFinished      Type = "node.finished"
	TypeNodeReopened      Type = "node.reopened"
	TypeNodeIntegrated    Type = "node.integrated"
	TypeNodeGatesChanged  Type = "node.gates_changed"
	TypeGateDispatched    Type = "gate.dispatched"
	TypeGateStarted       Type = "gate.started"
	TypeGateFinished      Type = "gate.finished"
	TypeGateRerun         Type = "gate.rerun_requested"
	TypeNodeRetry         Type = "node.retry_scheduled"
	TypeNodeEscalated     Type = "node.escalated"
	TypeNodeApproved      Type = "node.approved"
	TypeNodeRejected      Type = "node.rejected"
	TypeNodeRetryGranted  Type = "node.retry_granted"
	TypeNodeAwaiting      Type = "node.awaiting_approval"
	TypeFleetPaused       Type = "fleet.paused"
	TypeFleetResumed      Type = "fleet.resumed"
	TypeNodeWaiting       Type = "node.waiting"
	TypeGateWaiting       Type = "gate.waiting"
	TypeNodeQueued        Type = "node.integration_queued"
	TypeIntegDispatched   Type = "integration.dispatched"
	TypeIntegFinished     Type = "integration.finished"
	TypeNodesAdded        Type = "workflow.nodes_added"
)

// Event is one entry of the event log, on subject protocol.EventSubject(WorkflowID).
// The coordinator's state is a fold of these events.
type Event struct {
	WorkflowID string
	// NodeID is set on node.* and gate.* events.
	NodeID string
	Time   time.Time
	// Body is what happened: one of the body types of this package.
	Body Body
	// Seq is the sequence in the stream of the message holding the event.
	// It is not part of the encoding: whoever reads the event from the log
	// sets it.
	Seq uint64
	// Index is the event's place in its message: 0 for the only or first
	// one, i for the i-th after it in a batch (batch.go). Like Seq, it is
	// set by whoever reads the log.
	Index int
}

// Type returns the event's type, "" without a body.
func (e Event) Type() Type {
	if e.Body == nil {
		return ""
	}
	return e.Body.Type()
}

// Body is the typed payload of an Event.
type Body interface {
	Type() Type
	eventBody()
}

// WorkflowSubmitted holds the whole validated spec, so a submission is all
// or nothing.
type WorkflowSubmitted struct {
	Workflow *protocol.WorkflowSpec `json:"workflow"`
	Repo     protocol.RepoRef       `json:"repo"`
	// RepoPath is the repository path on the submitting host.
	RepoPath string `json:"repo_path,omitempty"`
	// Source is the file name the workflow was submitted from.
	Source string `json:"source,omitempty"`
	// BaseBranch is the branch the base commit was taken from (the
	// repository's checked-out branch for --rev HEAD), "" when none: the
	// default target of a merge.
	BaseBranch string `json:"base_branch,omitempty"`
	// TraceParent is the W3C traceparent of the submission's span: every
	// later span of the workflow (scheduling, dispatches, integration)
	// joins its trace, also after a restart or failover. "" when the
	// submission was not traced (and in events written before it existed).
	TraceParent string `json:"trace_parent,omitempty"`
}

// WorkflowCancelRequested asks for every unfinished node to be cancelled.
type WorkflowCancelRequested struct{}

// WorkflowFinished records the workflow's end and its branch's tip.
type WorkflowFinished struct {
	Status protocol.WorkflowStatus `json:"status"`
	Branch string                  `json:"branch,omitempty"`
	Commit string                  `json:"commit,omitempty"`
	Reason string                  `json:"reason,omitempty"`
}

// NodeReady starts an attempt: the node's agent job is published after it.
type NodeReady struct {
	Attempt int `json:"attempt"`
}

// NodeStarted records the lease under which a worker runs the agent job.
type NodeStarted struct {
	Attempt    int    `json:"attempt"`
	LeaseToken uint64 `json:"lease_token"`
	Host       string `json:"host,omitempty"`
	// LatencyMicros is the job's ready→started latency.
	LatencyMicros int64 `json:"latency_us,omitempty"`
}

// NodeAgentDone records the agent's result.
type NodeAgentDone struct {
	Attempt    int                   `json:"attempt"`
	LeaseToken uint64                `json:"lease_token,omitempty"`
	Host       string                `json:"host,omitempty"`
	Result     *protocol.AgentResult `json:"result"`
	// Output is the check of the result's final message against the
	// task's output schema (nil when the task has none or the agent did
	// not succeed).
	Output *protocol.AgentOutput `json:"output,omitempty"`
}

// NodesAdded records the nodes a planner's plan added to the workflow
// (HIER-01): the planner is the event's node. Tasks are complete task
// specs, appended to the workflow's in this order; Dependents are nodes of
// the workflow that depended on the planner and now wait for every added
// node too.
type NodesAdded struct {
	Attempt    int                 `json:"attempt"`
	Tasks      []protocol.TaskSpec `json:"tasks"`
	Dependents []string            `json:"dependents,omitempty"`
}

// NodeFinished records a node's final status.
type NodeFinished struct {
	Attempt int                 `json:"attempt,omitempty"`
	Status  protocol.NodeStatus `json:"status"`
	Reason  string              `json:"reason,omitempty"`
}

// NodeReopened puts a node that failed on its gates back to gating (a gate
// rerun), its skipped dependents back to pending and the workflow back to
// running.
type NodeReopened struct {
	Attempt int    `json:"attempt,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// NodeIntegrated records that the node's patch landed on Branch at Commit.
type NodeIntegrated struct {
	Attempt int    `json:"attempt,omitempty"`
	Branch  string `json:"branch"`
	Commit  string `json:"commit"`
	// CommitTime is the author and committer date the commit was made
	// with, so any coordinator can make the same commit again from the
	// patches in the log. Zero in logs written before it existed.
	CommitTime time.Time `json:"commit_time,omitzero"`
}

// NodeGatesChanged adds, replaces or removes one gate of a node that has
// not finished (coordinator gate add|update|remove --task). It applies
// from the node's next gate round: a gating node runs an added gate in its
// dependency layer.
type NodeGatesChanged struct {
	Attempt int        `json:"attempt,omitempty"`
	Change  GateChange `json:"change"`
}

// GateDispatched starts a new round of a gate; its job is published after.
type GateDispatched struct {
	Gate    string `json:"gate"`
	Attempt int    `json:"attempt"`
	Round   int    `json:"round"`
	// Poll marks the re-run of a pending gate.
	Poll bool `json:"poll,omitempty"`
	// NoCache makes the run bypass the gate cache.
	NoCache bool `json:"no_cache,omitempty"`
	// Rerun, when set, says why a gate that ended is run again in the same
	// attempt (an out-of-memory kill gets one more run); its earlier
	// result no longer counts.
	Rerun string `json:"rerun,omitempty"`
}

// GateStarted records the lease under which a gate runner runs a gate job.
type GateStarted struct {
	Gate          string `json:"gate"`
	Attempt       int    `json:"attempt"`
	LeaseToken    uint64 `json:"lease_token"`
	Host          string `json:"host,omitempty"`
	LatencyMicros int64  `json:"latency_us,omitempty"`
}

// GateFinished records one gate execution's result: exactly one per
// execution (passed, failed, pending, timeout, error), cache hits and
// skips included.
type GateFinished struct {
	Gate       string               `json:"gate"`
	Attempt    int                  `json:"attempt"`
	Round      int                  `json:"round,omitempty"`
	LeaseToken uint64               `json:"lease_token,omitempty"`
	Host       string               `json:"host,omitempty"`
	Result     *protocol.GateResult `json:"result"`
	Reason     string               `json:"reason,omitempty"`
}

// GateRerunRequested discards a gate's outcome so the scheduler runs it
// again, in its dependency layer, once its dependencies have passed.
type GateRerunRequested struct {
	Gate    string `json:"gate"`
	Attempt int    `json:"attempt,omitempty"`
	Round   int    `json:"round,omitempty"`
	NoCache bool   `json:"no_cache,omitempty"`
}

// NodeRetryScheduled records that a round failed in a way the agent may
// fix: attempt Next starts at NotBefore (the retry policy's delay, kept in
// the log so a restart neither forgets nor shortens it) with Feedback.
type NodeRetryScheduled struct {
	Attempt   int       `json:"attempt"`
	Next      int       `json:"next"`
	NotBefore time.Time `json:"not_before"`
	Reason    string    `json:"reason"`
	// FailedGates are the gates whose blocking failure caused the retry;
	// each one's count of failed rounds goes up by one.
	FailedGates []string `json:"failed_gates,omitempty"`
	// Signature identifies the failure, for loop detection: rounds that
	// fail alike have the same.
	Signature string `json:"signature,omitempty"`
	// Class is "transient" for a re-run that uses no attempt (the trouble
	// was not the agent's work), "" for an ordinary retry.
	Class string `json:"class,omitempty"`
	// Feedback is the document the next attempt receives.
	Feedback json.RawMessage `json:"feedback,omitempty"`
}

// NodeEscalated hands a node to a human: its attempts ran out, a gate
// failed more rounds than its max_retries, a gate blocks without retry, an
// integrity violation, or a failure no retry can fix. The workflow needs
// attention until someone approves, rejects or retries the node.
type NodeEscalated struct {
	Attempt     int      `json:"attempt"`
	Reason      string   `json:"reason"`
	FailedGates []string `json:"failed_gates,omitempty"`
	Signature   string   `json:"signature,omitempty"`
	// Feedback is the failed round's feedback, kept for a human's retry.
	Feedback json.RawMessage `json:"feedback,omitempty"`
}

// NodeApproved records a human accepting an escalated node's latest
// patch despite its failed gates: it is integrated and the node succeeds.
type NodeApproved struct {
	Attempt int    `json:"attempt"`
	By      string `json:"by"`
	Note    string `json:"note,omitempty"`
	// AcceptedConfig are the files of Supervisor's trusted configuration
	// (.supervisor/) the patch changes and the approver explicitly
	// accepted; absent in events written before it existed and in
	// approvals of patches that change none.
	AcceptedConfig []string `json:"accepted_config,omitempty"`
}

// NodeRejected records a human rejecting an escalated node: it fails and
// its dependents are skipped.
type NodeRejected struct {
	Attempt int    `json:"attempt"`
	By      string `json:"by"`
	Reason  string `json:"reason"`
}

// NodeRetryGranted records a human granting an escalated node Attempts
// more rounds; the next starts at once with Feedback, which carries the
// human's note.
type NodeRetryGranted struct {
	Attempt  int             `json:"attempt"`
	By       string          `json:"by"`
	Note     string          `json:"note,omitempty"`
	Attempts int             `json:"attempts"`
	Feedback json.RawMessage `json:"feedback,omitempty"`
}

// NodeAwaitingApproval makes a node wait for a human's approval: an
// approval step once its gates passed, or a human task once its
// dependencies succeeded. Deadline, if set, is when the step's on_timeout
// happens.
type NodeAwaitingApproval struct {
	Attempt  int       `json:"attempt"`
	Reason   string    `json:"reason"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// NodeWaiting records that a runner holds the node's agent job back
// because the circuit breaker of Scope is open: the job runs once the
// breaker lets it through, at Until at the earliest. It uses no attempt
// and no delivery.
type NodeWaiting struct {
	Attempt int       `json:"attempt"`
	Scope   string    `json:"scope"`
	Until   time.Time `json:"until"`
	Host    string    `json:"host,omitempty"`
}

// GateWaiting is NodeWaiting for a gate job (round Round of Gate).
type GateWaiting struct {
	Gate    string    `json:"gate"`
	Attempt int       `json:"attempt"`
	Round   int       `json:"round,omitempty"`
	Scope   string    `json:"scope"`
	Until   time.Time `json:"until"`
	Host    string    `json:"host,omitempty"`
}

// NodeIntegrationQueued puts a node whose gates passed (and whose
// approval step, if any, approved it) at the end of its workflow's
// integration queue: its integration gates run on top of the branch and
// the nodes queued ahead of it before its patch lands.
type NodeIntegrationQueued struct {
	Attempt int `json:"attempt"`
}

// IntegrationDispatched starts round Round of integration gate Gate for a
// queued node's attempt on one speculative base: the patches already on
// the branch, then those of the queued nodes Ahead (in queue order), then
// the node's own. Speculation identifies that sequence of patches; a
// result counts only while the node's speculation is still the one
// dispatched for. The gate job is published after it.
type IntegrationDispatched struct {
	Attempt     int    `json:"attempt"`
	Gate        string `json:"gate"`
	Round       int    `json:"round"`
	Speculation string `json:"speculation"`
	// Ahead names the queued nodes, not yet on the branch, whose patches
	// the run applies before the node's own.
	Ahead []string `json:"ahead,omitempty"`
	// Poll marks the re-run of a pending integration gate.
	Poll bool `json:"poll,omitempty"`
}

// IntegrationFinished records the result of round Round of integration
// gate Gate on speculation Speculation.
type IntegrationFinished struct {
	Attempt     int                  `json:"attempt"`
	Gate        string               `json:"gate"`
	Round       int                  `json:"round"`
	Speculation string               `json:"speculation"`
	LeaseToken  uint64               `json:"lease_token,omitempty"`
	Host        string               `json:"host,omitempty"`
	Result      *protocol.GateResult `json:"result"`
	Reason      string               `json:"reason,omitempty"`
}

// FleetLogID is the workflow id of the fleet's own log, whose events
// (FleetPaused, FleetResumed) concern every workflow. No workflow id takes
// this form (they start with "wf-").
const FleetLogID = "fleet"

// FleetPaused stops new agent rounds fleet-wide: too many failed within an
// hour. It is an event of the fleet's log (FleetLogID).
type FleetPaused struct {
	Reason   string `json:"reason"`
	Failures int    `json:"failures"`
}

// FleetResumed ends a pause; By names the operator.
type FleetResumed struct {
	By string `json:"by"`
}

// GateChange is what a node.gates_changed event does to the node's gates:
// exactly one of Definition and Remove is set.
type GateChange struct {
	// Definition is a gate added to the node, or replacing the node's gate
	// of that name. A new gate is required unless Optional.
	Definition *protocol.GateSpec `json:"definition,omitempty"`
	// Remove names the gate the node no longer runs.
	Remove string `json:"remove,omitempty"`
	// Optional adds a new gate as optional rather than required.
	Optional bool `json:"optional,omitempty"`
	// OnFail, when set, is what the gate's failure does to the node:
	// "block", "retry_with_feedback" or "warn".
	OnFail string `json:"on_fail,omitempty"`
}

// Type implementations: one type per body.

func (WorkflowSubmitted) Type() Type       { return TypeWorkflowSubmitted }
func (WorkflowCancelRequested) Type() Type { return TypeWorkflowCancelled }
func (WorkflowFinished) Type() Type        { return TypeWorkflowFinished }
func (NodeReady) Type() Type               { return TypeNodeReady }
func (NodeStarted) Type() Type             { return TypeNodeStarted }
func (NodeAgentDone) Type() Type           { return TypeNodeAgentDone }
func (NodeFinished) Type() Type            { return TypeNodeFinished }
func (NodeReopened) Type() Type            { return TypeNodeReopened }
func (NodeIntegrated) Type() Type          { return TypeNodeIntegrated }
func (NodeGatesChanged) Type() Type        { return TypeNodeGatesChanged }
func (GateDispatched) Type() Type          { return TypeGateDispatched }
func (GateStarted) Type() Type             { return TypeGateStarted }
func (GateFinished) Type() Type            { return TypeGateFinished }
func (GateRerunRequested) Type() Type      { return TypeGateRerun }
func (NodeRetryScheduled) Type() Type      { return TypeNodeRetry }
func (NodeEscalated) Type() Type           { return TypeNodeEscalated }
func (NodeApproved) Type() Type            { return TypeNodeApproved }
func (NodeRejected) Type() Type            { return TypeNodeRejected }
func (NodeRetryGranted) Type() Type        { return TypeNodeRetryGranted }
func (NodeAwaitingApproval) Type() Type    { return TypeNodeAwaiting }
func (FleetPaused) Type() Type             { return TypeFleetPaused }
func (FleetResumed) Type() Type            { return TypeFleetResumed }
func (NodeWaiting) Type() Type             { return TypeNodeWaiting }
func (GateWaiting) Type() Type             { return TypeGateWaiting }
func (NodeIntegrationQueued) Type() Type   { return TypeNodeQueued }
func (IntegrationDispatched) Type() Type   { return TypeIntegDispatched }
func (IntegrationFinished) Type() Type     { return TypeIntegFinished }
func (NodesAdded) Type() Type              { return TypeNodesAdded }

func (WorkflowSubmitted) eventBody()       {}
func (WorkflowCancelRequested) eventBody() {}
func (WorkflowFinished) eventBody()        {}
func (NodeReady) eventBody()               {}
func (NodeStarted) eventBody()             {}
func (NodeAgentDone) eventBody()           {}
func (NodeFinished) eventBody()            {}
func (NodeReopened) eventBody()            {}
func (NodeIntegrated) eventBody()          {}
func (NodeGatesChanged) eventBody()        {}
func (GateDispatched) eventBody()          {}
func (GateStarted) eventBody()             {}
func (GateFinished) eventBody()            {}
func (GateRerunRequested) eventBody()      {}
func (NodeRetryScheduled) eventBody()      {}
func (NodeEscalated) eventBody()           {}
func (NodeApproved) eventBody()            {}
func (NodeRejected) eventBody()            {}
func (NodeRetryGranted) eventBody()        {}
func (NodeAwaitingApproval) eventBody()    {}
func (FleetPaused) eventBody()             {}
func (FleetResumed) eventBody()            {}
func (NodeWaiting) eventBody()             {}
func (GateWaiting) eventBody()             {}
func (NodeIntegrationQueued) eventBody()   {}
func (IntegrationDispatched) eventBody()   {}
func (IntegrationFinished) eventBody()     {}
func (NodesAdded) eventBody()              {}

// bodies makes, for each event type, a pointer to a zero body to decode
// into.
var bodies = map[Type]func() Body{
	TypeWorkflowSubmitted: func() Body { return &WorkflowSubmitted{} },
	TypeWorkflowCancelled: func() Body { return &WorkflowCancelRequested{} },
	TypeWorkflowFinished:  func() Body { return &WorkflowFinished{} },
	TypeNodeReady:         func() Body { return &NodeReady{} },
	TypeNodeStarted:       func() Body { return &NodeStarted{} },
	TypeNodeAgentDone:     func() Body { return &NodeAgentDone{} },
	TypeNodeFinished:      func() Body { return &NodeFinished{} },
	TypeNodeReopened:      func() Body { return &NodeReopened{} },
	TypeNodeIntegrated:    func() Body { return &NodeIntegrated{} },
	TypeNodeGatesChanged:  func() Body { return &NodeGatesChanged{} },
	TypeGateDispatched:    func() Body { return &GateDispatched{} },
	TypeGateStarted:       func() Body { return &GateStarted{} },
	TypeGateFinished:      func() Body { return &GateFinished{} },
	TypeGateRerun:         func() Body { return &GateRerunRequested{} },
	TypeNodeRetry:         func() Body { return &NodeRetryScheduled{} },
	TypeNodeEscalated:     func() Body { return &NodeEscalated{} },
	TypeNodeApproved:      func() Body { return &NodeApproved{} },
	TypeNodeRejected:      func() Body { return &NodeRejected{} },
	TypeNodeRetryGranted:  func() Body { return &NodeRetryGranted{} },
	TypeNodeAwaiting:      func() Body { return &NodeAwaitingApproval{} },
	TypeFleetPaused:       func() Body { return &FleetPaused{} },
	TypeFleetResumed:      func() Body { return &FleetResumed{} },
	TypeNodeWaiting:       func() Body { return &NodeWaiting{} },
	TypeGateWaiting:       func() Body { return &GateWaiting{} },
	TypeNodeQueued:        func() Body { return &NodeIntegrationQueued{} },
	TypeIntegDispatched:   func() Body { return &IntegrationDispatched{} },
	TypeIntegFinished:     func() Body { return &IntegrationFinished{} },
	TypeNodesAdded:        func() Body { return &NodesAdded{} },
}

// Types lists every event type this build knows.
func Types() []Type {
	out := make([]Type, 0, len(bodies))
	for t := range bodies {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// newBody returns a pointer to a zero body of type t.
func newBody(t Type) (Body, error) {
	if make, ok := bodies[t]; ok {
		return make(), nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownType, t)
}

// deref turns the pointer newBody made back into the value type the
// Body field holds.
func deref(b Body) Body {
	return reflect.ValueOf(b).Elem().Interface().(Body)
}

// eventEnvelope is an event's encoding (version 2).
type eventEnvelope struct {
	V          int             `json:"v"`
	Type       Type            `json:"type"`
	WorkflowID string          `json:"workflow_id"`
	NodeID     string          `json:"node_id,omitempty"`
	Time       time.Time       `json:"time"`
	Data       json.RawMessage `json:"data"`
}

// Encode encodes an event for the log.
func Encode(e Event) ([]byte, error) {
	if e.Body == nil {
		return nil, fmt.Errorf("encode event for %s: no body", e.WorkflowID)
	}
	if e.WorkflowID == "" {
		return nil, fmt.Errorf("encode %s event: no workflow id", e.Type())
	}
	// One pass: the body is encoded in place of the envelope's data, the
	// same bytes as encoding it first and embedding the result.
	data, err := json.Marshal(outEnvelope{V: Version, Type: e.Type(), WorkflowID: e.WorkflowID,
		NodeID: e.NodeID, Time: e.Time, Data: e.Body})
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Type(), err)
	}
	return data, nil
}

// outEnvelope is eventEnvelope as Encode writes it: the body itself in
// place of its encoding.
type outEnvelope struct {
	V          int       `json:"v"`
	Type       Type      `json:"type"`
	WorkflowID string    `json:"workflow_id"`
	NodeID     string    `json:"node_id,omitempty"`
	Time       time.Time `json:"time"`
	Data       Body      `json:"data"`
}

// Decode decodes an event of the log, of either version, strictly:
// unknown fields, unknown types and a body that does not match its type
// are errors. A message holding a batch is ErrBatch: DecodeAll reads it.
func Decode(data []byte) (Event, error) {
	if IsBatch(data) {
		return Event{}, ErrBatch
	}
	// An event of this version is read in one pass of its envelope (then
	// its body); anything else takes the probe below, which gives the
	// older version's reading or the error.
	var env eventEnvelope
	if err := strictUnmarshal(data, &env); err == nil && env.V == Version {
		return decodeBody(env)
	}
	var probe struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	switch probe.V {
	case 1:
		return decodeEventV1(data)
	case Version:
	default:
		return Event{}, fmt.Errorf("decode event: version %d: %w", probe.V, protocol.ErrUnsupportedVersion)
	}
	env = eventEnvelope{}
	if err := strictUnmarshal(data, &env); err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	return decodeBody(env)
}

// decodeBody decodes the body of an envelope of this version.
func decodeBody(env eventEnvelope) (Event, error) {
	body, err := newBody(env.Type)
	if err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	if len(env.Data) == 0 {
		return Event{}, fmt.Errorf("decode %s event: no data", env.Type)
	}
	if err := strictUnmarshal(env.Data, body); err != nil {
		return Event{}, fmt.Errorf("decode %s event: %w", env.Type, err)
	}
	ev := Event{WorkflowID: env.WorkflowID, NodeID: env.NodeID, Time: env.Time, Body: deref(body)}
	if err := ev.check(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// check rejects events that lack what their type needs.
func (e Event) check() error {
	if e.WorkflowID == "" {
		return fmt.Errorf("decode %s event: no workflow_id", e.Type())
	}
	switch b := e.Body.(type) {
	case WorkflowSubmitted:
		if b.Workflow == nil {
			return fmt.Errorf("decode %s event for %s: no workflow spec", e.Type(), e.WorkflowID)
		}
	case WorkflowCancelRequested, WorkflowFinished, FleetPaused, FleetResumed,
		WorkflowMergeRequested, WorkflowMerged, WorkflowMergeFailed:
	default:
		if e.NodeID == "" {
			return fmt.Errorf("decode %s event for %s: no node_id", e.Type(), e.WorkflowID)
		}
	}
	switch b := e.Body.(type) {
	case NodeAgentDone:
		if b.Result == nil {
			return fmt.Errorf("decode %s event for %s/%s: no result", e.Type(), e.WorkflowID, e.NodeID)
		}
	case GateFinished:
		if b.Result == nil {
			return fmt.Errorf("decode %s event for %s/%s: no result", e.Type(), e.WorkflowID, e.NodeID)
		}
	case IntegrationDispatched:
		if b.Speculation == "" || b.Gate == "" {
			return fmt.Errorf("decode %s event for %s/%s: no speculation or gate", e.Type(), e.WorkflowID, e.NodeID)
		}
	case IntegrationFinished:
		if b.Result == nil || b.Speculation == "" {
			return fmt.Errorf("decode %s event for %s/%s: no result or speculation", e.Type(), e.WorkflowID, e.NodeID)
		}
	}
	return nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Only white space may follow the value (More would let a stray ']' or
	// '}' through).
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
