package statemachine

import "github.com/supervisorhq/supervisor/shared/protocol"

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
