package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/supervisorhq/supervisor/coordinator/internal/notify"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// maxRounds bounds the decide-and-act rounds of one advance; each round
// appends at least one event, so it is far above what any workflow needs.
const maxRounds = 10000

// advance decides workflow wf and carries the effects out until the state
// machine has nothing more to do now; it runs in wf's queue. A failure is
// logged and left to the next decision (a tick, a report, a timer).
func (e *Engine) advance(ctx context.Context, wf string) {
	// The pass's span starts with its first effect: a decision with
	// nothing to do (most ticks) leaves no span.
	var span trace.Span
	defer func() {
		if span != nil {
			span.End()
		}
	}()
	var readInPass map[uint64]bool // events read for postponed jobs in this pass
	for range maxRounds {
		var (
			d     statemachine.Decision
			found bool
		)
		now := e.opts.Now()
		e.Read(func(s *statemachine.State) {
			w, ok := s.Workflow(wf)
			if found = ok; ok {
				d = statemachine.Decide(w, now, e.out.publishedIn(wf))
			}
		})
		if !found {
			return
		}
		if !d.Wake.IsZero() {
			e.wakes.at(wf, d.Wake.Sub(now), e.kick)
		}
		// The jobs postponed for their prompts can be built once the
		// events they wait for are read, after this decision's effects.
		readPostponed := func() bool {
			if len(d.Deferred) == 0 {
				return false
			}
			if readInPass == nil {
				readInPass = map[uint64]bool{}
			}
			return e.readDeferred(ctx, wf, d.Deferred, readInPass)
		}
		if len(d.Effects) == 0 {
			if readPostponed() {
				continue
			}
			return
		}
		if span == nil {
			ctx, span = e.startSpan(ctx, wf, SpanScheduling)
		}
		changed, err := e.execute(ctx, wf, d.Effects)
		if err != nil {
			span.RecordError(err)
			if ctx.Err() == nil {
				e.log.WarnContext(ctx, "workflow cannot advance now; will retry", "workflow", wf, "err", err)
			}
			return
		}
		if read := readPostponed(); !changed && !read {
			return // only jobs published: nothing new to decide on
		}
	}
	e.log.ErrorContext(ctx, "workflow did not settle; will retry", "workflow", wf, "rounds", maxRounds)
}

// execute carries effects out in order, stopping at the first failure. It
// reports whether the state changed (an event was folded in). The effects
// run, and log, in wf's trace (a command's context may be another's).
func (e *Engine) execute(ctx context.Context, wf string, effects []statemachine.Effect) (changed bool, err error) {
	ctx = e.workflowContext(ctx, wf)
	// Jobs are published without waiting for each acknowledgement (each
	// after the event that announces it was appended); all are waited
	// for before execute returns, so the next decision knows which were.
	var pending []pendingJob
	defer func() {
		if werr := e.awaitJobs(ctx, wf, pending); werr != nil && err == nil {
			err = werr
		}
	}()
	// A run of Append effects goes to the log as one message (PERF-57),
	// and the jobs announced among them are published once it is there;
	// the outcome of integrating a node without a patch joins it (no git
	// runs and no branch moves). Any other effect, or an event that brings
	// tasks in (read back by its sequence for their prompts), ends the run.
	var (
		run  []statemachine.Append
		held []statemachine.Publish
	)
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		folded, err := e.appendAll(ctx, run)
		changed = changed || folded
		run = run[:0]
		if err != nil {
			held = nil
			return err
		}
		for _, x := range held {
			p, err := e.publishAsync(ctx, wf, x)
			if err != nil {
				held = nil
				return err
			}
			pending = append(pending, p)
		}
		held = held[:0]
		return nil
	}
	for _, eff := range effects {
		if x, ok := eff.(statemachine.Append); ok {
			if _, tasks := taskBodies(x.Event.Body); tasks {
				if err = flush(); err != nil {
					return changed, err
				}
				run = append(run, x)
				if err = flush(); err != nil {
					return changed, err
				}
				continue
			}
			run = append(run, x)
			continue
		}
		if x, ok := eff.(statemachine.Publish); ok && len(run) > 0 {
			held = append(held, x)
			continue
		}
		if x, ok := eff.(statemachine.Integrate); ok && e.patchless(wf, x.Node) && !runHas(run, x.Node) {
			// Nothing lands: its outcome joins the run (PERF-59).
			var ev statemachine.Append
			if ev, err = e.integration(ctx, wf, x); err != nil {
				if ferr := flush(); ferr != nil {
					return changed, ferr
				}
				return changed, err
			}
			run = append(run, ev)
			continue
		}
		if err = flush(); err != nil {
			return changed, err
		}
		folded := false
		switch x := eff.(type) {
		case statemachine.Publish:
			var p pendingJob
			if p, err = e.publishAsync(ctx, wf, x); err == nil {
				pending = append(pending, p)
			}
		case statemachine.Integrate:
			folded, err = e.integrate(ctx, wf, x)
		case statemachine.Finish:
			folded, err = e.finish(ctx, wf, x)
		case statemachine.Merge:
			folded, err = e.merge(ctx, wf, x)
		case statemachine.Reopen:
			// Runners drop jobs of finished workflows; this one runs again.
			err = e.store.CacheDelete(ctx, protocol.WorkflowFinishedKey(wf))
		default:
			err = fmt.Errorf("engine: unknown effect %T", eff)
		}
		changed = changed || folded
		if err != nil {
			return changed, err
		}
	}
	if err = flush(); err != nil {
		return changed, err
	}
	return changed, nil
}

