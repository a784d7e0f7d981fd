package statemachine

import (
	"fmt"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Spend is what agent runs used: tokens and cost, summed over runs.
type Spend struct {
	// Runs counts the agent runs that reported (AgentResult.Run).
	Runs  int
	Usage protocol.TokenUsage
	// CostUSD sums the runs whose cost is known (reported by the CLI or
	// estimated from the price table); CostEstimated is set when any part
	// of it was estimated, and CostUnknown counts the runs with no cost.
	CostUSD       float64
	CostEstimated bool
	CostUnknown   int
}

// add counts run in s.
func (s *Spend) add(run *protocol.AgentRun) {
	if run == nil {
		return
	}
	s.Runs++
	s.Usage = s.Usage.Add(run.Usage)
	switch {
	case run.CostKnown:
		s.CostUSD += run.CostUSD
		s.CostEstimated = s.CostEstimated || run.CostEstimated
	default:
		s.CostUnknown++
	}
}

// Plus returns the sum of s and o.
func (s Spend) Plus(o Spend) Spend {
	return Spend{Runs: s.Runs + o.Runs, Usage: s.Usage.Add(o.Usage), CostUSD: s.CostUSD + o.CostUSD,
		CostEstimated: s.CostEstimated || o.CostEstimated, CostUnknown: s.CostUnknown + o.CostUnknown}
}

// Spend is what every node's agent runs used, summed.
func (w *Workflow) Spend() Spend {
	var s Spend
	for _, n := range w.Nodes {
		s = s.Plus(n.Spend)
	}
	return s
}

// overBudget says why node n may start no other round, its spend having
// reached its budget (the task's max_cost_usd) or the workflow's having
// reached the workflow's; "" when neither. The spend counts known costs,
// estimated ones included.
func (d *decider) overBudget(n *Node) string {
	if b := n.Task.MaxCostUSD; b > 0 && n.Spend.CostUSD >= b {
		return fmt.Sprintf("budget spent: the node's agent runs cost %s, its max_cost_usd is $%.2f", costOf(n.Spend), b)
	}
	return d.workflowOverBudget()
}

// workflowOverBudget says why no node of the workflow may start another
// round, its agent runs having cost its max_cost_usd; "" when they have
// not (or it has no budget).
func (d *decider) workflowOverBudget() string {
	if b := d.w.Spec.MaxCostUSD; b > 0 {
		if s := d.w.Spend(); s.CostUSD >= b {
			return fmt.Sprintf("budget spent: the workflow's agent runs cost %s, its max_cost_usd is $%.2f", costOf(s), b)
		}
	}
	return ""
}

// costOf is a spend's cost for a reason: "$1.2345", marked when estimated.
func costOf(s Spend) string {
	t := fmt.Sprintf("$%.4f", s.CostUSD)
	if s.CostEstimated {
		t += " (estimated)"
	}
	return t
}
