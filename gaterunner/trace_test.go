package gaterunner

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// A review gate job's spans, recorded by the file exporter: the job's
// span is the child of the span context its message carries, and its
// phases — workspace preparation, the integrity capture and check, one
// sandbox run per reviewer, the upload — are the job span's children.
// The test installs the process's tracer provider; other tests running
// meanwhile record into the same file, so only this job's trace is read.
func TestReviewGateSpans(t *testing.T) {
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{Exporter: telemetry.ExporterFile, File: file}, "gaterunner-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		_, _ = telemetry.Setup(context.Background(), telemetry.Config{}, "none")
	})
	h := newHarness(t)
	bin := standIns(t)
	h.startRunnerOpts(Config{}, runnerOpts{settings: func(s *jobrun.Settings) {
		s.SandboxPath = bin + string(os.PathListSeparator) + sandbox.BasePath
	}})

	const traceID, dispatch = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
	j := h.reviewJob("review-traced", 2, 2, per(reply(approve), reply(approve)))
	data, err := protocol.Encode(j)
	if err != nil {
		t.Fatal(err)
	}
	ctx := telemetry.WithTraceParent(testkit.Context(t, time.Minute), "00-"+traceID+"-"+dispatch+"-01")
	if err := h.Bus.PublishJob(ctx, protocol.KindGate, j.Pool, j.JobID, data); err != nil {
		t.Fatal(err)
	}
	if g := h.expectResult(j, h.expectStarted(j)); g.Status != protocol.GatePassed {
		t.Fatalf("review gate %s: %s", g.Status, g.Error)
	}

	var spans []telemetry.FileSpan
	testkit.WaitFor(t, 10*time.Second, 20*time.Millisecond, "the gate job's span", func() bool {
		all, _ := telemetry.ReadSpanFile(file)
		spans = spans[:0]
		done := false
		for _, s := range all {
			if s.SpanContext.TraceID == traceID {
				spans = append(spans, s)
				done = done || s.Name == jobrun.SpanGateJob
			}
		}
		return done
	})
	var job telemetry.FileSpan
	for _, s := range spans {
		if s.Name == jobrun.SpanGateJob {
			job = s
		}
	}
	if job.Parent.SpanID != dispatch || job.Attr("supervisor.job_id") != j.JobID {
		t.Errorf("gate job span: parent %s, job %s; want parent %s, job %s", job.Parent.SpanID, job.Attr("supervisor.job_id"),
			dispatch, j.JobID)
	}
	children := map[string]int{}
	for _, s := range spans {
		if s.Parent.SpanID == job.SpanContext.SpanID {
			children[s.Name]++
		}
	}
	want := map[string]int{jobrun.SpanWorkspace: 1, jobrun.SpanIntegrity: 2, jobrun.SpanSandboxRun: 2, jobrun.SpanUpload: 1}
	for name, n := range want {
		if children[name] != n {
			t.Errorf("%d %q spans under the job, want %d (all: %v)", children[name], name, n, children)
		}
	}
}
