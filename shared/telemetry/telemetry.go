// Package telemetry is Supervisor's OpenTelemetry tracing: the flags that
// choose an exporter, the set-up that installs the process's global
// TracerProvider and the W3C Trace Context propagator, the carriers that
// move a span's context across NATS messages and into an agent CLI's
// environment, and a log/slog handler that stamps records with the trace
// and span of their context.
//
// With the exporter "none" (the default) the provider is OpenTelemetry's
// no-op one: spans cost nothing and record nothing, but a context that
// arrives in a message is still handed on, so a process without an
// exporter does not break the trace of those with one.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exporters, the values of --trace-exporter.
const (
	// ExporterNone records nothing (the default).
	ExporterNone = "none"
	// ExporterOTLPGRPC sends spans to an OTLP collector over gRPC.
	ExporterOTLPGRPC = "otlp-grpc"
	// ExporterOTLPHTTP sends spans to an OTLP collector over HTTP.
	ExporterOTLPHTTP = "otlp-http"
	// ExporterStdout writes each span as a JSON object on standard output.
	ExporterStdout = "stdout"
	// ExporterFile appends each span as a JSON object to --trace-file.
	ExporterFile = "file"
)

// InstrumentationName names the tracer every Supervisor span comes from.
const InstrumentationName = "github.com/supervisorhq/supervisor"

// Config chooses where spans go.
type Config struct {
	// Exporter is one of the Exporter* constants ("" is ExporterNone).
	Exporter string
	// Endpoint is the OTLP collector's URL (http://host:4317 for gRPC,
	// http://host:4318 for HTTP); empty means the exporter's default,
	// which the standard OTEL_EXPORTER_OTLP_* variables can set.
	Endpoint string
	// File is where the file exporter appends spans.
	File string
}

// AddFlags adds --trace-exporter, --trace-endpoint and --trace-file.
func AddFlags(fs *pflag.FlagSet) {
	fs.String("trace-exporter", ExporterNone, "where OpenTelemetry spans go: none, otlp-grpc, otlp-http, stdout or file")
	fs.String("trace-endpoint", "", "OTLP collector URL for otlp-grpc (e.g. http://127.0.0.1:4317) or otlp-http (http://127.0.0.1:4318); empty: the OTEL_EXPORTER_OTLP_* defaults")
	fs.String("trace-file", "", "file the file exporter appends spans to, one JSON object per span")
}

// FromViper reads the settings of AddFlags from v (so SUPERVISOR_TRACE_*
// variables and the config file set them too) and checks them.
func FromViper(v *viper.Viper) (Config, error) {
	c := Config{
		Exporter: strings.ToLower(strings.TrimSpace(v.GetString("trace-exporter"))),
		Endpoint: strings.TrimSpace(v.GetString("trace-endpoint")),
		File:     strings.TrimSpace(v.GetString("trace-file")),
	}
	return c, c.Validate()
}

// Validate checks the exporter's name and that the file exporter has a file.
func (c Config) Validate() error {
	switch c.Exporter {
	case "", ExporterNone, ExporterOTLPGRPC, ExporterOTLPHTTP, ExporterStdout:
	case ExporterFile:
		if c.File == "" {
			return errors.New("--trace-exporter file needs --trace-file")
		}
	default:
		return fmt.Errorf("--trace-exporter %q: want none, otlp-grpc, otlp-http, stdout or file", c.Exporter)
	}
	return nil
}

// Enabled reports whether spans are exported.
func (c Config) Enabled() bool { return c.Exporter != "" && c.Exporter != ExporterNone }

// active is the configuration of the last Setup, which ExporterEnv reads.
var active struct {
	mu  sync.Mutex
	cfg Config
}

// Active returns the configuration the last Setup installed.
func Active() Config {
	active.mu.Lock()
	defer active.mu.Unlock()
	return active.cfg
}

// Shutdown flushes and stops what Setup started.
type Shutdown func(context.Context) error

// Setup installs the global TracerProvider cfg asks for, spans named by
// service (the resource's service.name), and the W3C Trace Context
// propagator. The returned function flushes the spans still buffered and
// closes the exporter; call it before the process exits.
func Setup(ctx context.Context, cfg Config, service string) (Shutdown, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	active.mu.Lock()
	active.cfg = cfg
	active.mu.Unlock()
	if !cfg.Enabled() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, nil
	}
	exp, closeOut, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	res := resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("host.name", host),
		attribute.Int("process.pid", os.Getpid()),
	)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample()))}
	switch cfg.Exporter {
	case ExporterFile, ExporterStdout:
		// Written as each span ends: a file a test or an operator reads
		// while the process runs is complete up to now.
		opts = append(opts, sdktrace.WithSyncer(exp))
	default:
		opts = append(opts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(2*time.Second)))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		if closeOut != nil {
			err = errors.Join(err, closeOut.Close())
		}
		return err
	}, nil
}

// newExporter builds cfg's exporter and what to close after it.
func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, io.Closer, error) {
	switch cfg.Exporter {
	case ExporterOTLPGRPC:
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: otlp-grpc exporter: %w", err)
		}
		return exp, nil, nil
	case ExporterOTLPHTTP:
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: otlp-http exporter: %w", err)
		}
		return exp, nil, nil
	case ExporterStdout:
		exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: stdout exporter: %w", err)
		}
		return exp, nil, nil
	default: // ExporterFile
		f, err := os.OpenFile(cfg.File, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: trace file: %w", err)
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(f))
		if err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("telemetry: file exporter: %w", err)
		}
		return exp, f, nil
	}
}

// Start starts a span named name, a child of ctx's span (or the root of a
// new trace), from Supervisor's tracer.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return otel.Tracer(InstrumentationName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
