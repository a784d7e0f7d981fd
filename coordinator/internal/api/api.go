// Package api is the coordinator's request/reply API on NATS (sup.api.*):
// the request and response types, and the client the CLI uses.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// SubmitRequest submits a workflow. The repository's bundle is uploaded to
// the bundles bucket before the request is sent.
type SubmitRequest struct {
	// Filename is the workflow file's name, used in error positions.
	Filename string `json:"filename"`
	// YAML is the workflow file's content, validated again by the server.
	YAML string           `json:"yaml"`
	Repo protocol.RepoRef `json:"repo"`
	// RepoPath is the repository on the submitting host, where the
	// coordinator delivers the workflow's branch and carries out merges.
	// It must lie under one of the coordinator's repo roots, or the
	// submission is refused (Forbidden) — unless RepoPathOptional.
	RepoPath string `json:"repo_path,omitempty"`
	// RepoPathOptional makes a RepoPath outside the repo roots be left out
	// of the submission instead of refusing it: the coordinator then
	// writes into no repository for the workflow (the branch is in the
	// result bundle) and SubmitResponse.RepoPathDropped says why. A
	// workflow with auto_merge is refused all the same.
	RepoPathOptional bool `json:"repo_path_optional,omitempty"`
	// BaseBranch is the branch the base commit was taken from ("" for a
	// detached HEAD or a commit id): the default target of a merge.
	BaseBranch string `json:"base_branch,omitempty"`
	// ProjectGates is the repository's .supervisor/gates.yaml (or .toml)
	// at the base commit, sent only when the submitter trusts the project.
	ProjectGates *GateFile `json:"project_gates,omitempty"`
	// ProjectRoles are the repository's .supervisor/roles/*.yaml at the base
	// commit, sent only when the submitter trusts the project.
	ProjectRoles []GateFile `json:"project_roles,omitempty"`
	// ProjectContext are the repository's .supervisor/context/*.yaml at
	// the base commit (context strategies that replace the coordinator's
	// of the same name), sent only when the submitter trusts the project.
	ProjectContext []GateFile `json:"project_context,omitempty"`
}

// GateFile is a gate configuration file's name and content.
type GateFile struct {
	Filename string `json:"filename"`
	Content  string `json:"content"`
}

// SubmitResponse names the new workflow.
type SubmitResponse struct {
	WorkflowID string `json:"workflow_id"`
	Branch     string `json:"branch"`
	// TraceID is the id of the workflow's trace, "" when not traced.
	TraceID string `json:"trace_id,omitempty"`
	// RepoPathDropped, when set, says why the request's RepoPath was left
	// out (RepoPathOptional): the coordinator will not write into it.
	RepoPathDropped string `json:"repo_path_dropped,omitempty"`
	// Redacted names the places of the workflow in which the coordinator
	// masked a secret before storing it ("task deploy: prompt"): agents
	// read [REDACTED] there instead (CTX-07).
	Redacted []string `json:"redacted,omitempty"`
}

// IDRequest names a workflow (status, cancel) and optionally a node (logs).
type IDRequest struct {
	WorkflowID string `json:"workflow_id,omitempty"`
	NodeID     string `json:"node_id,omitempty"`
}

// GateRerunRequest asks for gates to run again: every gate of NodeID (or
// of every gating or gate-failed node when empty), or only Gate. A node
// that failed on its gates is reopened: it goes back to gating and its
// skipped dependents back to pending.
type GateRerunRequest struct {
	WorkflowID string `json:"workflow_id"`
	NodeID     string `json:"node_id,omitempty"`
	Gate       string `json:"gate,omitempty"`
	// NoCache runs the gates even if a cached result exists.
	NoCache bool `json:"no_cache,omitempty"`
}

// ListResponse lists workflows, and says whether the fleet is paused.
type ListResponse struct {
	Workflows []WorkflowSummary `json:"workflows"`
	Fleet     FleetStatus       `json:"fleet"`
}

// FleetStatus is the fleet-wide safeguard's state: paused (since when,
// why) or not, and the failed agent rounds within the last hour.
type FleetStatus struct {
	Paused           bool       `json:"paused"`
	Since            *time.Time `json:"since,omitempty"`
	Reason           string     `json:"reason,omitempty"`
	FailuresLastHour int        `json:"failures_last_hour"`
}

// ResumeRequest ends a fleet pause; By names the operator.
type ResumeRequest struct {
	By string `json:"by"`
}

