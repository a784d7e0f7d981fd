package worker

import (
	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
)

// observeAgent records how long the agent's process ran
// (supervisor_agent_duration_seconds, the sandbox's measure), when it
// started at all.
func observeAgent(job *protocol.AgentJob, status protocol.AgentStatus, res sandbox.Result) {
	if res.StartedAt.IsZero() {
		return
	}
	adapter := ""
	if job.Agent != nil {
		adapter = job.Agent.Adapter
	}
	metrics.AgentDuration.WithLabelValues(metrics.Bounded("adapter", adapter), string(status)).
		Observe(metrics.Seconds(res.Duration))
}
