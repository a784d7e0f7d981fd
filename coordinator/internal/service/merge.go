package service

import (
	"context"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// merge merges a succeeded workflow's branch into a branch of the
// submitting repository and replies with the workflow afterwards: the
// merge is carried out in the workflow's queue before the reply, unless
// it has to wait for the merge lock longer than the request lasts.
func (s *Service) merge(ctx context.Context, req api.MergeRequest) (api.WorkflowSummary, error) {
	by := strings.TrimSpace(req.By)
	if by == "" {
		return api.WorkflowSummary{}, api.BadRequest("merging names who does it (by)")
	}
	if req.Into != "" {
		if err := protocol.CheckBranchName(req.Into); err != nil {
			return api.WorkflowSummary{}, api.BadRequest("into: %v", err)
		}
	}
	err := s.wfs.Command(ctx, req.WorkflowID, func(w *statemachine.Workflow, now time.Time) ([]statemachine.Effect, error) {
		return statemachine.RequestMerge(w, req.Into, by, now)
	})
	if err != nil {
		return api.WorkflowSummary{}, refusal(err)
	}
	return s.summary(ctx, req.WorkflowID)
}

// mergeSummary renders a workflow's latest merge for the API.
func mergeSummary(m *statemachine.MergeState) *api.MergeSummary {
	if m == nil {
		return nil
	}
	return &api.MergeSummary{Request: m.Request, Status: string(m.Status), Into: m.Into, Commit: m.Commit,
		Result: m.Result, FastForward: m.FastForward, UpToDate: m.UpToDate, By: m.By, Auto: m.Auto,
		RequestedAt: m.RequestedAt, EndedAt: timePtr(m.EndedAt), Reason: m.Reason, Conflicts: m.Conflicts}
}
