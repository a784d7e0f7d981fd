package workflow

import "github.com/supervisorhq/supervisor/shared/protocol"

// Outcome is the fold of a node's gate results.
type Outcome string

// Outcomes, from lowest to highest priority.
const (
	// OutcomePassed: every gate passed, or the node has no gates.
	OutcomePassed Outcome = "passed"
	// OutcomePending: some gate is pending (exit 75) and none failed; poll.
	OutcomePending Outcome = "pending"
	// OutcomeFailed: some gate did not pass: the round failed, and the
	// state machine retries it with feedback or escalates the node.
	OutcomeFailed Outcome = "failed"
	// OutcomeEscalated: a human must look at the node.
	OutcomeEscalated Outcome = "escalated"
)

// FoldInput is what Fold needs: the latest status of each of the node's
// gates, and whether the coordinator escalates. Escalation is not a
// protocol.GateStatus: the coordinator decides it, e.g. when a failing gate
// has exhausted its max_retries (Q-3 step 7).
type FoldInput struct {
	Results   []protocol.GateStatus
	Escalated bool
}

// Fold folds gate results into one outcome by priority,
// escalated > failed > pending > passed (Q-3 step 5); no gates is passed
// (Q-3 step 2). In the fold:
//   - failed, timeout and error (infrastructure) count as failed;
//   - skipped counts as failed: a gate is only skipped because a dependency
//     did not pass, so it never lets a node pass;
//   - an unknown status counts as failed (fail closed).
func Fold(in FoldInput) Outcome {
	if in.Escalated {
		return OutcomeEscalated
	}
	out := OutcomePassed
	for _, s := range in.Results {
		switch s {
		case protocol.GatePassed:
		case protocol.GatePending:
			out = OutcomePending
		default:
			return OutcomeFailed
		}
	}
	return out
}

// FoldGates is Fold without escalation.
func FoldGates(results []protocol.GateStatus) Outcome {
	return Fold(FoldInput{Results: results})
}
