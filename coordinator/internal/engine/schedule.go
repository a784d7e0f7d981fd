package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// advance moves a workflow as far as its state allows: it skips nodes whose
// dependencies failed, publishes nodes whose dependencies all succeeded,
// dispatches and folds gates, and finishes the workflow when every node is
// terminal. It is idempotent: calling it again with no new events changes
// nothing but republishing jobs this process has not published yet.
// Callers hold e.mu.
func (e *Engine) advance(ctx context.Context, w *Workflow) {
	if w.Status.Terminal() {
		return
	}
	if err := e.step(ctx, w); err != nil {
		e.log.Warn("workflow cannot advance now; will retry", "workflow", w.ID, "err", err)
	}
}

func (e *Engine) step(ctx context.Context, w *Workflow) error {
	if w.CancelRequested {
		return e.cancelAll(ctx, w)
	}
	for _, id := range w.Order {
		n := w.Nodes[id]
		switch n.Status {
		case protocol.NodePending:
			blocked, waiting := w.depState(id)
			if blocked != "" {
				if err := e.finishNode(ctx, w, n, protocol.NodeSkipped, blocked); err != nil {
					return err
				}
				continue
			}
			if waiting {
				continue
			}
			ev := &protocol.Event{Type: protocol.EvNodeReady, WorkflowID: w.ID, NodeID: id, Attempt: 1}
			if err := e.emit(ctx, ev, fmt.Sprintf("%s.%s.a1.ready", w.ID, id)); err != nil {
				return err
			}
			if err := e.publishAgentJob(ctx, w, n); err != nil {
				return err
			}
		case protocol.NodeReady:
			if !n.published {
				if err := e.publishAgentJob(ctx, w, n); err != nil {
					return err
				}
			}
		case protocol.NodeGating:
			if err := e.stepGates(ctx, w, n); err != nil {
				return err
			}
		}
	}
	return e.maybeFinish(ctx, w)
}

// depState reports whether a node is blocked (a dependency ended without
// succeeding; the reason names it) or still waiting on a dependency.
func (w *Workflow) depState(id string) (blocked string, waiting bool) {
	for _, d := range w.deps[id] {
		switch ds := w.Nodes[d].Status; {
		case ds == protocol.NodeSucceeded:
		case ds.Terminal():
			if blocked == "" {
				blocked = fmt.Sprintf("dependency %s %s", d, ds)
			}
		default:
			waiting = true
		}
	}
	return blocked, waiting
}

// ancestors returns the transitive dependencies of a node.
func (w *Workflow) ancestors(id string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		for _, d := range w.deps[n] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(id)
	return seen
}

// basePatches are the accepted patches of a node's ancestors, in the order
// they were integrated onto the branch.
func (w *Workflow) basePatches(id string) []protocol.PatchRef {
	anc := w.ancestors(id)
	var out []protocol.PatchRef
	for _, nid := range w.Integrated {
		if anc[nid] && w.Nodes[nid].Patch != nil {
			out = append(out, *w.Nodes[nid].Patch)
		}
	}
	return out
}

func (e *Engine) publishAgentJob(ctx context.Context, w *Workflow, n *Node) error {
	job := &protocol.AgentJob{
		JobID: protocol.AgentJobID(w.ID, n.ID, n.Attempt), WorkflowID: w.ID, NodeID: n.ID,
		Attempt: n.Attempt, Pool: n.Task.Pool, Repo: w.Repo, Patches: w.basePatches(n.ID),
		Command: n.Task.Command, Prompt: n.Task.Prompt, Env: n.Task.Env,
		TimeoutSeconds: n.Task.TimeoutSeconds, PublishedAt: n.ReadyAt,
	}
	data, err := protocol.Encode(job)
	if err != nil {
		return err
	}
	if err := e.bus.PublishJob(ctx, protocol.KindAgent, job.Pool, job.JobID, data); err != nil {
		return err
	}
	n.published = true
	return nil
}

