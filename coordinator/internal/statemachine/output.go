package statemachine

// Structured output (OUT-01…OUT-09): a task with an output schema accepts
// an agent round only when the agent's final message ends with a valid
// result block. The block is checked once, when the result is reported,
// and the check travels in the node.agent_done event; everything decided
// from it here reads only the state, so a replay decides the same.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/agentoutput"
	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/redact"
)

// checkOutput checks a successful agent result against the task's output
// schema: the final message the CLI reported (Run.Text), or for a job
// without a parsed run, or run by the command adapter, the tail of its
// standard output. It returns nil
// when the task has no schema or the agent did not succeed.
func checkOutput(t *protocol.TaskSpec, a *protocol.AgentResult) *protocol.AgentOutput {
	if t.Output == "" || a == nil || a.Status != protocol.AgentSucceeded {
		return nil
	}
	text, source := a.Stdout, "stdout"
	if a.Run != nil && a.Run.Adapter != "command" {
		// The command adapter reads no final message: its stdout is it.
		text, source = a.Run.Text, "run"
	}
	out := &protocol.AgentOutput{Schema: t.Output, Source: source}
	o, err := agentoutput.Parse(t.Output, redact.String(text))
	var ie *agentoutput.InvalidError
	switch {
	case err == nil:
		out.Block, out.Status = o.Block, o.Status()
	case errors.Is(err, agentoutput.ErrNoBlock):
		out.Problem, out.Error = protocol.OutputNoBlock, err.Error()
	case errors.As(err, &ie):
		out.Problem, out.Error = protocol.OutputInvalid, fmt.Sprintf("the block does not match the %s schema", t.Output)
		for _, v := range ie.Violations {
			p := v.Path
			if p == "" {
				p = "(the block)"
			}
			out.Violations = append(out.Violations, p+": "+v.Message)
		}
		if ie.Omitted > 0 {
			out.Violations = append(out.Violations, fmt.Sprintf("… and %d more", ie.Omitted))
		}
	default:
		out.Problem, out.Error = protocol.OutputInvalid, err.Error()
	}
	return out
}

// outputFailure says whether node n's round fails on its result block:
// no block, an invalid one, a status that asks for another round, a
// planner's plan that cannot be added to the workflow (all fixable), or a
// BLOCKED status, which escalates at once with the agent's blockers.
func (w *Workflow) outputFailure(n *Node) (failure, bool) {
	o := n.Output
	if n.Task.Output == "" || o == nil {
		return failure{}, false
	}
	if !o.Valid() {
		what := "no result block"
		if o.Problem == protocol.OutputInvalid {
			what = "an invalid result block"
		}
		return failure{agent: fmt.Sprintf("output: %s (%s): %s", what, o.Schema, o.Error), output: &feedback.Output{
			Schema: o.Schema, Problem: o.Problem, Error: o.Error, Violations: o.Violations}}, true
	}
	var b struct {
		Blockers []string `json:"blockers"`
	}
	_ = json.Unmarshal(o.Block, &b) // a valid block: it decodes
	switch o.Status {
	case agentoutput.StatusBlocked:
		blockers := strings.Join(b.Blockers, "; ")
		return failure{agent: "output: the agent reported BLOCKED: " + blockers,
			escalate: "the agent is blocked: " + blockers,
			output:   &feedback.Output{Schema: o.Schema, Problem: feedback.OutputStatus, Status: o.Status, Error: blockers}}, true
	case agentoutput.StatusNeedsRevision, agentoutput.StatusPartial, agentoutput.StatusFailed, agentoutput.StatusNeedsRefinement:
		return failure{agent: "output: the agent reported " + o.Status, output: &feedback.Output{Schema: o.Schema,
			Problem: feedback.OutputStatus, Status: o.Status, Error: "the result block's status is " + o.Status}}, true
	}
	if o.Schema == agentoutput.Plan {
		if _, err := w.expansion(n); err != nil {
			msg := "the plan cannot be added to the workflow: " + err.Error()
			return failure{agent: "output: " + msg, output: &feedback.Output{Schema: o.Schema, Problem: protocol.OutputInvalid,
				Error: msg}}, true
		}
	}
	return failure{}, false
}

// withOutputInstructions appends to prompt the required output format of
// schema (OUT-08), unless the prompt (a role's template may have put them
// there) or the feedback that follows it already carries them.
func withOutputInstructions(prompt, schema, feedbackText string) string {
	ins := agentoutput.Instructions(schema)
	if ins == "" {
		return prompt
	}
	header, _, _ := strings.Cut(ins, "\n")
	if strings.Contains(prompt, header) || strings.Contains(feedbackText, header) {
		return prompt
	}
	return strings.TrimRight(prompt, "\n") + "\n\n" + ins
}

// MaxDependencyReports bounds, in bytes, the reports of a node's
// dependencies added to its agent's prompt (64 KiB); those past it are
// named, not shown.
const MaxDependencyReports = 64 << 10

