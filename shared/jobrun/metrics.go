package jobrun

import (
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// openSlots counts a runner's slots in supervisor_runner_slots while it
// pulls jobs.
func openSlots(opts bus.PullOptions) func() {
	return metrics.OpenSlots(string(opts.Kind), max(opts.Concurrency, 1))
}

// busySlot marks one of the runner's slots busy while a job past its
// breakers runs.
func busySlot(m Meta) func() { return metrics.BusySlot(string(m.Kind)) }

// observeStarted records the job's ready→started latency: from its
// publication by the coordinator to its start report (two hosts' clocks).
func observeStarted(m Meta, at time.Time) {
	if m.PublishedAt.IsZero() {
		return
	}
	metrics.JobStartLatency.WithLabelValues(string(m.Kind), metrics.Bounded("pool", m.Pool)).
		Observe(metrics.Seconds(at.Sub(m.PublishedAt)))
}

// observeJob counts a handled delivery by its outcome: sent is the report
// published for it (nil if none was).
func observeJob(m Meta, disp bus.Disposition, sent *protocol.Report) {
	metrics.Jobs.WithLabelValues(string(m.Kind), metrics.Bounded("pool", m.Pool), jobOutcome(disp, sent)).Inc()
}

// jobOutcome is the outcome label of a delivery.
func jobOutcome(disp bus.Disposition, sent *protocol.Report) string {
	switch disp.Action() {
	case "term":
		return metrics.OutcomeDropped
	case "abandon":
		return metrics.OutcomeAbandoned
	case "nak":
		if sent == nil {
			return metrics.OutcomeHandedBack
		}
	}
	if sent == nil {
		return metrics.OutcomeHandedBack
	}
	switch {
	case sent.Agent != nil:
		switch sent.Agent.Status {
		case protocol.AgentSucceeded:
			return metrics.OutcomeSucceeded
		case protocol.AgentError:
			return metrics.OutcomeError
		}
	case sent.Gate != nil:
		switch sent.Gate.Status {
		case protocol.GatePassed:
			return metrics.OutcomeSucceeded
		case protocol.GatePending:
			return metrics.OutcomePending
		case protocol.GateError:
			return metrics.OutcomeError
		}
	}
	return metrics.OutcomeFailed
}
