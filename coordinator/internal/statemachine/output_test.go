package statemachine_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// agentSays reports node's agent succeeding with text as its final
// message (AgentResult.Run.Text), with a patch when patch is true.
func (w *world) agentSays(node string, token uint64, text string, patch bool) []string {
	return w.agentResult(node, token, patch, func(a *protocol.AgentResult) {
		a.Run = &protocol.AgentRun{Adapter: "claude-code", Success: true, Text: text}
	})
}

// agentResult reports node's agent succeeding, changed by set.
func (w *world) agentResult(node string, token uint64, patch bool, set func(*protocol.AgentResult)) []string {
	n := w.node(node)
	a := &protocol.AgentResult{JobID: protocol.AgentJobID(w.id, node, n.Attempt), WorkflowID: w.id, NodeID: node,
		Attempt: n.Attempt, LeaseToken: token, Host: "h", Status: protocol.AgentSucceeded, FinishedAt: w.now}
	if patch {
		a.Patch = &protocol.PatchRef{NodeID: node, Object: fmt.Sprintf("%s/%s/a%d.patch", w.id, node, n.Attempt),
			SHA256: fmt.Sprintf("sha-%s-a%d", node, n.Attempt), Size: 1,
			Stat: &protocol.PatchStat{Files: 1, Insertions: 1, Paths: []string{node + ".txt"}}}
	}
	set(a)
	return w.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: a})
}

func block(s string) string { return "Done.\n```json\n" + s + "\n```\n" }

const (
	genericOK      = `{"status":"SUCCESS","action_taken":"added it"}`
	genericBlocked = `{"status":"BLOCKED","action_taken":"nothing","blockers":["no database credentials","schema unknown"]}`
	outputGates    = "gates:\n  - {name: test, command: [go, test, ./...]}\n"
)

