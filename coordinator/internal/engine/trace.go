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
	tp := e.traceParent(wf)
	if telemetry.TraceID(tp) == "" {
		return ctx, noSpan
	}
	attrs = append(attrs, attribute.String("supervisor.workflow_id", wf))
	return telemetry.Start(inTrace(ctx, tp), name, attrs...)
}

// workflowContext returns ctx in workflow wf's trace, for the log records
// about wf (telemetry.Handler adds the ids of the record's context): ctx
// itself when its span is in that trace already, else ctx with the
// submission's span context — the parent startSpan gives such a span. ctx
// of a workflow without a trace (or an unknown one) is returned as it is.
func (e *Engine) workflowContext(ctx context.Context, wf string) context.Context {
	return inTrace(ctx, e.traceParent(wf))
}

// traceParent is workflow wf's trace parent, "" when it has none.
func (e *Engine) traceParent(wf string) string {
	var tp string
	e.Read(func(s *statemachine.State) {
		if w, ok := s.Workflow(wf); ok {
			tp = w.TraceParent
		}
	})
	return tp
}

// inTrace returns ctx when its span is in tp's trace, else ctx with tp's
// span context; ctx itself when tp names no trace.
func inTrace(ctx context.Context, tp string) context.Context {
	id := telemetry.TraceID(tp)
	if id == "" {
		return ctx
	}
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || sc.TraceID().String() != id {
		ctx = telemetry.WithTraceParent(ctx, tp)
	}
	return ctx
}
