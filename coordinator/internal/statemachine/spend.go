package statemachine

import (
	"fmt"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Spend is what agent runs used: tokens and cost, summed over runs. Its
// totals count the node's own agent runs and its review gates' reviewers
// alike; Review is the reviewers' part of them.
type Spend struct {
	SpendPart
	// Review is what review gates' reviewers used, counted in the totals
	// too (the agent's part is the totals less this).
	Review SpendPart
}

// SpendPart is what a set of runs used.
type SpendPart struct {
	// Runs counts the runs that reported (AgentResult.Run, a reviewer's
	// ReviewVerdict.Run).
	Runs  int
	Usage protocol.TokenUsage
	// CostUSD sums the runs whose cost is known (reported by the CLI or
	// estimated from the price table); CostEstimated is set when any part
	// of it was estimated, and CostUnknown counts the runs with no cost.
	CostUSD       float64
	CostEstimated bool
	CostUnknown   int
}

// add counts run in u.
func (u *SpendPart) add(run *protocol.AgentRun) {
	if run == nil {
		return
	}
	u.Runs++
	u.Usage = u.Usage.Add(run.Usage)
	switch {
	case run.CostKnown:
		u.CostUSD += run.CostUSD
		u.CostEstimated = u.CostEstimated || run.CostEstimated
	default:
		u.CostUnknown++
	}
}

// plus returns the sum of u and o.
func (u SpendPart) plus(o SpendPart) SpendPart {
	return SpendPart{Runs: u.Runs + o.Runs, Usage: u.Usage.Add(o.Usage), CostUSD: u.CostUSD + o.CostUSD,
		CostEstimated: u.CostEstimated || o.CostEstimated, CostUnknown: u.CostUnknown + o.CostUnknown}
}

// add counts an agent run in s.
func (s *Spend) add(run *protocol.AgentRun) { s.SpendPart.add(run) }

// addReview counts a review gate's reviewers' runs in s: in its totals
// and in its review part.
func (s *Spend) addReview(r *protocol.ReviewResult) {
	if r == nil {
		return
	}
	for _, v := range r.Reviewers {
		s.SpendPart.add(v.Run)
		s.Review.add(v.Run)
	}
}

// Plus returns the sum of s and o.
func (s Spend) Plus(o Spend) Spend {
	return Spend{SpendPart: s.SpendPart.plus(o.SpendPart), Review: s.Review.plus(o.Review)}
}

// Spend is what every node's agent runs and reviewers used, summed.
func (w *Workflow) Spend() Spend {
	var s Spend
	for _, n := range w.Nodes {
		s = s.Plus(n.Spend())
	}
	return s
}

// overBudget says why node n may start no other round, its spend having
// reached its budget (the task's max_cost_usd) or the workflow's having
// reached the workflow's; "" when neither. The spend counts known costs,
// estimated ones included.
func (d *decider) overBudget(n *Node) string {
	if b := n.Task.MaxCostUSD(); b > 0 && n.Spend().CostUSD >= b {
		return fmt.Sprintf("budget spent: the node's %s, its max_cost_usd is $%.2f", costOf(n.Spend()), b)
	}
	return d.workflowOverBudget()
}

// workflowOverBudget says why no node of the workflow may start another
// round, its agent runs having cost its max_cost_usd; "" when they have
// not (or it has no budget).
func (d *decider) workflowOverBudget() string {
	if b := d.w.Spec.MaxCostUSD; b > 0 {
		if s := d.w.Spend(); s.CostUSD >= b {
			return fmt.Sprintf("budget spent: the workflow's %s, its max_cost_usd is $%.2f", costOf(s), b)
		}
	}
	return ""
}

// costOf is a spend's cost for a reason: "agent runs cost $1.2345",
// marked when estimated, naming the reviewers' part when they cost
// anything ("agent runs and reviewers cost $1.2345 (reviewers $0.2000)").
func costOf(s Spend) string {
	t := fmt.Sprintf("$%.4f", s.CostUSD)
	if s.CostEstimated {
		t += " (estimated)"
	}
	if s.Review.Runs == 0 {
		return "agent runs cost " + t
	}
	return fmt.Sprintf("agent runs and reviewers cost %s (reviewers $%.4f)", t, s.Review.CostUSD)
}
