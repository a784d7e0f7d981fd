package gatecache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
)

// Store key namespaces: a cached entry lives under EntryPrefix+id, the
// single-flight lock of a key under LockPrefix+id.
const (
	EntryPrefix = "gatecache/v1/"
	LockPrefix  = "gatecache-lock/"
)

// Defaults of Options.
const (
	DefaultTTL         = 24 * time.Hour
	DefaultLockTTL     = time.Minute
	DefaultWaitTimeout = 10 * time.Minute
	DefaultPoll        = 500 * time.Millisecond
)

// Errors.
var (
	// ErrMiss means the cache has no live entry for the key.
	ErrMiss = errors.New("gatecache: miss")
	// ErrNotPassed means Put was given a result that did not pass: only
	// passing results are cached (CA-05).
	ErrNotPassed = errors.New("gatecache: only passed results are cached")
	// ErrBadKey means a key is not 64 lowercase hex digits.
	ErrBadKey = errors.New("gatecache: malformed key")
)

// Entry is a cached gate result.
type Entry struct {
	// Key is the cache key (Key.ID) the entry is stored under.
	Key string `json:"key"`
	// Tree is the git tree id of the code the gate passed on.
	Tree string `json:"tree,omitempty"`
	// CachedAt is when the entry was stored.
	CachedAt time.Time `json:"cached_at"`
	// Host is the runner that produced the result.
	Host string `json:"host,omitempty"`
	// Result is the passing run's result, as reported then. A reader
	// reporting a hit should mark it as cached and fill in its own job
	// fields (job id, attempt, lease token).
	Result protocol.GateResult `json:"result"`
}

// Options configure a Cache.
type Options struct {
	// TTL is how long an entry lives (default DefaultTTL).
	TTL time.Duration
	// LockTTL is the single-flight lock's lease; it is renewed every
	// LockTTL/3 while the run lasts (default DefaultLockTTL).
	LockTTL time.Duration
	// WaitTimeout bounds how long Do waits for another runner's run of the
	// same key before running it itself (default DefaultWaitTimeout).
	WaitTimeout time.Duration
	// Poll is how often a waiting Do looks at the cache and the lock
	// (default DefaultPoll).
	Poll time.Duration
	// Host names this runner in entries and lock owners (default
	// os.Hostname()).
	Host string
	// Logger receives warnings about store failures (default: discarded).
	Logger *slog.Logger
}

// Cache stores passing gate results in a state.Store, fleet-wide. It is
// safe for concurrent use.
type Cache struct {
	store state.Store
	opts  Options
	log   *slog.Logger
}

// New returns a Cache on store.
func New(store state.Store, opts Options) *Cache {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = DefaultLockTTL
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Cache{store: store, opts: opts, log: log}
}

