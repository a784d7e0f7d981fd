package statemachine_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// A retry's feedback is rendered with the template the task's role names:
// the implementer's tells the agent it is the implementer.
func TestRoleFeedbackTemplate(t *testing.T) {
	cat, err := roles.Load(roles.Options{BuiltinDir: filepath.Join("..", "..", "..", "configs", "roles")})
	if err != nil {
		t.Fatal(err)
	}
	strategies, err := contextpack.Load(filepath.Join("..", "..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		role string
		want bool
	}{{"implementer", true}, {"reviewer", false}} {
		t.Run(tc.role, func(t *testing.T) {
			src := "name: l\ndefaults:\n  agent: {command: [fake-agent]}\n  allow_empty: true\n" +
				"gates:\n  - {name: test, command: [go, test, ./...]}\n" +
				"tasks:\n  - {id: a, role: " + tc.role + ", prompt: add Shout, gates: [test]}\n"
			spec, err := workflow.ParseWithOptions("wf.yaml", []byte(src), workflow.Options{Roles: cat, Strategies: strategies})
			if err != nil {
				t.Fatal(err)
			}
			w, _ := newWorldSpec(t, spec)
			w.agentDone("a", 1, protocol.AgentSucceeded, true)
			w.gateDone("a", "test", 1, protocol.GateFailed)
			w.later(retryDelay)
			job := w.job("a")
			if got := strings.Contains(job.Prompt, "As the implementer"); got != tc.want {
				t.Errorf("feedback rendered with the implementer's template: %v, want %v\n%s", got, tc.want, job.Prompt)
			}
			if !strings.Contains(job.Prompt, "add Shout") || !strings.Contains(job.Prompt, "test") {
				t.Errorf("prompt:\n%s", job.Prompt)
			}
		})
	}
}
