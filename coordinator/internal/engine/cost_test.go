package engine

import (
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/pricing"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// TestEstimateCost: a report whose CLI reported tokens but no cost gets
// the price table's estimate, at the task's model when the run names
// none, before it becomes an event; the report's own Run is not changed
// in place, and a reported cost is left alone.
func TestEstimateCost(t *testing.T) {
	prices := pricing.Table{"gpt-5-codex": {Input: 1.25, CachedInput: 0.125, Output: 10}}
	w := &statemachine.Workflow{Nodes: map[string]*statemachine.Node{
		"a": {ID: "a", Task: protocol.TaskSpec{Agent: &protocol.AgentSpec{Adapter: "codex", Model: "gpt-5-codex"}}},
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