// Acceptance by schema (OUT-01, OUT-06, RETRY-05, RETRY-09): a round
// whose final message has no valid block is a fixable failure, retried
// with feedback saying what was wrong and what the schema requires; a
// BLOCKED status escalates at once with the agent's blockers; a valid
// block is kept on the node, and the gates run.
func TestOutputAcceptance(t *testing.T) {
	yaml := "name: o\n" + agent + outputGates + "tasks:\n  - {id: a, prompt: add Shout, output: generic, gates: [test]}\n"
	runScenarios(t, []scenario{{
		name:   "no block, then an invalid block, then a valid one",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"a marker is no block: retried, no gate runs", func(w *world) []string {
				return w.agentSays("a", 1, "STATUS: SUCCESS", true)
			}, lines("node.agent_done a succeeded", "node.retry_scheduled a")},
			{"the feedback says so, and the schema's requirements reach the prompt", func(w *world) []string {
				n := w.node("a")
				f := feedbackOf(t, n.Feedback())
				var out []string
				if f.Output == nil || f.Output.Problem != feedback.OutputNoBlock || f.Output.Schema != "generic" || len(f.Gates) != 0 {
					out = append(out, "feedback: "+string(n.Feedback()))
				}
				if !strings.HasPrefix(n.Reason, "output: no result block (generic)") {
					out = append(out, "reason: "+n.Reason)
				}
				w.later(time.Minute)
				job := w.job("a")
				if !strings.Contains(job.Prompt, "had no JSON block") || !strings.Contains(job.Prompt, "## Required output format (generic)") {
					out = append(out, "prompt: "+job.Prompt)
				}
				return out
			}, nil},
			{"an invalid block: retried with every violation", func(w *world) []string {
				return w.agentSays("a", 2, block(`{"status":"DONE"}`), true)
			}, lines("node.agent_done a succeeded", "node.retry_scheduled a")},
			{"the violations, with their JSON pointers", func(w *world) []string {
				f := feedbackOf(t, w.node("a").Feedback())
				return []string{f.Output.Problem, strings.Join(f.Output.Violations, " | ")}
			}, lines("invalid", "(the block): missing property 'action_taken' | /status: value must be one of 'SUCCESS', 'NEEDS_REVISION', 'BLOCKED'")},
			{"attempt 3", func(w *world) []string { return w.later(time.Minute) }, lines("node.ready a", "publish agent a a3")},
			{"a valid block: the gates run", func(w *world) []string {
				return w.agentSays("a", 3, block(genericOK), true)
			}, lines("node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1")},
			gateStep("test passes", "a", "test", 3, protocol.GatePassed,
				"gate.finished a/test passed", "integrate a", "node.integrated a", "node.finished a succeeded", "finish succeeded deliver"),
		},
		after: func(t *testing.T, w *world) {
			n := w.node("a")
			if !n.Output.Valid() || string(n.Output.Block) != genericOK || n.Output.Status != "SUCCESS" || n.Output.Source != "run" {
				t.Errorf("output %+v", n.Output)
			}
			if len(n.History()) != 2 || n.History()[1].Output.Problem != protocol.OutputInvalid {
				t.Errorf("history %+v", n.History())
			}
			s := service.Summary(w.wf(), true)
			if s.Nodes[0].Output == nil || string(s.Nodes[0].Output.Block) != genericOK {
				t.Errorf("status shows %+v", s.Nodes[0].Output)
			}
		},
	}, {
		name:   "BLOCKED escalates at once, with the blockers",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"blocked", func(w *world) []string { return w.agentSays("a", 1, block(genericBlocked), true) },
				lines("node.agent_done a succeeded", "node.escalated a")},
			{"the reason names the blockers; one attempt used", func(w *world) []string {
				n := w.node("a")
				return []string{string(n.Status), n.Reason, fmt.Sprint(n.Attempt)}
			}, lines("escalated", "the agent is blocked: no database credentials; schema unknown "+
				"(output: the agent reported BLOCKED: no database credentials; schema unknown)", "1")},
			{"a human lets it go on, with a note", func(w *world) []string {
				return w.command(statemachine.Retry(w.wf(), "a", "ada", "the credentials are in the vault now", 1, w.now))
			}, lines("node.retry_granted a", "node.ready a", "publish agent a a2")},
			{"the next prompt quotes the blockers and the note, and the schema once", func(w *world) []string {
				p := w.job("a").Prompt
				var out []string
				for _, want := range []string{"reported BLOCKED, with the blockers quoted below", "no database credentials; schema unknown",
					"the credentials are in the vault now"} {
					if !strings.Contains(p, want) {
						out = append(out, "no "+want)
					}
				}
				if n := strings.Count(p, "## Required output format (generic)"); n != 1 {
					out = append(out, fmt.Sprintf("the schema %d times", n))
				}
				return out
			}, nil},
		},
	}, {
		name:   "NEEDS_REVISION is another round; without a parsed run, stdout's tail is read",
		yaml:   yaml,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"needs revision", func(w *world) []string {
				return w.agentResult("a", 1, true, func(a *protocol.AgentResult) {
					a.Stdout = block(`{"status":"NEEDS_REVISION","action_taken":"half"}`)
				})
			}, lines("node.agent_done a succeeded", "node.retry_scheduled a")},
			{"stdout was read", func(w *world) []string {
				n := w.node("a")
				f := feedbackOf(t, n.Feedback())
				return []string{n.History()[0].Output.Source, f.Output.Problem, f.Output.Status}
			}, lines("stdout", "status", "NEEDS_REVISION")},
		},
	}, {
		name:   "a review's verdict is recorded: not APPROVED, or no block, counts as a rejection (OUT-07)",
		yaml:   "name: o\n" + agent + "tasks:\n  - {id: r, prompt: review, output: review}\n  - {id: s, prompt: review, output: review}\n",
		submit: lines("workflow.submitted", "node.ready r", "publish agent r a1", "node.ready s", "publish agent s a1"),
		steps: []step{
			{"changes requested: the round is accepted, the review is a rejection", func(w *world) []string {
				out := w.agentSays("r", 1, block(`{"status":"CHANGES_REQUESTED","issues":[{"severity":"major","description":"no test"}],"suggestions":[]}`), false)
				return append(out, fmt.Sprint(w.node("r").ReviewRejected()))
			}, lines("node.agent_done r succeeded", "integrate r", "node.integrated r", "node.finished r succeeded", "true")},
			{"no block: retried, and a rejection meanwhile", func(w *world) []string {
				out := w.agentSays("s", 1, "LGTM", false)
				return append(out, fmt.Sprint(w.node("s").ReviewRejected()))
			}, lines("node.agent_done s succeeded", "node.retry_scheduled s", "true")},
			{"approved", func(w *world) []string {
				w.later(time.Minute)
				out := w.agentSays("s", 2, block(`{"status":"APPROVED","issues":[],"suggestions":[]}`), false)
				return append(out, fmt.Sprint(w.node("s").ReviewRejected()))
			}, lines("node.agent_done s succeeded", "integrate s", "node.integrated s", "node.finished s succeeded",
				"finish succeeded deliver", "false")},
		},
	}})
}