// runHas reports whether run holds an event of node.
func runHas(run []statemachine.Append, node string) bool {
	for _, a := range run {
		if a.Event.NodeID == node {
			return true
		}
	}
	return false
}

// append appends one event to its workflow's log and folds it in, as
// appendAll does; folded is false when the log already had it.
func (e *Engine) append(ctx context.Context, ev eventlog.Event, msgID string) (folded bool, err error) {
	return e.appendAll(ctx, []statemachine.Append{{Event: ev, MsgID: msgID}})
}

// appendAll appends events of one workflow to its log, in order, as few
// messages as the bus takes (bus.AppendEvents), each fenced on the last
// event this engine has folded for the workflow, and folds each message's
// events in once it is there; folded is false when the log already had
// them all. If the log has moved (another coordinator appended), the
// workflow is reloaded from the log and the append fails: the next
// decision starts from the log's state.
func (e *Engine) appendAll(ctx context.Context, appends []statemachine.Append) (folded bool, err error) {
	e.appendGate.RLock() // a snapshot's sequence is taken between appends
	defer e.appendGate.RUnlock()
	events, msgIDs := make([]eventlog.Event, len(appends)), make([]string, len(appends))
	for i, a := range appends {
		events[i], msgIDs[i] = a.Event, a.MsgID
	}
	for len(events) > 0 {
		wf := events[0].WorkflowID
		var last uint64
		e.Read(func(s *statemachine.State) { last = s.LastSeq(wf) })
		began := time.Now()
		seq, n, dup, err := e.bus.AppendEvents(ctx, events, bus.WithMsgIDs(msgIDs), bus.ExpectLast(last))
		moved := err == nil && dup && seq > last || errors.Is(err, bus.ErrEventLogMoved)
		if err != nil || moved {
			observeAppend(nil, time.Since(began), false)
		} else {
			observeAppend(events[:n], time.Since(began), !dup)
		}
		if moved {
			e.log.WarnContext(e.workflowContext(ctx, wf), "the workflow's event log has events this coordinator has not folded; reloading it",
				"workflow", wf, "last_folded", last, "err", err)
			if rerr := e.reload(ctx, wf); rerr != nil {
				return false, fmt.Errorf("engine: reload %s: %w", wf, rerr)
			}
			return true, fmt.Errorf("engine: %s event for %s not appended: %w", events[0].Type(), wf, bus.ErrEventLogMoved)
		}
		if err != nil {
			return folded, err
		}
		if !dup {
			folded = true
			if err := e.foldAppended(ctx, events[:n], seq); err != nil {
				return true, err
			}
		}
		events, msgIDs = events[n:], msgIDs[n:]
	}
	return folded, nil
}

// foldAppended folds in the events of one message this engine has just
// appended at seq, all under one hold of the state's lock (a reader, a
// snapshot among them, sees none of them or all), then does what their
// being new calls for: keeping tasks' prompts, notifying, logging an
// escalation, counting, waking the fleet. The first event that did not
// fold is the error.
func (e *Engine) foldAppended(ctx context.Context, events []eventlog.Event, seq uint64) error {
	for i := range events {
		events[i].Seq, events[i].Index = seq, i
		if tasks, ok := taskBodies(events[i].Body); ok && e.leavePrompts {
			e.prompts.keep(seq, tasks) // the new nodes' jobs need them next
		}
	}
	var first error
	failed := make([]bool, len(events))
	e.mu.Lock()
	for i, ev := range events {
		if err := e.st.Apply(ev); err != nil {
			failed[i] = true
			if first == nil {
				first = fmt.Errorf("engine: fold %s event for %s: %w", ev.Type(), ev.WorkflowID, err)
			}
		}
	}
	e.mu.Unlock()
	for i, ev := range events {
		if failed[i] {
			continue
		}
		e.notify(ev)
		if b, ok := ev.Body.(eventlog.NodeEscalated); ok {
			e.log.WarnContext(e.workflowContext(ctx, ev.WorkflowID), "node escalated; it waits for a human",
				"workflow", ev.WorkflowID, "node", ev.NodeID, "attempt", b.Attempt, "reason", b.Reason)
		}
		e.observeFolded(ev)
		if statemachine.CountsAgainstFleet(ev) {
			e.kickFleet()
		}
		if _, ok := ev.Body.(eventlog.FleetResumed); ok {
			e.kickAll()
		}
	}
	return first
}

