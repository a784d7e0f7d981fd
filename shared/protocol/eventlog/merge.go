package eventlog

// Merge event types: a workflow's branch merged into a target branch of
// the submitting repository.
const (
	TypeWorkflowMergeRequested Type = "workflow.merge_requested"
	TypeWorkflowMerged         Type = "workflow.merged"
	TypeWorkflowMergeFailed    Type = "workflow.merge_failed"
)

// WorkflowMergeRequested records the decision to merge the workflow's
// branch at Commit into Into: asked by By (coordinator merge), or by the
// workflow's auto_merge when it succeeded (Auto). Request numbers the
// workflow's merge requests from 1. The merge is carried out after the
// event, and again after a restart until its outcome is recorded.
type WorkflowMergeRequested struct {
	Request int    `json:"request"`
	Into    string `json:"into"`
	Commit  string `json:"commit"`
	By      string `json:"by,omitempty"`
	Auto    bool   `json:"auto,omitempty"`
}

// WorkflowMerged records that request Request was merged: Into is at
// Commit, a fast-forward to the workflow's tip, a new merge commit, or
// unchanged when it already held the work (UpToDate).
type WorkflowMerged struct {
	Request     int    `json:"request"`
	Into        string `json:"into"`
	Commit      string `json:"commit"`
	FastForward bool   `json:"fast_forward,omitempty"`
	UpToDate    bool   `json:"up_to_date,omitempty"`
}

// WorkflowMergeFailed records that request Request could not be merged,
// and why; Conflicts lists the conflicting paths of a merge conflict.
// Neither branch was changed.
type WorkflowMergeFailed struct {
	Request   int      `json:"request"`
	Into      string   `json:"into"`
	Reason    string   `json:"reason"`
	Conflicts []string `json:"conflicts,omitempty"`
}

func (WorkflowMergeRequested) Type() Type { return TypeWorkflowMergeRequested }
func (WorkflowMerged) Type() Type         { return TypeWorkflowMerged }
func (WorkflowMergeFailed) Type() Type    { return TypeWorkflowMergeFailed }

func (WorkflowMergeRequested) eventBody() {}
func (WorkflowMerged) eventBody()         {}
func (WorkflowMergeFailed) eventBody()    {}

func init() {
	bodies[TypeWorkflowMergeRequested] = func() Body { return &WorkflowMergeRequested{} }
	bodies[TypeWorkflowMerged] = func() Body { return &WorkflowMerged{} }
	bodies[TypeWorkflowMergeFailed] = func() Body { return &WorkflowMergeFailed{} }
}
