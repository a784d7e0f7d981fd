package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// watcher reads the event log for the figures.
//
// It runs in the measured process: what it spends would be counted with
// the coordinator's CPU, and each log message it read during a
// measurement would be one more delivery for the NATS server to make. So
// while a measurement runs it reads, of the log, only the last message of
// a workflow it waits for (wait), and the whole log, in order, from where
// the last reading stopped, once the measurement's window has closed
// (settle, collect) or to explain a failure.
type watcher struct {
	js     jetstream.JetStream
	client *api.Client

	mu  sync.Mutex
	wfs map[string]*wfEvents
	// next is the first log sequence not yet read; readErr the last
	// reading's failure.
	next    uint64
	readErr error
}

const (
	// waitPollMax bounds the interval between wait's looks at the log: a
	// burst's end is the coordinator's timestamp, so a longer interval
	// only adds idle time after it.
	waitPollMax = 20 * time.Millisecond
	// waitListEvery is how often wait also asks the coordinator for its
	// listing, which tells a workflow waiting for a human (or one whose
	// workflow.finished is not its last event).
	waitListEvery = time.Second
	// readLogTimeout bounds one reading of the log after a window.
	readLogTimeout = 2 * time.Minute
)

// wfEvents is what the event log said about one workflow.
type wfEvents struct {
	ready       map[string]time.Time
	started     map[string]time.Time
	agentDone   map[string]time.Time
	nodeLatency []time.Duration
	gateLatency []time.Duration
	turnaround  []time.Duration
	run         []time.Duration
	settle      []time.Duration
	succeeded   int
	failure     string
	finished    bool
	status      protocol.WorkflowStatus
	reason      string
	finishedAt  time.Time
	// Gates, keyed by node and gate: when each was last started; the
	// first gate.dispatched, the last gate.finished and node.agent_done;
	// how many gates finished; which host started them; and how long each
	// ran (gate.started → gate.finished).
	gateStarted      map[string]time.Time
	firstDispatched  time.Time
	lastGateFinished time.Time
	lastAgentDone    time.Time
	gatesFinished    int
	gateHosts        map[string]int
	gateRun          []time.Duration
	// firstReady is the first node.ready; agentHosts counts, by host,
	// the node.started events (agent jobs) each runner reported.
	firstReady time.Time
	agentHosts map[string]int
	// escalated is the first node.escalated, if any: the node waits for
	// a human, so the workflow would not finish by itself.
	escalated string
	// rounds keeps, by node, what the closed loop did: only for nodes
	// whose gates failed or that went past their first attempt, so the
	// other scenarios allocate nothing for it.
	rounds map[string]nodeRounds
}

// newWatcher reads b's event log from its start, asking client (on b's
// connection) whether workflows have finished.
func newWatcher(b *bus.Bus, client *api.Client) *watcher {
	return &watcher{js: b.JS, client: client, wfs: map[string]*wfEvents{}, next: 1}
}

// settle reads the log written so far (readLocked), for a measurement
// whose window has closed; a failure is kept for collect.
func (w *watcher) settle() {
	ctx, cancel := context.WithTimeout(context.Background(), readLogTimeout)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.readErr = w.readLocked(ctx)
}

// readLocked reads, in log order, every event message from w.next to the
// last one in the stream now, and applies its events. The caller holds mu.
// It reads through an ephemeral pull consumer of its own (no acks), which
// it deletes when done, so none is left on the server into the next
// measurement.
func (w *watcher) readLocked(ctx context.Context) (err error) {
	stream, err := w.js.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		return fmt.Errorf("read the event log: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("read the event log: %w", err)
	}
	last := info.State.LastSeq
	if last < w.next {
		return nil
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: protocol.SubjectEvents,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: w.next,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true,
		// Gone by itself if this process dies before deleting it.
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("read the event log from %d: %w", w.next, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if derr := stream.DeleteConsumer(dctx, cons.CachedInfo().Name); derr != nil && err == nil {
			err = fmt.Errorf("read the event log: delete its consumer: %w", derr)
		}
	}()
	for w.next <= last {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return fmt.Errorf("read the event log from %d: %w", w.next, err)
		}
		n := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("read the event log from %d: %w", w.next, err)
			}
			n++
			w.next = md.Sequence.Stream + 1
			if evs, err := watchDecode(msg.Data()); err == nil {
				for _, ev := range evs {
					w.applyLocked(ev)
				}
			}
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("read the event log from %d: %w", w.next, err)
		}
		if n == 0 {
			return nil // the rest is not events (or was removed)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read the event log from %d: %w", w.next, err)
		}
	}
	return nil
}

