package statemachine

import (
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// OnReport turns a runner's report into the events it causes: a start, a
// result, a dead letter, or a job held back by an open circuit breaker (a
// wait). A report that no longer matters (another attempt, a node or gate that has moved
// on, a finished workflow) causes none; one from an older lease than the
// one the coordinator knows causes none either, and stale says why, for
// the log. Fencing: a started report must carry a greater lease token than
// the current one, a result at least the current one.
func OnReport(w *Workflow, r *protocol.Report, now time.Time) (effects []Effect, stale string) {
	if w.Status.Terminal() {
		return nil, ""
	}
	if isIntegrationReport(w, r) {
		return onIntegrationReport(w, r, now)
	}
	ev := func(node string, body eventlog.Body, msgID string) []Effect {
		return []Effect{Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: node, Time: now, Body: body},
			MsgID: w.msgID(msgID)}}
	}
	switch r.Type {
	case protocol.ReportStarted:
		s := r.Started
		n := w.Nodes[s.NodeID]
		if n == nil || s.Attempt != n.Attempt {
			return nil, ""
		}
		latency := s.StartedAt.Sub(s.PublishedAt).Microseconds()
		if s.Kind == protocol.KindGate {
			g := n.Gates[s.Gate]
			if n.Status != protocol.NodeGating || g == nil || !g.Dispatched || g.Terminal() {
				return nil, ""
			}
			if s.LeaseToken <= g.LeaseToken {
				return nil, "older or same lease"
			}
			return ev(n.ID, eventlog.GateStarted{Gate: s.Gate, Attempt: s.Attempt, LeaseToken: s.LeaseToken,
				Host: s.Host, LatencyMicros: latency}, fmt.Sprintf("%s.gate-started.%d", s.JobID, s.LeaseToken)), ""
		}
		if n.Status != protocol.NodeReady && n.Status != protocol.NodeRunning {
			return nil, ""
		}
		if s.LeaseToken <= n.LeaseToken {
			return nil, "older or same lease"
		}
		return ev(n.ID, eventlog.NodeStarted{Attempt: s.Attempt, LeaseToken: s.LeaseToken, Host: s.Host,
			LatencyMicros: latency}, fmt.Sprintf("%s.started.%d", s.JobID, s.LeaseToken)), ""

	case protocol.ReportAgentResult:
		a := r.Agent
		n := w.Nodes[a.NodeID]
		if n == nil || a.Attempt != n.Attempt || n.Agent != nil ||
			(n.Status != protocol.NodeRunning && n.Status != protocol.NodeReady) {
			return nil, ""
		}
		if a.LeaseToken < n.LeaseToken {
			return nil, fmt.Sprintf("lease %d is current", n.LeaseToken)
		}
		return ev(n.ID, eventlog.NodeAgentDone{Attempt: a.Attempt, LeaseToken: a.LeaseToken, Host: a.Host, Result: a,
			Output: checkOutput(n.Task, a)},
			fmt.Sprintf("%s.done.%d", a.JobID, a.LeaseToken)), ""

	case protocol.ReportGateResult:
		gr := r.Gate
		n := w.Nodes[gr.NodeID]
		if n == nil || gr.Attempt != n.Attempt || n.Status != protocol.NodeGating {
			return nil, ""
		}
		g := n.Gates[gr.Gate]
		if g == nil || !g.Dispatched || g.Terminal() {
			return nil, ""
		}
		if gr.Round != 0 && gr.Round != g.Round {
			return nil, fmt.Sprintf("round %d, current round %d", gr.Round, g.Round)
		}
		if gr.LeaseToken < g.LeaseToken {
			return nil, fmt.Sprintf("lease %d is current", g.LeaseToken)
		}
		id := fmt.Sprintf("%s.finished.%d.%s", gr.JobID, gr.LeaseToken, gr.Status)
		if gr.Status == protocol.GatePending {
			id = "" // each poll is its own event
		}
		return ev(n.ID, eventlog.GateFinished{Gate: gr.Gate, Attempt: gr.Attempt, Round: g.Round,
			LeaseToken: gr.LeaseToken, Host: gr.Host, Result: gr}, id), ""

	case protocol.ReportWaiting:
		return onWaiting(w, r.Waiting, ev), ""

	case protocol.ReportDeadLetter:
		dl := r.DeadLetter
		n := w.Nodes[dl.NodeID]
		if n == nil || dl.Attempt != n.Attempt || n.Status.Terminal() {
			return nil, ""
		}
		reason := fmt.Sprintf("%s job %s dead-lettered after %d deliveries: %s", dl.Kind, dl.JobID, dl.Deliveries, dl.Reason)
		if dl.Kind == protocol.KindGate {
			g := n.Gates[dl.Gate]
			if g == nil || g.Terminal() {
				return nil, ""
			}
			res := &protocol.GateResult{JobID: dl.JobID, WorkflowID: w.ID, NodeID: n.ID, Gate: dl.Gate, Attempt: dl.Attempt,
				Status: protocol.GateError, Error: reason}
			return ev(n.ID, eventlog.GateFinished{Gate: dl.Gate, Attempt: dl.Attempt, Result: res, Reason: reason},
				dl.JobID+".dead"), ""
		}
		if n.Status != protocol.NodeReady && n.Status != protocol.NodeRunning {
			return nil, ""
		}
		// Its deliveries are spent: no retry of the agent would fix what
		// keeps the job from running, so a human decides.
		return ev(n.ID, eventlog.NodeEscalated{Attempt: n.Attempt, Reason: reason},
			fmt.Sprintf("%s.%s.a%d.escalated", w.ID, n.ID, n.Attempt)), ""
	}
	return nil, ""
}

