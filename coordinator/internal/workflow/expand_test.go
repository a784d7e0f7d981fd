package workflow

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/agentoutput"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

const plannerWorkflow = `name: grow
defaults: {agent: {adapter: codex}}
gates:
  - {name: vet, command: [go, vet, ./...]}
  - {name: test, command: [go, test, ./...]}
tasks:
  - id: plan
    prompt: plan the feature
    output: plan
    gates: []
    expand:
      agent: {command: [impl-agent]}
      prompt: Build this component.
      gates: [test]
      timeout: 10m
      max_attempts: 4
  - id: docs
    prompt: document it
    depends_on: [plan]
    output: generic
`

func TestParseOutputAndExpand(t *testing.T) {
	spec, err := Parse("w.yaml", []byte(plannerWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	plan, docs := spec.Tasks[0], spec.Tasks[1]
	if plan.Output != "plan" || !plan.AllowEmpty || docs.Output != "generic" || docs.AllowEmpty {
		t.Fatalf("output/allow_empty: %+v %+v", plan, docs)
	}
	want := &protocol.ExpandSpec{Agent: &protocol.AgentSpec{Adapter: "command", Command: []string{"impl-agent"}}, Prompt: "Build this component.", Pool: protocol.DefaultPool,
		Gates: []string{"test"}, TimeoutSeconds: 600, MaxAttempts: 4, Output: "implementation"}
	if !reflect.DeepEqual(plan.Expand, want) {
		t.Fatalf("expand = %+v, want %+v", plan.Expand, want)
	}
}

func TestParseOutputProblems(t *testing.T) {
	tests := []struct {
		name, src string
		wants     []want
	}{
		{"unknown schema", head + "tasks: [{id: a, prompt: p, output: essay}]\n",
			[]want{`3:36: unknown task "a" output "essay" (known: generic, implementation, plan, review)`}},
		{"expand without plan", head + "tasks: [{id: a, prompt: p, output: generic, expand: {}}]\n",
			[]want{`3:45: task "a" has expand but its output is not plan`}},
		{"expand of plans", head + "tasks: [{id: a, prompt: p, output: plan, expand: {output: plan}}]\n",
			[]want{`3:59: task "a" expand output cannot be plan`}},
		{"expand unknown gate and key", head + "tasks: [{id: a, prompt: p, output: plan, expand: {gates: [nope], colour: red}}]\n",
			[]want{`3:59: task "a" expand uses unknown gate "nope"`, `3:66: unknown field "colour" in task "a" expand`}},
		{"human output", head + "tasks: [{id: a, type: human, prompt: p, output: plan}]\n",
			[]want{`3:41: task "a" is a human task: it has no agent output`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(tt.src))
			checkProblems(t, "w.yaml", tt.src, err, tt.wants)
		})
	}
}

func mustPlan(t *testing.T, block string) *agentoutput.PlanOutput {
	t.Helper()
	out, err := agentoutput.Decode(agentoutput.Plan, []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	return out.Plan
}

func TestExpand(t *testing.T) {
	spec, err := Parse("w.yaml", []byte(plannerWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	plan := mustPlan(t, string(agentoutput.Example(agentoutput.Plan)))
	x, err := Expand(spec, "plan", plan)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	deps := map[string][]string{}
	for _, task := range x.Tasks {
		ids = append(ids, task.ID)
		deps[task.ID] = task.DependsOn
		if task.Planner != "plan" || task.Output != "implementation" || task.TimeoutSeconds != 600 ||
			!reflect.DeepEqual(task.Gates, []string{"test"}) || !strings.HasPrefix(task.Prompt, "Build this component.\n\n## Component ") {
			t.Fatalf("task %+v", task)
		}
	}
	if strings.Join(ids, " ") != "plan--user-model plan--hashing plan--login" {
		t.Fatalf("ids %v", ids)
	}
	// DAG-02: depends_on; DAG-03: every component of the phase before;
	// the planner itself first.
	if got := deps["plan--login"]; !reflect.DeepEqual(got, []string{"plan", "plan--user-model", "plan--hashing"}) {
		t.Fatalf("login deps %v", got)
	}
	if !reflect.DeepEqual(x.Dependents, []string{"docs"}) {
		t.Fatalf("dependents %v", x.Dependents)
	}
	login := x.Tasks[2]
	if !strings.Contains(login.Prompt, "Interface LoginRequest (go, in api/types.go)") || !reflect.DeepEqual(login.Files, []string{"api/login*.go"}) {
		t.Fatalf("login %+v", login)
	}
	grown := Grow(spec, x)
	if len(grown.Tasks) != 5 || len(spec.Tasks) != 2 || len(grown.Tasks[1].DependsOn) != 4 || len(spec.Tasks[1].DependsOn) != 1 {
		t.Fatalf("grow changed the original or missed the dependents: %+v", grown.Tasks[1])
	}
	if _, err := NewGraph(grown); err != nil {
		t.Fatal(err)
	}
}

func TestExpandLimits(t *testing.T) {
	spec, err := Parse("w.yaml", []byte(plannerWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	var comps []string
	for i := range MaxTasks - 1 {
		comps = append(comps, fmt.Sprintf(`{"id":"c%d","description":"d"}`, i))
	}
	plan := mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[`+strings.Join(comps, ",")+`]}]}`)
	_, err = Expand(spec, "plan", plan)
	if err == nil || !strings.Contains(err.Error(), "the plan has 499 components; with the workflow's 2 tasks that makes 501, more than the 500") {
		t.Fatalf("limit: %v", err)
	}
	// A planner's id that makes a component's id collide with a task of
	// the workflow: ids stay unique.
	spec.Tasks = append(spec.Tasks, protocol.TaskSpec{ID: "plan--c0", Prompt: "p"})
	_, err = Expand(spec, "plan", mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[{"id":"c0","description":"d"}]}]}`))
	if err == nil || !strings.Contains(err.Error(), `duplicate task id "plan--c0"`) {
		t.Fatalf("duplicate: %v", err)
	}
	var ce *CycleError
	if errors.As(err, &ce) {
		t.Fatal("a duplicate is no cycle")
	}
}

func TestExpandLongID(t *testing.T) {
	planner := strings.Repeat("p", 40)
	spec := &protocol.WorkflowSpec{Name: "w", Tasks: []protocol.TaskSpec{{ID: planner, Prompt: "p", Output: "plan"}}}
	_, err := Expand(spec, planner, mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[{"id":"`+
		strings.Repeat("c", 30)+`","description":"d"}]}]}`))
	if err == nil || !strings.Contains(err.Error(), "longer than a task id may be") {
		t.Fatalf("long id: %v", err)
	}
}

func TestExpandTooLarge(t *testing.T) {
	spec := &protocol.WorkflowSpec{Name: "w", Tasks: []protocol.TaskSpec{{ID: "plan", Prompt: "p", Output: "plan",
		Expand: &protocol.ExpandSpec{Prompt: strings.Repeat("x", MaxExpandPrompt)}}}}
	var comps []string
	for i := range 60 {
		comps = append(comps, fmt.Sprintf(`{"id":"c%d","description":"d"}`, i))
	}
	_, err := Expand(spec, "plan", mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[`+strings.Join(comps, ",")+`]}]}`))
	if err == nil || !strings.Contains(err.Error(), "more than the 786432 (768 KiB) one plan may add") {
		t.Fatalf("size: %v", err)
	}
	src := head + "tasks: [{id: a, prompt: p, output: plan, expand: {prompt: " + strings.Repeat("y", MaxExpandPrompt+1) + "}}]\n"
	if _, err := Parse("w.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "expand prompt is 16385 bytes; at most 16384") {
		t.Fatalf("expand prompt: %v", err)
	}
}

// A component's files become its node's files as a task's are parsed
// (DAG-07 serializes nodes on them): "dir/" is everything under dir.
func TestExpandFiles(t *testing.T) {
	spec := &protocol.WorkflowSpec{Name: "w", Tasks: []protocol.TaskSpec{{ID: "plan", Prompt: "p", Output: "plan"}}}
	x, err := Expand(spec, "plan", mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[`+
		`{"id":"a","description":"d","files":["./src//auth/","go.mod"]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := x.Tasks[0].Files; !reflect.DeepEqual(got, []string{"src/auth/**", "go.mod"}) {
		t.Fatalf("files %q", got)
	}
}

// A planner without expand: is one with expand: {}: its agent, pool and
// timeout, the workflow's defaults, every workflow gate.
func TestParseDefaultExpand(t *testing.T) {
	spec, err := Parse("w.yaml", []byte("name: demo\ndefaults: {agent: {adapter: codex}, allow_empty: true}\ngates:\n  - {name: vet, command: [vet]}\n"+
		"tasks: [{id: plan, prompt: p, output: plan, pool: big, timeout: 5m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := spec.Tasks[0].Expand
	if e == nil || e.Pool != "big" || e.TimeoutSeconds != 300 || !e.AllowEmpty || e.Output != "implementation" ||
		!reflect.DeepEqual(e.Gates, []string{"vet"}) || e.Agent == nil || e.Agent.Adapter != "codex" {
		t.Fatalf("expand %+v", e)
	}
}