const planYAML = "name: p\n" + agent + outputGates + `tasks:
  - id: plan
    prompt: plan the feature
    output: plan
    gates: []
    expand: {prompt: Build this component., gates: [test]}
  - {id: docs, prompt: document it, depends_on: [plan], gates: []}
`

const planBlock = `{"status":"COMPLETE","estimated_components":3,"phases":[
 {"id":"backend","components":[{"id":"model","description":"the model"},{"id":"hash","description":"hashing"}]},
 {"id":"api","components":[{"id":"login","description":"login endpoint","depends_on":["model"],"files":["api/login.go"]}]}]}`

// Plans that grow the DAG (HIER-01, DAG-02, DAG-03): a planner's valid
// plan adds a node per component when the planner succeeds, appended
// through workflow.nodes_added; they are scheduled like any node, the
// planner's dependents wait for them, and the workflow's counts include
// them. A plan that cannot be added is a fixable failure of the planner.
func TestPlanGrowsTheDAG(t *testing.T) {
	runScenarios(t, []scenario{{
		name:   "a plan's components become nodes",
		yaml:   planYAML,
		submit: lines("workflow.submitted", "node.ready plan", "publish agent plan a1"),
		steps: []step{
			{"the planner's plan: nodes added, then it succeeds; phase 1 starts", func(w *world) []string {
				return w.agentSays("plan", 1, "Here is the plan.\n"+block(planBlock), false)
			}, lines("node.agent_done plan succeeded", "integrate plan", "node.integrated plan",
				"workflow.nodes_added plan +plan--model +plan--hash +plan--login", "node.finished plan succeeded",
				"node.ready plan--model", "publish agent plan--model a1", "node.ready plan--hash", "publish agent plan--hash a1")},
			{"dependencies: the planner, depends_on and the phase before; docs waits for all", func(w *world) []string {
				var out []string
				for _, id := range []string{"plan--login", "docs"} {
					out = append(out, id+": "+strings.Join(w.node(id).Task.DependsOn, " "))
				}
				job := w.job("plan--model")
				if !strings.HasPrefix(job.Prompt, "Build this component.\n\n## Component model (phase backend) of the plan of plan\n\nthe model") ||
					!strings.Contains(job.Prompt, "## Required output format (implementation)") {
					out = append(out, "prompt: "+job.Prompt)
				}
				return out
			}, lines("plan--login: plan plan--model plan--hash", "docs: plan plan--model plan--hash plan--login")},
			{"model is built", func(w *world) []string {
				return w.agentSays("plan--model", 1, block(`{"status":"SUCCESS","files_created":["m.go"],"files_modified":[],"tests_written":["TestM"]}`), true)
			}, lines("node.agent_done plan--model succeeded", "gate.dispatched plan--model/test r1", "publish gate plan--model/test r1")},
			gateStep("its test passes", "plan--model", "test", 1, protocol.GatePassed, "gate.finished plan--model/test passed",
				"integrate plan--model", "node.integrated plan--model", "node.finished plan--model succeeded"),
			{"hash reports PARTIAL: another round", func(w *world) []string {
				return w.agentSays("plan--hash", 1, block(`{"status":"PARTIAL","files_created":[],"files_modified":[],"tests_written":[]}`), true)
			}, lines("node.agent_done plan--hash succeeded", "node.retry_scheduled plan--hash")},
			{"counts include the added nodes", func(w *world) []string {
				s := service.Summary(w.wf(), true)
				var planner string
				for _, n := range s.Nodes {
					if n.ID == "plan--hash" {
						planner = n.Planner
					}
				}
				return []string{fmt.Sprint(s.Counts), planner, fmt.Sprint(s.Nodes[0].Expanded)}
			}, lines("map[pending:2 retrying:1 succeeded:2]", "plan", "3")},
		},
	}, {
		name:   "components whose files overlap never run at once (DAG-07)",
		yaml:   "name: p\n" + agent + "tasks:\n  - {id: plan, prompt: plan, output: plan}\n",
		submit: lines("workflow.submitted", "node.ready plan", "publish agent plan a1"),
		steps: []step{
			{"two components share go.mod, a third does not: two start", func(w *world) []string {
				return w.agentSays("plan", 1, block(`{"status":"COMPLETE","estimated_components":3,"phases":[{"id":"one","components":[`+
					`{"id":"a","description":"a","files":["a/","go.mod"]},{"id":"b","description":"b","files":["b/","go.mod"]},`+
					`{"id":"c","description":"c","files":["c/"]}]}]}`), false)
			}, lines("node.agent_done plan succeeded", "integrate plan", "node.integrated plan",
				"workflow.nodes_added plan +plan--a +plan--b +plan--c", "node.finished plan succeeded",
				"node.ready plan--a", "publish agent plan--a a1", "node.ready plan--c", "publish agent plan--c a1")},
			{"a finishes: b starts", func(w *world) []string {
				return w.agentSays("plan--a", 1, block(`{"status":"SUCCESS","files_created":[],"files_modified":["go.mod"],"tests_written":[]}`), true)
			}, lines("node.agent_done plan--a succeeded", "integrate plan--a", "node.integrated plan--a", "node.finished plan--a succeeded",
				"node.ready plan--b", "publish agent plan--b a1")},
		},
	}, {
		name: "a plan that cannot be added is the planner's to fix",
		yaml: "name: p\n" + agent + "tasks:\n  - {id: plan, prompt: plan, output: plan}\n" +
			"  - {id: plan--model, prompt: taken}\n",
		submit: lines("workflow.submitted", "node.ready plan", "publish agent plan a1", "node.ready plan--model", "publish agent plan--model a1"),
		steps: []step{
			{"a component id clashes with a task", func(w *world) []string {
				return w.agentSays("plan", 1, block(planBlock), false)
			}, lines("node.agent_done plan succeeded", "node.retry_scheduled plan")},
			{"the feedback says why", func(w *world) []string {
				return []string{feedbackOf(t, w.node("plan").Feedback()).Output.Error}
			}, lines(`the plan cannot be added to the workflow: workflow: duplicate task id "plan--model"`)},
		},
	}, {
		name:   "a BLOCKED plan adds nothing and escalates",
		yaml:   planYAML,
		submit: lines("workflow.submitted", "node.ready plan", "publish agent plan a1"),
		steps: []step{
			{"blocked", func(w *world) []string {
				return w.agentSays("plan", 1, block(`{"status":"BLOCKED","phases":[],"estimated_components":0,"blockers":["which database?"]}`), false)
			}, lines("node.agent_done plan succeeded", "node.escalated plan")},
			{"a human approves: it succeeds, nothing is added, docs runs", func(w *world) []string {
				return w.command(statemachine.Approve(w.wf(), "plan", "ada", "", w.now))
			}, lines("node.approved plan", "integrate plan", "node.integrated plan", "node.finished plan succeeded",
				"node.ready docs", "publish agent docs a1")},
		},
	}})
}

