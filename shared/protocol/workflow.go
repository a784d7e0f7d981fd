package protocol

import (
	"reflect"
	"time"
)

// WorkflowSpec is a validated workflow in its wire form: what the
// coordinator stores in the workflow.submitted event. The YAML a user writes
// is parsed and validated into this shape by the coordinator.
type WorkflowSpec struct {
	Name string `json:"name"`
	// Tasks are the DAG's nodes, in the order they were declared.
	Tasks []TaskSpec `json:"tasks"`
	// Gates are the gate definitions tasks refer to by name.
	Gates []GateSpec `json:"gates,omitempty"`
	// AutoMerge makes the coordinator merge the workflow's branch into
	// MergeInto (or, when empty, the branch it was submitted from) once
	// the workflow succeeds.
	AutoMerge bool   `json:"auto_merge,omitempty"`
	MergeInto string `json:"merge_into,omitempty"`
	// IntegrationGates name gates of Gates that test each node's work on
	// top of everything integrated before it and the nodes queued ahead
	// of it, before it lands on the workflow's branch (the integration
	// queue). Empty: a node whose gates passed is integrated at once.
	IntegrationGates []string `json:"integration_gates,omitempty"`
	// MaxCostUSD is the workflow's budget (0: none): once its agent runs
	// have cost this much, no node starts another round; the node
	// escalates instead.
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// TaskSpec is one node of a workflow. The settings most tasks leave unset
// are in TaskRare, which a task points at only when one of them is set: a
// coordinator keeps a TaskSpec per node in flight (PERF-51). On the wire
// they are the task's own fields. Read them through TaskSpec's methods of
// the same names (nil-safe) and set them with SetRare.
type TaskSpec struct {
	ID string `json:"id"`
	// Agent says how the node's agent runs (nil for a human task and in
	// events written before it existed).
	Agent     *AgentSpec `json:"agent,omitempty"`
	Prompt    string     `json:"prompt"`
	DependsOn []string   `json:"depends_on,omitempty"`
	// Gates lists every gate the task runs, required and optional, in the
	// order written (dependencies are not added: the gate plan closes over
	// depends_on).
	Gates []string `json:"gates,omitempty"`
	// Required and Optional split Gates (RC-01…RC-05): a task
	// written with a plain list requires every gate. Events written before
	// these fields existed have neither; GateRequired handles both.
	Required []string `json:"required,omitempty"`
	Optional []string `json:"optional,omitempty"`
	// OnFail overrides what a gate's failure does, by gate name: "block",
	// "retry_with_feedback" or "warn" (lowercase; RC-04, OF-01).
	OnFail map[string]string `json:"on_fail,omitempty"`
	// GateDefs are gate definitions written in the task itself (the YAML
	// front matter of its prompt). For this task they replace workflow
	// gates of the same name, as a whole (never field by field).
	GateDefs       []GateSpec        `json:"gate_defs,omitempty"`
	Pool           string            `json:"pool"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	// MaxAttempts counts the agent rounds the node may take in all, the
	// first included (0 in events written before it existed: the retry
	// policy's, see Attempts).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Retry is the retry policy in effect, resolved at submission so that
	// a replay decides the same (nil in events written before it existed:
	// DefaultRetryPolicy).
	Retry *RetryPolicy `json:"retry,omitempty"`
	// AllowEmpty accepts an agent round that changes nothing; without it,
	// such a round is a no_changes failure, retried with feedback.
	AllowEmpty bool `json:"allow_empty,omitempty"`
	// Type is TaskAgent ("": an agent does the task) or TaskHuman (no
	// agent: the task waits for a human to approve it; its prompt tells
	// the human what to do).
	Type string `json:"type,omitempty"`
	// Files are globs of the files the task works on (DAG-07): two nodes
	// whose files may overlap never run at the same time, and the later
	// builds on the earlier's accepted work. None: the task declares
	// nothing and is never held back for files.
	Files []string `json:"files,omitempty"`
	// Context, when set, is the context packed for the agent before it
	// runs (CTX-01), resolved from the strategy when the workflow was
	// parsed.
	Context *ContextSpec `json:"context,omitempty"`
	// Output names the output schema the agent's final message must end
	// with (generic, plan, implementation, review; "" = none): a round
	// without a valid block is retried with feedback (OUT-01, OUT-06).
	Output string `json:"output,omitempty"`
	// TaskRare holds the settings most tasks leave unset (nil: none set).
	*TaskRare
}

// TaskRare are the settings of a task most tasks leave unset (see
// TaskSpec). Tasks copied from one another may share one: never write
// through it, use SetRare.
type TaskRare struct {
	// Command is the agent's argv in events written before Agent existed;
	// new specs leave it empty and set Agent.
	Command []string `json:"command,omitempty"`
	// Adapter names the agent adapter of such an event's Command, if any.
	Adapter string `json:"adapter,omitempty"`
	// RetryFrom says what a retry starts from: RetryFromPrevious ("", the
	// previous attempt's work on top of the base) or RetryFromBase.
	RetryFrom string `json:"retry_from,omitempty"`
	// Approval, if set, makes the node wait for a human's approval once
	// its gates have passed (HITL-02).
	Approval *Approval `json:"approval,omitempty"`
	// Interface are globs of the interface files the task defines
	// (HIER-03): once it has succeeded, a patch of another node that
	// changes a file they match fails its round, unless that node's
	// MayChangeInterfaces allows it.
	Interface []string `json:"interface,omitempty"`
	// MayChangeInterfaces are globs of locked interface files the task
	// may change anyway ("**": any; written may_change_interfaces: true).
	MayChangeInterfaces []string `json:"may_change_interfaces,omitempty"`
	// Expand, on a task whose Output is plan, is the template of the
	// nodes the plan's components become (HIER-01, DAG-02).
	Expand *ExpandSpec `json:"expand,omitempty"`
	// Planner names the node whose plan added this one (ids of such nodes
	// are "<planner>--<component>"); "" for a task of the submitted workflow.
	Planner string `json:"planner,omitempty"`
	// MaxCostUSD is the node's budget (0: none): once its agent runs have
	// cost this much, it starts no other round; it escalates instead.
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// Role names the role whose settings the task took at parse time
	// (ROLE-01); nothing reads role files after parsing.
	Role string `json:"role,omitempty"`
	// FeedbackTemplate names the template a retry's feedback is rendered
	// with ("" for the default one).
	FeedbackTemplate string `json:"feedback_template,omitempty"`
}

// SetRare changes the task's rarely set settings with set, on a copy of
// them: tasks copied from this one keep theirs. The task points at none
// once all are unset.
func (t *TaskSpec) SetRare(set func(r *TaskRare)) {
	r := &TaskRare{}
	if t.TaskRare != nil {
		*r = *t.TaskRare
	}
	set(r)
	if reflect.ValueOf(*r).IsZero() {
		r = nil
	}
	t.TaskRare = r
}

// Command is TaskRare.Command (nil when unset).
func (t TaskSpec) Command() []string {
	if t.TaskRare == nil {
		return nil
	}
	return t.TaskRare.Command
}

// Adapter is TaskRare.Adapter ("" when unset).
func (t TaskSpec) Adapter() string {
	if t.TaskRare == nil {
		return ""
	}
	return t.TaskRare.Adapter
}

// RetryFrom is TaskRare.RetryFrom ("" when unset).
func (t TaskSpec) RetryFrom() string {
	if t.TaskRare == nil {
		return ""
	}
	return t.TaskRare.RetryFrom
}

// Approval is TaskRare.Approval (nil when unset).
func (t TaskSpec) Approval() *Approval {
	if t.TaskRare == nil {
		return nil
	}
	return t.TaskRare.Approval
}

// Interface is TaskRare.Interface (nil when unset).
func (t TaskSpec) Interface() []string {
	if t.TaskRare == nil {
		return nil
	}
	return t.TaskRare.Interface
}

// MayChangeInterfaces is TaskRare.MayChangeInterfaces (nil when unset).
func (t TaskSpec) MayChangeInterfaces() []string {
	if t.TaskRare == nil {
		return nil
	}
	return t.TaskRare.MayChangeInterfaces
}

// Expand is TaskRare.Expand (nil when unset).
func (t TaskSpec) Expand() *ExpandSpec {
	if t.TaskRare == nil {
		return nil
	}
	return t.TaskRare.Expand
}

// Planner is TaskRare.Planner ("" when unset).
func (t TaskSpec) Planner() string {
	if t.TaskRare == nil {
		return ""
	}
	return t.TaskRare.Planner
}

// MaxCostUSD is TaskRare.MaxCostUSD (0 when unset).
func (t TaskSpec) MaxCostUSD() float64 {
	if t.TaskRare == nil {
		return 0
	}
	return t.TaskRare.MaxCostUSD
}

// Role is TaskRare.Role ("" when unset).
func (t TaskSpec) Role() string {
	if t.TaskRare == nil {
		return ""
	}
	return t.TaskRare.Role
}

// FeedbackTemplate is TaskRare.FeedbackTemplate ("" when unset).
func (t TaskSpec) FeedbackTemplate() string {
	if t.TaskRare == nil {
		return ""
	}
	return t.TaskRare.FeedbackTemplate
}

// ExpandSpec is the template of the nodes a planner's plan adds: each
// component becomes a task with these settings, its prompt being Prompt
// (if any) followed by the component's description.
type ExpandSpec struct {
	Agent *AgentSpec `json:"agent,omitempty"`
	// Command and Adapter are the agent's argv in the form tasks of this
	// build's workflows still use (see TaskSpec.Command).
	Command        []string          `json:"command,omitempty"`
	Adapter        string            `json:"adapter,omitempty"`
	Prompt         string            `json:"prompt,omitempty"`
	Pool           string            `json:"pool,omitempty"`
	Gates          []string          `json:"gates,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	MaxAttempts    int               `json:"max_attempts,omitempty"`
	Output         string            `json:"output,omitempty"`
	AllowEmpty     bool              `json:"allow_empty,omitempty"`
	// Context is the context of every added node's agent (nil: none),
	// resolved when the workflow was parsed; a node whose context lists no
	// targets gets its component's files as targets ($TARGET).
	Context *ContextSpec `json:"context,omitempty"`
	// MaxCostUSD is each added node's budget (0: none).
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// MayChangeInterfaces are globs of locked interface files every added
	// node may change anyway ("**": any); see TaskSpec.MayChangeInterfaces.
	MayChangeInterfaces []string `json:"may_change_interfaces,omitempty"`
	// Role names the role the added nodes take (TaskSpec.Role); its
	// settings were resolved into this template when the workflow was
	// parsed, and RolePrompt is its prompt, rendered for each added node.
	Role       string      `json:"role,omitempty"`
	RolePrompt *RolePrompt `json:"role_prompt,omitempty"`
	// FeedbackTemplate is the added nodes' TaskSpec.FeedbackTemplate.
	FeedbackTemplate string `json:"feedback_template,omitempty"`
	// After names tasks of the workflow every added node waits for too,
	// besides the planner: sign-offs between the plan and its build. A
	// dependent of the planner that one of them waits for (itself
	// included) does not wait for the added nodes.
	After []string `json:"after,omitempty"`
}

// RolePrompt is a role's prompt as an expand template carries it, so that
// the nodes a plan adds get their role's prompt without the role's files:
// Additions come first, then Template (a Go text/template over the node's
// prompt, id, targets, role name and Config) rendered.
type RolePrompt struct {
	Template  string         `json:"template,omitempty"`
	Additions string         `json:"additions,omitempty"`
	Config    map[string]any `json:"config,omitempty"`
}

// Task types.
const (
	TaskAgent = ""
	TaskHuman = "human"
)

// Approval is an approval step: who may decide, and what happens when
// nobody does in time.
type Approval struct {
	// TimeoutSeconds bounds the wait (0: none); then OnTimeout happens.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// OnTimeout is OnTimeoutApprove, OnTimeoutReject or OnTimeoutEscalate
	// (the default).
	OnTimeout string `json:"on_timeout,omitempty"`
	// Approvers, if any, are the only ones who may decide.
	Approvers []string `json:"approvers,omitempty"`
	// AutoApprove, if set, is the approval policy (HITL-05): a patch
	// within its limits that touches no sensitive path is approved
	// without a human, and the approval says why.
	AutoApprove *AutoApprove `json:"auto_approve,omitempty"`
}

// AutoApprove is an approval policy: the limits within which a node's
// patch, its gates passed, needs no human.
type AutoApprove struct {
	// MaxFiles and MaxLines bound the files changed and the lines added
	// plus removed.
	MaxFiles int `json:"max_files"`
	MaxLines int `json:"max_lines"`
	// SensitivePaths are globs a patch may not touch, on top of the
	// built-in ones (DefaultSensitivePaths).
	SensitivePaths []string `json:"sensitive_paths,omitempty"`
}

// Defaults of an approval policy's limits.
const (
	DefaultAutoApproveMaxFiles = 2
	DefaultAutoApproveMaxLines = 100
)

// DefaultSensitivePaths are globs no auto-approved patch may touch,
// matched against the lower-cased path: credentials and keys, auth,
// cryptography and payment code, CI, deployment and container
// definitions, git's own settings and Supervisor's gate configuration.
var DefaultSensitivePaths = []string{
	"**/*.pem", "**/*.key", "**/*.p12", "**/*.pfx", "**/*.crt", "**/id_rsa*", "**/id_ed25519*",
	"**/.env", "**/.env.*", "**/*secret*", "**/*credential*", "**/*password*", "**/*token*",
	"**/*auth*", "**/*login*", "**/*session*", "**/*permission*", "**/*crypt*", "**/*cipher*",
	"**/*payment*", "**/*billing*", "**/*invoice*",
	".github/**", ".gitlab-ci.yml", ".circleci/**", "**/jenkinsfile", ".buildkite/**",
	"**/dockerfile", "**/dockerfile.*", "**/compose.yaml", "**/docker-compose*.yml", "**/*.tf",
	"**/deploy/**", "**/k8s/**", "**/helm/**", "**/*prod*",
	".gitattributes", ".gitmodules", "**/codeowners", ".supervisor/**",
}

// What an approval step's timeout does.
const (
	OnTimeoutApprove  = "approve"
	OnTimeoutReject   = "reject"
	OnTimeoutEscalate = "escalate"
)

// Attempts is the task's budget of agent rounds: MaxAttempts, else its
// retry policy's, else DefaultMaxAttempts.
func (t TaskSpec) Attempts() int {
	switch {
	case t.MaxAttempts > 0:
		return t.MaxAttempts
	case t.Retry != nil && t.Retry.MaxAttempts > 0:
		return t.Retry.MaxAttempts
	}
	return DefaultMaxAttempts
}

// RetryPolicy returns the task's retry policy, DefaultRetryPolicy if none.
func (t TaskSpec) RetryPolicy() RetryPolicy {
	if t.Retry != nil {
		return *t.Retry
	}
	p, _ := BuiltinRetryPolicy(DefaultRetryPolicyName)
	return p
}

// GateRequired reports whether the task requires the named gate: it is in
// Required or, for a spec without Required and Optional, in Gates. A gate
// the task only runs as a dependency of another is not required (OF-03).
func (t TaskSpec) GateRequired(name string) bool {
	if t.Required != nil || t.Optional != nil {
		return hasString(t.Required, name)
	}
	return hasString(t.Gates, name)
}

// GateDefinitions returns the gate definitions in effect for task t: the
// workflow's, with the task's own GateDefs replacing those of the same
// name and added after them.
func (w *WorkflowSpec) GateDefinitions(t TaskSpec) []GateSpec {
	if len(t.GateDefs) == 0 {
		return w.Gates
	}
	own := make(map[string]bool, len(t.GateDefs))
	for _, g := range t.GateDefs {
		own[g.Name] = true
	}
	out := make([]GateSpec, 0, len(w.Gates)+len(t.GateDefs))
	for _, g := range w.Gates {
		if !own[g.Name] {
			out = append(out, g)
		}
	}
	return append(out, t.GateDefs...)
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// GateSpec is one gate definition in wire form (shared/gates.Gate
// documents each field). Fields added after the first release are
// omitempty, and their accessors give the documented defaults when an
// older event leaves them out.
type GateSpec struct {
	Name string `json:"name"`
	// Type is "" for a command gate, GateTypeReview for a review gate
	// (Review set, Command empty).
	Type           string            `json:"type,omitempty"`
	Review         *ReviewSpec       `json:"review,omitempty"`
	Description    string            `json:"description,omitempty"`
	Command        []string          `json:"command"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	DependsOn      []string          `json:"depends_on,omitempty"`
	Pool           string            `json:"pool"`
	Env            map[string]string `json:"env,omitempty"`
	WorkingDir     string            `json:"working_dir,omitempty"`
	// Severity is "error", "warning" or "info"; "" means error.
	Severity string `json:"severity,omitempty"`
	// Cache enables caching of passing results; nil means true.
	Cache                     *bool    `json:"cache,omitempty"`
	CacheInputs               []string `json:"cache_inputs,omitempty"`
	ForceHashLargeCacheInputs bool     `json:"force_hash_large_cache_inputs,omitempty"`
	// SkipOnDependencyFailure skips the gate when a dependency failed in a
	// blocking way; nil means true.
	SkipOnDependencyFailure *bool    `json:"skip_on_dependency_failure,omitempty"`
	AllowedWrites           []string `json:"allowed_writes,omitempty"`
	AllowShell              bool     `json:"allow_shell,omitempty"`
	// MaxRetries caps the rounds the gate may fail; nil means 3.
	MaxRetries *int `json:"max_retries,omitempty"`
	// PollIntervalSeconds and MaxPendingSeconds govern pending gates;
	// 0 means 30 s and 24 h.
	PollIntervalSeconds int            `json:"poll_interval_seconds,omitempty"`
	MaxPendingSeconds   int            `json:"max_pending_seconds,omitempty"`
	Image               string         `json:"image,omitempty"`
	Resources           *GateResources `json:"resources,omitempty"`
	// CacheDirs are directories the gate's tools keep caches in (npm,
	// pip, cargo), each relative to the command's HOME or absolute in the
	// container (CheckCacheDir): the sandbox gives each a warm, trusted
	// content that the gate's writes never reach past its run.
	CacheDirs []string `json:"cache_dirs,omitempty"`
	// Source is where the gate was defined, as file:line.
	Source string `json:"source,omitempty"`
}

// GateResources are a gate's sandbox limits; zero fields mean the runner's
// defaults.
type GateResources struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	PIDs        int64   `json:"pids,omitempty"`
}

// UsesCache reports whether passing results may be cached (default true).
func (g GateSpec) UsesCache() bool { return g.Cache == nil || *g.Cache }

// SkipsOnDependencyFailure reports whether a blocking failure of a
// dependency skips the gate (default true).
func (g GateSpec) SkipsOnDependencyFailure() bool {
	return g.SkipOnDependencyFailure == nil || *g.SkipOnDependencyFailure
}

// Retries returns max_retries (default 3).
func (g GateSpec) Retries() int {
	if g.MaxRetries == nil {
		return 3
	}
	return *g.MaxRetries
}

// PollInterval returns how often a pending gate is polled (default 30 s).
func (g GateSpec) PollInterval() time.Duration {
	if g.PollIntervalSeconds <= 0 {
		return 30 * time.Second
	}
	return time.Duration(g.PollIntervalSeconds) * time.Second
}

// MaxPending returns how long a gate may stay pending (default 24 h).
func (g GateSpec) MaxPending() time.Duration {
	if g.MaxPendingSeconds <= 0 {
		return 24 * time.Hour
	}
	return time.Duration(g.MaxPendingSeconds) * time.Second
}

// NodeStatus is the state of one DAG node: pending → ready → running →
// gating → (retrying → ready … | escalated) → one of the terminal statuses.
type NodeStatus string

// Node statuses.
const (
	NodePending NodeStatus = "pending"
	NodeReady   NodeStatus = "ready"
	NodeRunning NodeStatus = "running"
	NodeGating  NodeStatus = "gating"
	// NodeRetrying waits for its retry delay before its next attempt,
	// which gets the failed round's feedback.
	NodeRetrying NodeStatus = "retrying"
	// NodeEscalated waits for a human: approve, reject or retry. It is not
	// terminal; its dependents wait with it.
	NodeEscalated NodeStatus = "escalated"
	// NodeAwaitingApproval waits for a human's approval: an approval step
	// after its gates passed, or a human task.
	NodeAwaitingApproval NodeStatus = "awaiting_approval"
	// NodeIntegrating waits in the workflow's integration queue: its own
	// gates passed, and its integration gates run on top of the branch
	// and the nodes queued ahead of it before it lands.
	NodeIntegrating NodeStatus = "integrating"
	NodeSucceeded   NodeStatus = "succeeded"
	NodeFailed      NodeStatus = "failed"
	NodeSkipped     NodeStatus = "skipped"
	NodeCancelled   NodeStatus = "cancelled"
)

// Terminal reports whether a node in this status will not change again.
func (s NodeStatus) Terminal() bool {
	switch s {
	case NodeSucceeded, NodeFailed, NodeSkipped, NodeCancelled:
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
