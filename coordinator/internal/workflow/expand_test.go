package workflow

import (
	"encoding/json"
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
	if !reflect.DeepEqual(plan.Expand(), want) {
		t.Fatalf("expand = %+v, want %+v", plan.Expand(), want)
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
		{"expand after: unknown, the planner, twice", head + "tasks: [{id: a, prompt: p, output: plan, expand: {after: [zed, a, b, b]}}, {id: b, prompt: p}]\n",
			[]want{`3:59: task "a" expand after names unknown task "zed"`, `3:64: task "a" expand after names the planner itself`,
				`3:70: task "a" expand after lists "b" twice`}},
		{"expand after not a list", head + "tasks: [{id: a, prompt: p, output: plan, expand: {after: b}}, {id: b, prompt: p}]\n",
			[]want{`3:58: task "a" expand after must be a list of names`}},
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
		if task.Planner() != "plan" || task.Output != "implementation" || task.TimeoutSeconds != 600 ||
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

// An expand template's after tasks (TPL-03): every component waits for
// them too, and a dependent of the planner that one of them waits for does
// not wait for the components (it would be a cycle); the others do.
func TestExpandAfter(t *testing.T) {
	spec, err := Parse("w.yaml", []byte(head+`tasks:
  - id: plan
    prompt: p
    output: plan
    expand: {after: [iface]}
  - {id: review, prompt: p, depends_on: [plan]}
  - {id: threat, prompt: p, depends_on: [review]}
  - {id: iface, prompt: p, depends_on: [review, threat]}
  - {id: implement, prompt: p, depends_on: [plan, iface]}
  - {id: docs, prompt: p, depends_on: [plan]}
`))
	if err != nil {
		t.Fatal(err)
	}
	x, err := Expand(spec, "plan", mustPlan(t, string(agentoutput.Example(agentoutput.Plan))))
	if err != nil {
		t.Fatal(err)
	}
	if got := x.Tasks[0].DependsOn; !reflect.DeepEqual(got, []string{"plan", "iface"}) {
		t.Fatalf("first component's deps %v", got)
	}
	if got := x.Tasks[2].DependsOn; !reflect.DeepEqual(got, []string{"plan", "iface", "plan--user-model", "plan--hashing"}) {
		t.Fatalf("login's deps %v", got)
	}
	if !reflect.DeepEqual(x.Dependents, []string{"implement", "docs"}) {
		t.Fatalf("dependents %v, want review left out", x.Dependents)
	}
	if _, err := NewGraph(Grow(spec, x)); err != nil {
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
		TaskRare: &protocol.TaskRare{Expand: &protocol.ExpandSpec{Prompt: strings.Repeat("x", MaxExpandPrompt)}}}}}
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
	e := spec.Tasks[0].Expand()
	if e == nil || e.Pool != "big" || e.TimeoutSeconds != 300 || !e.AllowEmpty || e.Output != "implementation" ||
		!reflect.DeepEqual(e.Gates, []string{"vet"}) || e.Agent == nil || e.Agent.Adapter != "codex" {
		t.Fatalf("expand %+v", e)
	}
}

