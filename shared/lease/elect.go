package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/supervisorhq/supervisor/shared/state"
)

// Elect makes owner the holder of key, waiting while someone else holds
// it: it tries every ttl/10 (ElectRetry) until it succeeds or ctx ends, so
// a standby takes over at most about 1.1·ttl after a leader died. The lease is
// then held as with Hold and StepDown: the returned context is cancelled
// with cause ErrLost when leadership is lost or may have been (the store
// unreachable for too long), and the holder must stop acting as leader.
func Elect(ctx context.Context, store state.Locks, key, owner string, ttl time.Duration, log *slog.Logger) (*Held, context.Context, error) {
	logged := false
	for {
		h, lctx, err := Hold(ctx, store, key, owner, ttl, log, StepDown())
		if err == nil {
			if log != nil {
				log.Info("leading", "key", key, "owner", owner, "token", h.Token())
			}
			return h, lctx, nil
		}
		switch {
		case !errors.Is(err, state.ErrLocked):
			if log != nil {
				log.Warn("cannot take the leader lease; retrying", "key", key, "err", err)
			}
		case !logged:
			if log != nil {
				log.Info("another owner leads; standing by", "key", key, "owner", owner)
			}
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(ElectRetry(ttl)):
		}
	}
}

// ElectRetry is how often Elect tries to take a lease someone else holds:
// a tenth of its TTL, at least 100 ms. Trying costs one state-store
// request, and trying often bounds how long a dead holder's lease is left
// unclaimed past its expiry.
func ElectRetry(ttl time.Duration) time.Duration {
	return max(ttl/10, 100*time.Millisecond)
}
