package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// ttl is the lease TTL the tests hold leases with: renewals happen every
// ttl/3, so a lease that is not renewed lapses well within a test.
const ttl = 1200 * time.Millisecond

var seq atomic.Int64

// backends returns a fresh store factory per real backend.
func backends() map[string]func(t *testing.T) state.Store {
	return map[string]func(t *testing.T) state.Store{
		"kvstate": func(t *testing.T) state.Store {
			s, err := kvstate.New(context.Background(), testkit.JetStream(t, testkit.NATS(t)))
			if err != nil {
				t.Fatalf("kvstate: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redisstate": func(t *testing.T) state.Store {
			url := testkit.Redis(t)
			prefix := fmt.Sprintf("leasetest:%d:%d:", time.Now().UnixNano(), seq.Add(1))
			s, err := redisstate.Open(context.Background(), url, redisstate.WithPrefix(prefix))
			if err != nil {
				t.Fatalf("redisstate: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// forEachBackend runs f as a parallel subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, store state.Store)) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, open(t))
		})
	}
}

// flaky wraps a store and, while paused, fails every renewal with a
// transient (unavailable) error, as if the store could not be reached.
type flaky struct {
	state.Locks
	paused  atomic.Bool
	renewed atomic.Int64
}

func (f *flaky) Renew(ctx context.Context, l state.Lease, ttl time.Duration) (state.Lease, error) {
	if f.paused.Load() {
		return state.Lease{}, fmt.Errorf("test: store unreachable: %w", state.ErrUnavailable)
	}
	nl, err := f.Locks.Renew(ctx, l, ttl)
	if err == nil {
		f.renewed.Add(1)
	}
	return nl, err
}

func waitDone(t *testing.T, ctx context.Context, within time.Duration) {
	t.Helper()
	testkit.Receive(t, ctx.Done(), within, "job context not cancelled")
}

func TestHoldRenewsWhileHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		ctx := testkit.Context(t, 20*time.Second)
		counting := &flaky{Locks: store}
		held, jctx, err := lease.Hold(ctx, counting, "lease/job-renew", "runner-a", ttl, nil)
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		token := held.Token()
		if token == 0 {
			t.Fatal("Hold returned a zero fencing token")
		}

		// Well past the TTL, the lease is still ours and the job still runs.
		time.Sleep(2*ttl + ttl/2)
		if err := jctx.Err(); err != nil {
			t.Fatalf("job context ended while the lease was held: %v (cause %v)", err, context.Cause(jctx))
		}
		if n := counting.renewed.Load(); n < 3 {
			t.Fatalf("lease renewed %d times in 2.5 TTLs, want at least 3", n)
		}
		if _, err := store.Acquire(ctx, "lease/job-renew", "runner-b", ttl); !errors.Is(err, state.ErrLocked) {
			t.Fatalf("another owner acquired a held lease after its TTL: err = %v, want ErrLocked", err)
		}
		if held.Token() != token {
			t.Fatalf("renewal changed the token from %d to %d", token, held.Token())
		}
		// A second Hold of the same key fails with ErrLocked too.
		if _, _, err := lease.Hold(ctx, store, "lease/job-renew", "runner-b", ttl, nil); !errors.Is(err, state.ErrLocked) {
			t.Fatalf("Hold on a held key: err = %v, want ErrLocked", err)
		}

		if err := held.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		waitDone(t, jctx, time.Second)
		if lease.Lost(jctx) {
			t.Fatal("Lost is true after a voluntary Release")
		}
		// Release is idempotent.
		if err := held.Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}

		// Released: another owner takes it at once, with a greater token.
		l, err := store.Acquire(ctx, "lease/job-renew", "runner-b", ttl)
		if err != nil {
			t.Fatalf("Acquire after Release: %v", err)
		}
		if l.Token <= token {
			t.Fatalf("new token %d not greater than released token %d", l.Token, token)
		}
		// No renewal goroutine of the released lease disturbs the new owner.
		time.Sleep(ttl / 2)
		if _, err := store.Renew(ctx, l, ttl); err != nil {
			t.Fatalf("new owner's Renew: %v", err)
		}
	})
}

