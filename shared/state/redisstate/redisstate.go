// Package redisstate is the Redis backend of state.Store.
//
// Keys (all under the configured prefix, "sup:" by default):
//
//	lock:{key}     the lease, "<token>:<owner>", with the lease's TTL
//	lockseq:{key}  the key's fencing-token counter (never expires)
//	cache:<key>    a cache entry, with its TTL
//	breaker:<key>  a circuit breaker as JSON, naming its scope (absent while idle)
//	epoch          the store's fencing epoch (with WithEpochs; never expires)
//
// The braces are Redis Cluster hash tags, so a lease and its counter live in
// the same slot. BreakerList scans the breaker keys, so it sees one server's
// keys, and with WithEpochs the acquire script touches the epoch key beside
// the lease's: a Redis Cluster is not supported.
//
// Fencing tokens must keep increasing even if Redis loses its data (a
// restart without persistence, a flush, a new server). With WithEpochs the
// store finds such a loss by the epoch key's absence: it then draws a new
// epoch from the durable counter it was given (JetStream KV, see
// backends.Open) and every key's counter continues above (epoch-1)<<32, so
// every token issued after the loss exceeds every token issued before it
// (as long as no key takes 2^32 leases in one epoch). Without WithEpochs the
// counters must survive for tokens to keep increasing: run Redis with a
// noeviction policy (or one that evicts only keys with a TTL) and with
// persistence.
package redisstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/internal/backend"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// DefaultPrefix is the key prefix used unless WithPrefix overrides it.
const DefaultPrefix = "sup:"

// DefaultOpenTimeout bounds how long Open keeps trying to reach the server.
const DefaultOpenTimeout = 5 * time.Second

// maxTxAttempts bounds the optimistic-transaction retries of a breaker change.
const maxTxAttempts = 100

// Option configures a Store.
type Option func(*config)

type config struct {
	prefix       string
	epochs       EpochSource
	tls          tlsconfig.Files
	passwordFile string
}

func newConfig(opts []Option) config {
	c := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// EpochSource is a durable counter outside Redis from which a store draws
// a new fencing epoch when it finds Redis has lost its data.
type EpochSource interface {
	// NextEpoch increments the counter called name and returns its new
	// value (1 the first time).
	NextEpoch(ctx context.Context, name string) (uint64, error)
}

// WithEpochs keeps fencing tokens increasing across a loss of Redis's
// data by drawing epochs from src (see the package comment). The counter
// is named after the store's prefix.
func WithEpochs(src EpochSource) Option {
	return func(c *config) { c.epochs = src }
}

// WithPrefix sets the prefix of every key the store uses (default "sup:").
// Stores with different prefixes sharing one server do not see each other.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// Store is a state.Store on Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	prefix string
	epochs EpochSource
}

var _ state.Store = (*Store)(nil)

// Open connects to the Redis server at url (redis://, rediss:// or unix://,
// as accepted by redis.ParseURL, with the TLS and password settings of
// ClientOptions) and pings it, retrying with backoff for up to
// DefaultOpenTimeout or until ctx ends. If the server cannot be reached
// the error wraps state.ErrUnavailable; if it refuses the user or the TLS
// handshake fails the error says so. Either names url with any password
// redacted. The returned Store owns its client; Close closes it.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	c := newConfig(opts)
	shown := RedactURL(url)
	ropts, err := c.clientOptions(url)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, *ropts, DefaultOpenTimeout, func(err error) error { return c.explain(err, ropts) }); err != nil {
		if refused := c.explain(err, ropts); refused != nil {
			return nil, fmt.Errorf("redisstate: Redis at %s: %w", shown, refused)
		}
		return nil, fmt.Errorf("redisstate: Redis at %s unreachable: %w: %w", shown, state.ErrUnavailable, err)
	}
	return &Store{client: redis.NewClient(ropts), prefix: c.prefix, epochs: c.epochs}, nil
}

