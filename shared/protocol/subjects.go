package protocol

import (
	"fmt"
	"regexp"
	"time"
)

// Streams, subjects and buckets. docs/protocol.md documents each.
const (
	// StreamJobs is the work-queue stream of agent and gate jobs.
	StreamJobs = "SUP_JOBS"
	// StreamResults carries Reports from runners to the coordinator.
	StreamResults = "SUP_RESULTS"
	// StreamEvents is the coordinator's event log (limits retention).
	StreamEvents = "SUP_EVENTS"
	// StreamAdvisories keeps JetStream's max-deliveries advisories for the
	// jobs stream, so a dead letter is noticed even if the coordinator was
	// down when it happened.
	StreamAdvisories = "SUP_DEADLETTERS"

	// SubjectJobs matches every job subject.
	SubjectJobs = "sup.job.>"
	// SubjectResults matches every report subject.
	SubjectResults = "sup.res.>"
	// SubjectEvents matches every event subject.
	SubjectEvents = "sup.evt.>"
	// SubjectMaxDeliveries matches the server's max-deliveries advisories for
	// consumers of StreamJobs.
	SubjectMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamJobs + ".>"

	// APIPrefix is the subject prefix of the coordinator's micro service.
	APIPrefix = "sup.api"

	// BucketBundles holds git bundles of submitted repositories.
	BucketBundles = "sup-bundles"
	// BucketPatches holds the binary patches agents produce.
	BucketPatches = "sup-patches"
	// BucketLogs holds full agent and gate logs, and result bundles.
	BucketLogs = "sup-logs"
	// BucketState is the JetStream KV bucket the embedded state backend uses.
	BucketState = "sup-state"
	// BucketGates is the JetStream KV bucket of the fleet's gate registry
	// (coordinator gate add|update|remove): key = gate name, value = the
	// gate as GateSpec JSON, validated before it is stored. It is the
	// fleet-wide user-level gate source. Sources, lowest precedence first:
	// built-in < the coordinator's user file < the registry < project <
	// workflow < task.
	BucketGates = "sup-gates"
	// BucketSnapshots is the object store of the coordinator's snapshots
	// of its fold of the event log (engine/snapshot.go): only the
	// coordinator reads and writes it.
	BucketSnapshots = "sup-snapshots"
	// GatesHistory is how many revisions of each registry gate are kept.
	GatesHistory = 5

	// HeaderMsgID is JetStream's de-duplication header.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderKind tells agent jobs from gate jobs on the jobs stream.
	HeaderKind = "Sup-Kind"

	// DefaultPool is the pool tasks and gates use when none is given.
	DefaultPool = "default"
)

// API endpoint names under APIPrefix.
const (
	APISubmit = "submit"
	APIStatus = "status"
	APIList   = "list"
	APICancel = "cancel"
	APILogs   = "logs"
	// APIGateRerun re-runs a node's gates (coordinator gate rerun).
	APIGateRerun = "gate-rerun"
	// APIGateList lists the gates available to new workflows (built-in,
	// user, registry), or one node's effective gates.
	APIGateList = "gate-list"
	// APIGateAdd adds a gate to the registry, or to a running node.
	APIGateAdd = "gate-add"
	// APIGateUpdate changes some fields of a registry or node gate.
	APIGateUpdate = "gate-update"
	// APIGateRemove removes a registry gate, or a gate of a running node.
	APIGateRemove = "gate-remove"
	// APIInbox lists the nodes that wait for a human, across workflows.
	APIInbox = "inbox"
	// APIShow returns one node's attempts, feedback and candidate diff.
	APIShow = "show"
	// APIApprove, APIReject and APIRetry are a human's decisions on an
	// escalated node.
	APIApprove = "approve"
	APIReject  = "reject"
	APIRetry   = "retry"
	// APIResume ends a fleet-wide pause of new agent rounds.
	APIResume = "resume"
	// APIBreakers lists the fleet's circuit breakers; APIBreakerReset
	// closes one.
	APIBreakers     = "breakers"
	APIBreakerReset = "breaker-reset"
	// APIMerge merges a succeeded workflow's branch into a branch of the
	// submitting repository (coordinator merge).
	APIMerge = "merge"
	// APIFleet lists the runners seen recently (BucketRunners).
	APIFleet = "fleet"
)

// APISubject returns the subject of an API endpoint.
func APISubject(endpoint string) string { return APIPrefix + "." + endpoint }

// AgentJobSubject is the subject agent jobs for pool are published on.
func AgentJobSubject(pool string) string { return "sup.job.agent." + pool }

// GateJobSubject is the subject gate jobs for pool are published on.
func GateJobSubject(pool string) string { return "sup.job.gate." + pool }

// ResultSubject is the subject reports about workflow wf are published on.
func ResultSubject(wf string) string { return "sup.res." + wf }

// EventSubject is the subject events of workflow wf are appended on.
func EventSubject(wf string) string { return "sup.evt." + wf }

// ConsumerName is the durable consumer name for a job kind and pool.
func ConsumerName(kind JobKind, pool string) string { return string(kind) + "-" + pool }

// AgentJobID is the deterministic job id (and Nats-Msg-Id) of an agent job.
func AgentJobID(wf, node string, attempt int) string {
	return fmt.Sprintf("%s.%s.a%d", wf, node, attempt)
}

// GateJobID is the deterministic job id (and Nats-Msg-Id) of a gate job.
// round distinguishes re-runs of the same gate for the same attempt.
func GateJobID(wf, node string, attempt int, gate string, round int) string {
	return fmt.Sprintf("%s.%s.a%d.g.%s.r%d", wf, node, attempt, gate, round)
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidName reports whether s may be used as a task id, gate name, pool or
// workflow id: lowercase letters, digits, '-' and '_', at most 64, starting
// with a letter or digit. Such names are safe in subjects and object names.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// NameRule describes ValidName for error messages.
const NameRule = "lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 64 characters"

// CancelSubject is the core-NATS subject on which the coordinator announces
// that workflow wf was cancelled, so runners can stop its jobs early.
func CancelSubject(wf string) string { return "sup.ctl.cancel." + wf }

// LogSubject is the core-NATS subject on which a worker publishes the live
// log lines of node node of workflow wf while its agent runs (LogLine
// messages, JSON): one per event the agent's adapter parsed. Nothing keeps
// them: a subscriber sees the lines published while it listens, and the
// stored log (APILogs) has them all once the job ends.
func LogSubject(wf, node string) string { return "sup.log." + wf + "." + node }

// LogLine is one live log line of an agent job (LogSubject).
type LogLine struct {
	Attempt int       `json:"attempt"`
	Time    time.Time `json:"time"`
	// Kind is the event's kind (agentcli.Event: "text", "tool", "result" …);
	// Text its content, secrets redacted.
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// SubjectCancelAll matches every cancellation announcement.
const SubjectCancelAll = "sup.ctl.cancel.*"

// WorkflowFinishedKey is the state-store key the coordinator sets when a
// workflow ends, so runners drop that workflow's jobs still in the queue.
func WorkflowFinishedKey(wf string) string { return "workflow-finished/" + wf }
