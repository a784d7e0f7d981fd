package api

import (
	"context"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// MergeRequest asks for a succeeded workflow's branch to be merged into
// Into ("" for the workflow's merge_into, or else the branch it was
// submitted from) of the submitting repository; By names who asks.
type MergeRequest struct {
	WorkflowID string `json:"workflow_id"`
	Into       string `json:"into,omitempty"`
	By         string `json:"by"`
}

// MergeSummary is a workflow's latest merge request and its outcome.
type MergeSummary struct {
	Request int `json:"request"`
	// Status is "requested" (not done yet), "merged" or "failed".
	Status string `json:"status"`
	Into   string `json:"into"`
	// Commit is the workflow's tip being merged; Result the target's tip
	// after the merge, reached by a fast-forward, a merge commit, or
	// nothing (up to date).
	Commit      string     `json:"commit"`
	Result      string     `json:"result,omitempty"`
	FastForward bool       `json:"fast_forward,omitempty"`
	UpToDate    bool       `json:"up_to_date,omitempty"`
	By          string     `json:"by,omitempty"`
	Auto        bool       `json:"auto,omitempty"`
	RequestedAt time.Time  `json:"requested_at"`
	EndedAt     *time.Time `json:"ended_at,omitempty"`
	// Reason is why it failed; Conflicts the conflicting paths.
	Reason    string   `json:"reason,omitempty"`
	Conflicts []string `json:"conflicts,omitempty"`
}

// Merge merges a workflow's branch and returns the workflow afterwards:
// its Merge says how the merge went, or that it is still to be done
// (another merge of the target held the lock too long; the coordinator
// tries again).
func (c *Client) Merge(ctx context.Context, req MergeRequest) (WorkflowSummary, error) {
	return call[WorkflowSummary](ctx, c, protocol.APIMerge, req)
}