// TestPlanReplay: folding a grown workflow's log again, encoded and
// decoded as the log gives it back, gives the same state, and deciding on
// it gives the same decision (the expansion is in the events).
func TestPlanReplay(t *testing.T) {
	w, _ := newWorld(t, planYAML, true)
	w.agentSays("plan", 1, block(planBlock), false)
	w.agentSays("plan--model", 1, block(`{"status":"SUCCESS","files_created":[],"files_modified":[],"tests_written":[]}`), true)
	w.agentSays("plan--hash", 1, "no block", true)
	for range 2 {
		st := statemachine.New()
		for _, ev := range w.events {
			data, err := eventlog.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			back, err := eventlog.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			back.Seq = ev.Seq
			if err := st.Apply(back); err != nil {
				t.Fatalf("replay %s: %v", describeEvent(back), err)
			}
		}
		got, _ := st.Workflow(testWF)
		want := w.wf()
		if !reflect.DeepEqual(service.Summary(got, true), service.Summary(want, true)) || !reflect.DeepEqual(got.Order, want.Order) {
			t.Fatalf("replayed state differs:\n%+v\n%+v", service.Summary(got, true), service.Summary(want, true))
		}
		d1, d2 := statemachine.Decide(got, w.now, nil), statemachine.Decide(want, w.now, nil)
		j1, _ := json.Marshal(d1)
		j2, _ := json.Marshal(d2)
		if string(j1) != string(j2) {
			t.Fatalf("replayed decision differs:\n%s\n%s", j1, j2)
		}
	}
}

// fuzzPlanWorkflow has a planner whose plan grows the DAG, a dependent of
// it, and tasks of the other schemas.
const fuzzPlanWorkflow = "name: fuzzplan\n" + agent + outputGates + `tasks:
  - {id: plan, prompt: plan, output: plan, gates: [], expand: {gates: [test]}}
  - {id: docs, prompt: docs, depends_on: [plan], output: generic, gates: []}
  - {id: rev, prompt: review, output: review, gates: [test]}
`

