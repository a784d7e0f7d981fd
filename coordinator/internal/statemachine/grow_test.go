package statemachine_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// growPlan defines interface LoginRequest in api/types.go, which
// component types's files cover (so types defines it), and which login,
// in the next phase, uses.
const growPlan = `{"status":"COMPLETE","estimated_components":3,"phases":[
 {"id":"contracts","components":[{"id":"types","description":"the API types","files":["api/types.go"]}],
  "interfaces":[{"name":"LoginRequest","type":"go","definition":"type LoginRequest struct{ Email string }","file":"api/types.go"}]},
 {"id":"build","components":[
  {"id":"login","description":"the handler","files":["api/login.go"],"interfaces":["LoginRequest"]},
  {"id":"store","description":"the store","files":["store/"]}]}]}`

const implOK = `{"status":"SUCCESS","files_created":[],"files_modified":[],"tests_written":[]}`

// Nodes a plan adds have what a hand-written node can: the interface the
// plan's component defines is locked once that node has succeeded
// (HIER-03, HIER-06), the expand template's budget stops an added node
// (max_cost_usd), and its context is packed with the component's files
// as targets (CTX-10).
func TestPlanNodesLikeTasks(t *testing.T) {
	const yaml = "name: g\n" + agent + `tasks:
  - id: plan
    prompt: plan it
    output: plan
    gates: []
    expand: {gates: [], max_cost_usd: 0.05}
`
	runScenarios(t, []scenario{{
		name:   "interfaces and budgets of added nodes",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready plan", "publish agent plan a1"),
		steps: []step{
			{"the plan adds three nodes; types starts", func(w *world) []string {
				w.say = func(node string, _ uint64) string {
					if node == "plan" {
						return block(growPlan)
					}
					return block(implOK)
				}
				return w.agentDone("plan", 1, protocol.AgentSucceeded, false)
			}, lines("node.agent_done plan succeeded", "integrate plan", "node.integrated plan",
				"workflow.nodes_added plan +plan--types +plan--login +plan--store", "node.finished plan succeeded",
				"node.ready plan--types", "publish agent plan--types a1")},
			{"types writes the interface and succeeds: it is locked", func(w *world) []string {
				touching(w, "api/types.go")
				return w.agentDone("plan--types", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done plan--types succeeded", "integrate plan--types", "node.integrated plan--types",
				"node.finished plan--types succeeded", "node.ready plan--login", "publish agent plan--login a1",
				"node.ready plan--store", "publish agent plan--store a1")},
			{"login changes the locked interface: its round fails", func(w *world) []string {
				touching(w, "api/types.go", "api/login.go")
				return w.agentDone("plan--login", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done plan--login succeeded", "node.retry_scheduled plan--login")},
			{"store's round fails at $0.03: under its budget", func(w *world) []string {
				return w.agentRun("plan--store", 1, protocol.AgentFailed, 0.03, false)
			}, lines("node.agent_done plan--store failed", "node.retry_scheduled plan--store")},
			{"both retry", func(w *world) []string { return w.later(time.Hour) },
				lines("node.ready plan--login", "publish agent plan--login a2", "node.ready plan--store", "publish agent plan--store a2")},
			{"login leaves the interface alone: accepted", func(w *world) []string {
				touching(w, "api/login.go")
				return w.agentDone("plan--login", 2, protocol.AgentSucceeded, true)
			}, lines("node.agent_done plan--login succeeded", "integrate plan--login", "node.integrated plan--login",
				"node.finished plan--login succeeded")},
			{"store spends $0.06 in all: over the expand's budget, it escalates", func(w *world) []string {
				return w.agentRun("plan--store", 2, protocol.AgentFailed, 0.03, false)
			}, lines("node.agent_done plan--store failed", "node.escalated plan--store")},
		},
		after: func(t *testing.T, w *world) {
			login := w.node("plan--login")
			want := "interface_locked: the patch changes locked interface files (api/types.go) defined by plan--types"
			if r := login.History()[0].Reason; !strings.HasPrefix(r, want) {
				t.Errorf("login's failed round: %q, want it to start %q", r, want)
			}
			if r := w.node("plan--store").Reason; !strings.HasPrefix(r, "budget spent: the node's agent runs cost $0.0600, its max_cost_usd is $0.05") {
				t.Errorf("store's reason %q", r)
			}
		},
	}})
}

// An expand template's context reaches the added nodes' jobs, with each
// component's files as $TARGET and the interfaces locked for it as
// $INTERFACES (CTX-10, CTX-09).
func TestPlanNodesContext(t *testing.T) {
	cat, err := contextpack.Load(filepath.Join("..", "..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workflow.ParseWithOptions("wf.yaml", []byte("name: c\n"+agent+`tasks:
  - id: plan
    prompt: plan it
    output: plan
    expand: {context: {strategy: implementer_targeted, budget: 9000}}
`), workflow.Options{Strategies: cat})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, st: statemachine.New(), id: testWF, now: t0, published: map[string]bool{}, roundTrip: true}
	repo := protocol.RepoRef{ID: "r-test", BaseCommit: strings.Repeat("b", 40), Bundle: "r-test/base.bundle"}
	w.carry(statemachine.Submit(testWF, statemachine.Submission{Spec: spec, Repo: repo, Source: "wf.yaml"}, w.now))
	w.settle()
	if job := publishedJob(t, w, "plan"); job.Context != nil {
		t.Fatalf("the planner packs no context: %+v", job.Context)
	}
	w.say = func(node string, _ uint64) string {
		if node == "plan" {
			return block(growPlan)
		}
		return block(implOK)
	}
	w.agentDone("plan", 1, protocol.AgentSucceeded, false)
	types := publishedJob(t, w, "plan--types")
	if c := types.Context; c == nil || c.Strategy != "implementer_targeted" || c.Budget != 9000 ||
		strings.Join(c.Targets, ",") != "api/types.go" || len(c.Interfaces) != 0 || !strings.Contains(c.Plan, "### Task plan") {
		t.Fatalf("types's context %+v", types.Context)
	}
	touching(w, "api/types.go")
	w.agentDone("plan--types", 1, protocol.AgentSucceeded, true)
	login := publishedJob(t, w, "plan--login")
	if c := login.Context; c == nil || strings.Join(c.Targets, ",") != "api/login.go" || strings.Join(c.Interfaces, ",") != "api/types.go" {
		t.Fatalf("login's context %+v", login.Context)
	}
	if store := publishedJob(t, w, "plan--store"); strings.Join(store.Context.Targets, ",") != "store/**" {
		t.Fatalf("store's targets %v", store.Context.Targets)
	}
}

// An expand template's after list (TPL-03): the components wait for the
// sign-offs between the plan and its build. The plan's review and the
// interface definition run first, each reading the plan in its prompt, and
// do not wait for the components; the steps after them do.
func TestPlanWaitsForSignOffs(t *testing.T) {
	approve := func(node string) func(w *world) []string {
		return func(w *world) []string { return w.command(statemachine.Approve(w.wf(), node, "ada", "", w.now)) }
	}
	runScenarios(t, []scenario{{
		name: "components start once the interfaces are approved",
		yaml: "name: e\n" + agent + outputGates + `tasks:
  - id: plan
    prompt: plan the feature
    output: plan
    gates: []
    expand: {prompt: Build this component., gates: [test], after: [interface_definition]}
  - {id: plan_review, prompt: review the plan, depends_on: [plan], gates: [], approval: required}
  - {id: interface_definition, prompt: define the interfaces, depends_on: [plan_review], gates: [], approval: required}
  - {id: implement, prompt: integrate it, depends_on: [plan, interface_definition], gates: []}
`,
		submit: lines("workflow.submitted", "node.ready plan", "publish agent plan a1"),
		steps: []step{
			{"the plan: nodes added, but only its review starts", func(w *world) []string {
				return w.agentSays("plan", 1, block(planBlock), false)
			}, lines("node.agent_done plan succeeded", "integrate plan", "node.integrated plan",
				"workflow.nodes_added plan +plan--model +plan--hash +plan--login", "node.finished plan succeeded",
				"node.ready plan_review", "publish agent plan_review a1")},
			{"the components wait for the interfaces; the review does not wait for them", func(w *world) []string {
				var out []string
				for _, id := range []string{"plan--model", "plan--login", "plan_review", "implement"} {
					out = append(out, id+": "+strings.Join(w.node(id).Task.DependsOn, " "))
				}
				return out
			}, lines("plan--model: plan interface_definition", "plan--login: plan interface_definition plan--model plan--hash",
				"plan_review: plan", "implement: plan interface_definition plan--model plan--hash plan--login")},
			{"the reviewer reads the plan", func(w *world) []string {
				p := w.job("plan_review").Prompt
				if !strings.HasPrefix(p, "review the plan\n\n## Reports of the tasks this one depends on\n\n### plan (plan)\n\n```json\n{\n") ||
					!strings.Contains(p, `"description": "login endpoint"`) {
					return []string{"prompt: " + p}
				}
				return nil
			}, nil},
			agentStep("reviewed: a human signs it off", "plan_review", 1, protocol.AgentSucceeded, false,
				"node.agent_done plan_review succeeded", "node.awaiting_approval plan_review"),
			{"signed off: the interfaces are defined", approve("plan_review"),
				lines("node.approved plan_review", "integrate plan_review", "node.integrated plan_review", "node.finished plan_review succeeded",
					"node.ready interface_definition", "publish agent interface_definition a1")},
			agentStep("defined: a human approves them; no component yet", "interface_definition", 2, protocol.AgentSucceeded, true,
				"node.agent_done interface_definition succeeded", "node.awaiting_approval interface_definition"),
			{"approved: the first phase's components start", approve("interface_definition"),
				lines("node.approved interface_definition", "integrate interface_definition", "node.integrated interface_definition",
					"node.finished interface_definition succeeded",
					"node.ready plan--model", "publish agent plan--model a1", "node.ready plan--hash", "publish agent plan--hash a1")},
		},
	}})
}
