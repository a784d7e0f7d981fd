package engine

import (
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// newWorkflow builds the initial state of a submitted workflow.
func newWorkflow(e *protocol.Event) (*Workflow, error) {
	if e.Workflow == nil || e.Repo == nil {
		return nil, fmt.Errorf("workflow.submitted event for %s lacks its spec or repo", e.WorkflowID)
	}
	g, err := workflow.NewGraph(e.Workflow)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", e.WorkflowID, err)
	}
	w := &Workflow{
		ID: e.WorkflowID, Spec: e.Workflow, Repo: *e.Repo, RepoPath: e.RepoPath, Source: e.Source,
		Status: protocol.WorkflowRunning, SubmittedAt: e.Time, Nodes: map[string]*Node{},
		Order: g.TopoOrder(), Branch: BranchName(e.WorkflowID),
		deps: map[string][]string{},
	}
	for _, t := range e.Workflow.Tasks {
		defs := e.Workflow.GateDefinitions(t)
		layers, err := workflow.GateLayers(defs, t.Gates)
		if err != nil {
			return nil, fmt.Errorf("workflow %s task %s: %w", e.WorkflowID, t.ID, err)
		}
		n := &Node{ID: t.ID, Task: t, Status: protocol.NodePending, Gates: map[string]*GateRun{},
			GateSpecs: map[string]protocol.GateSpec{}, OnFail: map[string]gates.FailAction{}}
		byName := make(map[string]protocol.GateSpec, len(defs))
		for _, d := range defs {
			byName[d.Name] = d
		}
		for _, layer := range layers {
			n.GateOrder = append(n.GateOrder, layer...)
			for _, g := range layer {
				n.GateSpecs[g] = byName[g]
				n.OnFail[g] = gates.TaskOnFail(t, byName[g])
			}
		}
		w.Nodes[t.ID] = n
		w.deps[t.ID] = t.DependsOn
	}
	return w, nil
}

// apply folds one event into the state. It is the only place state
// changes, used both live and when replaying the log after a restart.
func (e *Engine) apply(ev *protocol.Event, seq uint64) error {
	if ev.Type == protocol.EvWorkflowSubmitted {
		if _, ok := e.wfs[ev.WorkflowID]; ok {
			return nil // duplicate submission event
		}
		w, err := newWorkflow(ev)
		if err != nil {
			return err
		}
		w.LastSeq = seq
		e.wfs[w.ID] = w
		e.order = append(e.order, w.ID)
		return nil
	}
	w, ok := e.wfs[ev.WorkflowID]
	if !ok {
		return fmt.Errorf("event %s for unknown workflow %s", ev.Type, ev.WorkflowID)
	}
	w.LastSeq = seq
	var n *Node
	if ev.NodeID != "" {
		if n = w.Nodes[ev.NodeID]; n == nil {
			return fmt.Errorf("event %s for unknown node %s/%s", ev.Type, ev.WorkflowID, ev.NodeID)
		}
	}
	switch ev.Type {
	case protocol.EvWorkflowCancelled:
		w.CancelRequested = true
	case protocol.EvWorkflowFinished:
		w.Status, w.FinishedAt, w.Reason = ev.WorkflowStatus, ev.Time, ev.Reason
	case protocol.EvNodeReady:
		n.Status, n.Attempt, n.ReadyAt = protocol.NodeReady, ev.Attempt, ev.Time
		n.LeaseToken, n.Host, n.Agent, n.Patch = 0, "", nil, nil
		n.Gates = map[string]*GateRun{}
		n.published = false
	case protocol.EvNodeStarted:
		n.Status, n.LeaseToken, n.Host = protocol.NodeRunning, ev.LeaseToken, ev.Host
		if n.StartedAt.IsZero() {
			n.StartedAt = ev.Time
		}
	case protocol.EvNodeAgentDone:
		n.Agent = ev.Agent
		if ev.Agent != nil && ev.Agent.Status == protocol.AgentSucceeded {
			n.Status, n.Patch = protocol.NodeGating, ev.Agent.Patch
			for _, g := range n.GateOrder {
				n.Gates[g] = &GateRun{Name: g}
			}
		}
	case protocol.EvGateDispatched:
		g := n.gate(ev.Gate)
		g.Dispatched, g.Round, g.published, g.NoCache = true, g.Round+1, false, ev.NoCache
		// A new round is a new job, whose lease (lease/<job-id>) has
		// fencing tokens of its own; it is out until its result arrives.
		g.LeaseToken, g.Awaiting = 0, true
	case protocol.EvGateRerun:
		// A human asked for the gate again: its earlier outcome and pending
		// clock no longer count; stepGates dispatches it in its layer.
		g := n.gate(ev.Gate)
		g.Dispatched, g.Status, g.Result, g.NoCache = false, "", nil, ev.NoCache
		g.PendingSince, g.NextPollAt = time.Time{}, time.Time{}
	case protocol.EvGateStarted:
		g := n.gate(ev.Gate)
		g.LeaseToken, g.Host = ev.LeaseToken, ev.Host
	case protocol.EvGateFinished:
		g := n.gate(ev.Gate)
		g.Status, g.Result, g.Awaiting = ev.GateResult.Status, ev.GateResult, false
		if ev.GateResult.Host != "" {
			g.Host = ev.GateResult.Host
		}
		if g.Status == protocol.GatePending {
			if g.PendingSince.IsZero() {
				g.PendingSince = ev.Time
			}
			g.NextPollAt = ev.Time.Add(n.GateSpecs[ev.Gate].PollInterval())
		}
	case protocol.EvNodeIntegrated:
		n.Commit, w.Head = ev.Commit, ev.Commit
		w.Integrated = append(w.Integrated, n.ID)
	case protocol.EvNodeReopened:
		w.reopen(n)
	case protocol.EvNodeFinished:
		n.Status, n.Reason, n.EndedAt = ev.NodeStatus, ev.Reason, ev.Time
	case protocol.EvNodeGatesChanged:
		return w.applyGateChange(n, ev.GateChange) // gates_registry.go
	default:
		return fmt.Errorf("unknown event type %q", ev.Type)
	}
	return nil
}

func (n *Node) gate(name string) *GateRun {
	g := n.Gates[name]
	if g == nil {
		g = &GateRun{Name: name}
		n.Gates[name] = g
	}
	return g
}

// reopen puts a failed node back to gating, its skipped dependents back to
// pending and the workflow back to running (a gate rerun after failure).
func (w *Workflow) reopen(n *Node) {
	w.Generation++
	n.Status, n.Reason, n.EndedAt = protocol.NodeGating, "", time.Time{}
	changed := true
	for changed { // dependents skipped because of n, transitively
		changed = false
		for _, id := range w.Order {
			d := w.Nodes[id]
			if d.Status != protocol.NodeSkipped {
				continue
			}
			for _, dep := range w.deps[id] {
				if st := w.Nodes[dep].Status; !st.Terminal() || dep == n.ID {
					d.Status, d.Reason, d.EndedAt = protocol.NodePending, "", time.Time{}
					changed = true
					break
				}
			}
		}
	}
	if w.Status.Terminal() {
		w.Status, w.FinishedAt, w.Reason = protocol.WorkflowRunning, time.Time{}, ""
	}
}
