package protocol

// Review gates (EXE-009, OUT-05, OUT-07): a gate whose verdict comes from
// agent reviewers, not from a command's exit code. Each reviewer is a
// fresh run of an agent CLI in the gate's sandbox on the node's work; its
// final message must end with a review block (shared/agentoutput's review
// schema). The gate passes when at least Approvals reviewers approve.

// GateTypeReview is GateSpec.Type of a review gate ("" is a command gate).
const GateTypeReview = "review"

// ReviewSpec is a review gate's definition: who reviews, what they are
// told, and how many must approve.
type ReviewSpec struct {
	// Reviewers are the agents, one run each: N reviewers of one spec are
	// the spec N times, so different models may review side by side.
	Reviewers []AgentSpec `json:"reviewers"`
	// Approvals is how many reviewers must approve (1 ≤ Approvals ≤
	// len(Reviewers)).
	Approvals int `json:"approvals"`
	// Prompt is the review's instructions, put first in each reviewer's
	// prompt, before the task and the change.
	Prompt string `json:"prompt,omitempty"`
	// MaxDiffBytes caps the change shown to a reviewer (0: the runner's
	// default); a longer diff is cut and says so.
	MaxDiffBytes int `json:"max_diff_bytes,omitempty"`
	// Context, when set, is the context strategy (resolved where the
	// workflow was parsed, e.g. reviewer_diff) that packs what a reviewer
	// sees instead of the task and the diff alone: its plan is the node's
	// task, its diff and changed files the node's own work (CTX-06).
	Context *ContextSpec `json:"context,omitempty"`
}

// IsReview reports whether the gate is a review gate.
func (g GateSpec) IsReview() bool { return g.Type == GateTypeReview }

// ReviewIssue is one problem a reviewer found (agentoutput's ReviewIssue
// on the wire).
type ReviewIssue struct {
	Severity    string `json:"severity"`
	File        string `json:"file,omitempty"`
	Line        int    `json:"line,omitempty"`
	Description string `json:"description"`
	Suggestion  string `json:"suggestion,omitempty"`
}

// ReviewVerdict is what one reviewer of a review gate said.
type ReviewVerdict struct {
	// Reviewer numbers the reviewer from 1, in ReviewSpec.Reviewers order.
	Reviewer int `json:"reviewer"`
	// Adapter and Model name the agent that reviewed.
	Adapter string `json:"adapter"`
	Model   string `json:"model,omitempty"`
	// Verdict is the block's status: APPROVED, CHANGES_REQUESTED or
	// REJECTED; "" when the reviewer gave no valid review block, which
	// counts as a rejection (OUT-07).
	Verdict string `json:"verdict,omitempty"`
	// Approved says whether the reviewer counts as an approval.
	Approved bool `json:"approved"`
	// Issues, Suggestions and SecurityConcerns are the block's.
	Issues           []ReviewIssue `json:"issues,omitempty"`
	Suggestions      []string      `json:"suggestions,omitempty"`
	SecurityConcerns []string      `json:"security_concerns,omitempty"`
	// Problem says why the reviewer gave no valid block: its CLI failed,
	// the message had no block, or the block broke the schema.
	Problem string `json:"problem,omitempty"`
	// Run is what the reviewer's CLI reported (usage, cost, session …);
	// its Text is left out: the verdict and issues are what count.
	Run *AgentRun `json:"run,omitempty"`
}

// ReviewResult is a review gate's outcome, on GateResult.Review.
type ReviewResult struct {
	// Approvals counts the reviewers that approved; Required is the
	// quorum's approvals.
	Approvals int `json:"approvals"`
	Required  int `json:"required"`
	// Reviewers holds each reviewer's verdict, in order.
	Reviewers []ReviewVerdict `json:"reviewers"`
	// Usage and CostUSD sum the reviewers' runs; CostKnown is false when
	// some run reported no cost.
	Usage     TokenUsage `json:"usage"`
	CostUSD   float64    `json:"cost_usd,omitempty"`
	CostKnown bool       `json:"cost_known,omitempty"`
}
