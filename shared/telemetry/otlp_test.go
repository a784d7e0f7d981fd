package telemetry_test

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// received collects the spans an OTLP receiver was sent.
type received struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	// services are the service.name of each span's resource.
	services []string
}

func (r *received) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s)
				r.services = append(r.services, service)
			}
		}
	}
}

// check fails unless the receiver got exactly the span named name of
// trace traceID, from service.
func (r *received) check(t *testing.T, name, traceID, service string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.spans) != 1 {
		t.Fatalf("received %d spans, want 1", len(r.spans))
	}
	s := r.spans[0]
	if s.GetName() != name || hex.EncodeToString(s.GetTraceId()) != traceID || r.services[0] != service {
		t.Errorf("received span %q of trace %x from %q; want %q of %s from %q", s.GetName(), s.GetTraceId(), r.services[0],
			name, traceID, service)
	}
}

// grpcReceiver is an OTLP trace service over gRPC, OpenTelemetry's own
// protocol definition.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	got *received
}

func (g *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.got.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// The otlp-grpc exporter sends a span, with its trace id and the
// process's service name, to the --trace-endpoint over gRPC (plain text
// for an http:// URL) by the time the provider shuts down.
func TestOTLPGRPCExports(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := &received{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, &grpcReceiver{got: got})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	shutdown := setup(t, telemetry.Config{Exporter: telemetry.ExporterOTLPGRPC, Endpoint: "http://" + lis.Addr().String()}, "grpc-test")
	_, span := telemetry.Start(context.Background(), "over grpc")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	got.check(t, "over grpc", span.SpanContext().TraceID().String(), "grpc-test")
}

// The otlp-http exporter posts a span as OTLP protobuf to the endpoint's
// /v1/traces.
func TestOTLPHTTPExports(t *testing.T) {
	got := &received{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.Error(w, "want POST /v1/traces", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer srv.Close()

	shutdown := setup(t, telemetry.Config{Exporter: telemetry.ExporterOTLPHTTP, Endpoint: srv.URL + "/v1/traces"}, "http-test")
	_, span := telemetry.Start(context.Background(), "over http")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	got.check(t, "over http", span.SpanContext().TraceID().String(), "http-test")
}
