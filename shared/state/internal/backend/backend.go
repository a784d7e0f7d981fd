// Package backend holds what the two state backends, kvstate and
// redisstate, do alike: the checks of a lease's arguments, the breaker
// transitions applied through a backend's own atomic update, the encoding
// of a stored breaker, and the jittered wait between compare-and-swap
// attempts.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
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

// BreakerReset is state.Breakers.BreakerReset through update: the breaker
// becomes idle (closed, no failures), which the backends do not store.
func BreakerReset(ctx context.Context, update UpdateBreaker, scope string) (state.Breaker, error) {
	var before state.Breaker
	_, err := update(ctx, "breaker reset", scope, func(b state.Breaker) state.Breaker {
		before = b
		return state.Breaker{State: state.BreakerClosed}
	})
	if err != nil {
		return state.Breaker{}, err
	}
	return before.Normalized(), nil
}

// breakerRecord is a breaker as stored: its state with its scope, so that
// a backend that stores a long scope under a digest can still list it.
type breakerRecord struct {
	Scope string `json:"scope,omitempty"`
	state.Breaker
}

// EncodeBreaker encodes the breaker of scope for storage.
func EncodeBreaker(scope string, b state.Breaker) ([]byte, error) {
	data, err := json.Marshal(breakerRecord{Scope: scope, Breaker: b})
	if err != nil {
		return nil, fmt.Errorf("encode breaker record: %w", err)
	}
	return data, nil
}

// DecodeBreaker decodes a stored breaker record.
func DecodeBreaker(data []byte) (state.Breaker, error) {
	_, b, err := DecodeScopedBreaker(data)
	return b, err
}

// DecodeScopedBreaker decodes a stored breaker record with the scope it
// names ("" in a record written before records named their scope).
func DecodeScopedBreaker(data []byte) (string, state.Breaker, error) {
	var r breakerRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return "", state.Breaker{}, fmt.Errorf("decode breaker record: %w", err)
	}
	return r.Scope, r.Normalized(), nil
}

// SortBreakers sorts breakers by scope, as BreakerList returns them.
func SortBreakers(bs []state.ScopedBreaker) {
	sort.Slice(bs, func(i, j int) bool { return bs[i].Scope < bs[j].Scope })
}
