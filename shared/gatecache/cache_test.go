package gatecache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

var nsSeq atomic.Int64

// opener opens a new connection to one test namespace of a backend; two
// calls give two "runner processes" sharing the namespace.
type opener func(t *testing.T) state.Store

// backends runs fn for each backend against a real server, with a fresh
// namespace per call of fn.
func backends(t *testing.T, fn func(t *testing.T, open opener)) {
	t.Run("jetstream-kv", func(t *testing.T) {
		t.Parallel()
		url := testkit.NATS(t)
		bucket := fmt.Sprintf("gatecache-test-%d", nsSeq.Add(1))
		fn(t, func(t *testing.T) state.Store {
			s, err := kvstate.New(context.Background(), testkit.JetStream(t, url), kvstate.WithBucket(bucket))
			if err != nil {
				t.Fatalf("kvstate: %v", err)
			}
			return s
		})
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url := testkit.Redis(t)
		prefix := fmt.Sprintf("gatecache-test:%d:%d:", time.Now().UnixNano(), nsSeq.Add(1))
		fn(t, func(t *testing.T) state.Store {
			s, err := redisstate.Open(context.Background(), url, redisstate.WithPrefix(prefix))
			if err != nil {
				t.Fatalf("redisstate: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

var keySeq atomic.Int64

func testKey() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "key-%d-%d", time.Now().UnixNano(), keySeq.Add(1)))
	return hex.EncodeToString(sum[:])
}

func passed(gate string) Entry {
	code := 0
	return Entry{Tree: "abc", Result: protocol.GateResult{Gate: gate, Status: protocol.GatePassed, ExitCode: &code, Stdout: "ok"}}
}

func fastOpts() Options {
	return Options{TTL: time.Minute, LockTTL: time.Second, WaitTimeout: 10 * time.Second, Poll: 50 * time.Millisecond, Host: "runner-test"}
}

func TestCacheGetPut(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		c := New(open(t), fastOpts())
		key := testKey()
		if _, err := c.Get(ctx, key); !errors.Is(err, ErrMiss) {
			t.Fatalf("Get of an empty cache: %v; want ErrMiss", err)
		}
		if err := c.Put(ctx, key, passed("lint")); err != nil {
			t.Fatalf("Put: %v", err)
		}
		e, err := c.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if e.Key != key || e.Tree != "abc" || e.Host != "runner-test" || e.CachedAt.IsZero() ||
			e.Result.Gate != "lint" || e.Result.Status != protocol.GatePassed || *e.Result.ExitCode != 0 || e.Result.Stdout != "ok" {
			t.Fatalf("Get = %+v", e)
		}

		// Another runner (another connection) sees it.
		if _, err := New(open(t), fastOpts()).Get(ctx, key); err != nil {
			t.Fatalf("Get from a second connection: %v", err)
		}

		for _, st := range []protocol.GateStatus{protocol.GateFailed, protocol.GateError, protocol.GateTimeout, protocol.GateSkipped, ""} {
			e := passed("lint")
			e.Result.Status = st
			k := testKey()
			if err := c.Put(ctx, k, e); !errors.Is(err, ErrNotPassed) {
				t.Fatalf("Put of a %q result: %v; want ErrNotPassed", st, err)
			}
			if _, err := c.Get(ctx, k); !errors.Is(err, ErrMiss) {
				t.Fatalf("a refused %q result was stored: %v", st, err)
			}
		}
		for _, bad := range []string{"", "abc", "gatecache/v1/x", key[:63] + "G"} {
			if err := c.Put(ctx, bad, passed("x")); !errors.Is(err, ErrBadKey) {
				t.Fatalf("Put(%q): %v; want ErrBadKey", bad, err)
			}
			if _, err := c.Get(ctx, bad); !errors.Is(err, ErrBadKey) {
				t.Fatalf("Get(%q): %v; want ErrBadKey", bad, err)
			}
		}
		other := passed("x")
		other.Key = testKey()
		if err := c.Put(ctx, key, other); err == nil {
			t.Fatal("Put of an entry for another key: no error")
		}
		if err := c.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, key); !errors.Is(err, ErrMiss) {
			t.Fatalf("Get after Delete: %v", err)
		}
	})
}

func TestCacheMalformedEntryIsAMiss(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		c := New(s, fastOpts())
		key := testKey()
		if err := s.CachePut(ctx, EntryPrefix+key, []byte("{not json"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, key); !errors.Is(err, ErrMiss) {
			t.Fatalf("Get of a malformed entry: %v; want ErrMiss", err)
		}
		if _, err := s.CacheGet(ctx, EntryPrefix+key); !errors.Is(err, state.ErrNotFound) {
			t.Fatalf("malformed entry not removed: %v", err)
		}
	})
}

