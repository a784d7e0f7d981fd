package engine

// Retirement of finished workflows (PERF-33…PERF-35): the leader drops
// from memory each workflow finished at least RetainFinished ago with
// nothing left to do for it (statemachine.Retirable), keeping a summary
// for the workflow list; Recall reads a retired workflow back from its
// events for a reader, and a command brings it back into memory first.

import (
	"context"
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// DefaultRetainFinished is how long a finished workflow stays in memory.
const DefaultRetainFinished = time.Hour

// housekeepEvery bounds the period of retirement passes.
const housekeepEvery = time.Minute

// housekeep retires finished workflows and writes snapshots while the
// engine leads: once at the start, then every SnapshotInterval (at most a
// minute apart for retirement).
func (e *Engine) housekeep(ctx context.Context) {
	every := housekeepEvery
	if e.opts.SnapshotInterval > 0 {
		every = min(every, e.opts.SnapshotInterval)
	}
	if e.opts.RetainFinished > 0 {
		every = min(every, max(e.opts.RetainFinished/2, 10*time.Millisecond))
	}
	lastSnap := time.Time{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		e.RetireFinished()
		if e.opts.SnapshotInterval > 0 && time.Since(lastSnap) >= e.opts.SnapshotInterval {
			lastSnap = time.Now()
			if si, err := e.WriteSnapshot(ctx); err != nil {
				if ctx.Err() == nil {
					e.log.Warn("cannot write a snapshot of the state; will try again", "err", err)
				}
			} else if si.Bytes > 0 {
				e.log.Debug("snapshot written", "snapshot", si.Name, "bytes", si.Bytes, "workflows", si.Workflows, "retired", si.Retired)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshotOnStop writes a last snapshot when the engine stops cleanly.
func (e *Engine) snapshotOnStop() {
	if e.opts.SnapshotInterval < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	si, err := e.WriteSnapshot(ctx)
	if err != nil {
		e.log.Warn("cannot write a snapshot on stopping; the next start folds more of the log", "err", err)
		return
	}
	if si.Bytes > 0 {
		e.log.Info("snapshot written on stopping", "snapshot", si.Name, "bytes", si.Bytes)
	}
}

// RetireFinished retires every workflow finished at least RetainFinished
// ago with nothing left to do for it, each in its own queue (so never
// between a command's reading it and its event's fold), and returns how
// many it queued for retirement.
func (e *Engine) RetireFinished() int {
	if e.opts.RetainFinished < 0 {
		return 0
	}
	now := e.opts.Now()
	var ids []string
	e.Read(func(s *statemachine.State) {
		for _, w := range s.Workflows() {
			if w.Retirable(now, e.opts.RetainFinished) {
				ids = append(ids, w.ID)
			}
		}
	})
	n := 0
	for _, id := range ids {
		if e.queues.Go(id, func() { e.retire(id) }) {
			n++
		}
	}
	return n
}

// retire retires workflow wf if it may still be; it runs in wf's queue.
func (e *Engine) retire(wf string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w, ok := e.st.Workflow(wf); ok && w.Retirable(e.opts.Now(), e.opts.RetainFinished) && e.st.Retire(wf) {
		e.log.Debug("finished workflow retired from memory", "workflow", wf)
	}
}

// Recall returns retired workflow wf as its events fold, without putting
// it back in memory: the caller has it to itself. A workflow neither in
// memory nor retired is a statemachine.ErrNotFound refusal.
func (e *Engine) Recall(ctx context.Context, wf string) (*statemachine.Workflow, error) {
	retired := false
	e.Read(func(s *statemachine.State) { _, retired = s.Retired(wf) })
	if !retired {
		return nil, statemachine.WorkflowNotFound(wf)
	}
	st, _, err := e.fold(ctx, protocol.EventSubject(wf))
	if err != nil {
		return nil, fmt.Errorf("engine: recall retired workflow %s: %w", wf, err)
	}
	w, ok := st.Workflow(wf)
	if !ok {
		return nil, fmt.Errorf("engine: recall retired workflow %s: its submission is no longer in the event log", wf)
	}
	return w, nil
}

// bringBack puts retired workflow wf back in memory, from its events;
// nothing for a workflow that is not retired. It runs in wf's queue.
func (e *Engine) bringBack(ctx context.Context, wf string) error {
	retired := false
	e.Read(func(s *statemachine.State) { _, retired = s.Retired(wf) })
	if !retired {
		return nil
	}
	if err := e.reload(ctx, wf); err != nil {
		return fmt.Errorf("engine: bring retired workflow %s back: %w", wf, err)
	}
	e.log.Info("retired workflow brought back into memory for a command", "workflow", wf)
	return nil
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
