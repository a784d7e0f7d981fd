// Package protocol defines Supervisor's wire protocol: the versioned JSON
// messages that travel over NATS JetStream between the coordinator, workers
// and gate runners, and the names of the subjects, streams and buckets that
// carry them. docs/protocol.md describes the same contract for readers.
package protocol

import (
	"fmt"
	"time"

	json "github.com/goccy/go-json"
)

// Version is the protocol version stamped on every message as "v". A
// receiver rejects messages whose version is newer than the one it knows.
const Version = 1

// ErrUnsupportedVersion is returned by Decode when a message carries a
// protocol version this build does not understand.
var ErrUnsupportedVersion = fmt.Errorf("unsupported protocol version")

// PatchRef names a binary patch stored in the patches object-store bucket.
type PatchRef struct {
	// NodeID is the node whose agent produced the patch.
	NodeID string `json:"node_id"`
	// Object is the object name in BucketPatches.
	Object string `json:"object"`
	// SHA256 is the hex digest of the patch bytes.
	SHA256 string `json:"sha256"`
	// Size is the patch length in bytes.
	Size int64 `json:"size"`
	// Stat summarizes what the patch changes; the worker that made it
	// fills it in. Absent in logs written before it existed.
	Stat *PatchStat `json:"stat,omitempty"`
}

// PatchStat summarizes a patch: how many files and lines it changes, and
// the names it touches (both sides of a rename), up to a cap.
type PatchStat struct {
	Files      int  `json:"files"`
	Insertions int  `json:"insertions"`
	Deletions  int  `json:"deletions"`
	Binary     bool `json:"binary,omitempty"`
	// Paths are the names touched; PathsTruncated says some were left out.
	Paths          []string `json:"paths,omitempty"`
	PathsTruncated bool     `json:"paths_truncated,omitempty"`
}

// RepoRef identifies the repository and base commit a job works on.
type RepoRef struct {
	// ID is a stable identifier of the repository, used to key host mirror
	// caches (see workspace.RepoID).
	ID string `json:"id"`
	// BaseCommit is the full commit id every job of the workflow starts from.
	BaseCommit string `json:"base_commit"`
	// Bundle is the object name, in BucketBundles, of a git bundle that
	// contains BaseCommit and its history.
	Bundle string `json:"bundle"`
}

