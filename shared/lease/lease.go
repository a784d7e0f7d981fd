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
	strict bool
	ttl    time.Duration
}

// Option configures Hold.
type Option func(*Held)

// StepDown makes the holder give the lease up as soon as it may have
// expired: when no renewal has succeeded for a whole TTL (the store cannot
// be reached), the context is cancelled with cause ErrLost, because
// another owner may hold the lease by then. Without it, a holder that
// cannot reach the store carries on, relying on fencing tokens to have its
// late work ignored; a leader must not, since it would act alongside the
// next one.
func StepDown() Option { return func(h *Held) { h.strict = true } }

// Hold acquires key for owner with ttl and renews it every ttl/3. The
// returned context is cancelled with cause ErrLost if a renewal finds the
// lease gone. It returns state.ErrLocked if someone else holds it.
func Hold(ctx context.Context, store state.Locks, key, owner string, ttl time.Duration, log *slog.Logger, opts ...Option) (*Held, context.Context, error) {
	l, err := store.Acquire(ctx, key, owner, ttl)
	if err != nil {
		return nil, nil, fmt.Errorf("lease %s: %w", key, err)
	}
	jctx, cancel := context.WithCancelCause(ctx)
	h := &Held{lease: l, store: store, cancel: cancel, done: make(chan struct{}), ttl: ttl}
	for _, o := range opts {
		o(h)
	}
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
	// renewed is when the lease was last known to be ours: its TTL runs
	// from just before then at the latest.
	renewed := time.Now()
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
			attempt := time.Now()
			timeout := ttl / 3
			if h.strict {
				// Never wait on the store past two thirds of the TTL:
				// a holder stepping down must do so before the lease
				// can expire.
				timeout = min(timeout, time.Until(renewed.Add(2*ttl/3)))
			}
			rctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Millisecond))
			nl, err := h.store.Renew(rctx, cur, ttl)
			cancel()
			switch {
			case err == nil:
				renewed = attempt
				h.mu.Lock()
				h.lease = nl
				h.mu.Unlock()
			case errors.Is(err, state.ErrLockLost):
				if log != nil {
					log.WarnContext(ctx, "lease lost; stopping job", "key", cur.Key, "token", cur.Token)
				}
				h.cancel(ErrLost)
				return
			case h.strict && time.Since(renewed) >= ttl/2:
				// The next attempt could end past the TTL: the lease may
				// be someone else's by then.
				if log != nil {
					log.WarnContext(ctx, "lease renewals failing for its whole TTL; giving it up", "key", cur.Key, "ttl", ttl, "err", err)
				}
				h.cancel(fmt.Errorf("%w: no renewal for %s: %w", ErrLost, time.Since(renewed).Round(time.Millisecond), err))
				return
			default:
				// The store is unreachable: keep the job going and try again;
				// the lease survives until its TTL.
				if log != nil {
					log.WarnContext(ctx, "lease renewal failed; will retry", "key", cur.Key, "err", err)
				}
			}
		}
	}
}

// Confirm renews the lease at once and returns an error wrapping ErrLost
// (and cancels the holder's context with it) if the lease is no longer
// this holder's: it lapsed and another owner took it. A holder about to
// hand its work back asks first, since work it no longer owns is not its
// to hand back. Other errors (the store unreachable) are returned as they
// are, the lease kept.
func (h *Held) Confirm(ctx context.Context) error {
	h.mu.Lock()
	cur := h.lease
	h.mu.Unlock()
	nl, err := h.store.Renew(ctx, cur, h.ttl)
	switch {
	case err == nil:
		h.mu.Lock()
		h.lease = nl
		h.mu.Unlock()
		return nil
	case errors.Is(err, state.ErrLockLost):
		h.cancel(ErrLost)
		return fmt.Errorf("%w: %w", ErrLost, err)
	default:
		return err
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