// withDependencyReports appends to prompt the validated result blocks of
// the tasks node n depends on directly, in its depends_on order: a plan
// reviewer reads the plan it reviews, an integrator its components'
// reports. A dependency without a valid block adds nothing.
func (w *Workflow) withDependencyReports(prompt string, n *Node) string {
	var b strings.Builder
	var omitted []string
	for _, id := range n.Task.DependsOn {
		d := w.Nodes[id]
		if d == nil || !d.Output.Valid() {
			continue
		}
		var pretty bytes.Buffer
		if json.Indent(&pretty, d.Output.Block, "", "  ") != nil {
			pretty.Reset()
			pretty.Write(d.Output.Block)
		}
		section := fmt.Sprintf("### %s (%s)\n\n```json\n%s\n```\n\n", id, d.Output.Schema, pretty.String())
		if b.Len()+len(section) > MaxDependencyReports {
			omitted = append(omitted, id)
			continue
		}
		b.WriteString(section)
	}
	if b.Len() == 0 && len(omitted) == 0 {
		return prompt
	}
	out := strings.TrimRight(prompt, "\n") + "\n\n## Reports of the tasks this one depends on\n\n" + b.String()
	if len(omitted) > 0 {
		out += fmt.Sprintf("Not shown (over %d KiB of reports): %s.\n", MaxDependencyReports>>10, strings.Join(omitted, ", "))
	}
	return out
}

// expansion is what planner n's valid, complete plan adds to the workflow.
func (w *Workflow) expansion(n *Node) (workflow.Expansion, error) {
	var plan agentoutput.PlanOutput
	if err := json.Unmarshal(n.Output.Block, &plan); err != nil {
		return workflow.Expansion{}, fmt.Errorf("decode the plan: %w", err)
	}
	return workflow.Expand(w.Spec, n.ID, &plan)
}

// expands reports whether node n, succeeding now, adds its plan's nodes.
func (n *Node) expands() bool {
	return n.Task.Output == agentoutput.Plan && n.Output.Valid() && n.Output.Status == agentoutput.StatusComplete &&
		n.Expanded() == 0 && n.AgentSucceeded()
}

// ReviewRejected reports whether node n's review counts as a rejection
// (OUT-07): its task's schema is review and its round ended without a
// valid block, or with a verdict other than APPROVED. Review gates act on
// it later; for now it is recorded and shown.
func (n *Node) ReviewRejected() bool {
	if n.Task.Output != agentoutput.Review || n.Output == nil {
		return false
	}
	return !n.Output.Valid() || n.Output.Status != agentoutput.VerdictApproved
}

// addNodes folds a workflow.nodes_added event: the planner's tasks are
// appended to the spec, the planner's former dependents wait for them
// too, and the order is recomputed. An expansion that would not make a
// valid workflow does not fold. The added tasks' prompts stay in the log
// (at seq) if the workflow's others do.
func (w *Workflow) addNodes(planner *Node, b eventlog.NodesAdded, seq uint64) error {
	spec := workflow.Grow(w.Spec, workflow.Expansion{Tasks: b.Tasks, Dependents: b.Dependents})
	g, err := workflow.NewGraph(spec)
	if err != nil {
		return fmt.Errorf("nodes added by %s/%s: %w", w.ID, planner.ID, err)
	}
	// The grown spec's tasks are the old ones (a dependent's depends_on
	// grown) and then the added ones, which the new nodes point at; the
	// nodes already there point at their entry in it, or, with a task of
	// their own, at a copy of it with the new depends_on.
	added := make([]*Node, 0, len(b.Tasks))
	plans := gatePlans{}
	for i := len(spec.Tasks) - len(b.Tasks); i < len(spec.Tasks); i++ {
		t := &spec.Tasks[i]
		n := &Node{ID: t.ID, Status: protocol.NodePending, Budget: t.Attempts()}
		if err := n.setTask(spec, t, plans); err != nil {
			return fmt.Errorf("nodes added by %s/%s: task %s: %w", w.ID, planner.ID, t.ID, err)
		}
		added = append(added, n)
	}
	// The nodes point into spec.Tasks: their prompts go once the fold is
	// sure to succeed.
	w.leaveAddedPromptsOut(spec.Tasks[len(spec.Tasks)-len(b.Tasks):], seq)
	for i := range spec.Tasks {
		t := &spec.Tasks[i]
		switch n := w.Nodes[t.ID]; {
		case n == nil:
		case n.ownTask() == nil:
			n.Task = t
		default:
			own := *n.ownTask()
			own.DependsOn = t.DependsOn
			n.Task = &own
			n.setOwnTask(&own)
		}
	}
	for _, n := range added {
		w.Nodes[n.ID] = n
	}
	w.Spec, w.Order = spec, g.TopoOrder()
	w.ordered()
	if len(b.Tasks) == 0 {
		planner.setExpanded(-1) // expanded, into nothing
	} else {
		planner.setExpanded(len(b.Tasks))
	}
	return nil
}
