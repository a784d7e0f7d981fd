package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The tests share the process's global tracer provider: none runs in
// parallel.

// setup installs cfg for the test and restores the no-op provider after.
func setup(t *testing.T, cfg telemetry.Config, service string) telemetry.Shutdown {
	t.Helper()
	shutdown, err := telemetry.Setup(context.Background(), cfg, service)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		if _, err := telemetry.Setup(context.Background(), telemetry.Config{}, "none"); err != nil {
			t.Error(err)
		}
	})
	return shutdown
}

// A span context crosses a real NATS message: the receiver's span is a
// child of the sender's, in the same trace, and the file exporter records
// both with their parent link and the service that made them.
func TestContextCrossesNATS(t *testing.T) {
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	shutdown := setup(t, telemetry.Config{Exporter: telemetry.ExporterFile, File: file}, "sender-and-receiver")

	nc, err := nats.Connect(testkit.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("trace.test")
	if err != nil {
		t.Fatal(err)
	}

	ctx, send := telemetry.Start(context.Background(), "send")
	msg := &nats.Msg{Subject: "trace.test", Header: nats.Header{}}
	telemetry.Inject(ctx, msg.Header)
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	send.End()
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tp := got.Header.Get("traceparent"); !strings.HasPrefix(tp, "00-"+send.SpanContext().TraceID().String()+"-") {
		t.Fatalf("traceparent header = %q, want the sender's trace", tp)
	}
	rctx := telemetry.Extract(context.Background(), got.Header)
	_, recv := telemetry.Start(rctx, "receive")
	recv.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans, err := telemetry.ReadSpanFile(file)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]telemetry.FileSpan{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	s, r := byName["send"], byName["receive"]
	if s.SpanContext.SpanID == "" || r.SpanContext.SpanID == "" {
		t.Fatalf("spans recorded: %+v; want send and receive", spans)
	}
	if s.HasParent() {
		t.Errorf("send has parent %s; want a root", s.Parent.SpanID)
	}
	if r.SpanContext.TraceID != s.SpanContext.TraceID || r.Parent.SpanID != s.SpanContext.SpanID {
		t.Errorf("receive: trace %s parent %s; want trace %s parent %s", r.SpanContext.TraceID, r.Parent.SpanID,
			s.SpanContext.TraceID, s.SpanContext.SpanID)
	}
	if got := r.ResourceAttr("service.name"); got != "sender-and-receiver" {
		t.Errorf("service.name = %q", got)
	}
}

// Without an exporter nothing is recorded, but a context that arrives is
// handed on: a process with tracing off does not cut the trace.
func TestNoneHandsContextOn(t *testing.T) {
	setup(t, telemetry.Config{}, "quiet")
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := telemetry.WithTraceParent(context.Background(), parent)
	ctx, span := telemetry.Start(ctx, "not recorded")
	defer span.End()
	if span.IsRecording() {
		t.Error("the none exporter records spans")
	}
	h := nats.Header{}
	telemetry.Inject(ctx, h)
	if got := h.Get("traceparent"); got != parent {
		t.Errorf("handed on %q, want %q", got, parent)
	}
	if got := telemetry.TraceParent(ctx); got != parent {
		t.Errorf("TraceParent = %q, want %q", got, parent)
	}
	if got := telemetry.TraceID(parent); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("TraceID = %q", got)
	}
	for _, bad := range []string{"", "junk", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if got := telemetry.TraceID(bad); got != "" {
			t.Errorf("TraceID(%q) = %q, want empty", bad, got)
		}
	}
	if env := telemetry.ProcessEnv(context.Background()); len(env) != 0 {
		t.Errorf("ProcessEnv without a span = %v, want nothing", env)
	}
}

// The flags' values are checked; the file exporter needs its file.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  telemetry.Config
		want string
	}{
		{telemetry.Config{}, ""},
		{telemetry.Config{Exporter: "otlp-grpc"}, ""},
		{telemetry.Config{Exporter: "file"}, "needs --trace-file"},
		{telemetry.Config{Exporter: "jaeger"}, `"jaeger": want none`},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
		if c.want != "" {
			if _, err := telemetry.Setup(context.Background(), c.cfg, "x"); err == nil {
				t.Errorf("Setup(%+v) accepted it", c.cfg)
			}
		}
	}
}

// Claude Code gets TRACEPARENT and OTEL_TRACEPARENT, and its exporter
// settings only when this process exports over OTLP.
func TestClaudeCodeEnv(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := telemetry.WithTraceParent(context.Background(), parent)
	file := telemetry.ClaudeCodeEnv(ctx, telemetry.Config{Exporter: telemetry.ExporterFile, File: "x"})
	if file["TRACEPARENT"] != parent || file["OTEL_TRACEPARENT"] != parent || file["CLAUDE_CODE_ENABLE_TELEMETRY"] != "" {
		t.Errorf("file exporter: %v; want the two traceparents and no exporter settings", file)
	}
	grpc := telemetry.ClaudeCodeEnv(ctx, telemetry.Config{Exporter: telemetry.ExporterOTLPGRPC, Endpoint: "http://collector:4317"})
	for k, v := range map[string]string{"TRACEPARENT": parent, "OTEL_TRACEPARENT": parent, "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
		"CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_METRICS_EXPORTER": "none"} {
		if grpc[k] != v {
			t.Errorf("otlp-grpc: %s = %q, want %q", k, grpc[k], v)
		}
	}
	httpEnv := telemetry.ClaudeCodeEnv(ctx, telemetry.Config{Exporter: telemetry.ExporterOTLPHTTP, Endpoint: "http://collector:4318/v1/traces"})
	if httpEnv["OTEL_EXPORTER_OTLP_PROTOCOL"] != "http/protobuf" || httpEnv["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://collector:4318" {
		t.Errorf("otlp-http: %v", httpEnv)
	}
	if env := telemetry.ClaudeCodeEnv(context.Background(), telemetry.Config{Exporter: telemetry.ExporterOTLPGRPC}); len(env) != 0 {
		t.Errorf("without a span: %v, want nothing", env)
	}
}

// A record logged with a span's context carries its trace_id and span_id
// — through InfoContext or Log with a level, and with a context that was
// cancelled meanwhile (the runners log a job's end with its context);
// one logged without carries neither.
func TestHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.NewHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := telemetry.WithTraceParent(context.Background(), parent)
	log.InfoContext(ctx, "with")
	log.Info("without")
	log.Log(ctx, slog.LevelWarn, "with a level")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	log.ErrorContext(cctx, "cancelled")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("logged %q", buf.String())
	}
	recs := make([]map[string]any, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	sc := trace.SpanContextFromContext(ctx)
	for _, r := range []map[string]any{recs[0], recs[2], recs[3]} {
		if r["trace_id"] != sc.TraceID().String() || r["span_id"] != sc.SpanID().String() || r["component"] != "test" {
			t.Errorf("record with a span: %v", r)
		}
	}
	if recs[2]["level"] != "WARN" {
		t.Errorf("Log's level: %v", recs[2])
	}
	if _, ok := recs[1]["trace_id"]; ok {
		t.Errorf("record without a span: %v", recs[1])
	}
}