// ping pings the server opts names until it answers, ctx ends, timeout
// passes or permanent (non-nil for an error retrying cannot mend) says to
// stop. It uses its own client without the library's internal retries so
// that it controls the backoff and reports the real cause of a failure.
func ping(ctx context.Context, opts redis.Options, timeout time.Duration, permanent func(error) error) error {
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	opts.PoolSize = 1
	client := redis.NewClient(&opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	backoff := 50 * time.Millisecond
	var last error
	for attempt := 1; ; attempt++ {
		err := client.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if permanent(err) != nil {
			return err
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %d attempts in %s: %w", attempt, time.Since(start).Round(time.Millisecond), last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// RedactURL returns raw with any password (in the user info or a "password"
// query parameter) replaced by "xxxxx", for use in logs and errors.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparseable: drop everything that could be user info.
		if i := strings.Index(raw, "://"); i >= 0 {
			if j := strings.LastIndex(raw[i+3:], "@"); j >= 0 {
				return raw[:i+3] + "xxxxx@" + raw[i+3+j+1:]
			}
			return raw
		}
		if strings.Contains(raw, "@") {
			return "<unparseable URL>"
		}
		return raw
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// stripURL drops the URL a *url.Error quotes, which may hold a password.
func stripURL(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return fmt.Errorf("%s: %w", uerr.Op, uerr.Err)
	}
	return err
}

// Backend returns "redis".
func (s *Store) Backend() string { return "redis" }

// Close closes the Store's client.
func (s *Store) Close() error {
	if err := s.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redisstate: close: %w", err)
	}
	return nil
}

func (s *Store) lockKey(key string) string    { return s.prefix + "lock:{" + key + "}" }
func (s *Store) lockSeqKey(key string) string { return s.prefix + "lockseq:{" + key + "}" }
func (s *Store) cacheKey(key string) string   { return s.prefix + "cache:" + key }
func (s *Store) breakerKey(key string) string { return s.prefix + "breaker:" + key }
func (s *Store) epochKey() string             { return s.prefix + "epoch" }

// acquireScript takes the lease if it is free: KEYS = lease, counter,
// epoch; ARGV = owner, ttl in ms, epoch ("" without epochs, "0" to ask).
// It returns the new token, 0 if held, or -1 if the epoch key is missing
// and ARGV[3] is "0": the caller must draw a new epoch and run it again
// with it. The counter continues above (epoch-1)<<32.
var acquireScript = redis.NewScript(`
local floor = 0
if ARGV[3] ~= '' then
  local e = redis.call('GET', KEYS[3])
  if not e then
    if ARGV[3] == '0' then
      return -1
    end
    redis.call('SET', KEYS[3], ARGV[3])
    e = ARGV[3]
  end
  floor = (tonumber(e) - 1) * 4294967296
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < floor then
  redis.call('SET', KEYS[2], string.format('%d', floor))
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], string.format('%d', token) .. ':' .. ARGV[1], 'PX', ARGV[2])
return token
`)

// renewScript extends the lease if it still holds the expected value:
// KEYS = lease; ARGV = value, ttl in ms. It returns 1 on success, else 0.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes the lease if it still holds the expected value:
// KEYS = lease; ARGV = value. It returns 1 on success, else 0.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

func leaseValue(token uint64, owner string) string {
	return strconv.FormatUint(token, 10) + ":" + owner
}

// Acquire takes the lock on key for owner for ttl; see state.Locks.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (state.Lease, error) {
	if err := backend.CheckLease(key, owner, ttl); err != nil {
		return state.Lease{}, fmt.Errorf("redisstate: acquire %q: %w", key, err)
	}
	start := time.Now()
	epoch := ""
	if s.epochs != nil {
		epoch = "0"
	}
	token, err := s.acquire(ctx, key, owner, ttl, epoch)
	if err == nil && token < 0 {
		// Redis has lost its data (or this is its first use): continue
		// the counters in a new epoch, above every token issued before.
		var e uint64
		e, err = s.epochs.NextEpoch(ctx, "redis:"+s.prefix)
		if err != nil {
			return state.Lease{}, fmt.Errorf("redisstate: acquire %q: draw a fencing epoch: %w: %w", key, state.ErrUnavailable, err)
		}
		if e < 1 || e >= 1<<21 {
			return state.Lease{}, fmt.Errorf("redisstate: acquire %q: fencing epoch %d out of range", key, e)
		}
		token, err = s.acquire(ctx, key, owner, ttl, strconv.FormatUint(e, 10))
	}
	if err != nil {
		return state.Lease{}, s.fail(ctx, "acquire "+strconv.Quote(key), err)
	}
	if token == 0 {
		return state.Lease{}, fmt.Errorf("redisstate: acquire %q: %w", key, state.ErrLocked)
	}
	return state.Lease{Key: key, Owner: owner, Token: uint64(token), ExpiresAt: start.Add(ttl)}, nil
}

// acquire runs acquireScript; see it for epoch and the result.
func (s *Store) acquire(ctx context.Context, key, owner string, ttl time.Duration, epoch string) (int64, error) {
	return acquireScript.Run(ctx, s.client,
		[]string{s.lockKey(key), s.lockSeqKey(key), s.epochKey()}, owner, millis(ttl), epoch).Int64()
}

// Renew extends lease by ttl from now, keeping its token; see state.Locks.
func (s *Store) Renew(ctx context.Context, lease state.Lease, ttl time.Duration) (state.Lease, error) {
	if err := backend.CheckLease(lease.Key, lease.Owner, ttl); err != nil {
		return state.Lease{}, fmt.Errorf("redisstate: renew %q: %w", lease.Key, err)
	}
	start := time.Now()
	ok, err := renewScript.Run(ctx, s.client, []string{s.lockKey(lease.Key)},
		leaseValue(lease.Token, lease.Owner), millis(ttl)).Int()
	if err != nil {
		return state.Lease{}, s.fail(ctx, "renew "+strconv.Quote(lease.Key), err)
	}
	if ok != 1 {
		return state.Lease{}, fmt.Errorf("redisstate: renew %q (token %d): %w", lease.Key, lease.Token, state.ErrLockLost)
	}
	lease.ExpiresAt = start.Add(ttl)
	return lease, nil
}

// Release gives lease up; see state.Locks.
func (s *Store) Release(ctx context.Context, lease state.Lease) error {
	if lease.Key == "" {
		return errors.New("redisstate: release: empty key")
	}
	ok, err := releaseScript.Run(ctx, s.client, []string{s.lockKey(lease.Key)},
		leaseValue(lease.Token, lease.Owner)).Int()
	if err != nil {
		return s.fail(ctx, "release "+strconv.Quote(lease.Key), err)
	}
	if ok != 1 {
		return fmt.Errorf("redisstate: release %q (token %d): %w", lease.Key, lease.Token, state.ErrLockLost)
	}
	return nil
}

// CacheGet returns the live value for key, or state.ErrNotFound.
func (s *Store) CacheGet(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, errors.New("redisstate: cache get: empty key")
	}
	v, err := s.client.Get(ctx, s.cacheKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisstate: cache get %q: %w", key, state.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(ctx, "cache get "+strconv.Quote(key), err)
	}
	return v, nil
}

