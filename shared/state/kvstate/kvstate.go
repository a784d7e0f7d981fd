// Package kvstate is the JetStream KV backend of state.Store, used by the
// embedded default (no Redis).
//
// Everything lives in one bucket (protocol.BucketState unless WithBucket
// overrides it) under these keys, where <k> is the caller's key encoded to a
// valid KV key (see encodeKey):
//
//	lock.<k>     a lease: JSON {owner, token, expires_at}
//	cache.<k>    a cache entry: 8-byte big-endian expiry (Unix ns) + value
//	breaker.<k>  a circuit breaker as JSON, naming its scope (absent while idle)
//
// Every change is a compare-and-swap on the key's revision. A lease's
// fencing token is the bucket revision at which it was acquired; revisions
// are the bucket stream's sequence numbers, so they increase strictly across
// all acquisitions. Lease and cache expiry are judged by the reading
// client's clock against the writer's, so hosts' clocks must roughly agree.
package kvstate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/internal/backend"
)

// maxCASAttempts bounds the compare-and-swap retries of one operation.
const maxCASAttempts = 100

// maxRawKey is the longest caller key stored in readable or base64 form;
// longer keys are stored by their SHA-256.
const maxRawKey = 256

// Option configures a Store.
type Option func(*config)

type config struct {
	bucket   string
	replicas int
}

// WithBucket sets the KV bucket name (default protocol.BucketState).
func WithBucket(name string) Option {
	return func(c *config) { c.bucket = name }
}

// WithReplicas sets the bucket's replica count in a clustered deployment
// (default 1).
func WithReplicas(n int) Option {
	return func(c *config) { c.replicas = n }
}

// Store is a state.Store on a JetStream KV bucket. It is safe for
// concurrent use.
type Store struct {
	kv jetstream.KeyValue
}

var _ state.Store = (*Store)(nil)

// New creates the bucket, or updates its configuration, and returns a Store
// on it. The bucket uses file storage and keeps one revision per key. The
// caller keeps ownership of js and its connection.
func New(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Store, error) {
	if js == nil {
		return nil, errors.New("kvstate: nil JetStream context")
	}
	c := config{bucket: protocol.BucketState, replicas: 1}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      c.bucket,
		Description: "Supervisor shared state: leases, gate-result cache, circuit breakers",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.replicas,
	})
	if err != nil {
		return nil, fail(ctx, "create bucket "+strconv.Quote(c.bucket), err)
	}
	return &Store{kv: kv}, nil
}

// Attach returns a Store on the bucket as it exists, creating and changing
// nothing: what a client whose NATS role may not create buckets (a worker,
// a gate runner) does. It fails with jetstream.ErrBucketNotFound while the
// bucket does not exist yet.
func Attach(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Store, error) {
	if js == nil {
		return nil, errors.New("kvstate: nil JetStream context")
	}
	c := config{bucket: protocol.BucketState}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	kv, err := js.KeyValue(ctx, c.bucket)
	if err != nil {
		return nil, fail(ctx, "bucket "+strconv.Quote(c.bucket), err)
	}
	return &Store{kv: kv}, nil
}

// Backend returns "jetstream-kv".
func (s *Store) Backend() string { return "jetstream-kv" }

// Close does nothing: the connection belongs to the caller of New.
func (s *Store) Close() error { return nil }

// encodeKey maps an arbitrary caller key to a valid, collision-free KV key
// token: "r.<key>" if key uses only [A-Za-z0-9_-], otherwise "b.<base64url
// of key>", and "h.<hex SHA-256>" for keys longer than maxRawKey bytes.
func encodeKey(key string) string {
	if len(key) > maxRawKey {
		sum := sha256.Sum256([]byte(key))
		return "h." + hex.EncodeToString(sum[:])
	}
	for i := 0; i < len(key); i++ {
		if !rawKeyByte(key[i]) {
			return "b." + base64.RawURLEncoding.EncodeToString([]byte(key))
		}
	}
	return "r." + key
}

// rawKeyByte reports whether c may appear in a key stored as it is:
// [A-Za-z0-9_-].
func rawKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func lockKey(key string) string    { return "lock." + encodeKey(key) }
func cacheKey(key string) string   { return "cache." + encodeKey(key) }
func breakerKey(key string) string { return "breaker." + encodeKey(key) }

