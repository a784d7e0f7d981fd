package statemachine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// Apply folds one event into the state. It is the only code that changes
// state, used both live and when replaying the log, and it is
// deterministic: the same events in the same order give the same state.
// An event that does not fold (an unknown workflow or node, an invalid
// gate change) is an error and changes nothing but the workflow's LastSeq.
func (s *State) Apply(ev eventlog.Event) error {
	if ev.WorkflowID == FleetID {
		return s.applyFleet(ev)
	}
	if b, ok := ev.Body.(eventlog.WorkflowSubmitted); ok {
		if s.known(ev.WorkflowID) {
			return nil // a duplicate submission event
		}
		w, err := newWorkflow(ev.WorkflowID, b, ev.Time)
		if err != nil {
			return err
		}
		w.LastSeq = ev.Seq
		s.leavePromptsOut(w, ev.Seq)
		s.Put(w)
		return nil
	}
	w, ok := s.wfs[ev.WorkflowID]
	if !ok {
		if r, retired := s.retired[ev.WorkflowID]; retired {
			r.LastSeq = max(r.LastSeq, ev.Seq)
			return fmt.Errorf("event %s for workflow %s: %w", ev.Type(), ev.WorkflowID, ErrRetired)
		}
		return fmt.Errorf("event %s for unknown workflow %s", ev.Type(), ev.WorkflowID)
	}
	w.LastSeq = ev.Seq
	if err := w.apply(ev); err != nil {
		return err
	}
	s.countFailure(ev)
	return nil
}