// CachePut stores value under key for ttl (which must be positive).
func (s *Store) CachePut(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if key == "" {
		return errors.New("redisstate: cache put: empty key")
	}
	if ttl <= 0 {
		return fmt.Errorf("redisstate: cache put %q: ttl must be positive, got %s", key, ttl)
	}
	if value == nil {
		value = []byte{}
	}
	if err := s.client.Set(ctx, s.cacheKey(key), value, max(ttl, time.Millisecond)).Err(); err != nil {
		return s.fail(ctx, "cache put "+strconv.Quote(key), err)
	}
	return nil
}

// CacheDelete removes key; deleting a missing key is not an error.
func (s *Store) CacheDelete(ctx context.Context, key string) error {
	if key == "" {
		return errors.New("redisstate: cache delete: empty key")
	}
	if err := s.client.Del(ctx, s.cacheKey(key)).Err(); err != nil {
		return s.fail(ctx, "cache delete "+strconv.Quote(key), err)
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
	if scope == "" {
		return state.Breaker{}, errors.New("redisstate: breaker get: empty scope")
	}
	b, err := getBreaker(ctx, s.client, s.breakerKey(scope))
	if err != nil {
		return state.Breaker{}, s.fail(ctx, "breaker get "+strconv.Quote(scope), err)
	}
	return b, nil
}

// BreakerReset closes the breaker of scope and forgets its failures, and
// returns the state it had before.
func (s *Store) BreakerReset(ctx context.Context, scope string) (state.Breaker, error) {
	return backend.BreakerReset(ctx, s.updateBreaker, scope)
}

// listBatch is how many keys one SCAN step asks for and one MGET reads.
const listBatch = 200

// BreakerList returns every stored breaker, sorted by scope: the breaker
// keys are scanned (SCAN, so the server is never blocked) and read in
// batches. A breaker that becomes idle meanwhile is left out.
func (s *Store) BreakerList(ctx context.Context) ([]state.ScopedBreaker, error) {
	base := s.breakerKey("")
	var keys []string
	seen := map[string]bool{} // SCAN may return a key more than once
	iter := s.client.Scan(ctx, 0, globEscape(base)+"*", listBatch).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if err := iter.Err(); err != nil {
		return nil, s.fail(ctx, "breaker list", err)
	}
	out := []state.ScopedBreaker{}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), listBatch)]
		keys = keys[len(batch):]
		vals, err := s.client.MGet(ctx, batch...).Result()
		if err != nil {
			return nil, s.fail(ctx, "breaker list", err)
		}
		for i, v := range vals {
			raw, ok := v.(string)
			if !ok {
				continue // deleted since the scan: idle now
			}
			scope, b, err := backend.DecodeScopedBreaker([]byte(raw))
			if err != nil {
				return nil, fmt.Errorf("redisstate: breaker list: %s: %w", batch[i], err)
			}
			if scope == "" {
				scope = strings.TrimPrefix(batch[i], base)
			}
			out = append(out, state.ScopedBreaker{Scope: scope, Breaker: b})
		}
	}
	backend.SortBreakers(out)
	return out, nil
}

