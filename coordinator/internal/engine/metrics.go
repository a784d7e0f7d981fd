package engine

import (
	"context"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// observeAppend records one message appended to the event log: its
// latency, and its events by type when they were appended (not a
// duplicate, not refused).
func observeAppend(events []eventlog.Event, took time.Duration, appended bool) {
	metrics.EventAppend.Observe(metrics.Seconds(took))
	if appended {
		for _, ev := range events {
			metrics.EventsAppended.WithLabelValues(string(ev.Type())).Inc()
		}
	}
}

// observePublished counts a job the engine published.
func observePublished(kind protocol.JobKind, pool string) {
	metrics.JobsPublished.WithLabelValues(string(kind), metrics.Bounded("pool", pool)).Inc()
}

// observeFolded records what a newly appended (and folded) event means for
// the gate metrics the coordinator owns: retries and escalations a gate
// caused, and how long a gate stayed pending. A replay records nothing.
func (e *Engine) observeFolded(ev eventlog.Event) {
	switch b := ev.Body.(type) {
	case eventlog.NodeRetryScheduled:
		for _, g := range b.FailedGates {
			metrics.GateRetries.WithLabelValues(metrics.Bounded("gate", g)).Inc()
		}
	case eventlog.NodeEscalated:
		for _, g := range b.FailedGates {
			metrics.GatesEscalated.WithLabelValues(metrics.Bounded("gate", g)).Inc()
		}
	case eventlog.GateFinished:
		if b.Result == nil || b.Result.Status == protocol.GatePending {
			return
		}
		var since time.Time
		e.Read(func(s *statemachine.State) {
			w, ok := s.Workflow(ev.WorkflowID)
			if !ok {
				return
			}
			if n := w.Nodes[ev.NodeID]; n != nil && n.Gates[b.Gate] != nil {
				since = n.Gates[b.Gate].PendingSince()
			}
		})
		if !since.IsZero() {
			metrics.AsyncGateWait.WithLabelValues(metrics.Bounded("gate", b.Gate)).Observe(metrics.Seconds(ev.Time.Sub(since)))
		}
	}
}

// MetricsSnapshot is what the coordinator reports at each scrape: whether
// it leads, its workflows by status, its inbox and the fleet's breakers
// (metrics.CoordinatorSource).
func (e *Engine) MetricsSnapshot(ctx context.Context) (metrics.CoordinatorSnapshot, error) {
	snap := metrics.CoordinatorSnapshot{Workflows: map[string]int{}, Inbox: map[string]int{}}
	select {
	case <-e.ready:
		snap.Leader = true
	default:
	}
	for _, st := range []protocol.WorkflowStatus{protocol.WorkflowRunning, protocol.WorkflowNeedsAttention,
		protocol.WorkflowSucceeded, protocol.WorkflowFailed, protocol.WorkflowCancelled} {
		snap.Workflows[string(st)] = 0
	}
	for _, st := range []protocol.NodeStatus{protocol.NodeEscalated, protocol.NodeAwaitingApproval} {
		snap.Inbox[string(st)] = 0
	}
	e.Read(func(s *statemachine.State) {
		for _, w := range s.Workflows() {
			snap.Workflows[string(w.Status)]++
			for _, n := range w.Nodes {
				// The inbox lists these nodes (service/inbox.go).
				if (n.Status == protocol.NodeEscalated || n.Status == protocol.NodeAwaitingApproval) && !n.Approved() {
					snap.Inbox[string(n.Status)]++
				}
			}
		}
	})
	breakers, err := e.store.BreakerList(ctx)
	snap.Breakers = breakers
	return snap, err
}
