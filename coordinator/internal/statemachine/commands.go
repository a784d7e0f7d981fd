package statemachine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// Kinds of refusal of a command, matched with errors.Is.
var (
	// ErrNotFound: the command names a workflow, node or gate that does
	// not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the state does not allow the command now (a finished
	// workflow cancelled, a succeeded node's gates rerun …).
	ErrConflict = errors.New("conflict")
)

// Refusal is a command the state machine refuses; its message says why in
// words for the operator, and Kind (ErrNotFound, ErrConflict) how.
type Refusal struct {
	Kind error
	Msg  string
}

func (r *Refusal) Error() string { return r.Msg }

// Unwrap lets errors.Is match the kind.
func (r *Refusal) Unwrap() error { return r.Kind }

func notFound(format string, args ...any) error {
	return &Refusal{Kind: ErrNotFound, Msg: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &Refusal{Kind: ErrConflict, Msg: fmt.Sprintf(format, args...)}
}

// Submission is a validated workflow to start.
type Submission struct {
	Spec     *protocol.WorkflowSpec
	Repo     protocol.RepoRef
	RepoPath string
	Source   string
	// BaseBranch is the branch the base commit was taken from, if any.
	BaseBranch string
	// TraceParent is the W3C traceparent of the submission's span, if it
	// was traced (see eventlog.WorkflowSubmitted).
	TraceParent string
}

// Submit is the event that starts workflow id.
func Submit(id string, s Submission, now time.Time) Append {
	return Append{Event: eventlog.Event{WorkflowID: id, Time: now, Body: eventlog.WorkflowSubmitted{
		Workflow: s.Spec, Repo: s.Repo, RepoPath: s.RepoPath, Source: s.Source, BaseBranch: s.BaseBranch,
		TraceParent: s.TraceParent}},
		MsgID: id + ".submitted"}
}

// Cancel asks for the workflow to be cancelled; Decide then cancels its
// unfinished nodes and finishes it. A finished workflow cannot be.
func Cancel(w *Workflow, now time.Time) ([]Effect, error) {
	if w.Status.Terminal() {
		return nil, conflict("workflow %s already %s", w.ID, w.Status)
	}
	if w.CancelRequested {
		return nil, nil
	}
	return []Effect{Append{Event: eventlog.Event{WorkflowID: w.ID, Time: now, Body: eventlog.WorkflowCancelRequested{}},
		MsgID: w.msgID(w.ID + ".cancel")}}, nil
}

// GatesRerunnable reports whether a node's gates may run again: its agent
// succeeded, and it is gating, or failed or escalated on its gates.
func GatesRerunnable(n *Node) bool {
	return n.AgentSucceeded() && !n.Approved() &&
		(n.Status == protocol.NodeGating || n.Status == protocol.NodeFailed || n.Status == protocol.NodeEscalated)
}

// RerunGates runs gates again: every gate of node (or of every gating or
// gate-failed node when node is ""), or only gate and the gates skipped
// because it had failed. A node that failed on its gates is reopened: it goes back to gating, its skipped dependents
// back to pending, the workflow back to running. A gate running now is
// left to finish. Decide dispatches the gates again in their layers.
func RerunGates(w *Workflow, node, gate string, noCache bool, now time.Time) ([]Effect, error) {
	if w.CancelRequested || w.Status == protocol.WorkflowCancelled {
		return nil, conflict("workflow %s was cancelled", w.ID)
	}
	var targets []*Node
	if node != "" {
		n := w.Nodes[node]
		if n == nil {
			return nil, notFound("workflow %s has no node %q", w.ID, node)
		}
		if !GatesRerunnable(n) {
			return nil, conflict("node %s is %s: only a node whose agent succeeded and that is gating, or failed or escalated on its gates, can rerun gates", n.ID, n.Status)
		}
		targets = []*Node{n}
	} else {
		for _, id := range w.Order {
			if n := w.Nodes[id]; GatesRerunnable(n) && len(n.GateOrder()) > 0 {
				targets = append(targets, n)
			}
		}
		if len(targets) == 0 {
			return nil, conflict("workflow %s has no gating, gate-failed or escalated node", w.ID)
		}
	}
	var effects []Effect
	appendEv := func(n *Node, body eventlog.Body) {
		effects = append(effects, Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: n.ID, Time: now, Body: body}})
	}
	for _, n := range targets {
		names := n.GateOrder()
		if gate != "" {
			if _, ok := n.GateSpecs()[gate]; !ok {
				return nil, notFound("node %s has no gate %q", n.ID, gate)
			}
			names = skippedBecauseOf(n, gate)
		}
		if n.Status == protocol.NodeFailed || n.Status == protocol.NodeEscalated {
			appendEv(n, eventlog.NodeReopened{Attempt: n.Attempt, Reason: "gate rerun requested"})
			if w.Status.Terminal() {
				effects = append(effects, Reopen{})
			}
		}
		for _, name := range names {
			round := 0
			if g := n.Gates[name]; g != nil {
				if g.Dispatched && g.Status == "" {
					continue // running now: its result will do
				}
				round = g.Round
			}
			appendEv(n, eventlog.GateRerunRequested{Gate: name, Attempt: n.Attempt, Round: round, NoCache: noCache})
		}
	}
	return effects, nil
}