// applyLocked counts one event. The caller holds mu.
func (w *watcher) applyLocked(ev eventlog.Event) {
	wf := w.wfs[ev.WorkflowID]
	if wf == nil {
		wf = &wfEvents{ready: map[string]time.Time{}, started: map[string]time.Time{}, agentDone: map[string]time.Time{},
			gateStarted: map[string]time.Time{}, gateHosts: map[string]int{}, agentHosts: map[string]int{}}
		w.wfs[ev.WorkflowID] = wf
	}
	switch b := ev.Body.(type) {
	case eventlog.NodeReady:
		wf.ready[ev.NodeID] = ev.Time
		if wf.firstReady.IsZero() || ev.Time.Before(wf.firstReady) {
			wf.firstReady = ev.Time
		}
		if b.Attempt > 1 {
			wf.round(ev.NodeID, b.Attempt).ready = ev.Time
		}
	case eventlog.NodeStarted:
		wf.nodeLatency = append(wf.nodeLatency, time.Duration(b.LatencyMicros)*time.Microsecond)
		wf.started[ev.NodeID] = ev.Time
		wf.agentHosts[b.Host]++
		if b.Attempt > 1 {
			wf.round(ev.NodeID, b.Attempt).started = ev.Time
		}
	case eventlog.NodeRetryScheduled:
		a := wf.round(ev.NodeID, b.Attempt)
		a.retryScheduled, a.notBefore = ev.Time, b.NotBefore
	case eventlog.NodeEscalated:
		if wf.escalated == "" {
			wf.escalated = fmt.Sprintf("node %s escalated after attempt %d: %s", ev.NodeID, b.Attempt, b.Reason)
		}
	case eventlog.NodeAgentDone:
		wf.agentDone[ev.NodeID] = ev.Time
		if ev.Time.After(wf.lastAgentDone) {
			wf.lastAgentDone = ev.Time
		}
	case eventlog.GateDispatched:
		if wf.firstDispatched.IsZero() || ev.Time.Before(wf.firstDispatched) {
			wf.firstDispatched = ev.Time
		}
	case eventlog.GateStarted:
		wf.gateLatency = append(wf.gateLatency, time.Duration(b.LatencyMicros)*time.Microsecond)
		wf.gateStarted[ev.NodeID+"/"+b.Gate] = ev.Time
		wf.gateHosts[b.Host]++
	case eventlog.GateFinished:
		wf.gatesFinished++
		if ev.Time.After(wf.lastGateFinished) {
			wf.lastGateFinished = ev.Time
		}
		if t, ok := wf.gateStarted[ev.NodeID+"/"+b.Gate]; ok {
			wf.gateRun = append(wf.gateRun, ev.Time.Sub(t))
		}
		if passed := b.Result != nil && b.Result.Status == protocol.GatePassed; !passed || b.Attempt > 1 {
			wf.gateRound(ev, b, passed)
		}
	case eventlog.NodeFinished:
		if b.Status == protocol.NodeSucceeded {
			wf.succeeded++
		} else if wf.failure == "" {
			wf.failure = fmt.Sprintf("node %s %s: %s", ev.NodeID, b.Status, b.Reason)
		}
		if t, ok := wf.ready[ev.NodeID]; ok {
			wf.turnaround = append(wf.turnaround, ev.Time.Sub(t))
		}
		done, ok := wf.agentDone[ev.NodeID]
		if t, started := wf.started[ev.NodeID]; ok && started {
			wf.run = append(wf.run, done.Sub(t))
		}
		if ok {
			wf.settle = append(wf.settle, ev.Time.Sub(done))
		}
	case eventlog.WorkflowFinished:
		wf.finished, wf.status, wf.reason, wf.finishedAt = true, b.Status, b.Reason, ev.Time
	}
}

// wait blocks until every workflow of ids has finished and returns when
// the last one did (the coordinator's timestamp of workflow.finished). A
// workflow that did not succeed, or that waits for a human, is an error,
// explained from the log.
//
// It looks at the last log message of the first workflow not known to have
// finished, at intervals growing from a millisecond to waitPollMax. That costs the server one message read a look, whatever
// the size of the workflows. Every waitListEvery it also asks the
// coordinator for its listing (listed).
func (w *watcher) wait(ctx context.Context, ids []string) (time.Time, error) {
	stream, err := w.js.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		return time.Time{}, fmt.Errorf("wait: %w", err)
	}
	var (
		last     time.Time
		done     int // ids[:done] have finished
		delay    = time.Millisecond
		nextList = time.Now().Add(waitListEvery)
		lookErr  error
	)
	fail := func() (time.Time, error) {
		if _, err := w.progress(ids); err != nil {
			return time.Time{}, err
		}
		return time.Time{}, errors.New("a workflow failed or waits for a human")
	}
	for {
		for done < len(ids) {
			fin, ok, err := lastFinished(ctx, stream, ids[done])
			if lookErr = err; !ok {
				break
			}
			if fin.Status != protocol.WorkflowSucceeded {
				return fail()
			}
			done++
			if fin.At.After(last) {
				last = fin.At
			}
		}
		if done == len(ids) {
			return last, nil
		}
		if time.Now().After(nextList) {
			nextList = time.Now().Add(waitListEvery)
			if list, err := w.client.List(ctx); err == nil {
				at, finished, failed := listed(list.Workflows, ids)
				if failed {
					return fail()
				}
				if finished == len(ids) {
					return at, nil
				}
			} else {
				lookErr = err
			}
		}
		select {
		case <-time.After(delay):
			delay = min(2*delay, waitPollMax)
		case <-ctx.Done():
			nodes, _ := w.progress(ids)
			err := fmt.Errorf("%d nodes of %d workflow(s) succeeded before %w", nodes, len(ids), ctx.Err())
			if lookErr != nil {
				err = fmt.Errorf("%w (last look: %v)", err, lookErr)
			}
			return time.Time{}, err
		}
	}
}