func (w *Workflow) apply(ev eventlog.Event) error {
	switch b := ev.Body.(type) {
	case eventlog.WorkflowCancelRequested:
		w.CancelRequested = true
		return nil
	case eventlog.WorkflowFinished:
		w.Status, w.FinishedAt, w.Reason = b.Status, ev.Time, b.Reason
		return nil
	case eventlog.WorkflowMergeRequested, eventlog.WorkflowMerged, eventlog.WorkflowMergeFailed:
		return w.applyMerge(ev)
	case nil:
		return fmt.Errorf("event for %s without a body", w.ID)
	}
	n := w.Nodes[ev.NodeID]
	if n == nil {
		return fmt.Errorf("event %s for unknown node %s/%s", ev.Type(), w.ID, ev.NodeID)
	}
	switch b := ev.Body.(type) {
	case eventlog.NodeReady:
		n.Status, n.Attempt, n.ReadyAt = protocol.NodeReady, b.Attempt, ev.Time
		n.jobID = protocol.AgentJobID(w.ID, n.ID, b.Attempt)
		n.LeaseToken, n.Host, n.Agent, n.Patch, n.Output = 0, "", nil, nil, nil
		n.Gates = nil
		if r := n.rare; r != nil {
			r.Approved, r.ApprovedBy, r.AcceptedConfig = false, "", nil
			r.Waiting, r.Speculation, r.integRounds = nil, nil, nil
		}
		if r := n.retry; r != nil {
			r.RetryAt, r.NextAttempt = time.Time{}, 0
			r.Given = AttemptStart{}
			if b.Attempt > 1 {
				// The attempt's agent job carries Feedback (agentJob).
				r.Given.Feedback = r.Feedback
			}
			if r.grant != nil {
				r.Given.RetriedBy, r.Given.Note, r.grant = r.grant.RetriedBy, r.grant.Note, nil
			}
		}
		n.tidyParts()
	case eventlog.NodeWaiting:
		n.setWaiting(&BreakerWait{Scope: b.Scope, Until: b.Until, Host: b.Host})
	case eventlog.NodeStarted:
		n.Status, n.LeaseToken, n.Host = protocol.NodeRunning, b.LeaseToken, b.Host
		n.setWaiting(nil)
		if n.StartedAt.IsZero() {
			n.StartedAt = ev.Time
		}
	case eventlog.NodeAgentDone:
		n.Agent, n.Output = b.Result, b.Output
		n.setWaiting(nil)
		if b.Result != nil && b.Result.Run != nil {
			sp := part(&n.spent)
			sp.LastRun = b.Result.Run
			sp.Spend.add(b.Result.Run)
		}
		if n.AgentSucceeded() {
			n.Status, n.Patch = protocol.NodeGating, b.Result.Patch
			if n.Gates == nil && len(n.GateOrder()) > 0 {
				n.Gates = make(map[string]*GateRun, len(n.GateOrder()))
			}
			for _, g := range n.GateOrder() {
				n.Gates[g] = &GateRun{Name: g}
			}
		}
	case eventlog.GateDispatched:
		g := n.Gate(b.Gate)
		// A new round is a new job, whose lease (lease/<job-id>) has
		// fencing tokens of its own; it is out until its result arrives.
		g.Dispatched, g.Round, g.NoCache = true, g.Round+1, b.NoCache
		g.LeaseToken, g.Awaiting = 0, true
		g.setWaiting(nil)
		if b.Rerun != "" {
			g.Status, g.Result = "", nil
		}
		g.jobID = protocol.GateJobID(w.ID, n.ID, n.Attempt, b.Gate, g.Round)
	case eventlog.GateRerunRequested:
		// Its earlier outcome and pending clock no longer count; Decide
		// dispatches it again in its layer.
		g := n.Gate(b.Gate)
		g.Dispatched, g.Status, g.Result, g.NoCache = false, "", nil, b.NoCache
		if m := g.more; m != nil {
			m.PendingSince, m.NextPollAt, m.Waiting = time.Time{}, time.Time{}, nil
			tidy(&g.more)
		}
	case eventlog.GateWaiting:
		if g := n.Gate(b.Gate); b.Round == 0 || b.Round == g.Round {
			g.setWaiting(&BreakerWait{Scope: b.Scope, Until: b.Until, Host: b.Host})
		}
	case eventlog.GateStarted:
		g := n.Gate(b.Gate)
		g.LeaseToken, g.Host = b.LeaseToken, b.Host
		g.setWaiting(nil)
	case eventlog.GateFinished:
		g := n.Gate(b.Gate)
		g.Status, g.Result, g.Awaiting = b.Result.Status, b.Result, false
		g.setWaiting(nil)
		if b.Result.Review != nil {
			part(&n.spent).Spend.addReview(b.Result.Review)
			tidy(&n.spent)
		}
		if b.Result.OOMKilled {
			part(&g.more).OOMs++
		}
		if b.Result.Host != "" {
			g.Host = b.Result.Host
		}
		if g.Status == protocol.GatePending {
			g.setPending(ev.Time, ev.Time.Add(n.GateSpecs()[b.Gate].PollInterval()))
		}
	case eventlog.NodeIntegrated:
		d := part(&n.done)
		d.Integrated, d.Commit, d.CommitTime, w.Head = true, b.Commit, b.CommitTime, b.Commit
		w.Integrated = append(w.Integrated, n.ID)
	case eventlog.NodeReopened:
		w.reopen(n)
	case eventlog.NodeFinished:
		n.Status, n.Reason = b.Status, b.Reason
		n.setEnded(ev.Time)
		n.setWaiting(nil)
	case eventlog.NodeGatesChanged:
		return w.applyGateChange(n, b.Change)
	case eventlog.NodeRetryScheduled:
		n.record(ev, b.Reason, b.Feedback, b.Signature)
		r := n.retry
		n.Status, n.Reason, r.RetryAt, r.NextAttempt, r.Feedback = protocol.NodeRetrying, b.Reason, b.NotBefore, b.Next, b.Feedback
		n.countFailures(b.FailedGates)
		if b.Class == "transient" {
			// It uses no attempt: the budget grows by the round it takes.
			n.Budget, r.Transients = n.Budget+1, r.Transients+1
		} else {
			r.Transients = 0
		}
	case eventlog.NodeEscalated:
		n.record(ev, b.Reason, b.Feedback, b.Signature)
		n.Status, n.Reason, n.retry.Feedback = protocol.NodeEscalated, b.Reason, b.Feedback
		n.countFailures(b.FailedGates)
	case eventlog.NodeApproved:
		r := part(&n.rare)
		r.Approved, r.ApprovedBy, n.Reason, r.AcceptedConfig = true, b.By, "approved by "+b.By, b.AcceptedConfig
	case eventlog.NodeAwaitingApproval:
		r := part(&n.rare)
		n.Status, n.Reason, r.AwaitingSince, r.ApprovalDeadline = protocol.NodeAwaitingApproval, b.Reason, ev.Time, b.Deadline
		tidy(&n.rare)
		n.Attempt = max(n.Attempt, b.Attempt)
	case eventlog.NodeRejected:
		n.Status, n.Reason = protocol.NodeFailed, fmt.Sprintf("rejected by %s: %s", b.By, b.Reason)
		n.setEnded(ev.Time)
	case eventlog.NodeIntegrationQueued, eventlog.IntegrationDispatched, eventlog.IntegrationFinished:
		w.applyIntegration(n, ev)
	case eventlog.NodesAdded:
		if err := w.addNodes(n, b, ev.Seq); err != nil {
			return err
		}
	case eventlog.NodeRetryGranted:
		// A human's retry starts the count of each gate's failures afresh.
		r := part(&n.retry)
		n.Budget, r.GateFailures = n.Budget+b.Attempts, nil
		n.Status, r.RetryAt, r.NextAttempt, r.Feedback = protocol.NodeRetrying, ev.Time, b.Attempt+1, b.Feedback
		n.Reason = fmt.Sprintf("retry granted by %s (%d more attempts)", b.By, b.Attempts)
		r.grant = &AttemptStart{RetriedBy: b.By, Note: b.Note}
	default:
		return fmt.Errorf("unknown event type %q", ev.Type())
	}
	w.refreshStatusAfter(ev, n)
	return nil
}

