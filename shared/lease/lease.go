// Package lease holds a state-store lease for the length of a job: it
// renews the lease in the background and cancels the job's context if the
// lease is lost, so a runner never reports work done under a stale lease.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/supervisorhq/supervisor/shared/state"
)

// ErrLost is the cause of a Held context cancelled because the lease lapsed.
var ErrLost = errors.New("lease lost")

// Held is a lease kept alive until Release.
type Held struct {
	lease  state.Lease
	store  state.Locks
	cancel context.CancelCauseFunc
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
}

// Hold acquires key for owner with ttl and renews it every ttl/3. The
// returned context is cancelled with cause ErrLost if a renewal finds the
// lease gone. It returns state.ErrLocked if someone else holds it.
func Hold(ctx context.Context, store state.Locks, key, owner string, ttl time.Duration, log *slog.Logger) (*Held, context.Context, error) {
	l, err := store.Acquire(ctx, key, owner, ttl)
	if err != nil {
		return nil, nil, fmt.Errorf("lease %s: %w", key, err)
	}
	jctx, cancel := context.WithCancelCause(ctx)
	h := &Held{lease: l, store: store, cancel: cancel, done: make(chan struct{})}
	go h.renew(jctx, ttl, log)
	return h, jctx, nil
}

// Token is the lease's fencing token.
func (h *Held) Token() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease.Token
}

func (h *Held) renew(ctx context.Context, ttl time.Duration, log *slog.Logger) {
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			h.mu.Lock()
			cur := h.lease
			h.mu.Unlock()
			rctx, cancel := context.WithTimeout(context.Background(), ttl/3)
			nl, err := h.store.Renew(rctx, cur, ttl)
			cancel()
			switch {
			case err == nil:
				h.mu.Lock()
				h.lease = nl
				h.mu.Unlock()
			case errors.Is(err, state.ErrLockLost):
				if log != nil {
					log.Warn("lease lost; stopping job", "key", cur.Key, "token", cur.Token)
				}
				h.cancel(ErrLost)
				return
			default:
				// The store is unreachable: keep the job going and try again;
				// the lease survives until its TTL.
				if log != nil {
					log.Warn("lease renewal failed; will retry", "key", cur.Key, "err", err)
				}
			}
		}
	}
}

// Lost reports whether the lease was lost while held.
func Lost(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrLost) }

// Release stops renewing and gives the lease up.
func (h *Held) Release(ctx context.Context) error {
	var err error
	h.once.Do(func() {
		close(h.done)
		h.mu.Lock()
		cur := h.lease
		h.mu.Unlock()
		err = h.store.Release(ctx, cur)
		h.cancel(context.Canceled)
	})
	return err
}