// A lease that lapses (renewals impossible) and is taken by another owner
// cancels the job with cause ErrLost on the next renewal.
func TestLostAfterExpiryAndSteal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		ctx := testkit.Context(t, 20*time.Second)
		f := &flaky{Locks: store}
		held, jctx, err := lease.Hold(ctx, f, "lease/job-steal", "runner-a", ttl, nil)
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		f.paused.Store(true)

		// Renewals fail transiently: the job keeps running while the lease
		// lapses, and another owner can take it once it has.
		var stolen state.Lease
		deadline := time.Now().Add(3 * ttl)
		for {
			stolen, err = store.Acquire(ctx, "lease/job-steal", "thief", 10*ttl)
			if err == nil {
				break
			}
			if !errors.Is(err, state.ErrLocked) {
				t.Fatalf("thief Acquire: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease still held %s after renewals stopped", 3*ttl)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if stolen.Token <= held.Token() {
			t.Fatalf("thief's token %d not greater than %d", stolen.Token, held.Token())
		}
		if err := jctx.Err(); err != nil {
			t.Fatalf("transient renewal failures cancelled the job: %v", err)
		}

		f.paused.Store(false)
		waitDone(t, jctx, ttl)
		if !lease.Lost(jctx) {
			t.Fatalf("Lost = false; cause = %v", context.Cause(jctx))
		}
		if !errors.Is(context.Cause(jctx), lease.ErrLost) {
			t.Fatalf("cause = %v, want ErrLost", context.Cause(jctx))
		}

		// Releasing the lost lease fails and leaves the thief's lease alone.
		if err := held.Release(ctx); !errors.Is(err, state.ErrLockLost) {
			t.Fatalf("Release of a lost lease: err = %v, want ErrLockLost", err)
		}
		if _, err := store.Renew(ctx, stolen, ttl); err != nil {
			t.Fatalf("thief's Renew after the loser's Release: %v", err)
		}
		if _, err := store.Acquire(ctx, "lease/job-steal", "third", ttl); !errors.Is(err, state.ErrLocked) {
			t.Fatalf("third Acquire: err = %v, want ErrLocked (thief holds it)", err)
		}
	})
}

// A lease whose record disappears from the store (released behind the
// holder's back) is lost at the next renewal.
func TestLostWhenReleasedUnderneath(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		ctx := testkit.Context(t, 20*time.Second)
		held, jctx, err := lease.Hold(ctx, store, "lease/job-gone", "runner-a", ttl, nil)
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		underlying := state.Lease{Key: "lease/job-gone", Owner: "runner-a", Token: held.Token()}
		if err := store.Release(ctx, underlying); err != nil {
			t.Fatalf("release the underlying key: %v", err)
		}
		waitDone(t, jctx, ttl)
		if !lease.Lost(jctx) {
			t.Fatalf("Lost = false; cause = %v", context.Cause(jctx))
		}
		_ = held.Release(ctx)
	})
}

// Cancelling the parent cancels the job, but that is not a lost lease.
func TestParentCancelIsNotLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		parent, cancel := context.WithCancel(testkit.Context(t, 20*time.Second))
		held, jctx, err := lease.Hold(parent, store, "lease/job-parent", "runner-a", ttl, nil)
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		cancel()
		waitDone(t, jctx, time.Second)
		if lease.Lost(jctx) {
			t.Fatal("Lost is true after the parent was cancelled")
		}
		if err := held.Release(testkit.Context(t, 20*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if _, err := store.Acquire(testkit.Context(t, 20*time.Second), "lease/job-parent", "runner-b", ttl); err != nil {
			t.Fatalf("Acquire after Release: %v", err)
		}
	})
}

// A leader elected with Elect steps down when the store cannot be reached
// for long enough that its lease may lapse: its context ends with ErrLost
// before another owner can take the lease, so two leaders never act at
// once. Contrast TestLostAfterExpiryAndSteal, where a job's holder carries
// on.
func TestElectStepsDownBeforeExpiry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		ctx := testkit.Context(t, 20*time.Second)
		f := &flaky{Locks: store}
		held, lctx, err := lease.Elect(ctx, f, "leader/stepdown", "leader-a", ttl, nil)
		if err != nil {
			t.Fatalf("Elect: %v", err)
		}
		time.Sleep(ttl) // renewals work: still leading
		if err := lctx.Err(); err != nil {
			t.Fatalf("leader context ended while renewals worked: %v", context.Cause(lctx))
		}
		f.paused.Store(true)
		paused := time.Now()
		for {
			_, err := store.Acquire(ctx, "leader/stepdown", "leader-b", ttl)
			if err == nil {
				break
			}
			if !errors.Is(err, state.ErrLocked) {
				t.Fatalf("second owner's Acquire: %v", err)
			}
			if time.Since(paused) > 3*ttl {
				t.Fatalf("lease still held %s after renewals stopped", 3*ttl)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// By the time another owner could take the lease, the first had
		// given it up.
		if lctx.Err() == nil || !lease.Lost(lctx) {
			t.Fatalf("leader still leading when another owner took the lease (cause %v)", context.Cause(lctx))
		}
		_ = held.Release(ctx)
	})
}