// skippedBecauseOf is gate and the node's gates that were skipped because
// of it, transitively: they run again when it does.
func skippedBecauseOf(n *Node, gate string) []string {
	names := []string{gate}
	for _, name := range n.GateOrder() { // dependency layers: dependencies first
		g := n.Gates[name]
		if g == nil || g.Status != protocol.GateSkipped {
			continue
		}
		for _, dep := range n.GateSpecs()[name].DependsOn {
			if slices.Contains(names, dep) {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// ChangeGates adds, replaces or removes one gate of node n (gate
// add|update|remove --task). The change applies from the node's next gate
// round; a node that will run no more gates refuses it, and so does a
// change that would leave the node an invalid gate plan.
func ChangeGates(w *Workflow, n *Node, c eventlog.GateChange, now time.Time) (Append, error) {
	if err := Changeable(w, n); err != nil {
		return Append{}, err
	}
	if _, _, err := w.PlanGateChange(n, c); err != nil {
		return Append{}, conflict("%s", err)
	}
	return Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: n.ID, Time: now,
		Body: eventlog.NodeGatesChanged{Attempt: n.Attempt, Change: c}}}, nil
}

// Changeable refuses gate changes to a node that will run no more gates.
func Changeable(w *Workflow, n *Node) error {
	switch {
	case w.CancelRequested || w.Status == protocol.WorkflowCancelled:
		return conflict("workflow %s was cancelled", w.ID)
	case n.Status.Terminal():
		return conflict("node %s already %s: gate changes apply to a node's next gate round, and a finished node has none", n.ID, n.Status)
	case w.Status.Terminal():
		return conflict("workflow %s already %s", w.ID, w.Status)
	}
	return nil
}

// IntegratedEvent records the outcome of an Integrate effect: node's patch
// is on the branch, whose tip is now commit.
func IntegratedEvent(w *Workflow, node string, in Integrate, commit string, now time.Time) Append {
	n := w.Nodes[node]
	return Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: node, Time: now, Body: eventlog.NodeIntegrated{
		Attempt: n.Attempt, Branch: w.Branch, Commit: commit, CommitTime: in.CommitTime}},
		MsgID: w.msgID(fmt.Sprintf("%s.%s.a%d.integrated", w.ID, node, n.Attempt))}
}

// IntegrationConflictEvent escalates a node whose patch passed its gates
// but no longer applies to the branch: a human decides (retry it, or
// reject it).
func IntegrationConflictEvent(w *Workflow, node string, reason string, now time.Time) Append {
	n := w.Nodes[node]
	return Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: node, Time: now, Body: eventlog.NodeEscalated{
		Attempt: n.Attempt, Reason: "the patch does not apply to the workflow's branch: " + reason}},
		MsgID: w.msgID(fmt.Sprintf("%s.%s.a%d.escalated", w.ID, node, n.Attempt))}
}

// IntegrationRefusedEvent is the escalation of a node whose patch the
// integrator refused to read (bus.ErrPatchRefused: over the size limit, or
// not the size or SHA-256 its reference says): a human decides.
func IntegrationRefusedEvent(w *Workflow, node string, reason string, now time.Time) Append {
	n := w.Nodes[node]
	return Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: node, Time: now, Body: eventlog.NodeEscalated{
		Attempt: n.Attempt, Reason: "the patch cannot be integrated: " + reason}},
		MsgID: w.msgID(fmt.Sprintf("%s.%s.a%d.escalated", w.ID, node, n.Attempt))}
}

// WorkflowNotFound is the refusal of a command on an unknown workflow.
func WorkflowNotFound(id string) error { return notFound("workflow %q not found", id) }