// leaseRecord is a stored lease. Token is 0 until the lease is first
// renewed; until then the token is the entry's revision.
type leaseRecord struct {
	Owner     string    `json:"owner"`
	Token     uint64    `json:"token,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// currentLease reads the lease on key. It returns a nil entry if there is
// none.
func (s *Store) currentLease(ctx context.Context, key string) (jetstream.KeyValueEntry, leaseRecord, error) {
	e, err := s.kv.Get(ctx, lockKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, leaseRecord{}, nil
	}
	if err != nil {
		return nil, leaseRecord{}, err
	}
	var rec leaseRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, leaseRecord{}, fmt.Errorf("decode lease record: %w", err)
	}
	if rec.Token == 0 {
		rec.Token = e.Revision()
	}
	return e, rec, nil
}

// Acquire takes the lock on key for owner for ttl; see state.Locks.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (state.Lease, error) {
	op := "acquire " + strconv.Quote(key)
	if err := backend.CheckLease(key, owner, ttl); err != nil {
		return state.Lease{}, fmt.Errorf("kvstate: %s: %w", op, err)
	}
	for attempt := 1; attempt <= maxCASAttempts; attempt++ {
		e, rec, err := s.currentLease(ctx, key)
		if err != nil {
			return state.Lease{}, fail(ctx, op, err)
		}
		now := time.Now()
		if e != nil && now.Before(rec.ExpiresAt) {
			return state.Lease{}, fmt.Errorf("kvstate: %s: %w", op, state.ErrLocked)
		}
		expires := now.Add(ttl)
		data, err := json.Marshal(leaseRecord{Owner: owner, ExpiresAt: expires})
		if err != nil {
			return state.Lease{}, fmt.Errorf("kvstate: %s: encode lease: %w", op, err)
		}
		var rev uint64
		if e == nil {
			rev, err = s.kv.Create(ctx, lockKey(key), data)
		} else {
			rev, err = s.kv.Update(ctx, lockKey(key), data, e.Revision())
		}
		if err == nil {
			return state.Lease{Key: key, Owner: owner, Token: rev, ExpiresAt: expires}, nil
		}
		if !conflict(err) {
			return state.Lease{}, fail(ctx, op, err)
		}
		// Someone else wrote the key meanwhile: look again.
	}
	return state.Lease{}, fmt.Errorf("kvstate: %s: still conflicting after %d attempts", op, maxCASAttempts)
}

// Renew extends lease by ttl from now, keeping its token; see state.Locks.
func (s *Store) Renew(ctx context.Context, lease state.Lease, ttl time.Duration) (state.Lease, error) {
	op := fmt.Sprintf("renew %q (token %d)", lease.Key, lease.Token)
	if err := backend.CheckLease(lease.Key, lease.Owner, ttl); err != nil {
		return state.Lease{}, fmt.Errorf("kvstate: %s: %w", op, err)
	}
	for attempt := 1; attempt <= maxCASAttempts; attempt++ {
		e, rec, err := s.currentLease(ctx, lease.Key)
		if err != nil {
			return state.Lease{}, fail(ctx, op, err)
		}
		now := time.Now()
		if !holds(e, rec, lease, now) {
			return state.Lease{}, fmt.Errorf("kvstate: %s: %w", op, state.ErrLockLost)
		}
		expires := now.Add(ttl)
		data, err := json.Marshal(leaseRecord{Owner: lease.Owner, Token: lease.Token, ExpiresAt: expires})
		if err != nil {
			return state.Lease{}, fmt.Errorf("kvstate: %s: encode lease: %w", op, err)
		}
		_, err = s.kv.Update(ctx, lockKey(lease.Key), data, e.Revision())
		if err == nil {
			lease.ExpiresAt = expires
			return lease, nil
		}
		if !conflict(err) {
			return state.Lease{}, fail(ctx, op, err)
		}
	}
	return state.Lease{}, fmt.Errorf("kvstate: %s: still conflicting after %d attempts", op, maxCASAttempts)
}

// Release gives lease up; see state.Locks.
func (s *Store) Release(ctx context.Context, lease state.Lease) error {
	op := fmt.Sprintf("release %q (token %d)", lease.Key, lease.Token)
	if lease.Key == "" {
		return fmt.Errorf("kvstate: %s: empty key", op)
	}
	for attempt := 1; attempt <= maxCASAttempts; attempt++ {
		e, rec, err := s.currentLease(ctx, lease.Key)
		if err != nil {
			return fail(ctx, op, err)
		}
		if !holds(e, rec, lease, time.Now()) {
			return fmt.Errorf("kvstate: %s: %w", op, state.ErrLockLost)
		}
		err = s.kv.Delete(ctx, lockKey(lease.Key), jetstream.LastRevision(e.Revision()))
		if err == nil {
			return nil
		}
		if !conflict(err) {
			return fail(ctx, op, err)
		}
	}
	return fmt.Errorf("kvstate: %s: still conflicting after %d attempts", op, maxCASAttempts)
}

// holds reports whether the stored lease (e, rec) is lease and still live.
func holds(e jetstream.KeyValueEntry, rec leaseRecord, lease state.Lease, now time.Time) bool {
	return e != nil && rec.Owner == lease.Owner && rec.Token == lease.Token && now.Before(rec.ExpiresAt)
}

// CacheGet returns the live value for key, or state.ErrNotFound. An expired
// entry is deleted on the way.
func (s *Store) CacheGet(ctx context.Context, key string) ([]byte, error) {
	op := "cache get " + strconv.Quote(key)
	if key == "" {
		return nil, fmt.Errorf("kvstate: %s: empty key", op)
	}
	e, err := s.kv.Get(ctx, cacheKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("kvstate: %s: %w", op, state.ErrNotFound)
	}
	if err != nil {
		return nil, fail(ctx, op, err)
	}
	raw := e.Value()
	if len(raw) < 8 {
		return nil, fmt.Errorf("kvstate: %s: corrupt entry of %d bytes", op, len(raw))
	}
	expires := time.Unix(0, int64(binary.BigEndian.Uint64(raw[:8])))
	if !time.Now().Before(expires) {
		// Lazily remove it, unless it was rewritten meanwhile. A failure
		// here only leaves the expired entry for a later reader.
		_ = s.kv.Delete(ctx, cacheKey(key), jetstream.LastRevision(e.Revision()))
		return nil, fmt.Errorf("kvstate: %s: %w", op, state.ErrNotFound)
	}
	return append([]byte{}, raw[8:]...), nil
}

// CachePut stores value under key for ttl (which must be positive).
// Expired entries nobody reads again stay in the bucket until overwritten
// or deleted.
func (s *Store) CachePut(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	op := "cache put " + strconv.Quote(key)
	if key == "" {
		return fmt.Errorf("kvstate: %s: empty key", op)
	}
	if ttl <= 0 {
		return fmt.Errorf("kvstate: %s: ttl must be positive, got %s", op, ttl)
	}
	data := make([]byte, 8+len(value))
	binary.BigEndian.PutUint64(data, uint64(time.Now().Add(ttl).UnixNano()))
	copy(data[8:], value)
	if _, err := s.kv.Put(ctx, cacheKey(key), data); err != nil {
		return fail(ctx, op, err)
	}
	return nil
}

// CacheDelete removes key; deleting a missing key is not an error.
func (s *Store) CacheDelete(ctx context.Context, key string) error {
	op := "cache delete " + strconv.Quote(key)
	if key == "" {
		return fmt.Errorf("kvstate: %s: empty key", op)
	}
	if err := s.kv.Delete(ctx, cacheKey(key)); err != nil {
		return fail(ctx, op, err)
	}
	return nil
}

// BreakerAllow reports whether work in scope may start now; see
// state.Breakers.
func (s *Store) BreakerAllow(ctx context.Context, scope string, p state.BreakerPolicy) (state.Decision, error) {
	return backend.BreakerAllow(ctx, s.updateBreaker, scope, p)
}

// BreakerReport records the outcome of work in scope and returns the
// breaker's state afterwards.
func (s *Store) BreakerReport(ctx context.Context, scope string, p state.BreakerPolicy, success bool) (state.Breaker, error) {
	return backend.BreakerReport(ctx, s.updateBreaker, scope, p, success)
}

// BreakerGet returns the breaker's current state (closed if unknown).
func (s *Store) BreakerGet(ctx context.Context, scope string) (state.Breaker, error) {
	op := "breaker get " + strconv.Quote(scope)
	if scope == "" {
		return state.Breaker{}, fmt.Errorf("kvstate: %s: empty scope", op)
	}
	_, b, err := s.getBreaker(ctx, scope)
	if err != nil {
		return state.Breaker{}, fail(ctx, op, err)
	}
	return b, nil
}

// BreakerReset closes the breaker of scope and forgets its failures, and
// returns the state it had before.
func (s *Store) BreakerReset(ctx context.Context, scope string) (state.Breaker, error) {
	return backend.BreakerReset(ctx, s.updateBreaker, scope)
}

// BreakerList returns every stored breaker, sorted by scope. A breaker that
// becomes idle while the list is read is left out.
func (s *Store) BreakerList(ctx context.Context) ([]state.ScopedBreaker, error) {
	const op = "breaker list"
	lister, err := s.kv.ListKeysFiltered(ctx, "breaker.>")
	if err != nil {
		return nil, fail(ctx, op, err)
	}
	defer lister.Stop() //nolint:errcheck // only stops the watcher
	var keys []string
	seen := map[string]bool{} // a key written while listed may come twice
	for k := range lister.Keys() {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kvstate: %s: %w", op, err)
	}
	out := []state.ScopedBreaker{}
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since it was listed: idle now
		}
		if err != nil {
			return nil, fail(ctx, op, err)
		}
		scope, b, err := backend.DecodeScopedBreaker(e.Value())
		if err != nil {
			return nil, fmt.Errorf("kvstate: %s: %s: %w", op, k, err)
		}
		if scope == "" {
			if scope = decodeKey(strings.TrimPrefix(k, "breaker.")); scope == "" {
				continue // an old record under a digest: its scope is unknown
			}
		}
		out = append(out, state.ScopedBreaker{Scope: scope, Breaker: b})
	}
	backend.SortBreakers(out)
	return out, nil
}

// decodeKey is the inverse of encodeKey, or "" for a key stored by its
// digest (or not encoded by encodeKey at all).
func decodeKey(k string) string {
	switch {
	case strings.HasPrefix(k, "r."):
		return k[2:]
	case strings.HasPrefix(k, "b."):
		raw, err := base64.RawURLEncoding.DecodeString(k[2:])
		if err != nil {
			return ""
		}
		return string(raw)
	}
	return ""
}

// getBreaker reads a breaker; a missing one is closed with a nil entry.
func (s *Store) getBreaker(ctx context.Context, scope string) (jetstream.KeyValueEntry, state.Breaker, error) {
	e, err := s.kv.Get(ctx, breakerKey(scope))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, state.Breaker{State: state.BreakerClosed}, nil
	}
	if err != nil {
		return nil, state.Breaker{}, err
	}
	b, err := backend.DecodeBreaker(e.Value())
	if err != nil {
		return nil, state.Breaker{}, err
	}
	return e, b, nil
}

// updateBreaker applies fn to the breaker for scope with a compare-and-swap
// loop and returns the breaker as stored afterwards. Idle breakers are
// deleted.
func (s *Store) updateBreaker(ctx context.Context, op, scope string, fn func(state.Breaker) state.Breaker) (state.Breaker, error) {
	op += " " + strconv.Quote(scope)
	if scope == "" {
		return state.Breaker{}, fmt.Errorf("kvstate: %s: empty scope", op)
	}
	key := breakerKey(scope)
	for attempt := 1; attempt <= maxCASAttempts; attempt++ {
		e, cur, err := s.getBreaker(ctx, scope)
		if err != nil {
			return state.Breaker{}, fail(ctx, op, err)
		}
		next := fn(cur)
		if next.Equal(cur) {
			return next, nil
		}
		switch {
		case next.Idle():
			err = s.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		default:
			var data []byte
			if data, err = backend.EncodeBreaker(scope, next); err != nil {
				return state.Breaker{}, fmt.Errorf("kvstate: %s: %w", op, err)
			}
			if e == nil {
				_, err = s.kv.Create(ctx, key, data)
			} else {
				_, err = s.kv.Update(ctx, key, data, e.Revision())
			}
		}
		if err == nil {
			return next, nil
		}
		if !conflict(err) {
			return state.Breaker{}, fail(ctx, op, err)
		}
		if err := backend.SleepJitter(ctx, attempt); err != nil {
			return state.Breaker{}, fmt.Errorf("kvstate: %s: %w", op, err)
		}
	}
	return state.Breaker{}, fmt.Errorf("kvstate: %s: still conflicting after %d attempts", op, maxCASAttempts)
}

// conflict reports whether err is a failed compare-and-swap: the key was
// created or changed since it was read.
func conflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// fail wraps a NATS error, marking failures to reach the server or
// JetStream with state.ErrUnavailable.
func fail(ctx context.Context, op string, err error) error {
	if ctx.Err() == nil && unavailable(err) {
		return fmt.Errorf("kvstate: %s: %w: %w", op, state.ErrUnavailable, err)
	}
	return fmt.Errorf("kvstate: %s: %w", op, err)
}

func unavailable(err error) bool {
	if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) && apiErr.ErrorCode == bus.ErrCodeClusterNotAvailable {
		return true // "JetStream system temporarily unavailable": no meta leader yet
	}
	for _, target := range []error{
		nats.ErrConnectionClosed, nats.ErrConnectionDraining, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, nats.ErrNoServers, nats.ErrNoResponders, nats.ErrTimeout,
		nats.ErrStaleConnection, context.DeadlineExceeded,
		jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled,
		jetstream.ErrJetStreamNotEnabledForAccount, jetstream.ErrServerShutdown,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
