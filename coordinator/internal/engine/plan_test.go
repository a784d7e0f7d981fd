package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// agentSays reports job j's agent succeeding with text as its final
// message, as a worker running a CLI adapter does (AgentResult.Run).
func (e *env) agentSays(j *taken, token uint64, text string, patch *protocol.PatchRef) {
	e.t.Helper()
	a := j.agent
	e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: a.JobID, WorkflowID: a.WorkflowID, NodeID: a.NodeID, Attempt: a.Attempt, LeaseToken: token,
		Host: "test-runner", Status: protocol.AgentSucceeded, Patch: patch, StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(),
		Run: &protocol.AgentRun{Adapter: "claude-code", Success: true, Text: text},
	}}, fmt.Sprintf("%s.result.%d.1", a.JobID, token))
	if err := j.msg.Ack(); err != nil {
		e.t.Fatal(err)
	}
}

// HIER-01, DAG-03, OUT-06 on the bus: a planner's first answer has no
// result block and is retried with the schema's requirements in its
// prompt; its second is a plan, whose components become nodes published
// as jobs once the planner succeeds, phase by phase. A coordinator
// restarted in the middle rebuilds the grown workflow from the log and
// goes on; the planner's dependent runs last and the workflow succeeds
// with every node counted.
func TestPlanGrowsTheWorkflowOnTheBus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: grow
defaults:
  ` + agentCmd + `tasks:
  - id: plan
    prompt: plan the feature
    output: plan
    expand: {prompt: Build it., output: implementation}
  - id: docs
    prompt: document it
    depends_on: [plan]
`)
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	if j.agent.NodeID != "plan" || !strings.Contains(j.agent.Prompt, "## Required output format (plan)") {
		t.Fatalf("planner job %s, prompt %q", j.id(), j.agent.Prompt)
	}
	e.started(j, 1)
	e.agentSays(j, 1, "I think we should build a login.", nil)
	j = e.next(protocol.KindAgent, "default", 10*time.Second)
	if j.agent.NodeID != "plan" || j.agent.Attempt != 2 || !strings.Contains(j.agent.Prompt, "had no JSON block") {
		t.Fatalf("retry job %s, prompt %q", j.id(), j.agent.Prompt)
	}
	e.started(j, 2)
	e.agentSays(j, 2, "The plan:\n```json\n"+`{"status":"COMPLETE","estimated_components":2,"phases":[
		{"id":"one","components":[{"id":"model","description":"the model"}]},
		{"id":"two","components":[{"id":"login","description":"the login"}]}]}`+"\n```\n", nil)
	e.waitNode(wf, "plan", protocol.NodeSucceeded)
	model := e.next(protocol.KindAgent, "default", 5*time.Second)
	if model.agent.NodeID != "plan--model" || !strings.HasPrefix(model.agent.Prompt, "Build it.\n\n## Component model") ||
		!strings.Contains(model.agent.Prompt, "## Required output format (implementation)") {
		t.Fatalf("first added job %s, prompt %q", model.id(), model.agent.Prompt)
	}
	e.noJob(protocol.KindAgent, "default", 200*time.Millisecond, "login and docs wait for model")

	e.stopEng()
	e.start()
	if s := e.status(wf); len(s.Nodes) != 4 || nodeOf(s, "plan").Expanded != 2 || nodeOf(s, "plan--login").Planner != "plan" {
		t.Fatalf("after the restart: %+v", s)
	}
	e.started(model, 3)
	e.agentSays(model, 3, "```json\n"+`{"status":"SUCCESS","files_created":["m.go"],"files_modified":[],"tests_written":[]}`+"\n```", e.makePatch(model, "m.go", "package m\n"))
	login := e.next(protocol.KindAgent, "default", 5*time.Second)
	if login.agent.NodeID != "plan--login" || len(login.agent.Patches) != 1 {
		t.Fatalf("second added job %+v", login.agent)
	}
	// Its prompt was left in the log (PERF-50): the restarted coordinator
	// read it back from the nodes_added event.
	if !strings.HasPrefix(login.agent.Prompt, "Build it.\n\n## Component login") {
		t.Fatalf("second added job's prompt %q", login.agent.Prompt)
	}
	if mem := e.promptsInMemory(wf); mem["plan--login"] != "" || mem["plan"] != "" {
		t.Fatalf("prompts in memory %q, want them left in the log", mem)
	}
	e.started(login, 4)
	e.agentSays(login, 4, "```json\n"+`{"status":"SUCCESS","files_created":[],"files_modified":[],"tests_written":[]}`+"\n```", nil)
	docs := e.next(protocol.KindAgent, "default", 5*time.Second)
	if docs.agent.NodeID != "docs" || len(docs.agent.Patches) != 1 {
		t.Fatalf("docs job %+v", docs.agent)
	}
	e.started(docs, 5)
	e.agentDone(docs, 5, protocol.AgentSucceeded, nil)
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if s.Counts["succeeded"] != 4 {
		t.Errorf("counts %v", s.Counts)
	}
	if n := countEvents(e.events(wf), eventlog.TypeNodesAdded, "plan"); n != 1 {
		t.Errorf("%d nodes_added events, want 1", n)
	}
	// show lists each attempt's result check: the planner's first had no
	// block, its second the plan.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := e.client.Show(ctx, wf, "plan")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != 2 || d.Attempts[0].Output == nil || d.Attempts[0].Output.Problem != protocol.OutputNoBlock ||
		d.Attempts[1].Output == nil || d.Attempts[1].Output.Status != "COMPLETE" {
		t.Errorf("show attempts %+v", d.Attempts)
	}
}