// onWaiting turns a waiting report into a node.waiting or gate.waiting
// event while the job it concerns is still out: the current attempt's
// agent job before its result, or the current round of a gate. Nothing
// else changes: the runner holds the job and runs it when the breaker
// lets it, so the coordinator has nothing to publish again.
func onWaiting(w *Workflow, wt *protocol.Waiting, ev func(string, eventlog.Body, string) []Effect) []Effect {
	n := w.Nodes[wt.NodeID]
	if n == nil || wt.Attempt != n.Attempt {
		return nil
	}
	id := fmt.Sprintf("%s.waiting.%s.%d", wt.JobID, wt.Scope, wt.Until.UnixNano())
	if wt.Kind == protocol.KindGate {
		g := n.Gates[wt.Gate]
		if n.Status != protocol.NodeGating || g == nil || !g.Awaiting || (wt.Round != 0 && wt.Round != g.Round) {
			return nil
		}
		return ev(n.ID, eventlog.GateWaiting{Gate: wt.Gate, Attempt: wt.Attempt, Round: g.Round, Scope: wt.Scope,
			Until: wt.Until, Host: wt.Host}, id)
	}
	if n.Agent != nil || (n.Status != protocol.NodeReady && n.Status != protocol.NodeRunning) {
		return nil
	}
	return ev(n.ID, eventlog.NodeWaiting{Attempt: wt.Attempt, Scope: wt.Scope, Until: wt.Until, Host: wt.Host}, id)
}

// ReportNode names the one node whose state OnReport reads to answer r
// (besides whether w has finished, which no report's events change): the
// node of a started, agent, gate, waiting or dead-letter report of its own
// jobs. It is "" when OnReport reads more (a report of the integration
// queue's jobs) or r names no node. Reports of different nodes may thus be
// answered one after the other before the events of the earlier ones are
// folded, with the same effects as if they had been (PERF-58).
func ReportNode(w *Workflow, r *protocol.Report) string {
	if isIntegrationReport(w, r) {
		return ""
	}
	switch {
	case r.Type == protocol.ReportStarted && r.Started != nil:
		return r.Started.NodeID
	case r.Type == protocol.ReportAgentResult && r.Agent != nil:
		return r.Agent.NodeID
	case r.Type == protocol.ReportGateResult && r.Gate != nil:
		return r.Gate.NodeID
	case r.Type == protocol.ReportWaiting && r.Waiting != nil:
		return r.Waiting.NodeID
	case r.Type == protocol.ReportDeadLetter && r.DeadLetter != nil:
		return r.DeadLetter.NodeID
	}
	return ""
}