// AgentJob asks a worker to run an agent once for a node.
type AgentJob struct {
	V          int    `json:"v"`
	JobID      string `json:"job_id"`
	WorkflowID string `json:"workflow_id"`
	NodeID     string `json:"node_id"`
	// Attempt counts agent rounds for the node, from 1.
	Attempt int     `json:"attempt"`
	Pool    string  `json:"pool"`
	Repo    RepoRef `json:"repo"`
	// Patches are applied, in order, on top of the base commit before the
	// agent starts: the accepted work of the nodes this one depends on.
	Patches []PatchRef `json:"patches,omitempty"`
	// Command is the agent's argv when Agent is nil (jobs of events
	// written before Agent existed); it is never passed through a shell.
	Command []string `json:"command,omitempty"`
	// Agent, when set, is how to run the agent: the worker builds the argv
	// from it with the adapter it names and parses the CLI's output.
	Agent *AgentSpec `json:"agent,omitempty"`
	// Context, when set, is packed from the prepared workspace and put
	// before the prompt (CTX-01).
	Context *ContextSpec `json:"context,omitempty"`
	// Prompt is written to the agent's standard input.
	Prompt         string            `json:"prompt"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	// PublishedAt is when the coordinator published the job (the node became
	// ready); workers echo it so ready→started latency can be measured.
	PublishedAt time.Time `json:"published_at"`
	// StartFrom, on a retry, is the previous attempt's patch: it is applied
	// to the workspace without being committed, so the agent continues
	// that work and the attempt's patch holds both.
	StartFrom *PatchRef `json:"start_from,omitempty"`
	// Approvals names, for each ancestor a human approved, who did (or
	// "timeout"); the worker gives them to the agent in
	// SUPERVISOR_APPROVALS as "node=who" pairs, comma-separated.
	Approvals map[string]string `json:"approvals,omitempty"`
	// Feedback, on a retry, is the failed round's feedback (a JSON
	// document, package shared/feedback); the worker gives it to the agent
	// as a read-only file outside the workspace, named by
	// SUPERVISOR_FEEDBACK_FILE. Prompt already ends with its rendering.
	Feedback json.RawMessage `json:"feedback,omitempty"`
	// FileLocks are the state-store keys (FileLockKey) the worker holds
	// while the agent runs (DAG-07): the node's own and those of every
	// node of the workflow whose files may overlap its own, sorted.
	FileLocks []string `json:"file_locks,omitempty"`
}

// FileLockKey is the state-store key of a node's file lock: held by the
// worker running that node's agent and by those running the agents of
// nodes whose declared files may overlap its own.
func FileLockKey(workflow, node string) string { return "files/" + workflow + "/" + node }

// GateJob asks a gate runner to run one gate against a node's work.
type GateJob struct {
	V          int    `json:"v"`
	JobID      string `json:"job_id"`
	WorkflowID string `json:"workflow_id"`
	NodeID     string `json:"node_id"`
	// Attempt is the agent round whose output is under test.
	Attempt int     `json:"attempt"`
	Gate    string  `json:"gate"`
	Pool    string  `json:"pool"`
	Repo    RepoRef `json:"repo"`
	// Patches are applied in order on top of the base commit: the
	// dependencies' accepted patches, then the node's own patch.
	Patches        []PatchRef        `json:"patches,omitempty"`
	Command        []string          `json:"command"`
	Env            map[string]string `json:"env,omitempty"`
	WorkingDir     string            `json:"working_dir,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	PublishedAt    time.Time         `json:"published_at"`
	// Round numbers this gate's executions for the attempt, from 1: each
	// poll of a pending gate and each rerun is a new round.
	Round int `json:"round,omitempty"`
	// Definition is the gate's full definition (allowed_writes, cache
	// settings, image, resources …); Command, Env, WorkingDir and
	// TimeoutSeconds above repeat its execution fields.
	Definition *GateSpec `json:"definition,omitempty"`
	// NoCache makes the runner execute the gate even if a cached result
	// exists (a rerun with --no-cache); a passing result is still stored.
	NoCache bool `json:"no_cache,omitempty"`
	// TaskPrompt is, for a review gate, the node's task as its agent was
	// given it (the original plan or task, CTX-06), for the reviewers.
	TaskPrompt string `json:"task_prompt,omitempty"`
}

// JobKind tells agent jobs from gate jobs.
type JobKind string

// Job kinds.
const (
	KindAgent JobKind = "agent"
	KindGate  JobKind = "gate"
)

// GateStatus is the outcome of one gate execution. Error is kept apart from
// failed so that a broken runner or sandbox is never blamed on the code.
type GateStatus string

// Gate statuses.
const (
	GatePassed  GateStatus = "passed"
	GateFailed  GateStatus = "failed"
	GatePending GateStatus = "pending"
	GateTimeout GateStatus = "timeout"
	GateSkipped GateStatus = "skipped"
	// GateError means the infrastructure failed, not the code under test.
	GateError GateStatus = "error"
)

// GateStatusFromExit maps a gate process's exit to a status:
// 0 passed, 75 pending, killed by the timeout → timeout, anything else failed.
func GateStatusFromExit(exitCode int, timedOut bool) GateStatus {
	switch {
	case timedOut:
		return GateTimeout
	case exitCode == 0:
		return GatePassed
	case exitCode == 75:
		return GatePending
	default:
		return GateFailed
	}
}

// AgentStatus is the outcome of one agent run.
type AgentStatus string

// Agent statuses.
const (
	AgentSucceeded AgentStatus = "succeeded"
	AgentFailed    AgentStatus = "failed"
	AgentTimeout   AgentStatus = "timeout"
	// AgentError means the infrastructure failed (workspace, sandbox, store).
	AgentError AgentStatus = "error"
)

// Started reports that a worker or gate runner took a job and holds its lease.
type Started struct {
	Kind       JobKind `json:"kind"`
	JobID      string  `json:"job_id"`
	WorkflowID string  `json:"workflow_id"`
	NodeID     string  `json:"node_id"`
	Gate       string  `json:"gate,omitempty"`
	Attempt    int     `json:"attempt"`
	// LeaseToken is the fencing token of the lease the runner holds.
	LeaseToken uint64 `json:"lease_token"`
	Host       string `json:"host"`
	// Labels describe the runner: a worker's --labels, and gpus=N and
	// gpu=MODEL on a worker with GPUs.
	Labels      map[string]string `json:"labels,omitempty"`
	Delivery    uint64            `json:"delivery"`
	PublishedAt time.Time         `json:"published_at"`
	StartedAt   time.Time         `json:"started_at"`
}