// refreshStatusAfter is refreshStatus after an event about node n, in
// O(1) for the kinds of event that change no node but n: a running
// workflow has no node waiting for a human, so after such an event only n
// can need one. Any other event, or one folded while the workflow needs
// attention, looks at every node.
func (w *Workflow) refreshStatusAfter(ev eventlog.Event, n *Node) {
	if w.Status.Terminal() {
		return
	}
	switch ev.Body.(type) {
	case eventlog.NodeReady, eventlog.NodeStarted, eventlog.NodeAgentDone, eventlog.NodeWaiting,
		eventlog.GateDispatched, eventlog.GateStarted, eventlog.GateFinished, eventlog.GateWaiting,
		eventlog.NodeIntegrated, eventlog.NodeFinished:
		if w.Status == protocol.WorkflowRunning {
			if n.waitsForHuman() {
				w.Status = protocol.WorkflowNeedsAttention
			}
			return
		}
	}
	w.refreshStatus()
}

// waitsForHuman reports whether n waits for a human's decision.
func (n *Node) waitsForHuman() bool {
	return (n.Status == protocol.NodeEscalated || n.Status == protocol.NodeAwaitingApproval) && !n.Approved()
}

// refreshStatus keeps a running workflow's status in step with its nodes:
// it needs attention while a node waits for a human.
func (w *Workflow) refreshStatus() {
	if w.Status.Terminal() {
		return
	}
	w.Status = protocol.WorkflowRunning
	for _, n := range w.Nodes {
		if n.waitsForHuman() {
			w.Status = protocol.WorkflowNeedsAttention
			return
		}
	}
}

// record closes the node's current attempt in its history, the failure
// it ended with having signature sig.
func (n *Node) record(ev eventlog.Event, reason string, feedback json.RawMessage, sig string) {
	r := AttemptRecord{Attempt: n.Attempt, Agent: n.Agent, Patch: n.Patch, Output: n.Output, Outcome: ev.Type(), Reason: reason,
		At: ev.Time, Feedback: feedback, Given: n.Given(), Signature: sig}
	for _, name := range n.GateOrder() {
		if g := n.Gates[name]; g != nil && g.Result != nil {
			r.Gates = append(r.Gates, *g.Result)
		}
	}
	r.Gates = append(r.Gates, n.speculationResults()...)
	rt := part(&n.retry)
	rt.History = append(rt.History, r)
}

// countFailures counts a round's failure against each gate that caused it.
func (n *Node) countFailures(gates []string) {
	for _, g := range gates {
		r := part(&n.retry)
		if r.GateFailures == nil {
			r.GateFailures = map[string]int{}
		}
		r.GateFailures[g]++
	}
}

// reopen puts a failed node back to gating, its skipped dependents back to
// pending and the workflow back to running (a gate rerun after failure).
func (w *Workflow) reopen(n *Node) {
	w.Generation++
	n.Status, n.Reason = protocol.NodeGating, ""
	n.setEnded(time.Time{})
	changed := true
	for changed { // dependents skipped because of n, transitively
		changed = false
		for _, id := range w.Order {
			d := w.Nodes[id]
			if d.Status != protocol.NodeSkipped {
				continue
			}
			for _, dep := range w.dependsOn(id) {
				if st := w.Nodes[dep].Status; !st.Terminal() || dep == n.ID {
					d.Status, d.Reason = protocol.NodePending, ""
					d.setEnded(time.Time{})
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