func TestCacheTTL(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		opts := fastOpts()
		opts.TTL = 700 * time.Millisecond
		c := New(open(t), opts)
		key := testKey()
		if err := c.Put(ctx, key, passed("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, key); err != nil {
			t.Fatalf("Get before expiry: %v", err)
		}
		time.Sleep(opts.TTL + 300*time.Millisecond)
		if _, err := c.Get(ctx, key); !errors.Is(err, ErrMiss) {
			t.Fatalf("Get after expiry: %v; want ErrMiss", err)
		}
	})
}

// gateRun is a RunFunc that counts its runs and can block and fail.
type gateRun struct {
	runs    atomic.Int32
	started chan struct{} // signalled once per run
	release chan struct{} // if non-nil, a run waits for it
	hold    time.Duration // a run lasts this long
	fail    bool
	status  protocol.GateStatus
	nocache bool
}

func newGateRun() *gateRun {
	return &gateRun{started: make(chan struct{}, 16), status: protocol.GatePassed}
}

func (g *gateRun) run(ctx context.Context) (Entry, bool, error) {
	n := g.runs.Add(1)
	g.started <- struct{}{}
	if g.release != nil {
		select {
		case <-g.release:
		case <-ctx.Done():
			return Entry{}, false, ctx.Err()
		}
	}
	if g.hold > 0 {
		select {
		case <-time.After(g.hold):
		case <-ctx.Done():
			return Entry{}, false, ctx.Err()
		}
	}
	if g.fail {
		return Entry{}, false, errors.New("runner crashed")
	}
	e := passed(fmt.Sprintf("run-%d", n))
	e.Result.Status = g.status
	return e, !g.nocache, nil
}

type doResult struct {
	e   Entry
	hit bool
	err error
	at  time.Time
}

func goDo(c *Cache, ctx context.Context, key string, run RunFunc) <-chan doResult {
	ch := make(chan doResult, 1)
	go func() {
		e, hit, err := c.Do(ctx, key, run)
		ch <- doResult{e, hit, err, time.Now()}
	}()
	return ch
}

func waitStarted(t *testing.T, g *gateRun) {
	t.Helper()
	testkit.Receive(t, g.started, 10*time.Second, "run did not start")
}

