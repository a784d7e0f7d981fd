package statemachine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// agentRun reports node's agent ending with st under token, having cost
// cost (estimated or reported by its CLI) for 1000 input and 100 output
// tokens.
func (w *world) agentRun(node string, token uint64, st protocol.AgentStatus, cost float64, estimated bool) []string {
	n := w.node(node)
	a := &protocol.AgentResult{JobID: protocol.AgentJobID(w.id, node, n.Attempt), WorkflowID: w.id, NodeID: node,
		Attempt: n.Attempt, LeaseToken: token, Host: "h", Status: st, FinishedAt: w.now,
		Run: &protocol.AgentRun{Adapter: "codex", Model: "gpt-5-codex", SessionID: fmt.Sprintf("s%d", n.Attempt), Turns: 1,
			Usage: protocol.TokenUsage{Input: 1000, Output: 100}, CostUSD: cost, CostKnown: true, CostEstimated: estimated,
			Success: st == protocol.AgentSucceeded}}
	if st != protocol.AgentSucceeded {
		a.ExitCode, a.Error, a.Run.Class, a.Run.Error = 1, "turn failed: gave up", "agent", "turn failed: gave up"
	}
	return w.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: a})
}

// Budgets: a node whose agent runs have cost its max_cost_usd, or whose
// workflow's runs have cost the workflow's, starts no other round; it
// escalates with the spend in its reason. Spend is summed over every
// round and every node, estimated costs included and marked.
func TestBudgets(t *testing.T) {
	const head = "name: b\ndefaults:\n  agent: {adapter: codex, model: gpt-5-codex}\n  allow_empty: true\n"
	runScenarios(t, []scenario{{
		name:   "a node's budget: the round that reaches it is the last",
		yaml:   head + "tasks:\n  - {id: a, prompt: a, gates: [], max_cost_usd: 0.05}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"round 1 fails at $0.03: under the budget, a retry", func(w *world) []string {
				return w.agentRun("a", 1, protocol.AgentFailed, 0.03, false)
			}, lines("node.agent_done a failed", "node.retry_scheduled a")},
			{"round 2 fails at $0.03: $0.06 spent, no round 3", func(w *world) []string {
				w.later(time.Hour)
				return w.agentRun("a", 2, protocol.AgentFailed, 0.03, false)
			}, lines("node.agent_done a failed", "node.escalated a")},
		},
		after: func(t *testing.T, w *world) {
			n := w.node("a")
			if !strings.HasPrefix(n.Reason, "budget spent: the node's agent runs cost $0.0600, its max_cost_usd is $0.05") {
				t.Errorf("reason %q", n.Reason)
			}
			if s := n.Spend(); s.Runs != 2 || s.Usage.Input != 2000 || s.Usage.Output != 200 || s.CostEstimated {
				t.Errorf("spend %+v", s)
			}
			if n.LastRun() == nil || n.LastRun().SessionID != "s2" {
				t.Errorf("last run %+v, want round 2's", n.LastRun())
			}
		},
	}, {
		name:   "the workflow's budget: another node's spend stops a retry",
		yaml:   "max_cost_usd: 0.10\n" + head + "tasks:\n  - {id: a, prompt: a, gates: []}\n  - {id: b, prompt: b, gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready b", "publish agent b a1"),
		steps: []step{
			{"b succeeds at an estimated $0.08", func(w *world) []string {
				return w.agentRun("b", 1, protocol.AgentSucceeded, 0.08, true)
			}, lines("node.agent_done b succeeded", "integrate b", "node.integrated b", "node.finished b succeeded")},
			{"a fails at $0.03: $0.11 spent, a escalates", func(w *world) []string {
				return w.agentRun("a", 1, protocol.AgentFailed, 0.03, false)
			}, lines("node.agent_done a failed", "node.escalated a")},
		},
		after: func(t *testing.T, w *world) {
			r := w.node("a").Reason
			if !strings.HasPrefix(r, "budget spent: the workflow's agent runs cost $0.1100 (estimated), its max_cost_usd is $0.10") {
				t.Errorf("reason %q", r)
			}
			if s := w.wf().Spend(); s.Runs != 2 || !s.CostEstimated || s.Usage.Input != 2000 {
				t.Errorf("workflow spend %+v", s)
			}
		},
	}, {
		name:   "the workflow's budget: a node's first round is not started; a human's retry grants it",
		yaml:   "max_cost_usd: 0.05\n" + head + "tasks:\n  - {id: a, prompt: a, gates: []}\n  - {id: b, prompt: b, gates: [], depends_on: [a]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"a succeeds at $0.05: the budget is spent, b escalates unstarted", func(w *world) []string {
				return w.agentRun("a", 1, protocol.AgentSucceeded, 0.05, false)
			}, lines("node.agent_done a succeeded", "integrate a", "node.integrated a", "node.finished a succeeded", "node.escalated b")},
			{"b's reason names the spend", func(w *world) []string { return lines(w.node("b").Reason) },
				lines("budget spent: the workflow's agent runs cost $0.0500, its max_cost_usd is $0.05")},
			{"a human grants b a round: it starts", func(w *world) []string {
				return w.command(statemachine.Retry(w.wf(), "b", "ann", "", 1, w.now))
			}, lines("node.retry_granted b", "node.ready b", "publish agent b a1")},
		},
	}, {
		name:   "no budget: the attempts decide",
		yaml:   head + "tasks:\n  - {id: a, prompt: a, gates: []}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			{"an expensive failure is retried", func(w *world) []string {
				return w.agentRun("a", 1, protocol.AgentFailed, 100, false)
			}, lines("node.agent_done a failed", "node.retry_scheduled a")},
		},
	}})
}

