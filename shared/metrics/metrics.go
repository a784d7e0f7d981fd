// Package metrics defines every Prometheus metric Supervisor's binaries
// export, once, in one registry (Registry), and serves them on
// --metrics-listen (Serve). `coordinator dev` runs the coordinator, a
// worker and a gate runner in one process: each component records into
// the same metrics, told apart by their labels (kind), so none registers
// a copy of its own.
//
// Labels are bounded: no workflow, node or job id is ever a label. Gate,
// pool, adapter and breaker-scope names come from the fleet's
// configuration; past MaxLabelValues distinct values of one label, the
// rest are counted under "other" (see Bounded).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every metric's name.
const Namespace = "supervisor"

// Registry holds every Supervisor metric, the Go runtime's and the
// process's; Serve exposes it.
var Registry = prometheus.NewRegistry()

// Buckets of the duration histograms.
var (
	// shortBuckets: appends, start latencies (1 ms to ~2 min).
	shortBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)
	// longBuckets: gates and agents (100 ms to ~1.5 days).
	longBuckets = prometheus.ExponentialBuckets(0.1, 4, 10)
)

// Seed 004's gate metrics, with the supervisor_ prefix.
var (
	// GatesExecuted counts gate executions on gate runners by gate and
	// final status (passed, failed, pending, timeout, error). A cache hit
	// executes nothing and is counted by GateCacheHits instead.
	GatesExecuted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gates_executed_total",
		Help: "Gate executions on gate runners, by gate and status (cache hits not included)."}, []string{"gate", "status"})
	// GateDuration observes how long each executed gate ran.
	GateDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "gate_duration_seconds",
		Help: "How long executed gates ran, by gate.", Buckets: longBuckets}, []string{"gate"})
	// GateRetries counts node retries a gate's blocking failure caused
	// (coordinator).
	GateRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gate_retries_total",
		Help: "Node retries scheduled because the gate failed, by gate (coordinator)."}, []string{"gate"})
	// GatesEscalated counts escalations to a human a gate's failure caused
	// (coordinator).
	GatesEscalated = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gates_escalated_total",
		Help: "Nodes escalated to a human because the gate failed, by gate (coordinator)."}, []string{"gate"})
	// AsyncGateWait observes how long a gate stayed pending (exit 75) before
	// a final result (coordinator).
	AsyncGateWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "async_gate_wait_seconds",
		Help: "Time from a gate's first pending result to its final one, by gate (coordinator).", Buckets: longBuckets}, []string{"gate"})
)

// Gate runner metrics beyond seed 004's.
var (
	// GateCacheHits counts gate jobs answered from the fleet's gate cache.
	GateCacheHits = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gate_cache_hits_total",
		Help: "Gate jobs answered from the fleet's gate cache, by gate."}, []string{"gate"})
	// GateCacheMisses counts gate cache lookups that found nothing (the
	// gate then ran). Jobs with caching disabled or no_cache do not look up.
	GateCacheMisses = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gate_cache_misses_total",
		Help: "Gate cache lookups that found no entry, by gate."}, []string{"gate"})
	// IntegrityViolations counts gate runs that changed the workspace
	// outside their allowed_writes.
	IntegrityViolations = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "integrity_violations_total",
		Help: "Gate runs that wrote outside their allowed_writes, by gate."}, []string{"gate"})
)

// Runner metrics (workers and gate runners, through shared/jobrun).
var (
	// Jobs counts deliveries of jobs a runner finished handling, by kind
	// (agent, gate), pool and outcome (see the Outcome constants).
	Jobs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "jobs_total",
		Help: "Job deliveries a runner handled, by kind, pool and outcome."}, []string{"kind", "pool", "outcome"})
	// JobStartLatency observes the time from a job's publication (its node
	// or gate became ready) to the runner reporting it started.
	JobStartLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "job_start_latency_seconds",
		Help:    "Time from a job's publication by the coordinator to its start on a runner, by kind and pool.",
		Buckets: shortBuckets}, []string{"kind", "pool"})
	// AgentDuration observes how long agent CLIs ran, by adapter and status.
	AgentDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "agent_duration_seconds",
		Help: "How long agent processes ran, by adapter and status.", Buckets: longBuckets}, []string{"adapter", "status"})
)

// Coordinator metrics.
var (
	// JobsPublished counts jobs the coordinator published, by kind and pool.
	JobsPublished = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "jobs_published_total",
		Help: "Jobs the coordinator published, by kind and pool."}, []string{"kind", "pool"})
	// EventAppend observes appending one message to the event log (one
	// event or a batch of them: the JetStream publish and its
	// acknowledgement).
	EventAppend = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "eventlog_append_seconds",
		Help: "Latency of appending one message (an event or a batch of events) to the event log.", Buckets: shortBuckets})
	// EventsAppended counts events appended to the event log, by type.
	EventsAppended = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "events_appended_total",
		Help: "Events appended to the event log, by type."}, []string{"type"})
)

// Outcomes of a job delivery (the outcome label of Jobs).
const (
	OutcomeSucceeded  = "succeeded"   // a report of success (agent succeeded, gate passed)
	OutcomeFailed     = "failed"      // a report of failure (failed, timeout, skipped)
	OutcomePending    = "pending"     // a pending gate's report (polled again later)
	OutcomeError      = "error"       // a report of status error (an infrastructure error on the last delivery, an agent that could not run)
	OutcomeHandedBack = "handed_back" // handed back for redelivery (Nak)
	OutcomeAbandoned  = "abandoned"   // its lease was lost to another runner
	OutcomeDropped    = "dropped"     // dropped: its workflow finished or was cancelled
)

// supervisorCollectors are every collector of Supervisor's own metrics.
func supervisorCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		GatesExecuted, GateDuration, GateRetries, GatesEscalated, AsyncGateWait,
		GateCacheHits, GateCacheMisses, IntegrityViolations,
		Jobs, JobStartLatency, AgentDuration,
		JobsPublished, EventAppend, EventsAppended,
		slots, queues, coordinatorCollector,
	}
}

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	Registry.MustRegister(supervisorCollectors()...)
}

// Seconds is d in seconds, never negative (clocks of two hosts may
// disagree).
func Seconds(d time.Duration) float64 { return max(d.Seconds(), 0) }
