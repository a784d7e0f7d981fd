package pricing

import (
	"math"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

func TestEstimate(t *testing.T) {
	table := Table{"gpt-5-codex": {Input: 1.25, CachedInput: 0.125, Output: 10}, "gpt-5": {Input: 2, CachedInput: 1, Output: 20},
		"gemini-2.5-pro": {Input: 1.25, CachedInput: 0.31, Output: 10}}
	usage := protocol.TokenUsage{Input: 1_000_000, CachedInput: 400_000, Output: 100_000}
	tests := []struct {
		name      string
		run       protocol.AgentRun
		model     string
		want      float64
		estimated bool
	}{
		{"run's model", protocol.AgentRun{Model: "gemini-2.5-pro", Usage: usage}, "", 0.6*1.25 + 0.4*0.31 + 0.1*10, true},
		{"task's model when the run names none", protocol.AgentRun{Usage: usage}, "gpt-5-codex", 0.6*1.25 + 0.4*0.125 + 1, true},
		{"longest prefix", protocol.AgentRun{Model: "gpt-5-codex-2025", Usage: usage}, "", 0.6*1.25 + 0.4*0.125 + 1, true},
		{"not a prefix at a word", protocol.AgentRun{Model: "gpt-50", Usage: usage}, "", 0, false},
		{"several models: the first priced", protocol.AgentRun{Model: "unknown,gpt-5", Usage: usage}, "", 0.6*2 + 0.4*1 + 2, true},
		{"unknown model", protocol.AgentRun{Model: "llama", Usage: usage}, "", 0, false},
		{"the CLI's cost stays", protocol.AgentRun{Model: "gpt-5", Usage: usage, CostUSD: 0.5, CostKnown: true}, "", 0.5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := tt.run
			got := table.Estimate(&run, tt.model)
			if got != tt.estimated || run.CostEstimated != tt.estimated || math.Abs(run.CostUSD-tt.want) > 1e-9 {
				t.Errorf("Estimate = %v: cost %v estimated %v, want %v %v", got, run.CostUSD, run.CostEstimated, tt.want, tt.estimated)
			}
		})
	}
}

func TestParse(t *testing.T) {
	table, err := Parse([]any{map[string]any{"model": "gemini-2.5-pro", "input": 1.25, "output": "10"},
		map[string]any{"model": "gpt-5", "input": 1, "cached_input": 0.1, "output": 8}})
	if err != nil {
		t.Fatal(err)
	}
	if p := table["gemini-2.5-pro"]; p != (Price{Input: 1.25, CachedInput: 1.25, Output: 10}) {
		t.Errorf("gemini-2.5-pro = %+v (cached input defaults to input)", p)
	}
	for _, bad := range []struct {
		v    any
		want string
	}{
		{map[string]any{"gpt-5": 1}, "must be a list"},
		{[]any{map[string]any{"input": 1}}, "prices[0] has no model"},
		{[]any{map[string]any{"model": "m", "inptu": 1}}, `unknown key "inptu"`},
		{[]any{map[string]any{"model": "m", "input": -1}}, "input must be a number"},
		{[]any{map[string]any{"model": "m"}, map[string]any{"model": "m"}}, "listed twice"},
	} {
		if _, err := Parse(bad.v); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%v) = %v, want an error with %q", bad.v, err, bad.want)
		}
	}
}
