package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// InboxItem is a node that waits for a human.
type InboxItem struct {
	WorkflowID   string              `json:"workflow_id"`
	WorkflowName string              `json:"workflow_name"`
	NodeID       string              `json:"node_id"`
	Status       protocol.NodeStatus `json:"status"`
	// Reason says why it waits (the escalation's reason).
	Reason string `json:"reason"`
	// Attempt is the attempt that escalated, of Budget.
	Attempt int `json:"attempt"`
	Budget  int `json:"budget"`
	// Since is when it started waiting.
	Since time.Time `json:"since"`
	// Patch is the candidate patch, if the attempt made one, and DiffStat
	// what it changes.
	Patch    *protocol.PatchRef `json:"patch,omitempty"`
	DiffStat *DiffStat          `json:"diff_stat,omitempty"`
	// Deadline is when an approval step's on_timeout happens, and
	// Approvers who may decide it (anyone when empty).
	Deadline  *time.Time `json:"deadline,omitempty"`
	Approvers []string   `json:"approvers,omitempty"`
	// TraceID is the id of the workflow's trace ("" when not traced).
	TraceID string `json:"trace_id,omitempty"`
}

// DiffStat counts what a patch changes.
type DiffStat struct {
	Files      []FileStat `json:"files"`
	Insertions int        `json:"insertions"`
	Deletions  int        `json:"deletions"`
}

// FileStat is one file's lines added and removed (Binary: a binary change).
type FileStat struct {
	Path       string `json:"path"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
}

// InboxResponse lists the nodes that wait for a human, oldest first.
type InboxResponse struct {
	Items []InboxItem `json:"items"`
}

// AttemptDetail is one attempt of a node, as show reports it.
type AttemptDetail struct {
	Attempt     int                  `json:"attempt"`
	AgentStatus protocol.AgentStatus `json:"agent_status,omitempty"`
	AgentExit   int                  `json:"agent_exit,omitempty"`
	Patch       *protocol.PatchRef   `json:"patch,omitempty"`
	Gates       []GateSummary        `json:"gates,omitempty"`
	// Outcome is what ended the attempt (retry_scheduled, escalated …), or
	// "" for the attempt in progress.
	Outcome string     `json:"outcome,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	At      *time.Time `json:"at,omitempty"`
	// Feedback is the document the attempt's failure gave the next one.
	Feedback json.RawMessage `json:"feedback,omitempty"`
	// ReceivedFeedback is the document the attempt itself was given (none
	// for attempt 1), and RetriedBy and RetryNote the human whose retry
	// started it and their note ("" when the retry policy did).
	ReceivedFeedback json.RawMessage `json:"received_feedback,omitempty"`
	RetriedBy        string          `json:"retried_by,omitempty"`
	RetryNote        string          `json:"retry_note,omitempty"`
	// Output is the check of the attempt's result block, for a task with
	// an output schema.
	Output *protocol.AgentOutput `json:"output,omitempty"`
}

// NodeDetail is one node in full: its attempts, the feedback its current
// (or next) attempt gets, and the candidate diff.
type NodeDetail struct {
	WorkflowID string      `json:"workflow_id"`
	Node       NodeSummary `json:"node"`
	Budget     int         `json:"budget"`
	// Instructions is a human task's prompt: what the person is to do.
	Instructions string          `json:"instructions,omitempty"`
	Attempts     []AttemptDetail `json:"attempts"`
	Feedback     json.RawMessage `json:"feedback,omitempty"`
	// Diff is the candidate patch (the latest attempt's), cut at
	// DiffMaxBytes (DiffTruncated).
	Diff          string    `json:"diff,omitempty"`
	DiffTruncated bool      `json:"diff_truncated,omitempty"`
	DiffStat      *DiffStat `json:"diff_stat,omitempty"`
}

// DiffMaxBytes caps NodeDetail.Diff.
const DiffMaxBytes = 256 << 10

// DecisionRequest is a human's decision on an escalated node: approve
// (Note), reject (Reason) or retry (Note, Attempts: more rounds, 0 = the
// task's budget). By names who decides.
type DecisionRequest struct {
	WorkflowID string `json:"workflow_id"`
	NodeID     string `json:"node_id"`
	By         string `json:"by"`
	Note       string `json:"note,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Attempts   int    `json:"attempts,omitempty"`
	// AcceptConfig, on an approval, accepts the patch's changes to
	// Supervisor's trusted configuration (.supervisor/), without which
	// such a patch is not approved.
	AcceptConfig bool `json:"accept_config,omitempty"`
}

// Resume ends a fleet pause and returns the fleet's state afterwards, but
// for FailuresLastHour: the failed rounds within the hour before the
// resume, which it forgives.
func (c *Client) Resume(ctx context.Context, by string) (FleetStatus, error) {
	return call[FleetStatus](ctx, c, protocol.APIResume, ResumeRequest{By: by})
}

// Inbox lists the nodes that wait for a human.
func (c *Client) Inbox(ctx context.Context) ([]InboxItem, error) {
	out, err := call[InboxResponse](ctx, c, protocol.APIInbox, IDRequest{})
	return out.Items, err
}

// Show returns one node in full.
func (c *Client) Show(ctx context.Context, wf, node string) (NodeDetail, error) {
	return call[NodeDetail](ctx, c, protocol.APIShow, IDRequest{WorkflowID: wf, NodeID: node})
}

// Approve accepts an escalated node's latest patch despite its failed gates.
func (c *Client) Approve(ctx context.Context, req DecisionRequest) (WorkflowSummary, error) {
	return call[WorkflowSummary](ctx, c, protocol.APIApprove, req)
}

// Reject fails an escalated node.
func (c *Client) Reject(ctx context.Context, req DecisionRequest) (WorkflowSummary, error) {
	return call[WorkflowSummary](ctx, c, protocol.APIReject, req)
}

// Retry grants an escalated node more attempts, with an optional note for
// the agent.
func (c *Client) Retry(ctx context.Context, req DecisionRequest) (WorkflowSummary, error) {
	return call[WorkflowSummary](ctx, c, protocol.APIRetry, req)
}
