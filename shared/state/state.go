// Package state defines the store the fleet shares for leases with fencing
// tokens, the gate-result cache and circuit-breaker state. It has two
// backends: Redis (package redisstate) and JetStream KV (package kvstate);
// both pass the one conformance suite in package statetest.
package state

import (
	"context"
	"errors"
	"time"
)

// Errors returned by every backend; check them with errors.Is.
var (
	// ErrLocked means another owner holds a live lease on the key.
	ErrLocked = errors.New("state: lock held by another owner")
	// ErrLockLost means the lease expired or was taken over; work done under
	// it must be treated as stale.
	ErrLockLost = errors.New("state: lease lost")
	// ErrNotFound means the cache has no live entry for the key.
	ErrNotFound = errors.New("state: not found")
	// ErrUnavailable wraps failures to reach the backing server.
	ErrUnavailable = errors.New("state: backend unavailable")
)

// Lease is a held lock. Token is a fencing token: every acquisition of the
// same key, by anyone, gets a strictly greater token than all before it, so
// a reader can reject work done under an older lease.
type Lease struct {
	Key   string
	Owner string
	Token uint64
	// ExpiresAt is when the lease lapses unless renewed (the holder's clock).
	ExpiresAt time.Time
}

// Locks hands out leases with fencing tokens.
type Locks interface {
	// Acquire takes the lock on key for owner for ttl. It returns ErrLocked
	// while another owner holds a live lease. Re-acquiring a key one already
	// holds returns ErrLocked too: leases are not re-entrant.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error)
	// Renew extends a held lease by ttl from now, keeping its token. It
	// returns ErrLockLost when the lease has lapsed or another owner took it.
	Renew(ctx context.Context, lease Lease, ttl time.Duration) (Lease, error)
	// Release gives the lease up. Releasing a lease that has already lapsed
	// or been taken over returns ErrLockLost and changes nothing.
	Release(ctx context.Context, lease Lease) error
}

// Cache stores gate results by content-addressed key.
type Cache interface {
	// CacheGet returns the live value for key, or ErrNotFound.
	CacheGet(ctx context.Context, key string) ([]byte, error)
	// CachePut stores value under key for ttl, replacing any earlier value.
	CachePut(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// CacheDelete removes key; deleting a missing key is not an error.
	CacheDelete(ctx context.Context, key string) error
}

// Breakers keeps circuit-breaker state per scope (an agent adapter/model, a
// gate, a repository). All changes are atomic across the fleet.
type Breakers interface {
	// BreakerAllow reports whether work in scope may start now. A closed
	// breaker allows everything; an open one allows nothing until its
	// cool-down has passed, then exactly one caller gets Probe=true
	// (half-open) and everyone else is refused until that probe reports.
	BreakerAllow(ctx context.Context, scope string, p BreakerPolicy) (Decision, error)
	// BreakerReport records the outcome of work in scope and returns the
	// breaker's state afterwards.
	BreakerReport(ctx context.Context, scope string, p BreakerPolicy, success bool) (Breaker, error)
	// BreakerGet returns the breaker's current state (closed if unknown).
	BreakerGet(ctx context.Context, scope string) (Breaker, error)
	// BreakerList returns every breaker with something on record (open,
	// half-open, or closed with failures), sorted by scope. Idle breakers
	// are not stored, so they are not listed.
	BreakerList(ctx context.Context) ([]ScopedBreaker, error)
	// BreakerReset closes the breaker of scope and forgets its failures
	// (an operator's manual reset), and returns the state it had before.
	// Resetting an idle or unknown breaker changes nothing.
	BreakerReset(ctx context.Context, scope string) (Breaker, error)
}

// Store is everything the fleet shares.
type Store interface {
	Locks
	Cache
	Breakers
	// Backend names the implementation ("redis" or "jetstream-kv").
	Backend() string
	// Close releases the store's connections.
	Close() error
}
