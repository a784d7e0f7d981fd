package worker

import (
	"context"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// agentTraceEnv is what hands the job's trace to its agent CLI: TRACEPARENT
// for every CLI, and for Claude Code also OTEL_TRACEPARENT and, when this
// worker exports over OTLP, the settings that make it export its own spans
// to the same collector (telemetry.ClaudeCodeEnv). In the Docker sandbox
// the collector must be on --egress-allow for those spans to leave.
func agentTraceEnv(ctx context.Context, job *protocol.AgentJob) map[string]string {
	if job.Agent != nil && job.Agent.Adapter == "claude-code" {
		return telemetry.ClaudeCodeEnv(ctx, telemetry.Active())
	}
	return telemetry.ProcessEnv(ctx)
}
