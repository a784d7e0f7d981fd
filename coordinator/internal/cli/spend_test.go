package cli

import (
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

// TestCostText: status's cost column marks estimates, counts runs of
// unknown cost, names the budget, and shows the review gates' reviewers'
// part of the spend.
func TestCostText(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sp     api.Spend
		budget float64
		want   string
	}{
		{"reported", api.Spend{Runs: 1, CostUSD: 0.0241}, 0, "$0.0241"},
		{"estimated, unknown runs, budget", api.Spend{Runs: 3, CostUSD: 0.01, CostEstimated: true, CostUnknownRuns: 1}, 0.5,
			"~$0.0100 (+1 runs of unknown cost) of $0.50"},
		{"with reviewers", api.Spend{Runs: 4, CostUSD: 0.06, ReviewSpend: &api.Spend{Runs: 2, CostUSD: 0.04}}, 0,
			"$0.0600, reviewers 2 runs $0.0400"},
		{"reviewers of unknown cost", api.Spend{Runs: 3, CostUSD: 0.02, CostUnknownRuns: 1,
			ReviewSpend: &api.Spend{Runs: 1, CostUnknownRuns: 1}}, 1,
			"$0.0200 (+1 runs of unknown cost) of $1.00, reviewers 1 runs $0.0000 (+1 of unknown cost)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := costText(tc.sp, tc.budget); got != tc.want {
				t.Errorf("costText = %q, want %q", got, tc.want)
			}
		})
	}
}
