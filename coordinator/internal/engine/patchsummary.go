package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/patchstat"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// maxSummarizedPatch is the largest patch the coordinator reads to
// summarize it itself. A larger one is left with no summary, which the
// checks of what a patch changes treat as a patch that may change
// anything: trusted configuration, locked interfaces, approval policies.
const maxSummarizedPatch = 64 << 20

// summarizePatch replaces the summary a runner gave an agent report's
// patch with the coordinator's own, read from the patch in the object
// store, so the checks of what a patch changes — trusted configuration
// above all (TRUST-CONFIG) — do not rest on the runner's word. Like
// estimateCost it runs before the report becomes an event: the event
// holds the summary, and a replay reads no patch. A patch missing from
// the store, or too large to read, is left with no summary.
func (e *Engine) summarizePatch(ctx context.Context, r *protocol.Report) error {
	if r.Type != protocol.ReportAgentResult || r.Agent == nil || r.Agent.Patch == nil {
		return nil
	}
	p := r.Agent.Patch
	info, err := e.bus.Patches.GetInfo(ctx, p.Object)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		e.log.WarnContext(ctx, "agent patch not in the object store; it has no summary", "workflow", r.WorkflowID(),
			"node", r.Agent.NodeID, "object", p.Object)
		p.Stat = nil
		return nil
	case err != nil:
		return fmt.Errorf("engine: summarize patch %s: %w", p.Object, err)
	case info.Size > maxSummarizedPatch:
		p.Stat = nil
		return nil
	}
	data, err := e.bus.Patches.GetBytes(ctx, p.Object)
	if err != nil {
		return fmt.Errorf("engine: summarize patch %s: %w", p.Object, err)
	}
	p.Stat = patchstat.Parse(data).Summary()
	return nil
}