func (e *Engine) stepGates(ctx context.Context, w *Workflow, n *Node) error {
	now := e.opts.Now()
	for _, name := range n.GateOrder {
		g := n.gate(name)
		spec := n.GateSpecs[name]
		if g.Dispatched {
			switch {
			case g.Status == protocol.GatePending:
				if err := e.pollPending(ctx, w, n, g, spec, now); err != nil {
					return err
				}
			case !g.published && !g.terminal():
				if err := e.publishGateJob(ctx, w, n, g); err != nil {
					return err
				}
			}
			continue
		}
		blocked, waiting := n.gateDepState(spec)
		switch {
		case blocked != "":
			res := &protocol.GateResult{
				WorkflowID: w.ID, NodeID: n.ID, Gate: name, Attempt: n.Attempt,
				Status: protocol.GateSkipped, Error: "skipped: " + blocked, Round: g.Round,
			}
			ev := &protocol.Event{Type: protocol.EvGateFinished, WorkflowID: w.ID, NodeID: n.ID, Gate: name,
				Attempt: n.Attempt, GateResult: res, Reason: blocked, Round: g.Round}
			if err := e.emit(ctx, ev, fmt.Sprintf("%s.%s.a%d.g.%s.r%d.skipped", w.ID, n.ID, n.Attempt, name, g.Round)); err != nil {
				return err
			}
		case !waiting:
			if err := e.dispatchGate(ctx, w, n, g, &protocol.Event{NoCache: g.NoCache}); err != nil {
				return err
			}
		}
	}
	return e.foldNode(ctx, w, n)
}

// gateDepState reports whether a gate must be skipped because a dependency
// failed in a blocking way (and the gate skips on dependency failure, the
// default; GC-13, DP-07, DP-08), or must still wait for a dependency. A
// dependency whose failure only warns counts as passed.
func (n *Node) gateDepState(spec protocol.GateSpec) (blocked string, waiting bool) {
	for _, d := range spec.DependsOn {
		dg := n.gate(d)
		switch {
		case dg.Status == protocol.GatePassed:
		case !dg.terminal():
			waiting = true
		case n.blocking(d) && spec.SkipsOnDependencyFailure():
			if blocked == "" {
				blocked = fmt.Sprintf("gate %s %s", d, dg.Status)
			}
		}
	}
	return blocked, waiting
}

// pollPending re-runs a pending gate once its poll interval has passed, or
// times it out once it has been pending longer than max_pending (DESIGN
// decision 3). The schedule lives in the event log (the last pending
// result's time), so a restarted coordinator keeps it; polls are not
// attempts.
func (e *Engine) pollPending(ctx context.Context, w *Workflow, n *Node, g *GateRun, spec protocol.GateSpec, now time.Time) error {
	if limit := spec.MaxPending(); now.Sub(g.PendingSince) > limit {
		reason := fmt.Sprintf("pending since %s, longer than max_pending %s", g.PendingSince.UTC().Format(time.RFC3339), limit)
		res := &protocol.GateResult{WorkflowID: w.ID, NodeID: n.ID, Gate: g.Name, Attempt: n.Attempt,
			Status: protocol.GateTimeout, Error: reason, Round: g.Round}
		if g.Result != nil {
			res.Log, res.Output, res.Host = g.Result.Log, g.Result.Output, g.Result.Host
		}
		ev := &protocol.Event{Type: protocol.EvGateFinished, WorkflowID: w.ID, NodeID: n.ID, Gate: g.Name,
			Attempt: n.Attempt, GateResult: res, Reason: reason, Round: g.Round}
		return e.emit(ctx, ev, fmt.Sprintf("%s.%s.a%d.g.%s.r%d.pending-timeout", w.ID, n.ID, n.Attempt, g.Name, g.Round))
	}
	if g.Awaiting { // the last poll has not reported yet
		if !g.published {
			return e.publishGateJob(ctx, w, n, g)
		}
		return nil
	}
	if now.Before(g.NextPollAt) {
		return nil
	}
	return e.dispatchGate(ctx, w, n, g, &protocol.Event{Poll: true, NoCache: g.NoCache})
}

