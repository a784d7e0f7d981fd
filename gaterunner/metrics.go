package gaterunner

import (
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// observeGate records a gate job's result: an execution by status, its
// duration and an integrity violation; a cache hit executed nothing and is
// counted by observeCacheLookup alone.
func observeGate(g *protocol.GateResult) {
	if g == nil || g.Cached {
		return
	}
	gate := metrics.Bounded("gate", g.Gate)
	metrics.GatesExecuted.WithLabelValues(gate, string(g.Status)).Inc()
	// An error report of a job that never ran its gate has no duration.
	if g.Status != protocol.GateError || g.DurationMillis > 0 {
		metrics.GateDuration.WithLabelValues(gate).Observe(float64(g.DurationMillis) / 1000)
	}
	if g.IntegrityViolation {
		metrics.IntegrityViolations.WithLabelValues(gate).Inc()
	}
}

// observeCacheLookup counts a gate cache lookup's hit or miss.
func observeCacheLookup(gate string, hit bool) {
	if hit {
		metrics.GateCacheHits.WithLabelValues(metrics.Bounded("gate", gate)).Inc()
		return
	}
	metrics.GateCacheMisses.WithLabelValues(metrics.Bounded("gate", gate)).Inc()
}
