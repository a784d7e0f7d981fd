package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// promptsInMemory returns the task prompts workflow wf's state holds in
// memory, by task id (those left in the log are "").
func (e *env) promptsInMemory(wf string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	e.eng.Read(func(s *statemachine.State) {
		w, ok := s.Workflow(wf)
		if !ok {
			e.t.Fatalf("workflow %s not in memory", wf)
		}
		for _, t := range w.Spec.Tasks {
			out[t.ID] = t.Prompt
		}
	})
	return out
}

// PERF-50: with the default event log (kept for good, no deletes), the
// coordinator keeps no agent task's prompt in memory, and every job still
// carries its task's prompt: the first job (its prompt kept from the
// submission the coordinator appended), a retry with its feedback, and,
// after a restart that leaves the new coordinator nothing cached, a
// dependent's job whose prompt it reads back from the log (the
// statemachine tests cover the context plan's prompts). A human task's instructions stay in memory.
func TestPromptsStayInTheLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: prompts
defaults:
  ` + agentCmd + `tasks:
  - id: api
    prompt: "Define the API of the store.\n"
  - id: impl
    prompt: "Rename the store to shop.\n"
    depends_on: [api]
  - id: sign
    type: human
    prompt: Check the names.
    depends_on: [impl]
`)
	mem := e.promptsInMemory(wf)
	if mem["api"] != "" || mem["impl"] != "" {
		t.Fatalf("agent task prompts in memory: %q", mem)
	}
	if mem["sign"] != "Check the names." {
		t.Fatalf("the human task's instructions in memory: %q", mem["sign"])
	}

	api := e.next(protocol.KindAgent, "default", 5*time.Second)
	if api.agent.NodeID != "api" || !strings.HasPrefix(api.agent.Prompt, "Define the API of the store.") {
		t.Fatalf("first job %s, prompt %q", api.id(), api.agent.Prompt)
	}
	e.started(api, 1)
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: api.id(), WorkflowID: wf, NodeID: "api", Attempt: 1, LeaseToken: 1, Status: protocol.AgentFailed,
		ExitCode: 3, Error: "boom"}}, "api-result-1")
	_ = api.msg.Ack()
	retry := e.next(protocol.KindAgent, "default", 10*time.Second)
	if retry.agent.Attempt != 2 || !strings.HasPrefix(retry.agent.Prompt, "Define the API of the store.") ||
		len(retry.agent.Prompt) <= len("Define the API of the store.\n") {
		t.Fatalf("retry job %s, prompt %q: want the task's prompt and the feedback", retry.id(), retry.agent.Prompt)
	}
	e.started(retry, 2)

	// A new coordinator has read no prompt yet: impl's job reads its own
	// and its dependency's back from the log.
	e.stopEng()
	e.start()
	if mem := e.promptsInMemory(wf); mem["api"] != "" || mem["impl"] != "" {
		t.Fatalf("after the restart, agent task prompts in memory: %q", mem)
	}
	e.agentDone(retry, 2, protocol.AgentSucceeded, e.work(retry, map[string]string{"api.md": "get\n"}))
	impl := e.next(protocol.KindAgent, "default", 10*time.Second)
	if impl.agent.NodeID != "impl" || !strings.HasPrefix(impl.agent.Prompt, "Rename the store to shop.") {
		t.Fatalf("dependent job %s, prompt %q", impl.id(), impl.agent.Prompt)
	}
	e.started(impl, 3)
	e.agentDone(impl, 3, protocol.AgentSucceeded, nil)
	e.waitNode(wf, "sign", protocol.NodeAwaitingApproval)
	d, err := e.client.Show(testkit.Context(t, 5*time.Second), wf, "sign")
	if err != nil {
		t.Fatal(err)
	}
	if d.Instructions != "Check the names." {
		t.Errorf("the human task's instructions %q", d.Instructions)
	}
}

// With an event log that may lose events (here, one clients may delete
// from), prompts stay in memory: one left in the log could be gone when a
// job needs it.
func TestPromptsStayInMemoryWithAMutableLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{EventsMutable: true})
	e.start()
	wf := e.submit("name: mutable\ndefaults:\n  " + agentCmd + "tasks:\n  - id: only\n    prompt: keep me\n")
	if mem := e.promptsInMemory(wf); mem["only"] != "keep me" {
		t.Fatalf("prompt in memory %q, want it kept", mem["only"])
	}
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	if !strings.HasPrefix(j.agent.Prompt, "keep me") {
		t.Fatalf("job prompt %q", j.agent.Prompt)
	}
}
