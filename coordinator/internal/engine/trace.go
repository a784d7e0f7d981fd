package engine

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// Span names of the coordinator's work on a workflow.
const (
	// SpanScheduling covers one decide-and-act pass over a workflow that
	// had something to do.
	SpanScheduling = "scheduling"
	// SpanDispatch is the publication of one job; the runner's job span
	// is its child.
	SpanDispatch = "dispatch"
	// SpanReport is the folding of one runner report, a child of the
	// runner's job span.
	SpanReport = "report"
	// SpanIntegration is the application of a node's patch to the
	// workflow's branch.
	SpanIntegration = "integration"
	// SpanMerge is the merge of a finished workflow's branch.
	SpanMerge = "merge"
)

// noSpan is what spans of an untraced workflow are: they record nothing.
var noSpan = trace.SpanFromContext(context.Background())

// startSpan starts a span of workflow wf in the workflow's trace (the one
// its workflow.submitted event names): a child of ctx's span when that is
// in the trace already (a report's, the scheduling pass's), else of the
// submission's span — after a restart or failover too. A workflow whose
// submission was not traced gets no spans.
func (e *Engine) startSpan(ctx context.Context, wf, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	var tp string
	e.Read(func(s *statemachine.State) {
		if w, ok := s.Workflow(wf); ok {
			tp = w.TraceParent
		}
	})
	id := telemetry.TraceID(tp)
	if id == "" {
		return ctx, noSpan
	}
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || sc.TraceID().String() != id {
		ctx = telemetry.WithTraceParent(ctx, tp)
	}
	attrs = append(attrs, attribute.String("supervisor.workflow_id", wf))
	return telemetry.Start(ctx, name, attrs...)
}
