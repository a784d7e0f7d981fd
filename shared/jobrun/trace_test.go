package jobrun

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// tracedLog is a JSON logger wrapped in telemetry.Handler, as the
// binaries' loggers are, writing to buf.
func tracedLog(buf *testkit.Buffer) *slog.Logger {
	return slog.New(telemetry.NewHandler(slog.NewJSONHandler(buf, nil)))
}

// The runner's lines about a job that fails or waits are logged with the
// job's context: they carry the trace of the context the job came with
// (the workflow's, which the job message carries), on a real bus and
// state store. The failures are infrastructure errors handed back, then
// reported on the last delivery; the wait is an open circuit breaker's.
func TestRunLogsCarryTheJobsTrace(t *testing.T) {
	t.Parallel()
	e := newBreakerEnv(t)
	var buf testkit.Buffer
	e.deps.Log = tracedLog(&buf)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := telemetry.WithTraceParent(context.Background(), "00-"+traceID+"-00f067aa0ba902b7-01")
	want := func(msg, job string) {
		t.Helper()
		r := testkit.LogRecord(t, buf.String(), msg, "job", job)
		if r["trace_id"] != traceID || r["span_id"] == nil || r["span_id"] == "" {
			t.Errorf("%q: trace_id %v span_id %v, want trace %s and a span", msg, r["trace_id"], r["span_id"], traceID)
		}
	}

	m := e.runEnv.meta()
	failing := func(context.Context, uint64) Outcome { return Outcome{Err: errors.New("mirror unavailable")} }
	if d := Run(ctx, e.deps, nil, nakDelivery(1), m, failing, e.errReport(m)); d.String() != "nak(1s)" {
		t.Fatalf("delivery 1: %s, want nak(1s)", d)
	}
	e.expectStarted(m, 1)
	want("job failed for infrastructure reasons; handing it back", m.JobID)
	if d := Run(ctx, e.deps, nil, nakDelivery(3), m, failing, e.errReport(m)); d.String() != "ack" {
		t.Fatalf("delivery 3: %s, want ack", d)
	}
	s := e.expectStarted(m, 3)
	e.expectResult(m, s.LeaseToken, protocol.GateError)
	want("job failed on its last delivery", m.JobID)

	// An open breaker holds the next job; its lines carry the trace too.
	e.fail(e.work)
	held := e.meta()
	done := make(chan string, 1)
	go func() {
		done <- Run(ctx, e.deps, nil, nakDelivery(1), held, func(_ context.Context, token uint64) Outcome {
			return Outcome{Report: result(held, token, protocol.GatePassed, ""), Work: Worked, Repo: Worked}
		}, e.errReport(held)).String()
	}()
	e.expectWaiting(held, e.work, state.BreakerOpen)
	s = e.expectStarted(held, 1)
	e.expectResult(held, s.LeaseToken, protocol.GatePassed)
	if d := testkit.Receive(t, done, 10*time.Second, "Run did not return"); d != "ack" {
		t.Errorf("held job: %s, want ack", d)
	}
	want("circuit breaker refuses the job; it waits without spending a delivery", held.JobID)
	want("circuit breaker half-open: this job is its probe", held.JobID)
}

// nakDelivery is delivery n of at most three of a job handed to Run
// directly (no message).
func nakDelivery(n uint64) *bus.Delivery { return &bus.Delivery{Number: n, MaxDeliver: 3} }