// dispatchGate records a new round of a gate and publishes its job. tmpl
// carries the dispatch's flags (poll, no-cache).
func (e *Engine) dispatchGate(ctx context.Context, w *Workflow, n *Node, g *GateRun, tmpl *protocol.Event) error {
	ev := *tmpl
	ev.Type, ev.WorkflowID, ev.NodeID, ev.Gate, ev.Attempt, ev.Round = protocol.EvGateDispatched, w.ID, n.ID, g.Name, n.Attempt, g.Round+1
	if err := e.emit(ctx, &ev, fmt.Sprintf("%s.%s.a%d.g.%s.r%d.dispatched", w.ID, n.ID, n.Attempt, g.Name, ev.Round)); err != nil {
		return err
	}
	return e.publishGateJob(ctx, w, n, g)
}

func (e *Engine) publishGateJob(ctx context.Context, w *Workflow, n *Node, g *GateRun) error {
	spec := n.GateSpecs[g.Name]
	patches := w.basePatches(n.ID)
	if n.Patch != nil {
		patches = append(patches, *n.Patch)
	}
	def := spec
	job := &protocol.GateJob{
		JobID:      protocol.GateJobID(w.ID, n.ID, n.Attempt, g.Name, g.Round),
		WorkflowID: w.ID, NodeID: n.ID, Attempt: n.Attempt, Gate: g.Name, Pool: spec.Pool,
		Repo: w.Repo, Patches: patches, Command: spec.Command, Env: spec.Env,
		WorkingDir: spec.WorkingDir, TimeoutSeconds: spec.TimeoutSeconds, PublishedAt: e.opts.Now().UTC(),
		Round: g.Round, Definition: &def, NoCache: g.NoCache,
	}
	if job.Pool == "" {
		job.Pool = protocol.DefaultPool
	}
	data, err := protocol.Encode(job)
	if err != nil {
		return err
	}
	if err := e.bus.PublishJob(ctx, protocol.KindGate, job.Pool, job.JobID, data); err != nil {
		return err
	}
	g.published = true
	return nil
}

// foldNode decides a gating node once every gate has reported: every gate
// passed, or failed with on_fail warn (or there are none) → integrate and
// succeed; any blocking failure → fail, even while another gate is pending
// (seed 004 Q-3 step 5: failed > pending > passed); otherwise (some gate
// pending) keep gating. An integrity violation always blocks.
func (e *Engine) foldNode(ctx context.Context, w *Workflow, n *Node) error {
	statuses := make([]protocol.GateStatus, 0, len(n.GateOrder))
	for _, name := range n.GateOrder {
		g := n.gate(name)
		if g.Status == "" {
			return nil // not dispatched yet, or still running
		}
		st := g.Status
		if g.terminal() && st != protocol.GatePassed && !n.blocking(name) {
			st = protocol.GatePassed // a warning: reported, not blocking (OF-01)
		}
		statuses = append(statuses, st)
	}
	switch workflow.FoldGates(statuses) {
	case workflow.OutcomePassed:
		return e.integrateNode(ctx, w, n)
	case workflow.OutcomePending:
		return nil
	default:
		var bad []string
		for _, name := range n.GateOrder {
			if n.blocking(name) && n.gate(name).Status != protocol.GateSkipped {
				what := name + " " + string(n.gate(name).Status)
				if r := n.gate(name).Result; r != nil && r.IntegrityViolation {
					what += " (integrity violation: " + strings.Join(r.Violations, ", ") + ")"
				}
				bad = append(bad, what)
			}
		}
		sort.Strings(bad)
		return e.finishNode(ctx, w, n, protocol.NodeFailed, "gates did not pass: "+strings.Join(bad, ", "))
	}
}

