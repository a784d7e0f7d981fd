package statemachine_test

import (
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/redact"
)

// An agent job's prompt is masked as it leaves the coordinator (CTX-07),
// whatever the stored spec holds: a workflow submitted before submissions
// were redacted still sends no secret to a worker.
func TestAgentJobPromptRedacted(t *testing.T) {
	const secret = "hunter2-4f9c1a77"
	yaml := "name: r\n" + agent + "tasks:\n  - {id: a, prompt: \"Deploy. The password: " + secret + "\", gates: []}\n"
	w, _ := newWorld(t, yaml)
	if !strings.Contains(w.wf().Spec.Tasks[0].Prompt, secret) {
		t.Fatalf("the test's spec lost its secret before the job was made")
	}
	p := w.job("a").Prompt
	if strings.Contains(p, secret) || !strings.Contains(p, "The password: "+redact.Mask) {
		t.Fatalf("agent job prompt %q; want the password masked", p)
	}
}
