// Package backend holds what the two state backends, kvstate and
// redisstate, do alike: the checks of a lease's arguments, the breaker
// transitions applied through a backend's own atomic update, the decoding
// of a stored breaker, and the jittered wait between compare-and-swap
// attempts.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/supervisorhq/supervisor/shared/state"
)

// CheckLease checks the arguments of Acquire and Renew.
func CheckLease(key, owner string, ttl time.Duration) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case owner == "":
		return errors.New("empty owner")
	case ttl <= 0:
		return fmt.Errorf("ttl must be positive, got %s", ttl)
	}
	return nil
}

// SleepJitter waits a short random time growing with attempt, so
// conflicting writers spread out.
func SleepJitter(ctx context.Context, attempt int) error {
	d := time.Duration(rand.Int64N(int64(min(attempt, 20))*int64(time.Millisecond)) + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// UpdateBreaker is a backend's atomic update of a breaker: it applies fn
// to the breaker for scope and returns the breaker as stored afterwards;
// op names the operation in its errors.
type UpdateBreaker func(ctx context.Context, op, scope string, fn func(state.Breaker) state.Breaker) (state.Breaker, error)

// BreakerAllow is state.Breakers.BreakerAllow through update.
func BreakerAllow(ctx context.Context, update UpdateBreaker, scope string, p state.BreakerPolicy) (state.Decision, error) {
	var d state.Decision
	_, err := update(ctx, "breaker allow", scope, func(b state.Breaker) state.Breaker {
		var next state.Breaker
		next, d = b.Allow(p.CurrentTime(), p)
		return next
	})
	if err != nil {
		return state.Decision{}, err
	}
	return d, nil
}

// BreakerReport is state.Breakers.BreakerReport through update.
func BreakerReport(ctx context.Context, update UpdateBreaker, scope string, p state.BreakerPolicy, success bool) (state.Breaker, error) {
	return update(ctx, "breaker report", scope, func(b state.Breaker) state.Breaker {
		return b.Report(p.CurrentTime(), p, success)
	})
}

// DecodeBreaker decodes a stored breaker record.
func DecodeBreaker(data []byte) (state.Breaker, error) {
	var b state.Breaker
	if err := json.Unmarshal(data, &b); err != nil {
		return state.Breaker{}, fmt.Errorf("decode breaker record: %w", err)
	}
	return b.Normalized(), nil
}