// Elect waits while another owner holds the key and takes it once that
// owner lets it go; cancelling the wait returns the context's error.
func TestElectWaitsForTheHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		ctx := testkit.Context(t, 20*time.Second)
		first, _, err := lease.Elect(ctx, store, "leader/wait", "leader-a", ttl, nil)
		if err != nil {
			t.Fatalf("first Elect: %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, ttl/2)
		if _, _, err := lease.Elect(wctx, store, "leader/wait", "leader-b", ttl, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Elect while held: %v, want the wait's deadline", err)
		}
		cancel()
		got := make(chan *lease.Held, 1)
		go func() {
			h, _, err := lease.Elect(ctx, store, "leader/wait", "leader-b", ttl, nil)
			if err != nil {
				t.Errorf("second Elect: %v", err)
			}
			got <- h
		}()
		time.Sleep(ttl / 2)
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case h := <-got:
			if h == nil || h.Token() <= first.Token() {
				t.Fatalf("second leader's token not greater than the first's")
			}
			_ = h.Release(ctx)
		case <-time.After(2 * ttl):
			t.Fatal("the waiting owner did not take over after the release")
		}
	})
}

// A holder that dies without releasing (a coordinator killed with SIGKILL)
// leaves its lease to lapse: a waiting Elect takes it once it has expired,
// polling every ElectRetry, under a greater token (CHAOS-04).
func TestElectTakesOverALapsedLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		ctx := testkit.Context(t, 20*time.Second)
		dead, err := store.Acquire(ctx, "leader/lapse", "leader-a", ttl)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		start := time.Now()
		h, _, err := lease.Elect(ctx, store, "leader/lapse", "leader-b", ttl, nil)
		if err != nil {
			t.Fatalf("Elect after the holder died: %v", err)
		}
		defer func() { _ = h.Release(ctx) }()
		took := time.Since(start)
		if h.Token() <= dead.Token {
			t.Errorf("token %d after the lapse, want more than the dead holder's %d", h.Token(), dead.Token)
		}
		if took < ttl/2 {
			t.Errorf("took the lease after %s, before the dead holder's (ttl %s) could expire", took, ttl)
		}
		t.Logf("took over %s after the holder stopped renewing (ttl %s, retry %s)", took.Round(time.Millisecond), ttl, lease.ElectRetry(ttl))
	})
}

func TestElectRetry(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{10 * time.Second, time.Second},
		{15 * time.Second, 1500 * time.Millisecond},
		{500 * time.Millisecond, 100 * time.Millisecond},
	} {
		if got := lease.ElectRetry(c.ttl); got != c.want {
			t.Errorf("ElectRetry(%s) = %s, want %s", c.ttl, got, c.want)
		}
	}
}

// Confirm renews at once while the lease is the holder's, and reports
// ErrLost — cancelling the holder's context — once another owner has it
// (a runner cut off the network whose job was taken over; CHAOS-03).
func TestConfirm(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store state.Store) {
		ctx := testkit.Context(t, 20*time.Second)
		h, hctx, err := lease.Hold(ctx, store, "job/confirm", "runner-a", ttl, nil)
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		if err := h.Confirm(ctx); err != nil {
			t.Fatalf("Confirm of a held lease: %v", err)
		}
		// The lease lapses (released here, as its expiry would) and
		// another owner takes it.
		if err := store.Release(ctx, state.Lease{Key: "job/confirm", Owner: "runner-a", Token: h.Token()}); err != nil {
			t.Fatalf("Release: %v", err)
		}
		other, err := store.Acquire(ctx, "job/confirm", "runner-b", ttl)
		if err != nil {
			t.Fatalf("Acquire by another owner: %v", err)
		}
		defer func() { _ = store.Release(ctx, other) }()
		if err := h.Confirm(ctx); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Confirm after another owner took the lease: %v, want ErrLost", err)
		}
		if !lease.Lost(hctx) {
			t.Errorf("the holder's context is not cancelled as lost after Confirm found the lease gone")
		}
	})
}
