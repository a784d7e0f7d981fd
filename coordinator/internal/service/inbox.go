package service

// The human inbox: the nodes that wait for a human, one node in full, and
// a human's decisions on an escalated node (approve, reject, retry).

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/patchstat"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// inbox lists every node that waits for a human, oldest first.
func (s *Service) inbox(ctx context.Context, _ api.IDRequest) (api.InboxResponse, error) {
	out := api.InboxResponse{Items: []api.InboxItem{}}
	s.wfs.Read(func(st *statemachine.State) {
		for _, w := range st.Workflows() {
			for _, id := range w.Order {
				n := w.Nodes[id]
				if (n.Status != protocol.NodeEscalated && n.Status != protocol.NodeAwaitingApproval) || n.Approved() {
					continue
				}
				item := api.InboxItem{WorkflowID: w.ID, WorkflowName: w.Spec.Name, NodeID: n.ID, Status: n.Status,
					Reason: n.Reason, Attempt: n.Attempt, Budget: n.Budget, Patch: n.Patch,
					TraceID: telemetry.TraceID(w.TraceParent)}
				if n.Status == protocol.NodeAwaitingApproval {
					item.Since, item.Deadline = n.AwaitingSince(), timePtr(n.ApprovalDeadline())
					if a := n.Task.Approval(); a != nil {
						item.Approvers = a.Approvers
					}
				} else if len(n.History()) > 0 {
					item.Since = n.History()[len(n.History())-1].At
				}
				out.Items = append(out.Items, item)
			}
		}
	})
	sort.SliceStable(out.Items, func(i, j int) bool { return out.Items[i].Since.Before(out.Items[j].Since) })
	for i := range out.Items {
		if p := out.Items[i].Patch; p != nil {
			if data, err := s.bus.PatchBytes(ctx, *p); err == nil {
				out.Items[i].DiffStat = diffStat(data)
			}
		}
	}
	return out, nil
}

