package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/patchstat"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// patchNotFoundPatience bounds the last wait before a patch object not
// found is taken as missing: 50 ms doubling to it, about 1.5 s in all.
const patchNotFoundPatience = 800 * time.Millisecond

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
	// In a cluster, the object's description may be read from a replica
	// that has not yet applied the runner's upload (the object store's
	// direct reads are served by any replica): a missing object is looked
	// for again for a while before it is taken as missing.
	for wait := 50 * time.Millisecond; errors.Is(err, jetstream.ErrObjectNotFound) && wait <= patchNotFoundPatience; wait *= 2 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("engine: summarize patch %s: %w", p.Object, ctx.Err())
		case <-time.After(wait):
		}
		info, err = e.bus.Patches.GetInfo(ctx, p.Object)
	}
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
