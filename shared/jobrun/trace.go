package jobrun

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/viper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// SetupTracing reads the tracing flags (telemetry.AddFlags) from v and
// installs the process's tracer provider for service. The returned
// function flushes what is buffered, for at most ten seconds.
func SetupTracing(ctx context.Context, v *viper.Viper, service string, log *slog.Logger) (func(), error) {
	cfg, err := telemetry.FromViper(v)
	if err != nil {
		return nil, err
	}
	shutdown, err := telemetry.Setup(ctx, cfg, service)
	if err != nil {
		return nil, err
	}
	if cfg.Enabled() {
		log.Info("tracing on", "exporter", cfg.Exporter, "endpoint", cfg.Endpoint, "file", cfg.File)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("cannot flush traces", "err", err)
		}
	}, nil
}

// Span names of a job's lifecycle; the runners' own phases are children
// of the job's span.
const (
	SpanAgentJob    = "agent job"
	SpanGateJob     = "gate job"
	SpanWorkspace   = "workspace preparation"
	SpanCacheLookup = "cache lookup"
	SpanSandboxRun  = "sandbox run"
	SpanIntegrity   = "integrity check"
	SpanUpload      = "upload"
)

// startJobSpan starts the span of one delivery of a job, a child of the
// coordinator's dispatch span whose context the job message carries.
func startJobSpan(ctx context.Context, d *bus.Delivery, m Meta, host string) (context.Context, trace.Span) {
	if d.Msg != nil {
		ctx = telemetry.Extract(ctx, d.Msg.Headers())
	}
	name := SpanAgentJob
	if m.Kind == protocol.KindGate {
		name = SpanGateJob
	}
	attrs := []attribute.KeyValue{
		attribute.String("supervisor.job_id", m.JobID), attribute.String("supervisor.workflow_id", m.WorkflowID),
		attribute.String("supervisor.node_id", m.NodeID), attribute.Int("supervisor.attempt", m.Attempt),
		attribute.Int64("supervisor.delivery", int64(d.Number)), attribute.String("supervisor.host", host),
	}
	if m.Gate != "" {
		attrs = append(attrs, attribute.String("supervisor.gate", m.Gate), attribute.Int("supervisor.round", m.Round))
	}
	return telemetry.Start(ctx, name, attrs...)
}

// endJobSpan ends a job's span with what became of the message: an
// infrastructure error marks it failed.
func endJobSpan(span trace.Span, disp bus.Disposition, out *Outcome) {
	span.SetAttributes(attribute.String("supervisor.disposition", disp.String()))
	if out != nil && out.Err != nil {
		span.RecordError(out.Err)
		span.SetStatus(codes.Error, out.Err.Error())
	}
	span.End()
}