// ValidKey reports whether id is a well-formed key: 64 lowercase hex digits.
func ValidKey(id string) bool {
	if len(id) != 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Get returns the live entry for key, or ErrMiss. An entry that does not
// decode, or is not a passing result for this key, is treated as a miss and
// removed.
func (c *Cache) Get(ctx context.Context, key string) (*Entry, error) {
	if !ValidKey(key) {
		return nil, fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	b, err := c.store.CacheGet(ctx, EntryPrefix+key)
	if errors.Is(err, state.ErrNotFound) {
		return nil, ErrMiss
	}
	if err != nil {
		return nil, fmt.Errorf("gatecache: get %s: %w", key, err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil || e.Key != key || e.Result.Status != protocol.GatePassed {
		c.log.WarnContext(ctx, "gatecache: dropping a malformed entry", "key", key, "err", err)
		if err := c.store.CacheDelete(ctx, EntryPrefix+key); err != nil {
			c.log.WarnContext(ctx, "gatecache: delete malformed entry", "key", key, "err", err)
		}
		return nil, ErrMiss
	}
	return &e, nil
}

// Put stores e under key for the TTL. It refuses results that did not pass
// (ErrNotPassed). e.Key is set to key (a different non-empty e.Key is an
// error); a zero CachedAt becomes now and an empty Host this runner's.
func (c *Cache) Put(ctx context.Context, key string, e Entry) error {
	if !ValidKey(key) {
		return fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	if e.Result.Status != protocol.GatePassed {
		return fmt.Errorf("%w: status %q", ErrNotPassed, e.Result.Status)
	}
	if e.Key != "" && e.Key != key {
		return fmt.Errorf("gatecache: entry for key %s put under %s", e.Key, key)
	}
	e.Key = key
	if e.CachedAt.IsZero() {
		e.CachedAt = time.Now().UTC()
	}
	if e.Host == "" {
		e.Host = c.opts.Host
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := c.store.CachePut(ctx, EntryPrefix+key, b, c.opts.TTL); err != nil {
		return fmt.Errorf("gatecache: put %s: %w", key, err)
	}
	return nil
}

// Delete removes key's entry; a missing entry is not an error.
func (c *Cache) Delete(ctx context.Context, key string) error {
	if !ValidKey(key) {
		return fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	return c.store.CacheDelete(ctx, EntryPrefix+key)
}

// RunFunc runs the gate on a cache miss. It returns the entry to report
// (Result set; Tree optionally) and whether it may be cached: a passing
// result of a run that was not cancelled. ctx is cancelled if this runner
// loses the single-flight lock.
type RunFunc func(ctx context.Context) (e Entry, cacheable bool, err error)

// Do returns key's cached entry (hit = true) or runs run, once across the
// fleet for identical keys in flight at once:
//
//   - On a miss, Do takes the lock LockPrefix+key, renewed while run runs,
//     checks the cache again, runs, stores a cacheable passing result and
//     only then releases the lock.
//   - If another runner holds the lock, Do waits, polling the cache and the
//     lock: the result appearing is a hit; the lock disappearing without a
//     result (the other run failed or was not cacheable) means Do takes it
//     and runs itself; after WaitTimeout it runs itself without the lock.
//   - An empty key (caching disabled) just runs run.
//
// The cache is an optimization: if the store fails, Do logs a warning and
// runs without it. Only run's error or ctx's is returned.
func (c *Cache) Do(ctx context.Context, key string, run RunFunc) (Entry, bool, error) {
	if key == "" {
		e, _, err := run(ctx)
		return e, false, err
	}
	if !ValidKey(key) {
		return Entry{}, false, fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	owner := c.opts.Host + "/" + randomID()
	waitUntil := time.Now().Add(c.opts.WaitTimeout)
	waited := false
	for {
		if e, err := c.Get(ctx, key); err == nil {
			return *e, true, nil
		} else if !errors.Is(err, ErrMiss) {
			if ctx.Err() != nil {
				return Entry{}, false, ctx.Err()
			}
			c.log.WarnContext(ctx, "gatecache: store unavailable; running without the cache", "key", key, "err", err)
			return c.runAndPut(ctx, key, run)
		}

		held, hctx, err := lease.Hold(ctx, c.store, LockPrefix+key, owner, c.opts.LockTTL, c.log)
		if err == nil {
			return c.runHeld(ctx, hctx, held, key, run)
		}
		if ctx.Err() != nil {
			return Entry{}, false, ctx.Err()
		}
		if !errors.Is(err, state.ErrLocked) {
			c.log.WarnContext(ctx, "gatecache: cannot take the single-flight lock; running without it", "key", key, "err", err)
			return c.runAndPut(ctx, key, run)
		}
		if !waited {
			c.log.DebugContext(ctx, "gatecache: identical run in flight; waiting", "key", key)
			waited = true
		}
		if !time.Now().Before(waitUntil) {
			c.log.WarnContext(ctx, "gatecache: gave up waiting for an identical run; running it here", "key", key, "waited", c.opts.WaitTimeout)
			return c.runAndPut(ctx, key, run)
		}
		wait := min(c.opts.Poll, time.Until(waitUntil))
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return Entry{}, false, ctx.Err()
		case <-t.C:
		}
	}
}

// runHeld runs under the held lock: the cache is checked again first (the
// previous holder may have stored its result just before releasing), and a
// cacheable result is stored before the lock is released.
func (c *Cache) runHeld(ctx, hctx context.Context, held *lease.Held, key string, run RunFunc) (e Entry, hit bool, err error) {
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := held.Release(rctx); rerr != nil {
			c.log.WarnContext(ctx, "gatecache: release the single-flight lock", "key", key, "err", rerr)
		}
	}()
	if e, err := c.Get(hctx, key); err == nil {
		return *e, true, nil
	}
	return c.runAndPut(hctx, key, run)
}

// runAndPut runs and stores a cacheable passing result.
func (c *Cache) runAndPut(ctx context.Context, key string, run RunFunc) (Entry, bool, error) {
	e, cacheable, err := run(ctx)
	if err != nil || !cacheable || e.Result.Status != protocol.GatePassed {
		return e, false, err
	}
	e.Key = key
	if e.CachedAt.IsZero() {
		e.CachedAt = time.Now().UTC()
	}
	if e.Host == "" {
		e.Host = c.opts.Host
	}
	// Store even if ctx was cancelled after the run finished: the result
	// is valid whoever holds the lock.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if perr := c.Put(pctx, key, e); perr != nil {
		c.log.WarnContext(ctx, "gatecache: store result", "key", key, "err", perr)
	}
	return e, false, nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
