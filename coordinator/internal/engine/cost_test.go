package engine

import (
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/pricing"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// TestEstimateCost: a report whose CLI reported tokens but no cost gets
// the price table's estimate, at the task's model when the run names
// none, before it becomes an event; the report's own Run is not changed
// in place, and a reported cost is left alone.
func TestEstimateCost(t *testing.T) {
	prices := pricing.Table{"gpt-5-codex": {Input: 1.25, CachedInput: 0.125, Output: 10}}
	w := &statemachine.Workflow{Nodes: map[string]*statemachine.Node{
		"a": {ID: "a", Task: &protocol.TaskSpec{Agent: &protocol.AgentSpec{Adapter: "codex", Model: "gpt-5-codex"}}},
	}}
	orig := &protocol.AgentRun{Adapter: "codex", Usage: protocol.TokenUsage{Input: 2_000_000, Output: 100_000}}
	r := &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{NodeID: "a", Run: orig}}
	estimateCost(w, r, prices)
	if got := r.Agent.Run; !got.CostKnown || !got.CostEstimated || got.CostUSD != 2*1.25+1 {
		t.Errorf("run %+v, want an estimated $3.50", got)
	}
	if orig.CostKnown {
		t.Error("the report's run was changed in place")
	}
	known := &protocol.AgentRun{Adapter: "claude-code", Model: "gpt-5-codex", CostUSD: 0.02, CostKnown: true,
		Usage: protocol.TokenUsage{Input: 1000}}
	r = &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{NodeID: "a", Run: known}}
	estimateCost(w, r, prices)
	if r.Agent.Run.CostUSD != 0.02 || r.Agent.Run.CostEstimated {
		t.Errorf("a reported cost was replaced: %+v", r.Agent.Run)
	}
}

// TestEstimateReviewCost: a review gate's reviewers whose CLIs reported
// tokens but no cost are priced, each at the model its run names or else
// the one the gate's reviewer asked for; a reported cost is kept, a model
// the table lacks stays unknown, and the gate's sum is taken again; the
// report's result is not changed in place.
func TestEstimateReviewCost(t *testing.T) {
	prices := pricing.Table{"gpt-5": {Input: 1.25, Output: 10}, "gemini-2.5-pro": {Input: 2, Output: 12}}
	st := statemachine.New()
	if err := st.Apply(eventlog.Event{WorkflowID: "wf-cost", Time: time.Now(), Body: eventlog.WorkflowSubmitted{
		Workflow: &protocol.WorkflowSpec{Name: "cost",
			Gates: []protocol.GateSpec{{Name: "review", Type: protocol.GateTypeReview,
				Review: &protocol.ReviewSpec{Approvals: 1, Reviewers: []protocol.AgentSpec{
					{Adapter: "claude-code"}, {Adapter: "codex", Model: "gpt-5"}, {Adapter: "gemini"}, {Adapter: "command"}}}}},
			Tasks: []protocol.TaskSpec{{ID: "a", Prompt: "p", Gates: []string{"review"}}}}}}); err != nil {
		t.Fatal(err)
	}
	w, _ := st.Workflow("wf-cost")
	mtok := protocol.TokenUsage{Input: 1_000_000, Output: 100_000}
	orig := &protocol.ReviewResult{Required: 1, Reviewers: []protocol.ReviewVerdict{
		{Reviewer: 1, Run: &protocol.AgentRun{Adapter: "claude-code", Usage: mtok, CostUSD: 0.5, CostKnown: true}},
		{Reviewer: 2, Run: &protocol.AgentRun{Adapter: "codex", Usage: mtok}},
		{Reviewer: 3, Run: &protocol.AgentRun{Adapter: "gemini", Model: "gemini-2.5-pro", Usage: mtok}},
		{Reviewer: 4, Run: &protocol.AgentRun{Adapter: "command", Usage: mtok}},
	}, CostUSD: 0.5}
	r := &protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{NodeID: "a", Gate: "review", Review: orig}}
	estimateCost(w, r, prices)
	got := r.Gate.Review.Reviewers
	want := []struct {
		cost             float64
		known, estimated bool
	}{{0.5, true, false}, {1.25 + 1, true, true}, {2 + 1.2, true, true}, {0, false, false}}
	for i, x := range want {
		if run := got[i].Run; run.CostUSD != x.cost || run.CostKnown != x.known || run.CostEstimated != x.estimated {
			t.Errorf("reviewer %d: run %+v, want cost %v known %v estimated %v", i+1, run, x.cost, x.known, x.estimated)
		}
	}
	if s := r.Gate.Review; s.CostUSD != 0.5+2.25+3.2 || s.CostKnown {
		t.Errorf("gate sum $%v known %v, want $5.95 with one run unknown", s.CostUSD, s.CostKnown)
	}
	if orig.Reviewers[1].Run.CostKnown || orig.CostUSD != 0.5 {
		t.Error("the report's review was changed in place")
	}
}
