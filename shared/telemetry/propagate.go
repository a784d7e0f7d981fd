package telemetry

import (
	"context"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// headerCarrier lets the propagator read and write NATS message headers.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return nats.Header(h).Get(key) }
func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes ctx's span context into h (the traceparent header, and
// tracestate when there is one) with the W3C Trace Context propagator —
// used directly, so propagation works in a process that never ran Setup
// (tests, embedders). h must not be nil; nothing is written when ctx
// carries no valid span context.
func Inject(ctx context.Context, h nats.Header) {
	propagation.TraceContext{}.Inject(ctx, headerCarrier(h))
}

// Extract returns ctx with the remote span context h carries, if any, so
// a span started from it is a child of the sender's.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, headerCarrier(h))
}

// TraceParent returns ctx's span context as a W3C traceparent value, ""
// when ctx has no valid one. It is what the workflow.submitted event
// stores so later spans of the workflow join its trace.
func TraceParent(ctx context.Context) string {
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	return m.Get("traceparent")
}

// WithTraceParent returns ctx with the remote span context traceparent
// names ("" or a malformed value leave ctx as it is).
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// TraceID returns the trace id (32 hex digits) of a traceparent value, ""
// when it has none.
func TraceID(traceparent string) string {
	sc := trace.SpanContextFromContext(WithTraceParent(context.Background(), traceparent))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Environment variables that carry a trace context into a child process.
const (
	// EnvTraceParent is the OpenTelemetry environment carrier's name
	// (TRACEPARENT), which Claude Code in headless mode reads to parent
	// its spans.
	EnvTraceParent = "TRACEPARENT"
	// EnvTraceState carries the W3C tracestate alongside it.
	EnvTraceState = "TRACESTATE"
	// EnvOTELTraceParent is the same value under the OTEL_ prefix.
	EnvOTELTraceParent = "OTEL_TRACEPARENT"
)

// ProcessEnv returns the variables that hand ctx's span context to a
// child process: TRACEPARENT (and TRACESTATE when set). It is empty when
// ctx carries no valid span context.
func ProcessEnv(ctx context.Context) map[string]string {
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	env := map[string]string{}
	if tp := m.Get("traceparent"); tp != "" {
		env[EnvTraceParent] = tp
		if ts := m.Get("tracestate"); ts != "" {
			env[EnvTraceState] = ts
		}
	}
	return env
}

// ClaudeCodeEnv returns the variables that make Claude Code export its
// own spans into ctx's trace: ProcessEnv's, OTEL_TRACEPARENT, and — when
// this process exports over OTLP — telemetry and tracing switched on and
// pointed at the same collector (CLAUDE_CODE_ENABLE_TELEMETRY,
// CLAUDE_CODE_ENHANCED_TELEMETRY_BETA, OTEL_TRACES_EXPORTER=otlp,
// OTEL_EXPORTER_OTLP_PROTOCOL and OTEL_EXPORTER_OTLP_ENDPOINT). Metrics
// and log events stay off. Nothing is returned without a span context.
func ClaudeCodeEnv(ctx context.Context, cfg Config) map[string]string {
	env := ProcessEnv(ctx)
	tp, ok := env[EnvTraceParent]
	if !ok {
		return env
	}
	env[EnvOTELTraceParent] = tp
	var protocol string
	switch cfg.Exporter {
	case ExporterOTLPGRPC:
		protocol = "grpc"
	case ExporterOTLPHTTP:
		protocol = "http/protobuf"
	default:
		return env // a file or stdout of ours is nothing a CLI can write to
	}
	env["CLAUDE_CODE_ENABLE_TELEMETRY"] = "1"
	env["CLAUDE_CODE_ENHANCED_TELEMETRY_BETA"] = "1"
	env["OTEL_TRACES_EXPORTER"] = "otlp"
	env["OTEL_METRICS_EXPORTER"] = "none"
	env["OTEL_LOGS_EXPORTER"] = "none"
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
	if ep := collectorBase(cfg.Endpoint); ep != "" {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = ep
	}
	return env
}

// collectorBase turns --trace-endpoint into the base URL the OTLP
// environment variables want: an HTTP endpoint's /v1/traces path is
// dropped (the CLI appends its own per-signal paths).
func collectorBase(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return ""
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1/traces")
	return u.String()
}