// LogEntry is one log of a node.
type LogEntry struct {
	// Name says whose log it is: "agent" or "gate <name>"; "context" is
	// the prompt the agent was given, its packed context first.
	Name   string `json:"name"`
	Object string `json:"object"`
	// Content is the log's tail (the whole log when it fits).
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty"`
	// Size is the whole log's length in bytes; a truncated log is read
	// in full from the logs bucket under Object (coordinator logs --log).
	Size int64 `json:"size,omitempty"`
}

// LogsResponse carries a node's logs.
type LogsResponse struct {
	Logs []LogEntry `json:"logs"`
}

// NodeSummary is a node as the status API reports it.
type NodeSummary struct {
	ID      string              `json:"id"`
	Status  protocol.NodeStatus `json:"status"`
	Attempt int                 `json:"attempt,omitempty"`
	Host    string              `json:"host,omitempty"`
	// Sandbox says where the agent ran ("process", "docker IMAGE@ID").
	Sandbox   string        `json:"sandbox,omitempty"`
	DependsOn []string      `json:"depends_on,omitempty"`
	Gates     []GateSummary `json:"gates,omitempty"`
	Commit    string        `json:"commit,omitempty"`
	Reason    string        `json:"reason,omitempty"`
	StartedAt *time.Time    `json:"started_at,omitempty"`
	EndedAt   *time.Time    `json:"ended_at,omitempty"`
	// MaxAttempts is the node's budget of agent rounds (grants included).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// RetryAt is when a retrying node's next attempt starts.
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// ApprovalDeadline is when the approval step a node awaits decides
	// by itself (its on_timeout), if it has a timeout.
	ApprovalDeadline *time.Time `json:"approval_deadline,omitempty"`
	// Approved is set on a node awaiting approval, or escalated, that a
	// human (or its approval step's timeout) has approved: its work is
	// being integrated, and it succeeds without another decision.
	Approved bool `json:"approved,omitempty"`
	// Waiting is set while a runner holds the node's agent job back on an
	// open circuit breaker.
	Waiting *BreakerWait `json:"waiting,omitempty"`
	// Integration is set while the node waits in the workflow's
	// integration queue.
	Integration *QueueEntry `json:"integration,omitempty"`
	// WaitingForFiles names the nodes a pending node waits for because
	// their declared files may overlap its own (DAG-07).
	WaitingForFiles []string `json:"waiting_for_files,omitempty"`
	// Context is the object, in the logs bucket, holding the prompt the
	// latest agent round was given, its packed context first (CTX-01).
	Context string `json:"context,omitempty"`
	// Output is the check of the current attempt's result block against
	// the task's output schema: the validated block, or what was wrong.
	Output *protocol.AgentOutput `json:"output,omitempty"`
	// ReviewRejected is set on a review node whose result counts as a
	// rejection: no valid block, or a verdict other than APPROVED (OUT-07).
	ReviewRejected bool `json:"review_rejected,omitempty"`
	// Planner names the node whose plan added this one; Expanded counts
	// the nodes a planner's plan added.
	Planner  string `json:"planner,omitempty"`
	Expanded int    `json:"expanded,omitempty"`
	// LastRun is what the agent CLI reported about the node's latest run
	// (adapter, model, session, turns, usage, cost; its final text left
	// out), nil before one reported.
	LastRun *protocol.AgentRun `json:"last_run,omitempty"`
	// Spend is what all the node's runs used, every round counted.
	*Spend
	// MaxCostUSD is the node's budget (0: none).
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// QueueEntry is a node's place in its workflow's integration queue and
// the speculative run of the integration gates it is tested on.
type QueueEntry struct {
	// Position counts from 1, the head: the node that lands next.
	Position int `json:"position"`
	// Speculation identifies the sequence of patches the run applies.
	Speculation string `json:"speculation,omitempty"`
	// Integrated counts the patches on the branch the run applies first;
	// Ahead names the queued nodes whose patches come next, before the
	// node's own.
	Integrated int      `json:"integrated"`
	Ahead      []string `json:"ahead,omitempty"`
	// Gates are the integration gates' runs on that speculation.
	Gates []GateSummary `json:"gates,omitempty"`
}

// GateSummary is a gate as the status API reports it.
type GateSummary struct {
	Name     string              `json:"name"`
	Status   protocol.GateStatus `json:"status,omitempty"`
	ExitCode *int                `json:"exit_code,omitempty"`
	Host     string              `json:"host,omitempty"`
	// Log is the full log's object name in the logs bucket.
	Log string `json:"log,omitempty"`
	// Attempt is the agent round under test; Round counts this gate's
	// executions in that attempt (polls and reruns).
	Attempt        int    `json:"attempt,omitempty"`
	Round          int    `json:"round,omitempty"`
	DurationMillis int64  `json:"duration_ms,omitempty"`
	Cached         bool   `json:"cached,omitempty"`
	CacheDisabled  string `json:"cache_disabled,omitempty"`
	// Output is the tail of the gate's output, secrets redacted.
	Output             string   `json:"output,omitempty"`
	IntegrityViolation bool     `json:"integrity_violation,omitempty"`
	Violations         []string `json:"violations,omitempty"`
	Error              string   `json:"error,omitempty"`
	// Sandbox says where the gate ran ("process", "docker IMAGE@ID").
	Sandbox string `json:"sandbox,omitempty"`
	// Waiting is set while a runner holds the gate's job back on an open
	// circuit breaker.
	Waiting *BreakerWait `json:"waiting,omitempty"`
	// Review is a review gate's outcome: each reviewer's verdict, issues,
	// usage and cost, against the quorum.
	Review *protocol.ReviewResult `json:"review,omitempty"`
}

// WorkflowSummary is a workflow as the status and list APIs report it.
type WorkflowSummary struct {
	ID          string                  `json:"id"`
	Name        string                  `json:"name"`
	Status      protocol.WorkflowStatus `json:"status"`
	Source      string                  `json:"source,omitempty"`
	RepoPath    string                  `json:"repo_path,omitempty"`
	BaseCommit  string                  `json:"base_commit"`
	Branch      string                  `json:"branch"`
	Head        string                  `json:"head,omitempty"`
	Reason      string                  `json:"reason,omitempty"`
	SubmittedAt time.Time               `json:"submitted_at"`
	FinishedAt  *time.Time              `json:"finished_at,omitempty"`
	Counts      map[string]int          `json:"counts"`
	Nodes       []NodeSummary           `json:"nodes,omitempty"`
	// FleetPaused, when set, says why no new agent round starts anywhere
	// (coordinator resume ends it).
	FleetPaused string `json:"fleet_paused,omitempty"`
	// ResultBundle is the object (in the bundles bucket) holding Branch,
	// for hosts that cannot see RepoPath.
	ResultBundle string `json:"result_bundle,omitempty"`
	// BaseBranch is the branch the workflow was submitted from; AutoMerge
	// and MergeInto are the workflow's merge settings, Merge its latest
	// merge (see merge.go).
	BaseBranch string        `json:"base_branch,omitempty"`
	AutoMerge  bool          `json:"auto_merge,omitempty"`
	MergeInto  string        `json:"merge_into,omitempty"`
	Merge      *MergeSummary `json:"merge,omitempty"`
	// TraceID is the id of the workflow's OpenTelemetry trace, "" when
	// its submission was not traced.
	TraceID string `json:"trace_id,omitempty"`
	// Spend is what the workflow's agent runs and review gates' reviewers
	// used, summed over its nodes (nil before any run reported).
	*Spend
	// MaxCostUSD is the workflow's budget (0: none).
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// Spend is what agent runs used: their tokens and cost, summed. The
// totals count a node's own agent runs and its review gates' reviewers
// alike; Review is the reviewers' part of them.
type Spend struct {
	// Runs counts the runs that reported what they used.
	Runs  int                 `json:"runs"`
	Usage protocol.TokenUsage `json:"usage"`
	// CostUSD sums the runs whose cost is known: reported by the CLI, or
	// estimated from the coordinator's price table, in which case
	// CostEstimated is set. CostUnknownRuns counts the runs whose cost is
	// neither (a model the price table lacks).
	CostUSD         float64 `json:"cost_usd"`
	CostEstimated   bool    `json:"cost_estimated"`
	CostUnknownRuns int     `json:"cost_unknown_runs,omitempty"`
	// ReviewSpend is the part of the above that review gates' reviewers used
	// (nil when no reviewer reported); the agent's part is the rest.
	ReviewSpend *Spend `json:"review_spend,omitempty"`
}

// Error codes the service replies with (in the Nats-Service-Error-Code header).
const (
	CodeBadRequest = 400
	CodeForbidden  = 403
	CodeNotFound   = 404
	CodeConflict   = 409
	CodeTooLarge   = 413
	CodeInvalid    = 422
	// CodeTooMany: a client sent more requests than its rate allows.
	CodeTooMany  = 429
	CodeInternal = 500
	// CodeUnavailable: the coordinator has as much work in flight as it
	// may; the request may succeed once some finishes.
	CodeUnavailable = 503
)

// Error is an API error: what a handler returns to refuse a request, and
// what the client gets back. Code is one of the Code* constants.
type Error struct {
	Code        int
	Description string
	// Problems lists validation problems (code 422).
	Problems []workflow.Problem
}

func (e *Error) Error() string {
	if len(e.Problems) > 0 {
		return (&workflow.ValidationError{Problems: e.Problems}).Error()
	}
	return e.Description
}

// Is matches errors by code: errors.Is(err, ErrNotFound) holds for any
// 404, whatever its description.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is, one per code.
var (
	ErrBadRequest = &Error{Code: CodeBadRequest, Description: "bad request"}
	ErrForbidden  = &Error{Code: CodeForbidden, Description: "forbidden"}
	ErrNotFound   = &Error{Code: CodeNotFound, Description: "not found"}
	ErrConflict   = &Error{Code: CodeConflict, Description: "conflict"}
	ErrTooLarge   = &Error{Code: CodeTooLarge, Description: "too large"}
	ErrInvalid    = &Error{Code: CodeInvalid, Description: "invalid"}
	ErrInternal   = &Error{Code: CodeInternal, Description: "internal error"}
	// ErrTooMany matches any 429.
	ErrTooMany = &Error{Code: CodeTooMany, Description: "too many requests"}
	// ErrUnavailable matches any 503.
	ErrUnavailable = &Error{Code: CodeUnavailable, Description: "unavailable"}
)

func newError(code int, format string, args []any) *Error {
	return &Error{Code: code, Description: fmt.Sprintf(format, args...)}
}

// BadRequest is a 400: the request is malformed or incomplete.
func BadRequest(format string, args ...any) *Error { return newError(CodeBadRequest, format, args) }

// Forbidden is a 403: the coordinator's configuration does not allow
// what the request asks (a repo_path outside its repo roots).
func Forbidden(format string, args ...any) *Error { return newError(CodeForbidden, format, args) }

// NotFound is a 404: the request names something that does not exist.
func NotFound(format string, args ...any) *Error { return newError(CodeNotFound, format, args) }

// Conflict is a 409: the request does not fit the current state.
func Conflict(format string, args ...any) *Error { return newError(CodeConflict, format, args) }

// TooLarge is a 413.
func TooLarge(format string, args ...any) *Error { return newError(CodeTooLarge, format, args) }

// Invalid is a 422: what was given fails validation, with the problems.
func Invalid(description string, problems []workflow.Problem) *Error {
	return &Error{Code: CodeInvalid, Description: description, Problems: problems}
}

// TooMany is a 429: the client's request rate is over its limit.
func TooMany(format string, args ...any) *Error { return newError(CodeTooMany, format, args) }

// Unavailable is a 503: the coordinator is at a limit of work in flight.
func Unavailable(format string, args ...any) *Error { return newError(CodeUnavailable, format, args) }

// Internal is a 500.
func Internal(format string, args ...any) *Error { return newError(CodeInternal, format, args) }

// Client calls the coordinator's API.
type Client struct {
	NC *nats.Conn
}

// call sends req to endpoint and decodes the reply.
func call[Resp any](ctx context.Context, c *Client, endpoint string, req any) (Resp, error) {
	var out Resp
	data, err := json.Marshal(req)
	if err != nil {
		return out, err
	}
	if max := c.NC.MaxPayload(); int64(len(data)) > max {
		return out, TooLarge("request is %d bytes, over the server's %d-byte message limit", len(data), max)
	}
	// ctx's span context, if any, travels in the request's traceparent
	// header: the coordinator's spans for it are its children.
	rmsg := &nats.Msg{Subject: protocol.APISubject(endpoint), Data: data, Header: nats.Header{}}
	telemetry.Inject(ctx, rmsg.Header)
	msg, err := c.NC.RequestMsgWithContext(ctx, rmsg)
	if errors.Is(err, nats.ErrNoResponders) {
		return out, fmt.Errorf("no coordinator is serving %s (is `coordinator serve` or `coordinator dev` running?): %w",
			protocol.APISubject(endpoint), err)
	}
	if err != nil {
		return out, fmt.Errorf("%s: %w", protocol.APISubject(endpoint), err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		e := &Error{Description: msg.Header.Get(micro.ErrorHeader)}
		e.Code, _ = strconv.Atoi(code)
		if len(msg.Data) > 0 {
			_ = json.Unmarshal(msg.Data, &e.Problems)
		}
		return out, e
	}
	if err := json.Unmarshal(msg.Data, &out); err != nil {
		return out, fmt.Errorf("%s: bad reply: %w", protocol.APISubject(endpoint), err)
	}
	return out, nil
}

// Submit submits a workflow.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResponse, error) {
	return call[SubmitResponse](ctx, c, protocol.APISubmit, req)
}

// Status returns one workflow with its nodes.
func (c *Client) Status(ctx context.Context, wf string) (WorkflowSummary, error) {
	return call[WorkflowSummary](ctx, c, protocol.APIStatus, IDRequest{WorkflowID: wf})
}

// List returns every workflow, newest last, without node detail, and
// the fleet's state.
func (c *Client) List(ctx context.Context) (ListResponse, error) {
	return call[ListResponse](ctx, c, protocol.APIList, IDRequest{})
}

// Cancel asks the coordinator to cancel a workflow.
func (c *Client) Cancel(ctx context.Context, wf string) (WorkflowSummary, error) {
	return call[WorkflowSummary](ctx, c, protocol.APICancel, IDRequest{WorkflowID: wf})
}

// GateRerun re-runs gates and returns the workflow afterwards.
func (c *Client) GateRerun(ctx context.Context, req GateRerunRequest) (WorkflowSummary, error) {
	return call[WorkflowSummary](ctx, c, protocol.APIGateRerun, req)
}

// Logs returns a node's logs.
func (c *Client) Logs(ctx context.Context, wf, node string) ([]LogEntry, error) {
	out, err := call[LogsResponse](ctx, c, protocol.APILogs, IDRequest{WorkflowID: wf, NodeID: node})
	return out.Logs, err
}

// GateListRequest lists gates. Without WorkflowID: every gate available to
// new workflows, with its source (builtin, user or registry). With
// WorkflowID and NodeID: that node's effective gates in dispatch order.
type GateListRequest struct {
	WorkflowID string `json:"workflow_id,omitempty"`
	NodeID     string `json:"node_id,omitempty"`
}

// Gate sources as the gate API reports them. Fleet level, lowest
// precedence first: built-in sets < the coordinator's user file < the
// registry (the project, workflow and task come above them at
// submission). Node level: a gate of the workflow or of the task
// itself (front matter, or added with gate add --task).
const (
	SourceBuiltin  = "builtin"
	SourceUser     = "user"
	SourceRegistry = "registry"
	SourceWorkflow = "workflow"
	SourceTask     = "task"
)

// GateInfo is one gate as the gate API reports it.
type GateInfo struct {
	Name string `json:"name"`
	// Source is where the definition in effect comes from (Source*).
	Source string `json:"source"`
	// DefinedAt is the definition's file:line, or sup-gates/NAME for a
	// registry gate.
	DefinedAt string `json:"defined_at,omitempty"`
	// Overrides lists the lower fleet sources that also define the gate;
	// the definition shown replaces theirs.
	Overrides []string `json:"overrides,omitempty"`
	// Revision is a registry gate's revision in the KV bucket.
	Revision uint64 `json:"revision,omitempty"`
	// Definition is the gate with every default explicit.
	Definition protocol.GateSpec `json:"definition"`

	// Node level only: the dependency layer the gate is dispatched in
	// (from 0), whether the task requires it (false: optional, or only
	// run as a dependency), what its failure does, and its status in the
	// current attempt ("" = not run yet).
	Layer    *int                `json:"layer,omitempty"`
	Required *bool               `json:"required,omitempty"`
	OnFail   string              `json:"on_fail,omitempty"`
	Status   protocol.GateStatus `json:"status,omitempty"`
}

// GateListResponse is the answer to GateListRequest.
type GateListResponse struct {
	WorkflowID string              `json:"workflow_id,omitempty"`
	NodeID     string              `json:"node_id,omitempty"`
	NodeStatus protocol.NodeStatus `json:"node_status,omitempty"`
	Gates      []GateInfo          `json:"gates"`
}

// GateAddRequest adds a gate to the registry or, with WorkflowID and
// NodeID, to one node of a running workflow.
type GateAddRequest struct {
	WorkflowID string `json:"workflow_id,omitempty"`
	NodeID     string `json:"node_id,omitempty"`
	// Definition is one gate as YAML or JSON, in the schema of an entry of
	// a workflow's gates list (or a gate file holding exactly one gate).
	Definition string `json:"definition,omitempty"`
	// Filename names Definition in problems (default "gate add").
	Filename string `json:"filename,omitempty"`
	// Name, node level only and without Definition, adds a gate the
	// workflow or the fleet already defines.
	Name string `json:"name,omitempty"`
	// Replace redefines a gate that exists already; without it adding an
	// existing name is a conflict (409).
	Replace bool `json:"replace,omitempty"`
	// Optional and OnFail (node level) make a new gate optional and say
	// what its failure does (block, retry_with_feedback, warn).
	Optional bool   `json:"optional,omitempty"`
	OnFail   string `json:"on_fail,omitempty"`
}

// GateUpdateRequest changes some fields of a gate: Set maps gate schema
// fields (timeout, max_retries, poll_interval, max_pending, severity,
// command, env …) to their new values, Unset lists fields that go back to
// their defaults. The result is validated as a whole before it is stored.
// A built-in or user gate updated at fleet level is copied to the
// registry with the changes (removing it there restores the original).
type GateUpdateRequest struct {
	WorkflowID string                     `json:"workflow_id,omitempty"`
	NodeID     string                     `json:"node_id,omitempty"`
	Name       string                     `json:"name"`
	Set        map[string]json.RawMessage `json:"set,omitempty"`
	Unset      []string                   `json:"unset,omitempty"`
}

// GateRemoveRequest removes a registry gate or, with WorkflowID and
// NodeID, a gate of one node of a running workflow.
type GateRemoveRequest struct {
	WorkflowID string `json:"workflow_id,omitempty"`
	NodeID     string `json:"node_id,omitempty"`
	Name       string `json:"name"`
}

// Gate change actions.
const (
	GateAdded    = "added"
	GateReplaced = "replaced"
	GateUpdated  = "updated"
	GateRemoved  = "removed"
)

// GateChangeResponse reports a gate added, updated or removed.
type GateChangeResponse struct {
	// Action is added, replaced, updated or removed.
	Action string `json:"action"`
	// Gate is the gate as it now is (as it was, for a removal).
	Gate GateInfo `json:"gate"`
	// Note says what else the change means (an override, a restored
	// built-in gate, when a node runs the gate).
	Note string `json:"note,omitempty"`
	// Warnings are suspicious but valid parts of the definition.
	Warnings []string `json:"warnings,omitempty"`
}

// GateField is one field of a gate definition in the gate schema, for
// RenderGate.
type GateField struct {
	Key   string
	Value any
}

// RenderGate writes a gate definition as a YAML block mapping, one field
// per line in the order given (lists and mappings in flow style), so that
// validation problems point at the line of the field concerned.
func RenderGate(fields []GateField) (string, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range fields {
		v := &yaml.Node{}
		if err := v.Encode(f.Value); err != nil {
			return "", fmt.Errorf("gate field %s: %w", f.Key, err)
		}
		flow(v)
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: f.Key}, v)
	}
	out, err := yaml.Marshal(root)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

func flow(n *yaml.Node) {
	if n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode {
		n.Style = yaml.FlowStyle
	}
}

// GateList lists gates (see GateListRequest).
func (c *Client) GateList(ctx context.Context, req GateListRequest) (GateListResponse, error) {
	return call[GateListResponse](ctx, c, protocol.APIGateList, req)
}

// GateAdd adds a gate (see GateAddRequest).
func (c *Client) GateAdd(ctx context.Context, req GateAddRequest) (GateChangeResponse, error) {
	return call[GateChangeResponse](ctx, c, protocol.APIGateAdd, req)
}

// GateUpdate changes fields of a gate (see GateUpdateRequest).
func (c *Client) GateUpdate(ctx context.Context, req GateUpdateRequest) (GateChangeResponse, error) {
	return call[GateChangeResponse](ctx, c, protocol.APIGateUpdate, req)
}

// GateRemove removes a gate (see GateRemoveRequest).
func (c *Client) GateRemove(ctx context.Context, req GateRemoveRequest) (GateChangeResponse, error) {
	return call[GateChangeResponse](ctx, c, protocol.APIGateRemove, req)
}
