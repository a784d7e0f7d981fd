package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/state"
)

// lostJobAfter is how long a started job may go without a runner holding
// its lease before the watchdog runs it again, unless Options.LostJobAfter
// says otherwise: four ack waits, well past a dead runner's lease lapsing
// (two thirds of an ack wait) and JetStream redelivering its job (an ack
// wait after its last heartbeat).
func (e *Engine) lostJobAfter() time.Duration {
	if e.opts.LostJobAfter != 0 {
		return e.opts.LostJobAfter
	}
	return 4 * e.bus.Cfg.AckWait
}

// watchJobs is the watchdog of started jobs: every quarter of
// lostJobAfter it looks at every job the state says a runner holds
// (statemachine.RunningJobs) and checks that its lease (lease/<job-id>)
// is held. A job whose lease is free on every look for lostJobAfter is
// lost — its runner died and its job message is gone, or its report was
// consumed and never folded (by a coordinator that had stopped leading) —
// and is run again (statemachine.JobLost). It returns when ctx ends.
func (e *Engine) watchJobs(ctx context.Context) {
	after := e.lostJobAfter()
	if after < 0 {
		return
	}
	t := time.NewTicker(max(after/4, 10*time.Millisecond))
	defer t.Stop()
	free := map[statemachine.RunningJob]time.Time{} // since when each was seen free
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		running := map[statemachine.RunningJob]string{} // job → workflow
		e.Read(func(s *statemachine.State) {
			for _, w := range s.Workflows() {
				for _, j := range statemachine.RunningJobs(w) {
					running[j] = w.ID
				}
			}
		})
		for j := range free {
			if _, ok := running[j]; !ok {
				delete(free, j)
			}
		}
		for j, wf := range running {
			held, err := e.leaseHeld(ctx, j.JobID)
			if err != nil {
				if ctx.Err() == nil {
					e.log.WarnContext(e.workflowContext(ctx, wf), "watchdog: cannot check a job's lease", "job", j.JobID, "err", err)
				}
				continue
			}
			if held {
				delete(free, j)
				continue
			}
			since, seen := free[j]
			if !seen {
				free[j] = time.Now()
				continue
			}
			if time.Since(since) < after {
				continue
			}
			delete(free, j)
			e.jobLost(ctx, wf, j, fmt.Sprintf("no runner has held its lease (token %d) for %s", j.LeaseToken, time.Since(since).Round(time.Second)))
		}
	}
}

// leaseHeld reports whether a runner holds the lease of job id: the
// watchdog tries to take it and, if it can, gives it straight back. A
// runner asking for it meanwhile is told it is held and hands the job back
// for a moment; the token it gets next is greater, as ever.
func (e *Engine) leaseHeld(ctx context.Context, jobID string) (bool, error) {
	l, err := e.store.Acquire(ctx, "lease/"+jobID, "watchdog:"+e.opts.ID, time.Second)
	if errors.Is(err, state.ErrLocked) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if err := e.store.Release(ctx, l); err != nil && !errors.Is(err, state.ErrLockLost) {
		e.log.WarnContext(ctx, "watchdog: cannot give a job's lease back; it lapses in a second", "job", jobID, "err", err)
	}
	return false, nil
}

// jobLost runs the lost job j of workflow wf again, in the workflow's
// queue, unless it has moved on meanwhile.
func (e *Engine) jobLost(ctx context.Context, wf string, j statemachine.RunningJob, why string) {
	err := e.Command(ctx, wf, func(w *statemachine.Workflow, now time.Time) ([]statemachine.Effect, error) {
		effects := statemachine.JobLost(w, j, why, now)
		if len(effects) > 0 {
			e.log.WarnContext(e.workflowContext(ctx, wf), "watchdog: a started job has no runner; running it again",
				"workflow", wf, "node", j.Node, "gate", j.Gate, "job", j.JobID, "why", why)
		}
		return effects, nil
	})
	if err != nil && ctx.Err() == nil {
		e.log.WarnContext(e.workflowContext(ctx, wf), "watchdog: cannot run a lost job again; will look again", "job", j.JobID, "err", err)
	}
}
