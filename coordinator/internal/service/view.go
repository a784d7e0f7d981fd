package service

import (
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Summary renders a workflow for the API; withNodes adds per-node detail.
func Summary(w *statemachine.Workflow, withNodes bool) api.WorkflowSummary {
	s := api.WorkflowSummary{
		ID: w.ID, Name: w.Spec.Name, Status: w.Status, Source: w.Source, RepoPath: w.RepoPath,
		BaseCommit: w.Repo.BaseCommit, Branch: w.Branch, Head: w.Head, Reason: w.Reason,
		SubmittedAt: w.SubmittedAt, FinishedAt: timePtr(w.FinishedAt), Counts: map[string]int{},
		BaseBranch: w.BaseBranch, AutoMerge: w.Spec.AutoMerge, MergeInto: w.Spec.MergeInto, Merge: mergeSummary(w.Merge),
		TraceID: telemetry.TraceID(w.TraceParent),
	}
	if w.Status == protocol.WorkflowSucceeded {
		s.ResultBundle = statemachine.ResultBundleName(w.ID)
	}
	if f := w.Fleet(); f != nil && f.Paused && !w.Status.Terminal() {
		s.FleetPaused = f.PauseReason
	}
	s.Spend, s.MaxCostUSD = spend(w.Spend()), w.Spec.MaxCostUSD
	for _, id := range w.Order {
		n := w.Nodes[id]
		s.Counts[string(n.Status)]++
		if !withNodes {
			continue
		}
		ns := api.NodeSummary{
			ID: id, Status: n.Status, Attempt: n.Attempt, Host: n.Host, DependsOn: n.Task.DependsOn,
			Commit: n.Commit(), Reason: n.Reason, StartedAt: timePtr(n.StartedAt), EndedAt: timePtr(n.EndedAt()),
			MaxAttempts: n.Budget, Output: n.Output, ReviewRejected: n.ReviewRejected(), Planner: n.Task.Planner(),
			Expanded: max(n.Expanded(), 0),
		}
		if n.Status == protocol.NodeRetrying {
			ns.RetryAt = timePtr(n.RetryAt())
		}
		ns.WaitingForFiles = w.WaitingForFiles(id)
		if n.Status == protocol.NodeAwaitingApproval && !n.Approved() {
			ns.ApprovalDeadline = timePtr(n.ApprovalDeadline())
		}
		if n.Status == protocol.NodeAwaitingApproval || n.Status == protocol.NodeEscalated {
			ns.Approved = n.Approved()
		}
		if n.Status == protocol.NodeReady || n.Status == protocol.NodeRunning {
			ns.Waiting = breakerWait(n.Waiting())
		}
		if n.Agent != nil {
			ns.Sandbox = n.Agent.Sandbox
			ns.Context = n.Agent.Context
		}
		if n.LastRun() != nil {
			r := *n.LastRun()
			r.Text = ""
			ns.LastRun = &r
		}
		ns.Spend, ns.MaxCostUSD = spend(n.Spend()), n.Task.MaxCostUSD()
		for _, g := range n.GateOrder() {
			var gs api.GateSummary
			if gr := n.Gates[g]; gr != nil {
				gs = gateSummary(g, n.Attempt, gr.Result)
				gs.Status, gs.Host, gs.Round = gr.Status, gr.Host, gr.Round
				if gr.Awaiting {
					gs.Waiting = breakerWait(gr.Waiting())
				}
			} else {
				gs = gateSummary(g, n.Attempt, nil)
			}
			ns.Gates = append(ns.Gates, gs)
		}
		ns.Integration = queueEntry(w, n)
		s.Nodes = append(s.Nodes, ns)
	}
	return s
}

// spend is s for the API (nil when no run reported), with its reviewers'
// part when any reviewer reported.
// RetiredSummary is a retired workflow as the workflow list shows it:
// what Summary(w, false) showed of it before it was retired.
func RetiredSummary(r *statemachine.Retired) api.WorkflowSummary {
	s := api.WorkflowSummary{
		ID: r.ID, Name: r.Name, Status: r.Status, Source: r.Source, RepoPath: r.RepoPath,
		BaseCommit: r.BaseCommit, Branch: r.Branch, Head: r.Head, Reason: r.Reason,
		SubmittedAt: r.SubmittedAt, FinishedAt: timePtr(r.FinishedAt), Counts: map[string]int{},
		BaseBranch: r.BaseBranch, AutoMerge: r.AutoMerge, MergeInto: r.MergeInto, Merge: mergeSummary(r.Merge),
		TraceID: telemetry.TraceID(r.TraceParent), MaxCostUSD: r.MaxCostUSD,
	}
	if r.Status == protocol.WorkflowSucceeded {
		s.ResultBundle = statemachine.ResultBundleName(r.ID)
	}
	s.Spend = spend(r.Spend)
	for st, n := range r.Counts {
		s.Counts[string(st)] = n
	}
	return s
}

func spend(s statemachine.Spend) *api.Spend {
	if s.Runs == 0 {
		return nil
	}
	a := spendPart(s.SpendPart)
	if s.Review.Runs > 0 {
		a.ReviewSpend = spendPart(s.Review)
	}
	return a
}

// spendPart is one part of a spend for the API.
func spendPart(s statemachine.SpendPart) *api.Spend {
	return &api.Spend{Runs: s.Runs, Usage: s.Usage, CostUSD: s.CostUSD, CostEstimated: s.CostEstimated,
		CostUnknownRuns: s.CostUnknown}
}

// breakerWait is a job's wait on a circuit breaker for the API.
func breakerWait(w *statemachine.BreakerWait) *api.BreakerWait {
	if w == nil {
		return nil
	}
	return &api.BreakerWait{Scope: w.Scope, Until: w.Until, Host: w.Host}
}

// gateSummary is gate name of an attempt with its result r, if any.
func gateSummary(name string, attempt int, r *protocol.GateResult) api.GateSummary {
	gs := api.GateSummary{Name: name, Attempt: attempt}
	if r == nil {
		return gs
	}
	gs.Status, gs.Host, gs.Round = r.Status, r.Host, r.Round
	gs.ExitCode, gs.Log, gs.DurationMillis = r.ExitCode, r.Log, r.DurationMillis
	gs.Cached, gs.CacheDisabled, gs.Output = r.Cached, r.CacheDisabled, r.Output
	gs.IntegrityViolation, gs.Violations, gs.Error = r.IntegrityViolation, r.Violations, r.Error
	gs.Sandbox, gs.Review = r.Sandbox, r.Review
	if gs.Output == "" {
		gs.Output = strings.TrimSpace(r.Stdout + "\n" + r.Stderr)
	}
	return gs
}

// nodeGateInfo describes one gate of a node's plan.
func nodeGateInfo(n *statemachine.Node, name string, layer int) api.GateInfo {
	spec := n.GateSpecs()[name]
	src := api.SourceWorkflow
	for _, d := range n.Task.GateDefs {
		if d.Name == name {
			src = api.SourceTask
		}
	}
	l, req := layer, n.Task.GateRequired(name)
	info := api.GateInfo{Name: name, Source: src, DefinedAt: spec.Source, Definition: spec,
		Layer: &l, Required: &req, OnFail: string(n.OnFail()[name])}
	if g := n.Gates[name]; g != nil {
		info.Status = g.Status
	}
	return info
}

// nodeGateList is a node's gates in dispatch order.
func nodeGateList(w *statemachine.Workflow, n *statemachine.Node) api.GateListResponse {
	out := api.GateListResponse{WorkflowID: w.ID, NodeID: n.ID, NodeStatus: n.Status, Gates: []api.GateInfo{}}
	layers, _ := workflow.GateLayers(w.Spec.GateDefinitions(*n.Task), n.Task.Gates)
	for i, layer := range layers {
		for _, name := range layer {
			out.Gates = append(out.Gates, nodeGateInfo(n, name, i))
		}
	}
	return out
}
