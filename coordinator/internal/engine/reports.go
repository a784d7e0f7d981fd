package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/supervisorhq/supervisor/coordinator/internal/pricing"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

const (
	reportsConsumer     = "coordinator"
	deadLettersConsumer = "coordinator-dead-letters"
)

// consumeReports hands runners' reports to their workflows' inboxes (see foldReports) until
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

func (e *Engine) consumeLoop(ctx context.Context, cons jetstream.Consumer, what string, h func(context.Context, jetstream.Msg)) error {
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
		h(ctx, msg)
	}
}

// settle acks a message whose work is done, or hands it back for later;
// ctx is the work's, for the log.
func (e *Engine) settle(ctx context.Context, msg jetstream.Msg, what string, err error) {
	if err != nil {
		e.log.WarnContext(ctx, "cannot process message now; it will be redelivered", "what", what, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// handleReportMsg hands a report to its workflow's inbox; it is acked
// once the events it caused are in the log.
func (e *Engine) handleReportMsg(ctx context.Context, msg jetstream.Msg) {
	// The runner's job span context, which the report carries.
	ctx = telemetry.Extract(ctx, nats.Header(msg.Headers()))
	var r protocol.Report
	if err := protocol.Decode(msg.Data(), &r); err != nil {
		e.log.ErrorContext(ctx, "dropping undecodable report", "subject", msg.Subject(), "err", err)
		_ = msg.Ack()
		return
	}
	if err := r.Validate(); err != nil {
		e.log.ErrorContext(ctx, "dropping invalid report", "subject", msg.Subject(), "err", err)
		_ = msg.Ack()
		return
	}
	if !e.inbox.put(r.WorkflowID(), inboxReport{ctx: ctx, r: r, msg: msg}, e.queues, e.foldReports) {
		_ = msg.Nak() // stopping: the next leader folds it
	}
}

// foldReports folds every report waiting in workflow wf's inbox, in the
// order they arrived, then decides the workflow once for all of them (a
// burst of reports costs one decision, not one each), then settles them:
// each is acked once its events and the decision's are in the log, or
// handed back if it could not be folded. Consecutive reports of different
// nodes, each answered from its own node's state (statemachine.ReportNode),
// are answered one after the other and their events appended together, as
// one message (PERF-58); a report of a node already in the group, or one
// that reads more of the workflow, first has the group appended and
// folded. It runs in wf's queue.
func (e *Engine) foldReports(wf string) {
	batch := e.inbox.take(wf)
	if len(batch) == 0 {
		return
	}
	type folded struct {
		ctx  context.Context
		span trace.Span
		err  error
	}
	done := make([]folded, len(batch))
	var (
		group   []statemachine.Effect
		members []int
		nodes   = map[string]bool{}
	)
	flush := func() {
		if len(members) == 0 {
			return
		}
		_, err := e.execute(done[members[0]].ctx, wf, group)
		for _, i := range members {
			done[i].err = err
		}
		group, members = group[:0], members[:0]
		clear(nodes)
	}
	for i := range batch {
		p := &batch[i]
		sctx, span := e.startSpan(p.ctx, wf, SpanReport, attribute.String("supervisor.report_type", string(p.r.Type)))
		done[i] = folded{ctx: sctx, span: span}
		// Whose state the report reads is known before it is answered: a
		// report of a node in the group, or one that reads more, is
		// answered once the group's events are in the log and folded.
		node := e.reportNode(wf, &p.r)
		if node == "" || nodes[node] {
			flush()
		}
		effects, err := e.reportEffects(sctx, &p.r)
		if err != nil {
			done[i].err = err
			continue
		}
		if node == "" || !onlyAppends(effects) {
			flush()
			_, done[i].err = e.execute(sctx, wf, effects)
			continue
		}
		group = append(group, effects...)
		members = append(members, i)
		nodes[node] = true
	}
	flush()
	decide := false
	for _, f := range done {
		decide = decide || f.err == nil
	}
	if decide && e.ctx != nil && e.ctx.Err() == nil {
		last := done[len(done)-1].ctx
		e.advance(e.workflowContext(last, wf), wf)
	}
	for i, f := range done {
		telemetry.End(f.span, f.err)
		e.settle(f.ctx, batch[i].msg, "reports", f.err)
	}
}

// reportNode names the one node whose state answering r reads
// (statemachine.ReportNode), "" if it reads more or wf is not known.
func (e *Engine) reportNode(wf string, r *protocol.Report) string {
	node := ""
	e.Read(func(s *statemachine.State) {
		if w, ok := s.Workflow(wf); ok {
			node = statemachine.ReportNode(w, r)
		}
	})
	return node
}

// onlyAppends reports whether effects only append events.
func onlyAppends(effects []statemachine.Effect) bool {
	for _, eff := range effects {
		if _, ok := eff.(statemachine.Append); !ok {
			return false
		}
	}
	return true
}

// handleReport folds one report and decides the workflow again; it runs in
// the workflow's queue, and logs in the workflow's trace.
func (e *Engine) handleReport(ctx context.Context, r *protocol.Report) error {
	if err := e.foldReport(ctx, r); err != nil {
		return err
	}
	e.advance(e.workflowContext(ctx, r.WorkflowID()), r.WorkflowID())
	return nil
}

// foldReport turns one report into the events it causes and appends them,
// without deciding the workflow again (the caller does, once); it runs in
// the workflow's queue.
func (e *Engine) foldReport(ctx context.Context, r *protocol.Report) error {
	effects, err := e.reportEffects(ctx, r)
	if err != nil {
		return err
	}
	_, err = e.execute(e.workflowContext(ctx, r.WorkflowID()), r.WorkflowID(), effects)
	return err
}

// reportEffects says what one report causes, carrying nothing out; it
// runs in the workflow's queue. A report of a workflow this engine does
// not know is looked for in the log first; a stale one causes nothing.
func (e *Engine) reportEffects(ctx context.Context, r *protocol.Report) (effects []statemachine.Effect, err error) {
	ctx = e.workflowContext(ctx, r.WorkflowID())
	if err := e.summarizePatch(ctx, r); err != nil {
		return nil, err
	}
	var (
		stale string
		known bool
	)
	e.Read(func(s *statemachine.State) {
		w, ok := s.Workflow(r.WorkflowID())
		if known = ok; ok {
			estimateCost(w, r, e.opts.Prices)
			effects, stale = statemachine.OnReport(w, r, e.opts.Now())
		}
	})
	if !known {
		// Another coordinator may have started it (two leaders for a
		// moment): the log, not this engine's memory, says.
		if err := e.reload(ctx, r.WorkflowID()); err != nil {
			e.log.WarnContext(ctx, "report for unknown workflow ignored", "workflow", r.WorkflowID(), "type", r.Type, "err", err)
			return nil, nil
		}
		e.log.WarnContext(ctx, "report for a workflow this coordinator did not know; loaded it from the log", "workflow", r.WorkflowID())
		return e.reportEffects(ctx, r)
	}
	if stale != "" {
		e.log.InfoContext(ctx, "stale report ignored", "workflow", r.WorkflowID(), "type", r.Type, "why", stale)
		return nil, nil
	}
	return effects, nil
}

// estimateCost prices the runs of a report whose CLIs reported no cost
// with the price table, marking the cost estimated: an agent report's
// run, at the model the run names or else the one its task asked for, and
// a review gate's reviewers' runs, at the model each run names or else
// the one the gate's reviewer asked for. It runs before the report
// becomes an event, so the event holds the estimate and a replay needs no
// price table.
func estimateCost(w *statemachine.Workflow, r *protocol.Report, prices pricing.Table) {
	if r.Type == protocol.ReportGateResult {
		estimateReviewCost(w, r, prices)
		return
	}
	if r.Type != protocol.ReportAgentResult || r.Agent == nil || r.Agent.Run == nil || r.Agent.Run.CostKnown {
		return
	}
	model := ""
	if n := w.Nodes[r.Agent.NodeID]; n != nil && n.Task.Agent != nil {
		model = n.Task.Agent.Model
	}
	run := *r.Agent.Run
	if prices.Estimate(&run, model) {
		a := *r.Agent
		a.Run = &run
		r.Agent = &a
	}
}

// estimateReviewCost prices a review gate's reviewers' runs that reported
// no cost, on copies of the report's result, and sums the gate's cost
// again (CostKnown once every run's cost is).
func estimateReviewCost(w *statemachine.Workflow, r *protocol.Report, prices pricing.Table) {
	if r.Gate == nil || r.Gate.Review == nil || len(prices) == 0 {
		return
	}
	var specs []protocol.AgentSpec
	if n := w.Nodes[r.Gate.NodeID]; n != nil {
		if g, ok := n.GateSpecs()[r.Gate.Gate]; ok && g.Review != nil {
			specs = g.Review.Reviewers
		}
	}
	rev := *r.Gate.Review
	rev.Reviewers = append([]protocol.ReviewVerdict(nil), rev.Reviewers...)
	changed := false
	for i := range rev.Reviewers {
		v := &rev.Reviewers[i]
		if v.Run == nil || v.Run.CostKnown {
			continue
		}
		model := ""
		if k := v.Reviewer - 1; k >= 0 && k < len(specs) {
			model = specs[k].Model
		}
		run := *v.Run
		if prices.Estimate(&run, model) {
			v.Run, changed = &run, true
		}
	}
	if !changed {
		return
	}
	rev.CostUSD, rev.CostKnown = 0, true
	for _, v := range rev.Reviewers {
		if v.Run == nil {
			rev.CostKnown = false
			continue
		}
		rev.CostUSD += v.Run.CostUSD
		rev.CostKnown = rev.CostKnown && v.Run.CostKnown
	}
	g := *r.Gate
	g.Review = &rev
	r.Gate = &g
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
	return e.consumeLoop(ctx, cons, "dead letters", func(ctx context.Context, msg jetstream.Msg) {
		e.settle(ctx, msg, "dead letters", e.handleAdvisory(ctx, msg))
	})
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
		e.log.WarnContext(e.workflowContext(ctx, d.WorkflowID), "job dead-lettered", "job", d.JobID, "deliveries", d.Deliveries)
		r := &protocol.Report{V: protocol.Version, Type: protocol.ReportDeadLetter, DeadLetter: d}
		if err := e.queues.Do(ctx, d.WorkflowID, func() error { return e.handleReport(ctx, r) }); err != nil {
			return err
		}
	}
	if err := stream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		e.log.Warn("cannot remove dead-lettered job", "seq", adv.StreamSeq, "err", err)
	}
	return nil
}