func TestCacheDo(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, open opener) {
		t.Run("miss then hit", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := New(open(t), fastOpts())
			key := testKey()
			g := newGateRun()
			e, hit, err := c.Do(ctx, key, g.run)
			if err != nil || hit || e.Result.Gate != "run-1" || e.Key != key {
				t.Fatalf("first Do = %+v, %v, %v", e, hit, err)
			}
			e, hit, err = c.Do(ctx, key, g.run)
			if err != nil || !hit || e.Result.Gate != "run-1" || e.Host != "runner-test" {
				t.Fatalf("second Do = %+v, %v, %v; want a hit", e, hit, err)
			}
			if n := g.runs.Load(); n != 1 {
				t.Fatalf("runs = %d; want 1", n)
			}
			// The lock was released: another key's lock is free, and this
			// one can be taken.
			l, err := c.store.Acquire(ctx, LockPrefix+key, "probe", time.Second)
			if err != nil {
				t.Fatalf("lock still held after Do: %v", err)
			}
			_ = c.store.Release(ctx, l)
		})
		t.Run("not cacheable and not passed are not stored", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := New(open(t), fastOpts())
			for _, mod := range []func(g *gateRun){
				func(g *gateRun) { g.nocache = true },
				func(g *gateRun) { g.status = protocol.GateFailed },
				func(g *gateRun) { g.fail = true },
			} {
				key := testKey()
				g := newGateRun()
				mod(g)
				// Only the number of runs matters here, not what Do returns.
				_, _, _ = c.Do(ctx, key, g.run)
				_, _, _ = c.Do(ctx, key, g.run)
				if n := g.runs.Load(); n != 2 {
					t.Fatalf("runs = %d; want 2 (nothing cached)", n)
				}
			}
		})
		t.Run("empty key runs without caching", func(t *testing.T) {
			t.Parallel()
			c := New(open(t), fastOpts())
			g := newGateRun()
			for range 2 {
				if _, hit, err := c.Do(context.Background(), "", g.run); err != nil || hit {
					t.Fatalf("Do(\"\") = %v, %v", hit, err)
				}
			}
			if n := g.runs.Load(); n != 2 {
				t.Fatalf("runs = %d; want 2", n)
			}
			if _, _, err := c.Do(context.Background(), "nothex", g.run); !errors.Is(err, ErrBadKey) {
				t.Fatalf("Do(bad key) = %v", err)
			}
		})
		t.Run("single flight across runners", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			a, b := New(open(t), fastOpts()), New(open(t), fastOpts())
			key := testKey()
			g := newGateRun()
			g.hold = 300 * time.Millisecond
			ra := goDo(a, ctx, key, g.run)
			waitStarted(t, g)
			rb := goDo(b, ctx, key, g.run)
			x, y := <-ra, <-rb
			if x.err != nil || y.err != nil {
				t.Fatalf("errors: %v, %v", x.err, y.err)
			}
			if x.hit || !y.hit {
				t.Fatalf("hits = %v, %v; want false (ran), true (waited)", x.hit, y.hit)
			}
			if n := g.runs.Load(); n != 1 {
				t.Fatalf("runs = %d; want 1", n)
			}
			if x.e.Result.Gate != y.e.Result.Gate {
				t.Fatalf("results differ: %q vs %q", x.e.Result.Gate, y.e.Result.Gate)
			}
		})
		t.Run("single flight, many at once", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			caches := []*Cache{New(open(t), fastOpts()), New(open(t), fastOpts())}
			key := testKey()
			g := newGateRun()
			g.hold = 200 * time.Millisecond
			var start sync.WaitGroup
			start.Add(1)
			results := make(chan doResult, 6)
			for i := range 6 {
				go func() {
					start.Wait()
					e, hit, err := caches[i%2].Do(ctx, key, g.run)
					results <- doResult{e: e, hit: hit, err: err}
				}()
			}
			start.Done()
			hits := 0
			for range 6 {
				r := <-results
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.hit {
					hits++
				}
				if r.e.Result.Gate != "run-1" {
					t.Fatalf("result %q; want run-1", r.e.Result.Gate)
				}
			}
			if n := g.runs.Load(); n != 1 || hits != 5 {
				t.Fatalf("runs = %d, hits = %d; want 1 and 5", n, hits)
			}
		})
		t.Run("failed run releases the lock and the waiter runs", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			a, b := New(open(t), fastOpts()), New(open(t), fastOpts())
			key := testKey()
			ga := newGateRun()
			ga.fail, ga.hold = true, 200*time.Millisecond
			gb := newGateRun()
			start := time.Now()
			ra := goDo(a, ctx, key, ga.run)
			waitStarted(t, ga)
			rb := goDo(b, ctx, key, gb.run)
			x, y := <-ra, <-rb
			if x.err == nil {
				t.Fatal("the failing run reported no error")
			}
			if y.err != nil || y.hit || gb.runs.Load() != 1 {
				t.Fatalf("waiter: hit=%v err=%v runs=%d; want it to run itself", y.hit, y.err, gb.runs.Load())
			}
			if d := y.at.Sub(start); d > 5*time.Second {
				t.Fatalf("waiter took %v: it waited for the timeout instead of the lock", d)
			}
			if _, err := a.Get(ctx, key); err != nil {
				t.Fatalf("the waiter's passing result was not cached: %v", err)
			}
		})
		t.Run("wait timeout runs itself", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			a := New(open(t), fastOpts())
			opts := fastOpts()
			opts.WaitTimeout = 300 * time.Millisecond
			b := New(open(t), opts)
			key := testKey()
			ga := newGateRun()
			ga.release = make(chan struct{})
			gb := newGateRun()
			ra := goDo(a, ctx, key, ga.run)
			waitStarted(t, ga)
			start := time.Now()
			y := <-goDo(b, ctx, key, gb.run)
			if y.err != nil || y.hit || gb.runs.Load() != 1 {
				t.Fatalf("waiter: hit=%v err=%v runs=%d; want it to run after the timeout", y.hit, y.err, gb.runs.Load())
			}
			if d := y.at.Sub(start); d < opts.WaitTimeout {
				t.Fatalf("waiter ran after %v, before the wait timeout", d)
			}
			close(ga.release)
			if x := <-ra; x.err != nil || x.hit {
				t.Fatalf("holder: %+v", x)
			}
		})
		t.Run("lock renewed during a long run", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			opts := fastOpts()
			opts.LockTTL = 500 * time.Millisecond
			a, b := New(open(t), opts), New(open(t), opts)
			key := testKey()
			g := newGateRun()
			g.hold = 1500 * time.Millisecond // three lock TTLs
			ra := goDo(a, ctx, key, g.run)
			waitStarted(t, g)
			y := <-goDo(b, ctx, key, g.run)
			x := <-ra
			if x.err != nil || y.err != nil || !y.hit || g.runs.Load() != 1 {
				t.Fatalf("holder %+v, waiter %+v, runs %d; want one run and a hit", x, y, g.runs.Load())
			}
		})
		t.Run("crashed holder's lock expires", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := open(t)
			key := testKey()
			// A runner that took the lock and died: never renewed or released.
			// The lease runs from before the Acquire call: the gate cannot
			// have run sooner than its TTL after that, however slowly the
			// rest of the set-up went on a loaded machine.
			acquired := time.Now()
			if _, err := s.Acquire(ctx, LockPrefix+key, "dead-runner", 500*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			c := New(open(t), fastOpts())
			g := newGateRun()
			_, hit, err := c.Do(ctx, key, g.run)
			if err != nil || hit || g.runs.Load() != 1 {
				t.Fatalf("Do = %v, %v, runs %d", hit, err, g.runs.Load())
			}
			if d := time.Since(acquired); d < 450*time.Millisecond || d > 5*time.Second {
				t.Fatalf("the gate ran %v after the dead holder's lock was taken; want about its TTL (500ms)", d)
			}
		})
		t.Run("cancel while waiting", func(t *testing.T) {
			t.Parallel()
			a, b := New(open(t), fastOpts()), New(open(t), fastOpts())
			key := testKey()
			ga := newGateRun()
			ga.release = make(chan struct{})
			ra := goDo(a, context.Background(), key, ga.run)
			waitStarted(t, ga)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			gb := newGateRun()
			if _, _, err := b.Do(ctx, key, gb.run); !errors.Is(err, context.DeadlineExceeded) || gb.runs.Load() != 0 {
				t.Fatalf("Do with a cancelled context = %v, runs %d", err, gb.runs.Load())
			}
			close(ga.release)
			<-ra
		})
	})
}

func TestCacheStoreDown(t *testing.T) {
	t.Parallel()
	// A store whose server is gone: Do still runs the gate.
	url := testkit.Redis(t)
	s, err := redisstate.Open(context.Background(), url, redisstate.WithPrefix(fmt.Sprintf("gatecache-down:%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	c := New(s, fastOpts())
	g := newGateRun()
	e, hit, err := c.Do(context.Background(), testKey(), g.run)
	if err != nil || hit || g.runs.Load() != 1 || e.Result.Status != protocol.GatePassed {
		t.Fatalf("Do on a dead store = %+v, %v, %v", e, hit, err)
	}
}