// AgentResult reports the end of one agent run.
type AgentResult struct {
	JobID      string      `json:"job_id"`
	WorkflowID string      `json:"workflow_id"`
	NodeID     string      `json:"node_id"`
	Attempt    int         `json:"attempt"`
	LeaseToken uint64      `json:"lease_token"`
	Host       string      `json:"host"`
	Status     AgentStatus `json:"status"`
	ExitCode   int         `json:"exit_code"`
	// Stdout and Stderr are the tails of the agent's streams, capped.
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Patch is the agent's change; nil when it changed nothing.
	Patch *PatchRef `json:"patch,omitempty"`
	// Log is the object name of the full log in BucketLogs.
	Log        string    `json:"log,omitempty"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Sandbox says where the agent ran: "process", or "docker IMAGE@ID".
	Sandbox string `json:"sandbox,omitempty"`
	// Run is what the agent CLI reported, as its adapter parsed it (nil
	// when the agent did not run or the job had no Agent).
	Run *AgentRun `json:"run,omitempty"`
	// Context is the object name, in BucketLogs, of the context packed
	// for the agent and its manifest ("" when the job packed none).
	Context string `json:"context,omitempty"`
}

// GateResult reports the end of one gate execution.
type GateResult struct {
	JobID      string     `json:"job_id"`
	WorkflowID string     `json:"workflow_id"`
	NodeID     string     `json:"node_id"`
	Gate       string     `json:"gate"`
	Attempt    int        `json:"attempt"`
	LeaseToken uint64     `json:"lease_token"`
	Host       string     `json:"host"`
	Status     GateStatus `json:"status"`
	// ExitCode is nil when the process did not exit by itself.
	ExitCode   *int      `json:"exit_code,omitempty"`
	Stdout     string    `json:"stdout,omitempty"`
	Stderr     string    `json:"stderr,omitempty"`
	Log        string    `json:"log,omitempty"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`

	// Output is the combined output (stdout, then stderr), secrets
	// redacted, keeping its last OutputMaxChars characters (OT-01).
	Output string `json:"output,omitempty"`
	// DurationMillis is how long the gate ran (0 for cache hits and skips).
	DurationMillis int64 `json:"duration_ms,omitempty"`
	// TimedOut is true when the gate was killed by its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Cached is true when the result came from the gate cache.
	Cached bool `json:"cached,omitempty"`
	// CacheKey is the content-addressed key the result is cached under.
	CacheKey string `json:"cache_key,omitempty"`
	// CacheDisabled says why caching was off for this run, if it was.
	CacheDisabled string `json:"cache_disabled,omitempty"`
	// OOMKilled is true when the sandbox killed the gate for running out
	// of memory: a resource error (status error), not a failure of the code.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// IntegrityViolation is true when the gate changed the workspace
	// outside its allowed_writes; it blocks whatever the gate's severity.
	IntegrityViolation bool `json:"integrity_violation,omitempty"`
	// Violations lists the offending paths of an integrity violation.
	Violations []string `json:"violations,omitempty"`
	// Round numbers the executions of this gate for this attempt: polls
	// of a pending gate and reruns count up from 1.
	Round int `json:"round,omitempty"`
	// Sandbox says where the gate ran: "process", or "docker IMAGE@ID"
	// (sandbox.Result.Environment). A cache hit reports the run it reuses.
	Sandbox string `json:"sandbox,omitempty"`
	// Review is a review gate's outcome: each reviewer's verdict, issues,
	// usage and cost, and the quorum (nil for a command gate).
	Review *ReviewResult `json:"review,omitempty"`
}

// OutputMaxChars caps GateResult.Output (OT-01).
const OutputMaxChars = 10000

// DeadLetter reports a job that exhausted its deliveries without a result.
type DeadLetter struct {
	Kind       JobKind `json:"kind"`
	JobID      string  `json:"job_id"`
	WorkflowID string  `json:"workflow_id"`
	NodeID     string  `json:"node_id"`
	Gate       string  `json:"gate,omitempty"`
	Attempt    int     `json:"attempt"`
	Deliveries uint64  `json:"deliveries"`
	Reason     string  `json:"reason"`
}

// Waiting reports that a runner holds a job back without running it
// because the circuit breaker of one of the job's scopes is open (or
// half-open with another job's probe out). The job stays with the runner,
// neither redelivered nor counted as a failure, until the breaker may let
// it through; the runner sends another Waiting if it then has to wait
// again, on any scope.
type Waiting struct {
	Kind       JobKind `json:"kind"`
	JobID      string  `json:"job_id"`
	WorkflowID string  `json:"workflow_id"`
	NodeID     string  `json:"node_id"`
	Gate       string  `json:"gate,omitempty"`
	Attempt    int     `json:"attempt"`
	// Round is a gate job's round.
	Round int `json:"round,omitempty"`
	// Scope is the breaker's (AgentScope, GateScope or RepoScope).
	Scope string `json:"scope"`
	// State is the breaker's: "open", or "half_open" while a probe is out.
	State string `json:"state"`
	// Until is when the breaker may let a job through again: the end of its
	// cool-down, or when an unanswered probe is handed out again.
	Until time.Time `json:"until"`
	Host  string    `json:"host"`
	// Delivery is the job's delivery number (1 unless it was handed back).
	Delivery uint64    `json:"delivery"`
	At       time.Time `json:"at"`
}

// ReportType tags the payload of a Report.
type ReportType string

// Report types.
const (
	ReportStarted     ReportType = "started"
	ReportAgentResult ReportType = "agent_result"
	ReportGateResult  ReportType = "gate_result"
	ReportDeadLetter  ReportType = "dead_letter"
	ReportWaiting     ReportType = "waiting"
)

// Report is what workers and gate runners send to the coordinator on the
// results stream. Exactly one of the payload fields is set, matching Type.
type Report struct {
	V          int          `json:"v"`
	Type       ReportType   `json:"type"`
	Started    *Started     `json:"started,omitempty"`
	Agent      *AgentResult `json:"agent,omitempty"`
	Gate       *GateResult  `json:"gate,omitempty"`
	DeadLetter *DeadLetter  `json:"dead_letter,omitempty"`
	Waiting    *Waiting     `json:"waiting,omitempty"`
}

// WorkflowID returns the workflow the report concerns.
func (r *Report) WorkflowID() string {
	switch {
	case r.Started != nil:
		return r.Started.WorkflowID
	case r.Agent != nil:
		return r.Agent.WorkflowID
	case r.Gate != nil:
		return r.Gate.WorkflowID
	case r.DeadLetter != nil:
		return r.DeadLetter.WorkflowID
	case r.Waiting != nil:
		return r.Waiting.WorkflowID
	}
	return ""
}

// Validate checks that the payload matches the type.
func (r *Report) Validate() error {
	ok := false
	switch r.Type {
	case ReportStarted:
		ok = r.Started != nil
	case ReportAgentResult:
		ok = r.Agent != nil
	case ReportGateResult:
		ok = r.Gate != nil
	case ReportDeadLetter:
		ok = r.DeadLetter != nil
	case ReportWaiting:
		ok = r.Waiting != nil
	default:
		return fmt.Errorf("report: unknown type %q", r.Type)
	}
	if !ok {
		return fmt.Errorf("report: type %q without its payload", r.Type)
	}
	return nil
}

// Encode marshals a message after stamping the protocol version on it.
func Encode(v interface{ setVersion() }) ([]byte, error) {
	v.setVersion()
	return json.Marshal(v)
}

func (j *AgentJob) setVersion() { j.V = Version }
func (j *GateJob) setVersion()  { j.V = Version }
func (r *Report) setVersion()   { r.V = Version }

// Decode unmarshals a message and checks its protocol version.
func Decode(data []byte, v interface{ version() int }) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	if ver := v.version(); ver > Version || ver < 1 {
		return fmt.Errorf("decode %T: version %d: %w", v, ver, ErrUnsupportedVersion)
	}
	return nil
}

func (j *AgentJob) version() int { return j.V }
func (j *GateJob) version() int  { return j.V }
func (r *Report) version() int   { return r.V }