// notify tells the notifier of an escalation or a human's decision, once:
// only a newly appended event does (a replay or a duplicate does not).
func (e *Engine) notify(ev eventlog.Event) {
	if e.opts.Notify == nil {
		return
	}
	n := notify.Notification{Type: string(ev.Type()), WorkflowID: ev.WorkflowID, NodeID: ev.NodeID, Time: ev.Time}
	switch b := ev.Body.(type) {
	case eventlog.NodeEscalated:
		n.Attempt, n.Reason = b.Attempt, b.Reason
		n.Hint = fmt.Sprintf("coordinator show %s %s; then approve, reject or retry it", ev.WorkflowID, ev.NodeID)
	case eventlog.NodeAwaitingApproval:
		n.Attempt, n.Reason = b.Attempt, b.Reason
		n.Hint = fmt.Sprintf("coordinator show %s %s; then approve or reject it", ev.WorkflowID, ev.NodeID)
	case eventlog.NodeApproved:
		n.Attempt, n.By, n.Note = b.Attempt, b.By, b.Note
	case eventlog.NodeRejected:
		n.Attempt, n.By, n.Reason = b.Attempt, b.By, b.Reason
	case eventlog.NodeRetryGranted:
		n.Attempt, n.By, n.Note = b.Attempt, b.By, b.Note
	default:
		return
	}
	e.Read(func(s *statemachine.State) {
		if w, ok := s.Workflow(ev.WorkflowID); ok {
			n.WorkflowName, n.TraceID = w.Spec.Name, telemetry.TraceID(w.TraceParent)
		}
	})
	e.opts.Notify.Send(n)
}

// pendingJob is a job published and not yet acknowledged.
type pendingJob struct {
	id, node, gate string
	kind           protocol.JobKind
	pool           string
	ack            jetstream.PubAckFuture
	span           trace.Span
}

// jobAckTimeout bounds the wait for a published job's acknowledgement.
const jobAckTimeout = 30 * time.Second

// publishAsync publishes a job, once per engine (the bus de-duplicates the
// same job id anyway, so a restarted engine publishes what may be
// missing), without waiting for the stream to store it: awaitJobs waits.
func (e *Engine) publishAsync(ctx context.Context, wf string, p statemachine.Publish) (pendingJob, error) {
	var (
		data []byte
		err  error
		kind protocol.JobKind
		pool string
		node string
		gate string
	)
	if p.Agent != nil {
		kind, pool, node = protocol.KindAgent, p.Agent.Pool, p.Agent.NodeID
		data, err = protocol.Encode(p.Agent)
	} else {
		kind, pool, node, gate = protocol.KindGate, p.Gate.Pool, p.Gate.NodeID, p.Gate.Gate
		data, err = protocol.Encode(p.Gate)
	}
	if err != nil {
		return pendingJob{}, err
	}
	ctx, span := e.startSpan(ctx, wf, SpanDispatch, attribute.String("supervisor.job_id", p.JobID()),
		attribute.String("supervisor.job_kind", string(kind)), attribute.String("supervisor.pool", pool))
	ack, err := e.bus.PublishJobAsync(ctx, kind, pool, p.JobID(), data)
	if err != nil {
		telemetry.End(span, err)
		return pendingJob{}, err
	}
	return pendingJob{id: p.JobID(), node: node, gate: gate, kind: kind, pool: pool, ack: ack, span: span}, nil
}

