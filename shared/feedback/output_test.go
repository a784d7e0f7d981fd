package feedback

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRenderOutput: a round whose result block was invalid is told what
// was wrong (inside the untrusted part: it quotes the agent's output) and
// the schema's requirements with an example (RETRY-05, RETRY-09).
func TestRenderOutput(t *testing.T) {
	tests := []struct {
		problem, status string
		want            []string
	}{
		{OutputNoBlock, "", []string{"had no JSON block", "## Required output format (implementation)"}},
		{OutputInvalid, "", []string{"does not match the `implementation` schema", "- /status: value must be one of"}},
		{OutputStatus, "PARTIAL", []string{"reported status `PARTIAL`", "Finish the work"}},
		{OutputStatus, "BLOCKED", []string{"reported BLOCKED, with the blockers quoted below", "the problem"}},
	}
	for _, tt := range tests {
		t.Run(tt.problem+tt.status, func(t *testing.T) {
			in := Input{WorkflowID: "wf", NodeID: "n", Attempt: 1, MaxAttempts: 3, Output: &Output{Schema: "implementation",
				Problem: tt.problem, Status: tt.status, Error: "the problem \x1b[31m",
				Violations: []string{"/status: value must be one of 'SUCCESS', 'PARTIAL'"}}}
			f := Build(in)
			doc, err := json.Marshal(f)
			if err != nil || strings.Contains(string(doc), "\x1b") {
				t.Fatalf("document %s, %v", doc, err)
			}
			md, err := Render(f, "implementer")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(md, "## Feedback: the result of attempt 1 was not accepted") {
				t.Fatalf("header: %s", md[:80])
			}
			for _, w := range tt.want {
				if !strings.Contains(md, w) {
					t.Errorf("rendering lacks %q:\n%s", w, md)
				}
			}
			banner := strings.Index(md, "Untrusted gate output begins")
			if p := strings.Index(md, "the problem"); p < banner {
				t.Errorf("the agent's error is rendered before the untrusted banner")
			}
			if p := strings.Index(md, "Required output format"); p > banner {
				t.Errorf("the schema's requirements are rendered after the untrusted banner")
			}
		})
	}
}