// reviewerRun is what one reviewer's CLI reported: 500 input and 50
// output tokens at cost (estimated by the coordinator when estimated).
func reviewerRun(i int, adapter string, verdict string, cost float64, estimated bool) protocol.ReviewVerdict {
	return protocol.ReviewVerdict{Reviewer: i, Adapter: adapter, Verdict: verdict, Approved: verdict == "APPROVED",
		Run: &protocol.AgentRun{Adapter: adapter, Usage: protocol.TokenUsage{Input: 500, Output: 50},
			CostUSD: cost, CostKnown: true, CostEstimated: estimated, Success: true}}
}

// Review gates' reviewers cost money too: their runs count in the node's
// and the workflow's spend (with their part kept apart) and toward the
// task's and the workflow's max_cost_usd; a replay of the log gives the
// same spend.
func TestReviewSpendCountsTowardBudgets(t *testing.T) {
	const head = "name: b\ndefaults:\n  agent: {adapter: codex, model: gpt-5-codex}\n  allow_empty: true\n" + reviewGates
	for _, tc := range []struct {
		name, yaml, reason string
	}{{
		name:   "the task's budget",
		yaml:   head + "tasks:\n  - {id: a, prompt: a, gates: [review], max_cost_usd: 0.05}\n",
		reason: "budget spent: the node's agent runs and reviewers cost $0.0600 (estimated) (reviewers $0.0400), its max_cost_usd is $0.05",
	}, {
		name:   "the workflow's budget",
		yaml:   "max_cost_usd: 0.06\n" + head + "tasks:\n  - {id: a, prompt: a, gates: [review]}\n",
		reason: "budget spent: the workflow's agent runs and reviewers cost $0.0600 (estimated) (reviewers $0.0400), its max_cost_usd is $0.06",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := newWorld(t, tc.yaml, true)
			check(t, "the agent's round costs $0.02", w.agentRun("a", 1, protocol.AgentSucceeded, 0.02, false),
				lines("node.agent_done a succeeded", "gate.dispatched a/review r1", "publish gate a/review r1"))
			check(t, "the reviewers cost $0.04 and request changes: no other round", w.reviewDone("a", 1, protocol.GateFailed,
				reviewerRun(1, "claude-code", "APPROVED", 0.015, false), reviewerRun(2, "codex", "CHANGES_REQUESTED", 0.025, true)),
				lines("gate.finished a/review failed", "node.escalated a"))
			n := w.node("a")
			if !strings.HasPrefix(n.Reason, tc.reason) {
				t.Errorf("reason %q, want %q", n.Reason, tc.reason)
			}
			want := statemachine.Spend{
				SpendPart: statemachine.SpendPart{Runs: 3, Usage: protocol.TokenUsage{Input: 2000, Output: 200}, CostUSD: 0.06, CostEstimated: true},
				Review:    statemachine.SpendPart{Runs: 2, Usage: protocol.TokenUsage{Input: 1000, Output: 100}, CostUSD: 0.04, CostEstimated: true},
			}
			if !spendNear(n.Spend(), want) || !spendNear(w.wf().Spend(), want) {
				t.Errorf("node spend %+v, workflow spend %+v, want %+v", n.Spend(), w.wf().Spend(), want)
			}
			// The spend is the log's: a replay gives it again.
			st := statemachine.New()
			for _, ev := range w.events {
				if err := st.Apply(ev); err != nil {
					t.Fatal(err)
				}
			}
			re, _ := st.Workflow(w.id)
			if got := re.Nodes["a"].Spend(); !spendNear(got, want) {
				t.Errorf("replayed spend %+v, want %+v", got, want)
			}
		})
	}
}

// spendNear reports whether a and b are equal, costs to a micro-dollar.
func spendNear(a, b statemachine.Spend) bool {
	near := func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }
	if !near(a.CostUSD, b.CostUSD) || !near(a.Review.CostUSD, b.Review.CostUSD) {
		return false
	}
	a.CostUSD, a.Review.CostUSD, b.CostUSD, b.Review.CostUSD = 0, 0, 0, 0
	return a == b
}