// awaitJobs waits for the acknowledgements of jobs and records those the
// stream stored as published. The first failure is returned: the next
// decision publishes that job again (the bus de-duplicates by job id).
func (e *Engine) awaitJobs(ctx context.Context, wf string, jobs []pendingJob) error {
	if len(jobs) == 0 {
		return nil
	}
	var (
		first error
		done  []pendingJob
	)
	wctx, cancel := context.WithTimeout(ctx, jobAckTimeout)
	defer cancel()
	defer func() {
		if len(done) == 0 {
			return
		}
		e.mu.Lock()
		for _, j := range done {
			e.st.MarkPublished(wf, j.node, j.gate, j.id)
		}
		e.mu.Unlock()
	}()
	for _, j := range jobs {
		var err error
		select {
		case <-j.ack.Ok():
		case err = <-j.ack.Err():
			err = fmt.Errorf("bus: publish job %s: %w", j.id, err)
		case <-wctx.Done():
			err = fmt.Errorf("bus: publish job %s: no acknowledgement: %w", j.id, wctx.Err())
		}
		telemetry.End(j.span, err)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		e.out.add(wf, j.id)
		done = append(done, j)
		observePublished(j.kind, j.pool)
	}
	return first
}

// finish delivers the workflow's branch if asked, records the workflow's
// end, and tells runners through the state store to drop any of its jobs
// still queued (and, for a cancellation, to stop those running).
func (e *Engine) finish(ctx context.Context, wf string, f statemachine.Finish) (bool, error) {
	if f.Deliver {
		var in integration
		e.Read(func(s *statemachine.State) {
			w, _ := s.Workflow(wf)
			in = snapshot(w, "")
		})
		in.history = e.history(wf)
		if err := e.integ.deliver(ctx, in); err != nil {
			return false, err
		}
	}
	folded, err := e.append(ctx, f.Event, f.MsgID)
	if err != nil {
		return folded, err
	}
	st := f.Event.Body.(eventlog.WorkflowFinished).Status
	if err := e.store.CachePut(ctx, protocol.WorkflowFinishedKey(wf), []byte(st), finishedMarkerTTL); err != nil {
		e.log.WarnContext(ctx, "cannot mark the workflow finished for runners; its queued jobs will run and be ignored",
			"workflow", wf, "err", err)
	}
	e.out.forget(wf)
	e.wakes.cancel(wf)
	if f.Announce {
		// Running jobs stop when they hear this; queued ones are dropped
		// when a runner takes them and finds the finished marker.
		_ = e.bus.NC.Publish(protocol.CancelSubject(wf), nil)
	}
	return folded, nil
}

// finishedMarkerTTL outlives any job that could still be queued.
const finishedMarkerTTL = 7 * 24 * time.Hour

// outbox remembers the jobs this engine has published, by workflow.
type outbox struct {
	mu   sync.Mutex
	jobs map[string]map[string]struct{}
}

func newOutbox() *outbox { return &outbox{jobs: map[string]map[string]struct{}{}} }

// publishedIn returns whether a job of workflow wf was published, for one
// decision (Decide calls it with the state read-locked): the workflow's set is looked up once, not once per node. Only
// wf's queue adds to that set, and it decides in the same queue, so the
// set does not change while the decision reads it.
func (o *outbox) publishedIn(wf string) func(jobID string) bool {
	o.mu.Lock()
	jobs := o.jobs[wf]
	o.mu.Unlock()
	return func(jobID string) bool {
		_, ok := jobs[jobID]
		return ok
	}
}

func (o *outbox) add(wf, jobID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.jobs[wf] == nil {
		o.jobs[wf] = map[string]struct{}{}
	}
	o.jobs[wf][jobID] = struct{}{}
}

func (o *outbox) forget(wf string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.jobs, wf)
}

// wakeups holds one timer per workflow, for the state machine's Wake.
type wakeups struct {
	mu      sync.Mutex
	timers  map[string]*time.Timer
	when    map[string]time.Time
	stopped bool
}

func newWakeups() *wakeups {
	return &wakeups{timers: map[string]*time.Timer{}, when: map[string]time.Time{}}
}

// at arranges for kick(wf) after d, unless an earlier one is arranged.
func (w *wakeups) at(wf string, d time.Duration, kick func(string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	due := time.Now().Add(max(d, 0))
	if t, ok := w.timers[wf]; ok {
		if !w.when[wf].After(due) {
			return
		}
		t.Stop()
	}
	w.when[wf] = due
	w.timers[wf] = time.AfterFunc(max(d, 0), func() {
		w.mu.Lock()
		delete(w.timers, wf)
		delete(w.when, wf)
		w.mu.Unlock()
		kick(wf)
	})
}

func (w *wakeups) cancel(wf string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.timers[wf]; ok {
		t.Stop()
		delete(w.timers, wf)
		delete(w.when, wf)
	}
}

func (w *wakeups) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for wf, t := range w.timers {
		t.Stop()
		delete(w.timers, wf)
	}
}

// newWorkflowID returns "wf-" and 12 random base-32 characters.
func newWorkflowID() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "wf-" + string(b[:]), nil
}