// fuzzTexts are the final messages the fuzzed agents choose from, by
// schema: valid blocks, invalid ones, BLOCKED, statuses that ask for
// another round, plans that grow the DAG and a plan that cannot.
var fuzzTexts = map[string][]string{
	"plan": {
		block(planBlock),
		block(`{"status":"COMPLETE","estimated_components":1,"phases":[{"id":"p","components":[{"id":"x","description":"d","depends_on":["x"]}]}]}`),
		block(`{"status":"BLOCKED","phases":[],"estimated_components":0,"blockers":["why"]}`),
		block(planBlock),
		block(`{"status":"NEEDS_REFINEMENT","phases":[],"estimated_components":0}`),
		"STATUS: SUCCESS",
	},
	"generic": {block(genericOK), block(genericBlocked), "", block(`{"status":"NEEDS_REVISION","action_taken":"x"}`)},
	"implementation": {
		block(`{"status":"SUCCESS","files_created":[],"files_modified":[],"tests_written":[]}`),
		block(`{"status":"FAILED","files_created":[],"files_modified":[],"tests_written":[]}`),
		"```json\n{broken\n```",
	},
	"review": {
		block(`{"status":"APPROVED","issues":[],"suggestions":[]}`),
		block(`{"status":"REJECTED","issues":[{"severity":"critical","description":"no"}],"suggestions":[]}`),
		"LGTM",
	},
}

// fuzzSay picks node's final message by its schema and the lease token.
func fuzzSay(w *world) func(string, uint64) string {
	return func(node string, token uint64) string {
		texts := fuzzTexts[w.node(node).Task.Output]
		return texts[int(token)%len(texts)]
	}
}

// FuzzPlanReplayIsDeterministic is FuzzReplayIsDeterministic's drive over
// a workflow whose agents answer with result blocks of every kind (valid,
// invalid, blocked, plans that grow the DAG and plans that cannot): the
// log it writes replays, twice, into the state the live fold reached, and
// the replayed state decides the same.
func FuzzPlanReplayIsDeterministic(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{2, 0, 0, 0},
		{2, 0, 2, 0, 2, 1, 2, 0, 3, 0, 0, 4, 200, 2, 0, 0},
		{2, 1, 0, 0, 7, 1, 1, 2, 0, 0, 2, 0, 0, 3, 0, 0, 3, 1, 0},
		growingSeed,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 400 {
			script = script[:400]
		}
		w, _ := newWorld(t, fuzzPlanWorkflow, true)
		w.say = fuzzSay(w)
		drive(w, script)
		for range 2 {
			st := statemachine.New()
			for _, ev := range w.events {
				data, err := eventlog.Encode(ev)
				if err != nil {
					t.Fatalf("encode %s: %v", describeEvent(ev), err)
				}
				back, err := eventlog.Decode(data)
				if err != nil {
					t.Fatalf("decode %s: %v", describeEvent(ev), err)
				}
				back.Seq = ev.Seq
				if err := st.Apply(back); err != nil {
					t.Fatalf("replay %s: %v", describeEvent(ev), err)
				}
			}
			if !reflect.DeepEqual(w.st, st) {
				t.Fatal("replaying the log gave another state than the live fold")
			}
			live, _ := w.st.Workflow(testWF)
			again, _ := st.Workflow(testWF)
			if d1, d2 := statemachine.Decide(live, w.now, nil), statemachine.Decide(again, w.now, nil); !reflect.DeepEqual(d1, d2) {
				t.Fatalf("the replayed state decides otherwise:\n%v\n%v", d1, d2)
			}
		}
	})
}

// growingSeed drives fuzzPlanWorkflow through a plan that grows the DAG
// and rounds of the added nodes.
var growingSeed = []byte{4, 0, 2, 0, 0, 0, 4, 0, 2, 0, 0, 0, 2, 1, 0, 0, 2, 2, 0, 0, 3, 0, 0, 3, 1, 0, 3, 2, 0, 4, 100, 2, 0, 0, 2, 0, 0}

// TestFuzzPlanSeedGrows keeps the fuzz target's corpus honest: one seed
// does add nodes, and runs some of them.
func TestFuzzPlanSeedGrows(t *testing.T) {
	w, _ := newWorld(t, fuzzPlanWorkflow, true)
	w.say = fuzzSay(w)
	drive(w, growingSeed)
	var added, ranAdded bool
	for _, ev := range w.events {
		switch b := ev.Body.(type) {
		case eventlog.NodesAdded:
			added = len(b.Tasks) == 3
		case eventlog.NodeAgentDone:
			ranAdded = ranAdded || strings.HasPrefix(ev.NodeID, "plan--")
		}
	}
	if !added || !ranAdded {
		t.Fatalf("the seed added nodes: %v, ran one: %v", added, ranAdded)
	}
}