// show returns one node in full: its attempts, the feedback its current or
// next attempt gets, and the candidate diff.
func (s *Service) show(ctx context.Context, req api.IDRequest) (api.NodeDetail, error) {
	var out api.NodeDetail
	err := s.readWorkflow(ctx, req.WorkflowID, func(w *statemachine.Workflow) error {
		n := w.Nodes[req.NodeID]
		if n == nil {
			return api.NotFound("workflow %s has no node %q", w.ID, req.NodeID)
		}
		sum := Summary(w, true)
		for _, ns := range sum.Nodes {
			if ns.ID == n.ID {
				out.Node = ns
			}
		}
		out.WorkflowID, out.Budget, out.Feedback = w.ID, n.Budget, n.Feedback()
		if n.Task.Type == protocol.TaskHuman {
			out.Instructions = n.Task.Prompt
		}
		for _, r := range n.History() {
			out.Attempts = append(out.Attempts, attemptDetail(r))
		}
		if n.Attempt > 0 && (len(n.History()) == 0 || n.History()[len(n.History())-1].Attempt != n.Attempt) {
			cur := api.AttemptDetail{Attempt: n.Attempt, Patch: n.Patch, Gates: out.Node.Gates, Output: n.Output}
			withStart(&cur, n.Given())
			if n.Agent != nil {
				cur.AgentStatus, cur.AgentExit = n.Agent.Status, n.Agent.ExitCode
			}
			out.Attempts = append(out.Attempts, cur)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	var patch *protocol.PatchRef
	for i := len(out.Attempts) - 1; i >= 0 && patch == nil; i-- {
		patch = out.Attempts[i].Patch
	}
	if patch != nil {
		if data, err := s.bus.PatchBytes(ctx, *patch); err == nil {
			out.DiffStat = diffStat(data)
			if len(data) > api.DiffMaxBytes {
				data, out.DiffTruncated = data[:api.DiffMaxBytes], true
			}
			out.Diff = string(data)
		}
	}
	return out, nil
}

func attemptDetail(r statemachine.AttemptRecord) api.AttemptDetail {
	d := api.AttemptDetail{Attempt: r.Attempt, Patch: r.Patch, Outcome: strings.TrimPrefix(string(r.Outcome), "node."),
		Reason: r.Reason, At: timePtr(r.At), Feedback: r.Feedback, Output: r.Output}
	withStart(&d, r.Given)
	if r.Agent != nil {
		d.AgentStatus, d.AgentExit = r.Agent.Status, r.Agent.ExitCode
	}
	for i := range r.Gates {
		d.Gates = append(d.Gates, gateSummary(r.Gates[i].Gate, r.Attempt, &r.Gates[i]))
	}
	return d
}

// withStart fills in what the attempt d was started with.
func withStart(d *api.AttemptDetail, s statemachine.AttemptStart) {
	d.ReceivedFeedback, d.RetriedBy, d.RetryNote = s.Feedback, s.RetriedBy, s.Note
}

// decide runs a human's decision on an escalated node and returns the
// workflow afterwards.
func (s *Service) decide(ctx context.Context, req api.DecisionRequest,
	cmd func(w *statemachine.Workflow, by string, now time.Time) ([]statemachine.Effect, error)) (api.WorkflowSummary, error) {
	if req.NodeID == "" {
		return api.WorkflowSummary{}, api.BadRequest("a decision names a node")
	}
	by := strings.TrimSpace(req.By)
	if by == "" {
		return api.WorkflowSummary{}, api.BadRequest("a decision names who makes it (by)")
	}
	var tp string
	err := s.wfs.Command(ctx, req.WorkflowID, func(w *statemachine.Workflow, now time.Time) ([]statemachine.Effect, error) {
		tp = w.TraceParent
		return cmd(w, by, now)
	})
	if err != nil {
		return api.WorkflowSummary{}, refusal(err)
	}
	// Logged in the workflow's trace (TR-05), not the request's.
	s.log.InfoContext(telemetry.WithTraceParent(ctx, tp), "human decision", "workflow", req.WorkflowID, "node", req.NodeID, "by", by)
	return s.summary(ctx, req.WorkflowID)
}

func (s *Service) approve(ctx context.Context, req api.DecisionRequest) (api.WorkflowSummary, error) {
	return s.decide(ctx, req, func(w *statemachine.Workflow, by string, now time.Time) ([]statemachine.Effect, error) {
		if req.AcceptConfig {
			return statemachine.ApproveConfig(w, req.NodeID, by, req.Note, now)
		}
		return statemachine.Approve(w, req.NodeID, by, req.Note, now)
	})
}

func (s *Service) reject(ctx context.Context, req api.DecisionRequest) (api.WorkflowSummary, error) {
	return s.decide(ctx, req, func(w *statemachine.Workflow, by string, now time.Time) ([]statemachine.Effect, error) {
		return statemachine.Reject(w, req.NodeID, by, req.Reason, now)
	})
}

func (s *Service) retry(ctx context.Context, req api.DecisionRequest) (api.WorkflowSummary, error) {
	if req.Attempts < 0 {
		return api.WorkflowSummary{}, api.BadRequest("attempts must be positive")
	}
	return s.decide(ctx, req, func(w *statemachine.Workflow, by string, now time.Time) ([]statemachine.Effect, error) {
		return statemachine.Retry(w, req.NodeID, by, req.Note, req.Attempts, now)
	})
}

// diffStat counts the lines a git patch adds and removes, per file.
func diffStat(patch []byte) *api.DiffStat {
	st := patchstat.Parse(patch)
	out := &api.DiffStat{Files: make([]api.FileStat, 0, len(st.Files)), Insertions: st.Insertions, Deletions: st.Deletions}
	for _, f := range st.Files {
		out.Files = append(out.Files, api.FileStat{Path: f.Path, Insertions: f.Insertions, Deletions: f.Deletions, Binary: f.Binary})
	}
	return out
}
