package workflow

import (
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// no gates = passed, and the priority escalated > failed > pending >
// passed, with the statuses beyond those four: timeout and error count as
// failed, skipped never passes.
func TestFoldGates_Q3(t *testing.T) {
	const (
		P  = protocol.GatePassed
		F  = protocol.GateFailed
		PE = protocol.GatePending
		T  = protocol.GateTimeout
		S  = protocol.GateSkipped
		E  = protocol.GateError
	)
	tests := []struct {
		name      string
		results   []protocol.GateStatus
		escalated bool
		want      Outcome
	}{
		{"Q-3 step 2: no gates", nil, false, OutcomePassed},
		{"all passed", []protocol.GateStatus{P, P}, false, OutcomePassed},
		{"pending over passed", []protocol.GateStatus{P, PE, P}, false, OutcomePending},
		{"failed over pending", []protocol.GateStatus{PE, F, P}, false, OutcomeFailed},
		{"Q-1: timeout counts as failed", []protocol.GateStatus{P, T}, false, OutcomeFailed},
		{"error (infrastructure) counts as failed", []protocol.GateStatus{E, PE}, false, OutcomeFailed},
		{"skipped alongside its failure", []protocol.GateStatus{F, S, S}, false, OutcomeFailed},
		{"skipped never passes", []protocol.GateStatus{P, S}, false, OutcomeFailed},
		{"unknown status fails closed", []protocol.GateStatus{P, "weird"}, false, OutcomeFailed},
		{"escalated over failed", []protocol.GateStatus{F, PE}, true, OutcomeEscalated},
		{"escalated over passed", []protocol.GateStatus{P}, true, OutcomeEscalated},
		{"escalated with no gates", nil, true, OutcomeEscalated},
	}
	for _, tc := range tests {
		if got := Fold(FoldInput{Results: tc.results, Escalated: tc.escalated}); got != tc.want {
			t.Errorf("%s: Fold = %s, want %s", tc.name, got, tc.want)
		}
		if !tc.escalated {
			if got := FoldGates(tc.results); got != tc.want {
				t.Errorf("%s: FoldGates = %s, want %s", tc.name, got, tc.want)
			}
		}
	}
}

// The fold agrees with GateStatusFromExit.
func TestFoldFromExitCodes(t *testing.T) {
	tests := []struct {
		exit     int
		timedOut bool
		want     Outcome
	}{
		{0, false, OutcomePassed},
		{75, false, OutcomePending},
		{1, false, OutcomeFailed},
		{0, true, OutcomeFailed},
	}
	for _, tc := range tests {
		st := protocol.GateStatusFromExit(tc.exit, tc.timedOut)
		if got := FoldGates([]protocol.GateStatus{st}); got != tc.want {
			t.Errorf("exit %d timedOut %v (%s): FoldGates = %s, want %s", tc.exit, tc.timedOut, st, got, tc.want)
		}
	}
}