// globEscape escapes the characters SCAN's MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// getBreaker reads and decodes a breaker record; a missing one is closed.
func getBreaker(ctx context.Context, c redis.Cmdable, key string) (state.Breaker, error) {
	raw, err := c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return state.Breaker{State: state.BreakerClosed}, nil
	}
	if err != nil {
		return state.Breaker{}, err
	}
	return backend.DecodeBreaker(raw)
}

// updateBreaker applies fn to the breaker for scope atomically, with
// WATCH/MULTI and a retry when another client changed it meanwhile, and
// returns the breaker as stored afterwards. Idle breakers are deleted.
func (s *Store) updateBreaker(ctx context.Context, op, scope string, fn func(state.Breaker) state.Breaker) (state.Breaker, error) {
	if scope == "" {
		return state.Breaker{}, fmt.Errorf("redisstate: %s: empty scope", op)
	}
	key := s.breakerKey(scope)
	var next state.Breaker
	txf := func(tx *redis.Tx) error {
		cur, err := getBreaker(ctx, tx, key)
		if err != nil {
			return err
		}
		next = fn(cur)
		if next.Equal(cur) {
			return nil
		}
		var data []byte
		if !next.Idle() {
			if data, err = backend.EncodeBreaker(scope, next); err != nil {
				return err
			}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if data == nil {
				p.Del(ctx, key)
			} else {
				p.Set(ctx, key, data, 0)
			}
			return nil
		})
		return err
	}
	for attempt := 1; attempt <= maxTxAttempts; attempt++ {
		err := s.client.Watch(ctx, txf, key)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, redis.TxFailedErr) {
			return state.Breaker{}, s.fail(ctx, op+" "+strconv.Quote(scope), err)
		}
		if err := backend.SleepJitter(ctx, attempt); err != nil {
			return state.Breaker{}, fmt.Errorf("redisstate: %s %q: %w", op, scope, err)
		}
	}
	return state.Breaker{}, fmt.Errorf("redisstate: %s %q: still conflicting after %d attempts", op, scope, maxTxAttempts)
}

// fail wraps a client error, marking connection failures with
// state.ErrUnavailable.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() == nil && unavailable(err) {
		return fmt.Errorf("redisstate: %s: %w: %w", op, state.ErrUnavailable, err)
	}
	return fmt.Errorf("redisstate: %s: %w", op, err)
}

// unavailable reports whether err means the server could not be reached or
// cannot serve right now, as opposed to rejecting the request.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var netErr net.Error
	switch {
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr):
		return true
	}
	return redis.IsLoadingError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) ||
		redis.IsMaxClientsError(err)
}

// millis converts ttl to whole milliseconds, at least 1.
func millis(ttl time.Duration) int64 {
	return max(ttl.Milliseconds(), 1)
}