// wfFinished is a workflow.finished event's status and time.
type wfFinished struct {
	Status protocol.WorkflowStatus
	At     time.Time
}

// lastFinished reads workflow wf's last log message and returns its
// workflow.finished event, if it holds one; a workflow with no events yet
// has not finished.
func lastFinished(ctx context.Context, stream jetstream.Stream, wf string) (wfFinished, bool, error) {
	msg, err := stream.GetLastMsgForSubject(ctx, protocol.EventSubject(wf))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return wfFinished{}, false, nil
	}
	if err != nil {
		return wfFinished{}, false, fmt.Errorf("last event of %s: %w", wf, err)
	}
	evs, err := watchDecode(msg.Data)
	if err != nil {
		return wfFinished{}, false, fmt.Errorf("last event of %s: %w", wf, err)
	}
	for _, ev := range evs {
		if b, ok := ev.Body.(eventlog.WorkflowFinished); ok {
			return wfFinished{Status: b.Status, At: ev.Time}, true, nil
		}
	}
	return wfFinished{}, false, nil
}

// listed reads the coordinator's listing for ids: when the last of them
// finished, how many have, and whether any failed, was cancelled or waits
// for a human. A workflow not listed yet has not finished.
func listed(sums []api.WorkflowSummary, ids []string) (last time.Time, finished int, failed bool) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for _, s := range sums {
		if !want[s.ID] {
			continue
		}
		switch {
		case s.Status == protocol.WorkflowNeedsAttention:
			failed = true
		case s.Status.Terminal():
			finished++
			if s.Status != protocol.WorkflowSucceeded {
				failed = true
			}
			if s.FinishedAt != nil && s.FinishedAt.After(last) {
				last = *s.FinishedAt
			}
		}
	}
	return last, finished, failed
}

// progress reads the log and returns how many nodes of ids succeeded, and
// the first workflow's failure (or the log's), if any.
func (w *watcher) progress(ids []string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readLogTimeout)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	failed := w.readLocked(ctx)
	nodes := 0
	for _, id := range ids {
		wf := w.wfs[id]
		if wf == nil {
			continue
		}
		nodes += wf.succeeded
		if wf.escalated != "" && failed == nil {
			failed = fmt.Errorf("workflow %s: %s", id, wf.escalated)
		}
		if wf.finished && wf.status != protocol.WorkflowSucceeded && failed == nil {
			failed = fmt.Errorf("workflow %s %s: %s (first failure: %s)", id, wf.status, wf.reason, wf.failure)
		}
	}
	return nodes, failed
}

// stats is what a set of workflows' events add up to.
type stats struct {
	succeeded   int
	nodeLatency []time.Duration
	gateLatency []time.Duration
	turnaround  []time.Duration
	run         []time.Duration
	settle      []time.Duration
	// Gates: see wfEvents.
	gatesFinished    int
	gateHosts        map[string]int
	gateRun          []time.Duration
	firstDispatched  time.Time
	lastGateFinished time.Time
	lastAgentDone    time.Time
	firstReady       time.Time
	agentHosts       map[string]int
}

// collect adds up what the log says of ids, reading what settle has not
// read yet; the error is the log's reading failure, if any.
func (w *watcher) collect(ids []string) (stats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readLogTimeout)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.readErr = w.readLocked(ctx)
	st := stats{gateHosts: map[string]int{}, agentHosts: map[string]int{}}
	for _, id := range ids {
		wf := w.wfs[id]
		if wf == nil {
			continue
		}
		st.succeeded += wf.succeeded
		st.nodeLatency = append(st.nodeLatency, wf.nodeLatency...)
		st.gateLatency = append(st.gateLatency, wf.gateLatency...)
		st.turnaround = append(st.turnaround, wf.turnaround...)
		st.run = append(st.run, wf.run...)
		st.settle = append(st.settle, wf.settle...)
		st.gatesFinished += wf.gatesFinished
		for h, n := range wf.gateHosts {
			st.gateHosts[h] += n
		}
		st.gateRun = append(st.gateRun, wf.gateRun...)
		for h, n := range wf.agentHosts {
			st.agentHosts[h] += n
		}
		if !wf.firstReady.IsZero() && (st.firstReady.IsZero() || wf.firstReady.Before(st.firstReady)) {
			st.firstReady = wf.firstReady
		}
		if !wf.firstDispatched.IsZero() && (st.firstDispatched.IsZero() || wf.firstDispatched.Before(st.firstDispatched)) {
			st.firstDispatched = wf.firstDispatched
		}
		if wf.lastGateFinished.After(st.lastGateFinished) {
			st.lastGateFinished = wf.lastGateFinished
		}
		if wf.lastAgentDone.After(st.lastAgentDone) {
			st.lastAgentDone = wf.lastAgentDone
		}
	}
	return st, w.readErr
}
