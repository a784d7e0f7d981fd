package jobrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/state"
)

// DefaultFileLockWait bounds the pause between two tries to take a job's
// file locks while another job holds one of them (Deps.FileLockWait).
const DefaultFileLockWait = 2 * time.Second

// FileLocks are the file locks of one job, held (DAG-07).
type FileLocks struct {
	held []*lease.Held
}

// HoldFileLocks takes every key of keys (sorted: protocol.AgentJob's
// FileLocks) for owner, each a state-store lease of ttl renewed like the
// job's own, and returns them with a context that is cancelled, with
// cause lease.ErrLost, if any is lost. While another owner holds one it
// gives back those it took, waits up to wait (jittered, from half of it;
// 0: DefaultFileLockWait; waiting is told the key the first time) and
// tries again, until ctx ends. On failure it returns ctx and the error. The locks step
// down (lease.StepDown): a holder that cannot renew gives a lock up, and
// its job is stopped, before the lock can lapse and be taken by another,
// so two agents of overlapping files never run at once even across a
// partition. With no keys it holds nothing and returns ctx.
func HoldFileLocks(ctx context.Context, store state.Locks, keys []string, owner string, ttl, wait time.Duration,
	log *slog.Logger, waiting func(key string)) (*FileLocks, context.Context, error) {
	fl := &FileLocks{}
	if len(keys) == 0 {
		return fl, ctx, nil
	}
	if wait <= 0 {
		wait = DefaultFileLockWait
	}
	told := false
	for {
		cur := ctx
		var busy string
		var err error
		for _, key := range keys {
			var h *lease.Held
			h, cur, err = lease.Hold(cur, store, key, owner, ttl, log, lease.StepDown())
			if err != nil {
				busy = key
				break
			}
			fl.held = append(fl.held, h)
		}
		if err == nil {
			return fl, cur, nil
		}
		fl.Release()
		if !errors.Is(err, state.ErrLocked) {
			return nil, ctx, fmt.Errorf("file lock %s: %w", busy, err)
		}
		if !told && waiting != nil {
			waiting(busy)
			told = true
		}
		pause := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return nil, ctx, fmt.Errorf("waiting for file lock %s: %w", busy, context.Cause(ctx))
		case <-time.After(pause):
		}
	}
}

// Release gives every lock up, the last taken first.
func (fl *FileLocks) Release() {
	if fl == nil {
		return
	}
	for i := len(fl.held) - 1; i >= 0; i-- {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = fl.held[i].Release(rctx)
		cancel()
	}
	fl.held = nil
}

// Tokens are the fencing tokens of the locks held, as "key=token".
func (fl *FileLocks) Tokens(keys []string) string {
	parts := make([]string, 0, len(fl.held))
	for i, h := range fl.held {
		parts = append(parts, fmt.Sprintf("%s=%d", keys[i], h.Token()))
	}
	return strings.Join(parts, " ")
}

// FileLockOwner is the owner a job's file locks are held under: the
// runner, the job and the fencing token of its lease, so whoever finds a
// lock held can tell which delivery of which job holds it.
func FileLockOwner(host, job string, token uint64) string {
	return fmt.Sprintf("%s %s@%d", host, job, token)
}