func (e *Engine) integrateNode(ctx context.Context, w *Workflow, n *Node) error {
	commit, err := e.integ.apply(ctx, w, n)
	if err != nil {
		if errors.Is(err, errConflict) {
			return e.finishNode(ctx, w, n, protocol.NodeFailed, err.Error())
		}
		return err
	}
	ev := &protocol.Event{Type: protocol.EvNodeIntegrated, WorkflowID: w.ID, NodeID: n.ID, Attempt: n.Attempt,
		Branch: w.Branch, Commit: commit}
	if err := e.emit(ctx, ev, fmt.Sprintf("%s.%s.a%d.integrated", w.ID, n.ID, n.Attempt)); err != nil {
		return err
	}
	return e.finishNode(ctx, w, n, protocol.NodeSucceeded, "")
}

func (e *Engine) finishNode(ctx context.Context, w *Workflow, n *Node, st protocol.NodeStatus, reason string) error {
	ev := &protocol.Event{Type: protocol.EvNodeFinished, WorkflowID: w.ID, NodeID: n.ID, Attempt: n.Attempt,
		NodeStatus: st, Reason: reason}
	return e.emit(ctx, ev, fmt.Sprintf("%s.%s.a%d.%s", w.ID, n.ID, n.Attempt, st))
}

func (e *Engine) maybeFinish(ctx context.Context, w *Workflow) error {
	failed := []string{}
	for _, id := range w.Order {
		n := w.Nodes[id]
		if !n.Status.Terminal() {
			return nil
		}
		if n.Status != protocol.NodeSucceeded {
			failed = append(failed, id+" "+string(n.Status))
		}
	}
	st, reason := protocol.WorkflowSucceeded, ""
	if len(failed) > 0 {
		st, reason = protocol.WorkflowFailed, "nodes did not succeed: "+strings.Join(failed, ", ")
	}
	// A failed workflow's accepted work is delivered too: every commit on
	// the branch passed its gates, and whoever decides what happens next
	// needs to see it.
	if st == protocol.WorkflowSucceeded || w.Head != "" {
		if err := e.integ.deliver(ctx, w); err != nil {
			return err
		}
	}
	return e.finishWorkflow(ctx, w, st, reason)
}

// finishWorkflow records the workflow's end and tells the runners, through
// the state store, to drop any of its jobs still queued.
func (e *Engine) finishWorkflow(ctx context.Context, w *Workflow, st protocol.WorkflowStatus, reason string) error {
	ev := &protocol.Event{Type: protocol.EvWorkflowFinished, WorkflowID: w.ID, WorkflowStatus: st,
		Branch: w.Branch, Commit: w.Head, Reason: reason}
	if err := e.emit(ctx, ev, w.ID+".finished"); err != nil {
		return err
	}
	if err := e.store.CachePut(ctx, protocol.WorkflowFinishedKey(w.ID), []byte(st), finishedMarkerTTL); err != nil {
		e.log.Warn("cannot mark the workflow finished for runners; its queued jobs will run and be ignored",
			"workflow", w.ID, "err", err)
	}
	return nil
}

// finishedMarkerTTL outlives any job that could still be queued.
const finishedMarkerTTL = 7 * 24 * time.Hour

func (e *Engine) cancelAll(ctx context.Context, w *Workflow) error {
	for _, id := range w.Order {
		if n := w.Nodes[id]; !n.Status.Terminal() {
			if err := e.finishNode(ctx, w, n, protocol.NodeCancelled, "workflow cancelled"); err != nil {
				return err
			}
		}
	}
	if w.Head != "" {
		if err := e.integ.deliver(ctx, w); err != nil {
			return err
		}
	}
	if err := e.finishWorkflow(ctx, w, protocol.WorkflowCancelled, "cancelled by request"); err != nil {
		return err
	}
	// Running jobs stop when they hear this; queued ones are dropped when a
	// runner takes them and finds the finished marker.
	_ = e.bus.NC.Publish(protocol.CancelSubject(w.ID), nil)
	return nil
}
