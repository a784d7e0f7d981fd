package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

const (
	reportsConsumer     = "coordinator"
	deadLettersConsumer = "coordinator-dead-letters"
)

// consumeReports folds runners' reports into state, one at a time, until
// ctx ends. A report is acked only after the events it caused are in the
// log, so a coordinator that dies mid-report sees it again on restart.
func (e *Engine) consumeReports(ctx context.Context) error {
	cons, err := e.bus.JS.CreateOrUpdateConsumer(ctx, protocol.StreamResults, jetstream.ConsumerConfig{
		Durable:       reportsConsumer,
		Description:   "the leading coordinator folds runner reports",
		FilterSubject: protocol.SubjectResults,
		AckPolicy:     jetstream.AckExplicitPolicy,
		// Short, so reports a stopped coordinator had fetched but not folded
		// reach its successor quickly.
		AckWait:       10 * time.Second,
		MaxAckPending: 1024,
	})
	if err != nil {
		return fmt.Errorf("engine: reports consumer: %w", err)
	}
	return e.consumeLoop(ctx, cons, "reports", e.handleReportMsg)
}

func (e *Engine) consumeLoop(ctx context.Context, cons jetstream.Consumer, what string, h func(context.Context, jetstream.Msg) error) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("engine: consume %s: %w", what, err)
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			e.log.Warn("consume failed; retrying", "what", what, "err", err)
			time.Sleep(time.Second)
			continue
		}
		if err := h(ctx, msg); err != nil {
			e.log.Warn("cannot process message now; it will be redelivered", "what", what, "err", err)
			_ = msg.NakWithDelay(time.Second)
			continue
		}
		_ = msg.Ack()
	}
}