// An expand template sets what a task can: its context is resolved at
// parse time as a task's (CTX-01, CTX-09), its budget and the interfaces
// its nodes may change are read as a task's max_cost_usd and
// may_change_interfaces.
func TestParseExpandContextBudget(t *testing.T) {
	opts := Options{Strategies: strategies(t)}
	spec, err := ParseWithOptions("w.yaml", []byte(head+`tasks:
  - id: plan
    prompt: p
    output: plan
    expand:
      context: {strategy: implementer_targeted, budget: 8000}
      max_cost_usd: 2.5
      may_change_interfaces: [api/types.go]
  - id: plan2
    prompt: p
    output: plan
    expand: {context: reviewer_diff, may_change_interfaces: true}
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	e, e2 := spec.Tasks[0].Expand(), spec.Tasks[1].Expand()
	if e.Context == nil || e.Context.Strategy != "implementer_targeted" || e.Context.Budget != 8000 || len(e.Context.Definition.Parts) == 0 ||
		e.MaxCostUSD != 2.5 || !reflect.DeepEqual(e.MayChangeInterfaces, []string{"api/types.go"}) {
		t.Fatalf("expand %+v", e)
	}
	if e2.Context == nil || e2.Context.Strategy != "reviewer_diff" || e2.Context.Budget != 15000 || e2.MaxCostUSD != 0 ||
		!reflect.DeepEqual(e2.MayChangeInterfaces, []string{"**"}) {
		t.Fatalf("expand 2 %+v", e2)
	}

	tests := []struct {
		name, src string
		wants     []want
	}{
		{"unknown strategy", head + "tasks: [{id: a, prompt: p, output: plan, expand: {context: wide}}]\n",
			[]want{`3:60: task "a" expand context: unknown context strategy "wide"`}},
		{"budget out of range", head + "tasks: [{id: a, prompt: p, output: plan, expand: {context: {strategy: reviewer_diff, budget: 10}}}]\n",
			[]want{`3:94: task "a" expand context budget 10 is out of range`}},
		{"cost", head + "tasks: [{id: a, prompt: p, output: plan, expand: {max_cost_usd: -1}}]\n",
			[]want{`3:65: task "a" expand max_cost_usd -1 is out of range`}},
		{"interfaces", head + "tasks: [{id: a, prompt: p, output: plan, expand: {may_change_interfaces: [/etc/x]}}]\n",
			[]want{`3:75: task "a" expand may_change_interfaces entry "/etc/x" must be relative`}},
		{"credential", head + "tasks: [{id: a, prompt: p, output: plan, expand: {env: {ANTHROPIC_API_KEY: x}}}]\n",
			[]want{`3:57: task "a" expand env may not set ANTHROPIC_API_KEY`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWithOptions("w.yaml", []byte(tt.src), opts)
			checkProblems(t, "w.yaml", tt.src, err, tt.wants)
		})
	}
}

// The added nodes get the template's context, each with its component's
// files as targets unless the template names its own (CTX-10), its budget
// (max_cost_usd) and may_change_interfaces; a component whose files cover
// an interface's file defines it: its node's interface globs lock the
// file once it has succeeded (HIER-03, HIER-06).
func TestExpandContextBudgetInterfaces(t *testing.T) {
	cat := strategies(t)
	ctx, err := cat.Spec("implementer_targeted", 9000, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := cat.Spec("implementer_targeted", 0, []string{"docs/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := mustPlan(t, string(agentoutput.Example(agentoutput.Plan)))
	tests := []struct {
		name        string
		expand      *protocol.ExpandSpec
		wantTargets map[string][]string // node: its context's targets (nil: no context)
		wantCost    float64
		wantMay     []string
	}{
		{"no context", &protocol.ExpandSpec{}, map[string][]string{"plan--user-model": nil, "plan--login": nil}, 0, nil},
		{"targets from files", &protocol.ExpandSpec{Context: ctx, MaxCostUSD: 1.5, MayChangeInterfaces: []string{"api/types.go"}},
			map[string][]string{"plan--user-model": {"models/user.go", "migrations/*.sql"}, "plan--login": {"api/login*.go"}},
			1.5, []string{"api/types.go"}},
		{"targets of the template", &protocol.ExpandSpec{Context: fixed},
			map[string][]string{"plan--user-model": {"docs/**"}, "plan--login": {"docs/**"}}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &protocol.WorkflowSpec{Name: "w", Tasks: []protocol.TaskSpec{{ID: "plan", Prompt: "p", Output: "plan", TaskRare: &protocol.TaskRare{Expand: tt.expand}}}}
			x, err := Expand(spec, "plan", plan)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range x.Tasks {
				want, ok := tt.wantTargets[task.ID]
				if !ok {
					continue
				}
				switch {
				case want == nil && task.Context != nil:
					t.Errorf("%s: context %+v, want none", task.ID, task.Context)
				case want != nil && (task.Context == nil || !reflect.DeepEqual(task.Context.Targets, want) ||
					task.Context.Budget != tt.expand.Context.Budget || task.Context.Strategy != "implementer_targeted"):
					t.Errorf("%s: context %+v, want targets %q", task.ID, task.Context, want)
				}
				if task.MaxCostUSD() != tt.wantCost || !reflect.DeepEqual(task.MayChangeInterfaces(), tt.wantMay) {
					t.Errorf("%s: max_cost_usd %v may_change_interfaces %q", task.ID, task.MaxCostUSD(), task.MayChangeInterfaces())
				}
			}
			if tt.expand.Context != nil && len(tt.expand.Context.Targets) == 0 && len(x.Tasks[0].Context.Targets) > 0 &&
				&x.Tasks[0].Context.Targets[0] == &x.Tasks[1].Context.Targets[0] {
				t.Error("nodes share one context")
			}
		})
	}
}

// HIER-03: the component whose files cover an interface's file defines
// it, the first in plan order; an interface whose file no component's
// files cover, or that has no file, locks nothing.
func TestExpandInterfaceDefiners(t *testing.T) {
	plan := mustPlan(t, `{"status":"COMPLETE","estimated_components":3,"phases":[
	  {"id":"contracts","components":[{"id":"types","description":"the API types","files":["api/"]}],
	   "interfaces":[{"name":"LoginRequest","type":"go","definition":"type LoginRequest struct{}","file":"api/types.go"},
	                 {"name":"Token","type":"go","definition":"type Token string","file":"auth/token.go"},
	                 {"name":"Events","type":"openapi","definition":"openapi: 3.1.0"}]},
	  {"id":"build","components":[
	    {"id":"login","description":"the handler","files":["api/login.go","api/types.go"],"interfaces":["LoginRequest"]},
	    {"id":"hash","description":"hashing","files":["hash/*.go"]}]}]}`)
	spec := &protocol.WorkflowSpec{Name: "w", Tasks: []protocol.TaskSpec{{ID: "plan", Prompt: "p", Output: "plan"}}}
	x, err := Expand(spec, "plan", plan)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, task := range x.Tasks {
		got[task.ID] = task.Interface()
	}
	want := map[string][]string{"plan--types": {"api/types.go"}, "plan--login": nil, "plan--hash": nil}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("interfaces %q, want %q", got, want)
	}
	if p := x.Tasks[0].Prompt; !strings.Contains(p, "Interface LoginRequest (go, in api/types.go), fixed by the plan:") ||
		!strings.Contains(p, "This component defines interface LoginRequest in api/types.go: once it is accepted, that file is locked") {
		t.Fatalf("definer's prompt:\n%s", p)
	}
	if strings.Contains(x.Tasks[1].Prompt, "This component defines") {
		t.Fatalf("user's prompt:\n%s", x.Tasks[1].Prompt)
	}
	// An interface's file must be a path inside the repository: the
	// plan's check says where.
	_, err = agentoutput.Decode(agentoutput.Plan, []byte(`{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p",`+
		`"components":[{"id":"a","description":"d"}],"interfaces":[{"name":"I","type":"go","definition":"x","file":"../out.go"}]}]}`))
	if err == nil || !strings.Contains(err.Error(), `/phases/0/interfaces/0/file: "../out.go" must stay inside the repository`) {
		t.Fatalf("bad interface file: %v", err)
	}
}

// An expand template's role is resolved at parse time as a task's (ROLE-01,
// ROLE-06): it fills what the template leaves unset — agent, output,
// context, feedback template — and its prompt is rendered around each
// added node's prompt, with the component's files as its targets.
func TestExpandRole(t *testing.T) {
	opts := realSources(t)
	spec, err := ParseWithOptions("w.yaml", []byte(`name: roles
gates: [go-build, go-test]
tasks:
  - id: plan
    role: planner
    prompt: Split the feature.
    expand: {role: implementer, gates: [go-test]}
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	e := spec.Tasks[0].Expand()
	if e.Role != "implementer" || e.Output != "implementation" || e.Agent == nil || e.Agent.Adapter != "claude-code" ||
		e.Context == nil || e.Context.Strategy != "implementer_targeted" || e.Context.Budget != 25000 ||
		e.FeedbackTemplate != "implementer" || e.RolePrompt == nil || !reflect.DeepEqual(e.Gates, []string{"go-test"}) || e.AllowEmpty {
		t.Fatalf("expand %+v", e)
	}
	x, err := Expand(spec, "plan", mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[`+
		`{"id":"bye","description":"Add Bye.","files":["greet/bye*.go"]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	n := x.Tasks[0]
	if n.Role() != "implementer" || n.FeedbackTemplate() != "implementer" || n.Output != "implementation" ||
		!reflect.DeepEqual(n.Context.Targets, []string{"greet/bye*.go"}) {
		t.Fatalf("node %+v", n)
	}
	for _, want := range []string{"You are an implementer", "Task plan--bye:", "## Component bye (phase p) of the plan of plan\n\nAdd Bye.",
		"Files in scope:\n- greet/bye*.go", "Work test first", "at least 80% unit-test coverage"} {
		if !strings.Contains(n.Prompt, want) {
			t.Errorf("the node's prompt lacks %q:\n%s", want, n.Prompt)
		}
	}
	// The workflow as the event log gives it back expands the same: the
	// role's prompt travels in the spec, its config as JSON.
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var again protocol.WorkflowSpec
	if err := json.Unmarshal(data, &again); err != nil {
		t.Fatal(err)
	}
	y, err := Expand(&again, "plan", mustPlan(t, `{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[`+
		`{"id":"bye","description":"Add Bye.","files":["greet/bye*.go"]}]}]}`))
	if err != nil || y.Tasks[0].Prompt != n.Prompt {
		t.Fatalf("after a round trip: %v\n%s\nwant\n%s", err, y.Tasks[0].Prompt, n.Prompt)
	}
	// What the template sets wins over its role; a role that plans is
	// refused; an unknown role is named.
	spec, err = ParseWithOptions("w.yaml", []byte(`name: roles
gates: [go-build]
tasks:
  - id: plan
    role: planner
    prompt: Split the feature.
    expand: {role: implementer, agent: {adapter: codex}, output: generic, context: reviewer_diff}
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if e := spec.Tasks[0].Expand(); e.Agent.Adapter != "codex" || e.Output != "generic" || e.Context.Strategy != "reviewer_diff" ||
		!reflect.DeepEqual(e.Gates, []string{"go-build"}) {
		t.Fatalf("expand %+v", e)
	}
	for _, tt := range []struct{ src, want string }{
		{"name: r\ntasks: [{id: a, role: planner, prompt: p, expand: {role: planner}}]\n", `2:58: task "a" expand role "planner" has output plan`},
		{"name: r\ntasks: [{id: a, role: planner, prompt: p, expand: {role: coder}}]\n", `2:58: unknown task "a" expand role "coder"`},
	} {
		_, err := ParseWithOptions("w.yaml", []byte(tt.src), opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %s", tt.src, err, tt.want)
		}
	}
}