func (e *Engine) handleReportMsg(ctx context.Context, msg jetstream.Msg) error {
	var r protocol.Report
	if err := protocol.Decode(msg.Data(), &r); err != nil {
		e.log.Error("dropping undecodable report", "subject", msg.Subject(), "err", err)
		return nil
	}
	if err := r.Validate(); err != nil {
		e.log.Error("dropping invalid report", "subject", msg.Subject(), "err", err)
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.handleReport(ctx, &r)
}

// handleReport folds one report. Stale reports (an older attempt, an older
// lease's fencing token, a node that has moved on) are ignored. Callers
// hold e.mu.
func (e *Engine) handleReport(ctx context.Context, r *protocol.Report) error {
	w, ok := e.lookup(r.WorkflowID())
	if !ok {
		e.log.Warn("report for unknown workflow ignored", "workflow", r.WorkflowID(), "type", r.Type)
		return nil
	}
	if w.Status.Terminal() {
		return nil
	}
	var err error
	switch r.Type {
	case protocol.ReportStarted:
		err = e.onStarted(ctx, w, r.Started)
	case protocol.ReportAgentResult:
		err = e.onAgentResult(ctx, w, r.Agent)
	case protocol.ReportGateResult:
		err = e.onGateResult(ctx, w, r.Gate)
	case protocol.ReportDeadLetter:
		err = e.onDeadLetter(ctx, w, r.DeadLetter)
	}
	if err != nil {
		return err
	}
	e.advance(ctx, w)
	return nil
}

func (e *Engine) stale(w *Workflow, kind, node string, attempt int, token uint64, why string) {
	e.log.Info("stale report ignored", "workflow", w.ID, "node", node, "kind", kind, "attempt", attempt, "token", token, "why", why)
}

func (e *Engine) onStarted(ctx context.Context, w *Workflow, s *protocol.Started) error {
	n := w.Nodes[s.NodeID]
	if n == nil || s.Attempt != n.Attempt {
		return nil
	}
	latency := s.StartedAt.Sub(s.PublishedAt).Microseconds()
	if s.Kind == protocol.KindGate {
		g := n.Gates[s.Gate]
		if n.Status != protocol.NodeGating || g == nil || !g.Dispatched || g.terminal() {
			return nil
		}
		if s.LeaseToken <= g.LeaseToken {
			e.stale(w, "gate.started", n.ID, s.Attempt, s.LeaseToken, "older or same lease")
			return nil
		}
		ev := &protocol.Event{Type: protocol.EvGateStarted, WorkflowID: w.ID, NodeID: n.ID, Gate: s.Gate,
			Attempt: s.Attempt, LeaseToken: s.LeaseToken, Host: s.Host, LatencyMicros: latency}
		return e.emit(ctx, ev, fmt.Sprintf("%s.gate-started.%d", s.JobID, s.LeaseToken))
	}
	if n.Status != protocol.NodeReady && n.Status != protocol.NodeRunning {
		return nil
	}
	if s.LeaseToken <= n.LeaseToken {
		e.stale(w, "agent.started", n.ID, s.Attempt, s.LeaseToken, "older or same lease")
		return nil
	}
	ev := &protocol.Event{Type: protocol.EvNodeStarted, WorkflowID: w.ID, NodeID: n.ID, Attempt: s.Attempt,
		LeaseToken: s.LeaseToken, Host: s.Host, LatencyMicros: latency}
	return e.emit(ctx, ev, fmt.Sprintf("%s.started.%d", s.JobID, s.LeaseToken))
}

func (e *Engine) onAgentResult(ctx context.Context, w *Workflow, a *protocol.AgentResult) error {
	n := w.Nodes[a.NodeID]
	if n == nil || a.Attempt != n.Attempt || (n.Status != protocol.NodeRunning && n.Status != protocol.NodeReady) {
		return nil
	}
	if a.LeaseToken < n.LeaseToken {
		e.stale(w, "agent.result", n.ID, a.Attempt, a.LeaseToken, fmt.Sprintf("lease %d is current", n.LeaseToken))
		return nil
	}
	ev := &protocol.Event{Type: protocol.EvNodeAgentDone, WorkflowID: w.ID, NodeID: n.ID, Attempt: a.Attempt,
		LeaseToken: a.LeaseToken, Host: a.Host, Agent: a}
	if err := e.emit(ctx, ev, fmt.Sprintf("%s.done.%d", a.JobID, a.LeaseToken)); err != nil {
		return err
	}
	if a.Status == protocol.AgentSucceeded {
		return nil // gating; advance dispatches the gates
	}
	reason := fmt.Sprintf("agent %s (exit %d)", a.Status, a.ExitCode)
	if a.Error != "" {
		reason += ": " + a.Error
	}
	return e.finishNode(ctx, w, n, protocol.NodeFailed, reason)
}

func (e *Engine) onGateResult(ctx context.Context, w *Workflow, gr *protocol.GateResult) error {
	n := w.Nodes[gr.NodeID]
	if n == nil || gr.Attempt != n.Attempt || n.Status != protocol.NodeGating {
		return nil
	}
	g := n.Gates[gr.Gate]
	if g == nil || !g.Dispatched || g.terminal() {
		return nil
	}
	if gr.Round != 0 && gr.Round != g.Round {
		e.stale(w, "gate.result", n.ID, gr.Attempt, gr.LeaseToken, fmt.Sprintf("round %d, current round %d", gr.Round, g.Round))
		return nil
	}
	if gr.LeaseToken < g.LeaseToken {
		e.stale(w, "gate.result", n.ID, gr.Attempt, gr.LeaseToken, fmt.Sprintf("lease %d is current", g.LeaseToken))
		return nil
	}
	ev := &protocol.Event{Type: protocol.EvGateFinished, WorkflowID: w.ID, NodeID: n.ID, Gate: gr.Gate,
		Attempt: gr.Attempt, LeaseToken: gr.LeaseToken, Host: gr.Host, GateResult: gr}
	id := fmt.Sprintf("%s.finished.%d.%s", gr.JobID, gr.LeaseToken, gr.Status)
	if gr.Status == protocol.GatePending {
		id = "" // each poll is its own event
	}
	return e.emit(ctx, ev, id)
}

func (e *Engine) onDeadLetter(ctx context.Context, w *Workflow, d *protocol.DeadLetter) error {
	n := w.Nodes[d.NodeID]
	if n == nil || d.Attempt != n.Attempt || n.Status.Terminal() {
		return nil
	}
	reason := fmt.Sprintf("%s job %s dead-lettered after %d deliveries: %s", d.Kind, d.JobID, d.Deliveries, d.Reason)
	if d.Kind == protocol.KindGate {
		g := n.Gates[d.Gate]
		if g == nil || g.terminal() {
			return nil
		}
		res := &protocol.GateResult{JobID: d.JobID, WorkflowID: w.ID, NodeID: n.ID, Gate: d.Gate, Attempt: d.Attempt,
			Status: protocol.GateError, Error: reason}
		ev := &protocol.Event{Type: protocol.EvGateFinished, WorkflowID: w.ID, NodeID: n.ID, Gate: d.Gate,
			Attempt: d.Attempt, GateResult: res, Reason: reason}
		return e.emit(ctx, ev, d.JobID+".dead")
	}
	if n.Status != protocol.NodeReady && n.Status != protocol.NodeRunning {
		return nil
	}
	return e.finishNode(ctx, w, n, protocol.NodeFailed, reason)
}

// maxDeliveriesAdvisory is the part of JetStream's max-deliveries advisory
// the coordinator reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// consumeDeadLetters turns JetStream's max-deliveries advisories into dead
// letters: the job is read back from the jobs stream, reported as a node
// (or gate) error, and removed from the queue.
func (e *Engine) consumeDeadLetters(ctx context.Context) error {
	cons, err := e.bus.JS.CreateOrUpdateConsumer(ctx, protocol.StreamAdvisories, jetstream.ConsumerConfig{
		Durable:     deadLettersConsumer,
		Description: "the leading coordinator surfaces dead-lettered jobs",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("engine: dead-letter consumer: %w", err)
	}
	return e.consumeLoop(ctx, cons, "dead letters", e.handleAdvisory)
}

func (e *Engine) handleAdvisory(ctx context.Context, msg jetstream.Msg) error {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(msg.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		e.log.Error("dropping undecodable max-deliveries advisory", "err", err)
		return nil
	}
	stream, err := e.bus.JS.Stream(ctx, protocol.StreamJobs)
	if err != nil {
		return err
	}
	raw, err := stream.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // acked or terminated after all
	}
	if err != nil {
		return err
	}
	d, err := bus.DeadLetterFromJob(raw.Header.Get(protocol.HeaderKind), raw.Data, adv.Deliveries)
	if err != nil {
		e.log.Error("dead-lettered job cannot be decoded; removing it", "seq", adv.StreamSeq, "err", err)
	} else {
		e.log.Warn("job dead-lettered", "job", d.JobID, "deliveries", d.Deliveries)
		e.mu.Lock()
		err = e.handleReport(ctx, &protocol.Report{V: protocol.Version, Type: protocol.ReportDeadLetter, DeadLetter: d})
		e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if err := stream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		e.log.Warn("cannot remove dead-lettered job", "seq", adv.StreamSeq, "err", err)
	}
	return nil
}
