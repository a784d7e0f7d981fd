// Package statetest is the conformance suite every state.Store backend must
// pass. A backend's tests call Run with a constructor for fresh stores.
package statetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Lease and cache TTLs the suite waits out; short so the suite stays fast.
const (
	shortTTL = 250 * time.Millisecond
	longTTL  = 10 * time.Second
	// pastShort is comfortably past shortTTL.
	pastShort = shortTTL + 200*time.Millisecond
)

// concurrency is how many goroutines race in the concurrent cases.
const concurrency = 20

// Run runs the conformance suite against the stores newStore returns.
// newStore is called once per subtest, possibly in parallel, and must
// return a store that shares no keys with any other it returned (e.g. a
// unique key prefix or bucket); it should close the store on t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) state.Store) {
	t.Helper()
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"Locks", lockCases},
		{"Cache", cacheCases},
		{"Breakers", breakerCases},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range g.cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					s := newStore(t)
					if s.Backend() == "" {
						t.Error("Backend() is empty")
					}
					tc.run(t, s)
				})
			}
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, s state.Store)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, s state.Store, key, owner string, ttl time.Duration) state.Lease {
	t.Helper()
	l, err := s.Acquire(ctxFor(t), key, owner, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", key, owner, err)
	}
	return l
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// oddKeys are keys a backend must store faithfully and keep apart, including
// ones that differ only in characters a backend may have to encode.
var oddKeys = []string{
	"lease:wf-abc.node1.a1",
	"lease:wf-abc_node1_a1",
	"lease:wf-abc-node1-a1",
	"a.b", "a_b", "a:b", "a/b", "a b", "a*b", "a>b", "a=b",
	"YS5i", // base64url of "a.b"
	".leading", "trailing.", "double..dot",
	"ünïcode-κλειδί",
	"sha256:" + strings.Repeat("0123456789abcdef", 4),
	strings.Repeat("long-key/", 60),
}

var lockCases = []testCase{
	{"AcquireIsExclusive", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		before := time.Now()
		l := mustAcquire(t, s, "k", "alice", longTTL)
		if l.Key != "k" || l.Owner != "alice" || l.Token == 0 {
			t.Fatalf("lease = %+v, want key k, owner alice, non-zero token", l)
		}
		if l.ExpiresAt.Before(before.Add(longTTL)) || l.ExpiresAt.After(time.Now().Add(longTTL)) {
			t.Fatalf("ExpiresAt = %v, want about now+%s", l.ExpiresAt, longTTL)
		}
		_, err := s.Acquire(ctx, "k", "bob", longTTL)
		wantErr(t, "second owner", err, state.ErrLocked)
		_, err = s.Acquire(ctx, "k", "alice", longTTL)
		wantErr(t, "same owner again (not re-entrant)", err, state.ErrLocked)
		mustAcquire(t, s, "other", "bob", longTTL) // other keys are independent
	}},
	{"TokenIncreasesAcrossRelease", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		var last uint64
		for i := range 5 {
			l := mustAcquire(t, s, "k", fmt.Sprintf("owner-%d", i%2), longTTL)
			if l.Token <= last {
				t.Fatalf("acquisition %d: token %d not greater than %d", i, l.Token, last)
			}
			last = l.Token
			if err := s.Release(ctx, l); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}},
	{"TokenIncreasesAcrossExpiry", func(t *testing.T, s state.Store) {
		a := mustAcquire(t, s, "k", "alice", shortTTL)
		time.Sleep(pastShort)
		b := mustAcquire(t, s, "k", "bob", shortTTL)
		if b.Token <= a.Token {
			t.Fatalf("takeover token %d not greater than %d", b.Token, a.Token)
		}
		time.Sleep(pastShort)
		c := mustAcquire(t, s, "k", "alice", longTTL)
		if c.Token <= b.Token {
			t.Fatalf("second takeover token %d not greater than %d", c.Token, b.Token)
		}
	}},
	{"ExpiryLetsAnotherOwnerAcquire", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		mustAcquire(t, s, "k", "alice", shortTTL)
		_, err := s.Acquire(ctx, "k", "bob", shortTTL)
		wantErr(t, "before expiry", err, state.ErrLocked)
		time.Sleep(pastShort)
		mustAcquire(t, s, "k", "bob", longTTL)
	}},
	{"RenewKeepsTokenAndExtends", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		l := mustAcquire(t, s, "k", "alice", shortTTL)
		r, err := s.Renew(ctx, l, 2*time.Second)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if r.Token != l.Token || r.Key != l.Key || r.Owner != l.Owner {
			t.Fatalf("renewed lease = %+v, want token/key/owner of %+v", r, l)
		}
		if !r.ExpiresAt.After(l.ExpiresAt) {
			t.Fatalf("renewed ExpiresAt %v not after %v", r.ExpiresAt, l.ExpiresAt)
		}
		time.Sleep(pastShort) // past the original expiry
		_, err = s.Acquire(ctx, "k", "bob", longTTL)
		wantErr(t, "acquire after renew", err, state.ErrLocked)
		// Renewing the renewed lease or the original (same token) works.
		if _, err := s.Renew(ctx, r, longTTL); err != nil {
			t.Fatalf("second Renew: %v", err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatalf("Release with the original lease value: %v", err)
		}
		mustAcquire(t, s, "k", "bob", longTTL)
	}},
	{"RenewAfterExpiryIsLost", func(t *testing.T, s state.Store) {
		l := mustAcquire(t, s, "k", "alice", shortTTL)
		time.Sleep(pastShort)
		_, err := s.Renew(ctxFor(t), l, longTTL)
		wantErr(t, "renew after expiry", err, state.ErrLockLost)
		mustAcquire(t, s, "k", "bob", longTTL)
	}},
	{"RenewAfterTakeoverIsLost", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		a := mustAcquire(t, s, "k", "alice", shortTTL)
		time.Sleep(pastShort)
		b := mustAcquire(t, s, "k", "bob", longTTL)
		_, err := s.Renew(ctx, a, longTTL)
		wantErr(t, "stale renew", err, state.ErrLockLost)
		if _, err := s.Renew(ctx, b, longTTL); err != nil {
			t.Fatalf("new holder's Renew: %v", err)
		}
	}},
	{"ReleaseByStaleLeaseIsLost", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		a := mustAcquire(t, s, "k", "alice", shortTTL)
		time.Sleep(pastShort)
		b := mustAcquire(t, s, "k", "bob", longTTL)
		wantErr(t, "stale release", s.Release(ctx, a), state.ErrLockLost)
		_, err := s.Acquire(ctx, "k", "carol", longTTL)
		wantErr(t, "acquire after stale release", err, state.ErrLocked)
		if err := s.Release(ctx, b); err != nil {
			t.Fatalf("new holder's Release: %v", err)
		}
		mustAcquire(t, s, "k", "carol", longTTL)
	}},
	{"ReleaseTwiceIsLost", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		l := mustAcquire(t, s, "k", "alice", longTTL)
		if err := s.Release(ctx, l); err != nil {
			t.Fatalf("Release: %v", err)
		}
		wantErr(t, "second release", s.Release(ctx, l), state.ErrLockLost)
	}},
	{"ReleaseAfterExpiryIsLost", func(t *testing.T, s state.Store) {
		l := mustAcquire(t, s, "k", "alice", shortTTL)
		time.Sleep(pastShort)
		wantErr(t, "release after expiry", s.Release(ctxFor(t), l), state.ErrLockLost)
	}},
	{"ForgedLeaseIsLost", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		l := mustAcquire(t, s, "k", "alice", longTTL)
		for _, forged := range []state.Lease{
			{Key: l.Key, Owner: "mallory", Token: l.Token, ExpiresAt: l.ExpiresAt},
			{Key: l.Key, Owner: l.Owner, Token: l.Token + 1, ExpiresAt: l.ExpiresAt},
			{Key: l.Key, Owner: l.Owner, Token: l.Token - 1, ExpiresAt: l.ExpiresAt},
		} {
			_, err := s.Renew(ctx, forged, longTTL)
			wantErr(t, fmt.Sprintf("renew %+v", forged), err, state.ErrLockLost)
			wantErr(t, fmt.Sprintf("release %+v", forged), s.Release(ctx, forged), state.ErrLockLost)
		}
		if _, err := s.Renew(ctx, l, longTTL); err != nil {
			t.Fatalf("real holder's Renew: %v", err)
		}
	}},
	{"ConcurrentAcquireHasOneWinner", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		for round := range 3 {
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				leases  = make(chan state.Lease, concurrency)
				errs    = make(chan error, concurrency)
				key     = fmt.Sprintf("race-%d", round)
				lockErr int
			)
			for i := range concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					l, err := s.Acquire(ctx, key, fmt.Sprintf("owner-%d", i), longTTL)
					if err != nil {
						errs <- err
						return
					}
					leases <- l
				}()
			}
			close(start)
			wg.Wait()
			close(leases)
			close(errs)
			for err := range errs {
				if !errors.Is(err, state.ErrLocked) {
					t.Fatalf("round %d: loser's error = %v, want ErrLocked", round, err)
				}
				lockErr++
			}
			if n := len(leases); n != 1 || lockErr != concurrency-1 {
				t.Fatalf("round %d: %d winners and %d ErrLocked, want 1 and %d", round, n, lockErr, concurrency-1)
			}
		}
	}},
	{"OddKeysAreDistinct", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		leases := map[string]state.Lease{}
		for _, k := range oddKeys {
			leases[k] = mustAcquire(t, s, k, "alice", longTTL)
		}
		for _, k := range oddKeys {
			_, err := s.Acquire(ctx, k, "bob", longTTL)
			wantErr(t, fmt.Sprintf("acquire %q again", k), err, state.ErrLocked)
			if err := s.Release(ctx, leases[k]); err != nil {
				t.Fatalf("Release(%q): %v", k, err)
			}
		}
	}},
	{"InvalidArguments", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		if _, err := s.Acquire(ctx, "", "alice", longTTL); err == nil {
			t.Error("Acquire with empty key succeeded")
		}
		if _, err := s.Acquire(ctx, "k", "", longTTL); err == nil {
			t.Error("Acquire with empty owner succeeded")
		}
		if _, err := s.Acquire(ctx, "k", "alice", 0); err == nil {
			t.Error("Acquire with zero ttl succeeded")
		}
		l := mustAcquire(t, s, "k", "alice", longTTL)
		if _, err := s.Renew(ctx, l, -time.Second); err == nil {
			t.Error("Renew with negative ttl succeeded")
		}
	}},
}

var cacheCases = []testCase{
	{"MissingIsNotFound", func(t *testing.T, s state.Store) {
		_, err := s.CacheGet(ctxFor(t), "missing")
		wantErr(t, "get missing", err, state.ErrNotFound)
	}},
	{"PutGetOverwrite", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		cacheRoundTrip(t, s, "k", []byte("first"))
		cacheRoundTrip(t, s, "k", []byte("second, longer value"))
		cacheRoundTrip(t, s, "bin", []byte{0, 1, 2, 0xff, 0})
		cacheRoundTrip(t, s, "empty", []byte{})
		if err := s.CachePut(ctx, "nil", nil, longTTL); err != nil {
			t.Fatalf("CachePut(nil): %v", err)
		}
		if v, err := s.CacheGet(ctx, "nil"); err != nil || len(v) != 0 {
			t.Fatalf("CacheGet after nil put = %q, %v; want empty", v, err)
		}
	}},
	{"TTLExpiry", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		if err := s.CachePut(ctx, "short", []byte("v"), shortTTL); err != nil {
			t.Fatalf("CachePut: %v", err)
		}
		if err := s.CachePut(ctx, "long", []byte("v"), longTTL); err != nil {
			t.Fatalf("CachePut: %v", err)
		}
		if _, err := s.CacheGet(ctx, "short"); err != nil {
			t.Fatalf("CacheGet before expiry: %v", err)
		}
		time.Sleep(pastShort)
		_, err := s.CacheGet(ctx, "short")
		wantErr(t, "get after expiry", err, state.ErrNotFound)
		if _, err := s.CacheGet(ctx, "long"); err != nil {
			t.Fatalf("CacheGet of live entry: %v", err)
		}
		// An expired key can be written again.
		cacheRoundTrip(t, s, "short", []byte("again"))
	}},
	{"OverwriteResetsTTL", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		if err := s.CachePut(ctx, "k", []byte("v1"), shortTTL); err != nil {
			t.Fatalf("CachePut: %v", err)
		}
		if err := s.CachePut(ctx, "k", []byte("v2"), longTTL); err != nil {
			t.Fatalf("CachePut: %v", err)
		}
		time.Sleep(pastShort)
		if v, err := s.CacheGet(ctx, "k"); err != nil || string(v) != "v2" {
			t.Fatalf("CacheGet = %q, %v; want v2", v, err)
		}
	}},
	{"Delete", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		cacheRoundTrip(t, s, "k", []byte("v"))
		if err := s.CacheDelete(ctx, "k"); err != nil {
			t.Fatalf("CacheDelete: %v", err)
		}
		_, err := s.CacheGet(ctx, "k")
		wantErr(t, "get after delete", err, state.ErrNotFound)
		if err := s.CacheDelete(ctx, "k"); err != nil {
			t.Fatalf("CacheDelete of a deleted key: %v", err)
		}
		if err := s.CacheDelete(ctx, "never-existed"); err != nil {
			t.Fatalf("CacheDelete of a missing key: %v", err)
		}
		cacheRoundTrip(t, s, "k", []byte("back"))
	}},
	{"OddKeysAreDistinct", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		for _, k := range oddKeys {
			if err := s.CachePut(ctx, k, []byte("value of "+k), longTTL); err != nil {
				t.Fatalf("CachePut(%q): %v", k, err)
			}
		}
		for _, k := range oddKeys {
			v, err := s.CacheGet(ctx, k)
			if err != nil || string(v) != "value of "+k {
				t.Fatalf("CacheGet(%q) = %q, %v", k, v, err)
			}
		}
	}},
	{"NamespacesAreSeparate", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		// The same key as a cache entry, a lease and a breaker scope.
		if err := s.CachePut(ctx, "shared", []byte("v"), longTTL); err != nil {
			t.Fatalf("CachePut: %v", err)
		}
		l := mustAcquire(t, s, "shared", "alice", longTTL)
		if _, err := s.BreakerReport(ctx, "shared", state.BreakerPolicy{Failures: 1}, false); err != nil {
			t.Fatalf("BreakerReport: %v", err)
		}
		if v, err := s.CacheGet(ctx, "shared"); err != nil || string(v) != "v" {
			t.Fatalf("CacheGet = %q, %v; want v", v, err)
		}
		if err := s.CacheDelete(ctx, "shared"); err != nil {
			t.Fatalf("CacheDelete: %v", err)
		}
		if _, err := s.Renew(ctx, l, longTTL); err != nil {
			t.Fatalf("Renew after deleting the cache entry: %v", err)
		}
	}},
	{"InvalidArguments", func(t *testing.T, s state.Store) {
		ctx := ctxFor(t)
		if err := s.CachePut(ctx, "", []byte("v"), longTTL); err == nil {
			t.Error("CachePut with empty key succeeded")
		}
		if err := s.CachePut(ctx, "k", []byte("v"), 0); err == nil {
			t.Error("CachePut with zero ttl succeeded")
		}
	}},
}

func cacheRoundTrip(t *testing.T, s state.Store, key string, value []byte) {
	t.Helper()
	ctx := ctxFor(t)
	if err := s.CachePut(ctx, key, value, longTTL); err != nil {
		t.Fatalf("CachePut(%q): %v", key, err)
	}
	got, err := s.CacheGet(ctx, key)
	if err != nil {
		t.Fatalf("CacheGet(%q): %v", key, err)
	}
	if !bytes.Equal(got, value) {
		t.Fatalf("CacheGet(%q) = %q, want %q", key, got, value)
	}
}

// newClock returns a controllable time source for breaker policies.
func newClock() *testkit.Clock {
	return testkit.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

func policy(c *testkit.Clock) state.BreakerPolicy {
	return state.BreakerPolicy{Failures: 3, Window: time.Minute, CoolDown: 30 * time.Second, Now: c.Now}
}

func report(t *testing.T, s state.Store, scope string, p state.BreakerPolicy, success bool) state.Breaker {
	t.Helper()
	b, err := s.BreakerReport(ctxFor(t), scope, p, success)
	if err != nil {
		t.Fatalf("BreakerReport(%q, %v): %v", scope, success, err)
	}
	return b
}

func allow(t *testing.T, s state.Store, scope string, p state.BreakerPolicy) state.Decision {
	t.Helper()
	d, err := s.BreakerAllow(ctxFor(t), scope, p)
	if err != nil {
		t.Fatalf("BreakerAllow(%q): %v", scope, err)
	}
	return d
}

func get(t *testing.T, s state.Store, scope string) state.Breaker {
	t.Helper()
	b, err := s.BreakerGet(ctxFor(t), scope)
	if err != nil {
		t.Fatalf("BreakerGet(%q): %v", scope, err)
	}
	return b
}

func list(t *testing.T, s state.Store) []state.ScopedBreaker {
	t.Helper()
	bs, err := s.BreakerList(ctxFor(t))
	if err != nil {
		t.Fatalf("BreakerList: %v", err)
	}
	return bs
}

// openBreaker reports p.Failures failures so the breaker opens at c.Now().
func openBreaker(t *testing.T, s state.Store, scope string, c *testkit.Clock, p state.BreakerPolicy) {
	t.Helper()
	for range p.Failures {
		report(t, s, scope, p, false)
	}
	if b := get(t, s, scope); b.State != state.BreakerOpen || !b.OpenedAt.Equal(c.Now()) {
		t.Fatalf("after %d failures: %+v, want open at %v", p.Failures, b, c.Now())
	}
}

// probing opens the breaker of scope "s" on a new clock, lets it cool
// down and takes its probe; it returns the clock and the policy.
func probing(t *testing.T, s state.Store) (*testkit.Clock, state.BreakerPolicy) {
	t.Helper()
	c := newClock()
	p := policy(c)
	openBreaker(t, s, "s", c, p)
	c.Advance(p.CoolDown)
	if d := allow(t, s, "s", p); !d.Probe {
		t.Fatalf("no probe after cool-down: %+v", d)
	}
	return c, p
}

var breakerCases = []testCase{
	{"UnknownIsClosed", func(t *testing.T, s state.Store) {
		c := newClock()
		if b := get(t, s, "unknown"); b.State != state.BreakerClosed || len(b.FailureTimes) != 0 {
			t.Fatalf("BreakerGet = %+v, want closed", b)
		}
		if d := allow(t, s, "unknown", policy(c)); !d.Allowed || d.Probe || d.State != state.BreakerClosed {
			t.Fatalf("BreakerAllow = %+v, want allowed, closed", d)
		}
		if b := report(t, s, "unknown", policy(c), true); b.State != state.BreakerClosed {
			t.Fatalf("BreakerReport(success) = %+v, want closed", b)
		}
	}},
	{"OpensAfterFailuresInWindow", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		for i := range p.Failures - 1 {
			b := report(t, s, "s", p, false)
			if b.State != state.BreakerClosed || len(b.FailureTimes) != i+1 {
				t.Fatalf("after %d failures: %+v, want closed with %d failures", i+1, b, i+1)
			}
			if d := allow(t, s, "s", p); !d.Allowed {
				t.Fatalf("refused while closed: %+v", d)
			}
			c.Advance(time.Second)
		}
		b := report(t, s, "s", p, false)
		if b.State != state.BreakerOpen || !b.OpenedAt.Equal(c.Now()) {
			t.Fatalf("after %d failures: %+v, want open at %v", p.Failures, b, c.Now())
		}
		if got := get(t, s, "s"); !got.Equal(b) {
			t.Fatalf("BreakerGet = %+v, want %+v", got, b)
		}
		c.Advance(p.CoolDown - time.Second)
		d := allow(t, s, "s", p)
		if d.Allowed || d.Probe || d.State != state.BreakerOpen || !d.RetryAt.Equal(b.OpenedAt.Add(p.CoolDown)) {
			t.Fatalf("BreakerAllow while open = %+v, want refused until %v", d, b.OpenedAt.Add(p.CoolDown))
		}
		if other := allow(t, s, "other-scope", p); !other.Allowed {
			t.Fatalf("another scope refused: %+v", other)
		}
	}},
	{"FailuresOutsideWindowDoNotCount", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		report(t, s, "s", p, false)
		report(t, s, "s", p, false)
		c.Advance(p.Window + time.Second)
		b := report(t, s, "s", p, false)
		if b.State != state.BreakerClosed || len(b.FailureTimes) != 1 {
			t.Fatalf("breaker = %+v, want closed with only the recent failure", b)
		}
	}},
	{"SuccessWhileClosedKeepsWindow", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		report(t, s, "s", p, false)
		report(t, s, "s", p, false)
		if b := report(t, s, "s", p, true); b.State != state.BreakerClosed || len(b.FailureTimes) != 2 {
			t.Fatalf("after a success: %+v, want closed with 2 failures", b)
		}
		if b := report(t, s, "s", p, false); b.State != state.BreakerOpen {
			t.Fatalf("third failure in window with a success between: %+v, want open", b)
		}
	}},
	{"HalfOpenHasOneProbeUnderConcurrency", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		openBreaker(t, s, "s", c, p)
		c.Advance(p.CoolDown)
		ctx := ctxFor(t)
		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			decisions = make(chan state.Decision, concurrency)
			errs      = make(chan error, concurrency)
		)
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := s.BreakerAllow(ctx, "s", p)
				if err != nil {
					errs <- err
					return
				}
				decisions <- d
			}()
		}
		close(start)
		wg.Wait()
		close(decisions)
		close(errs)
		for err := range errs {
			t.Fatalf("BreakerAllow: %v", err)
		}
		probes := 0
		for d := range decisions {
			switch {
			case d.Probe:
				probes++
				if !d.Allowed || d.State != state.BreakerHalfOpen {
					t.Errorf("probe decision = %+v, want allowed, half-open", d)
				}
			case d.Allowed:
				t.Errorf("non-probe caller allowed: %+v", d)
			case d.State != state.BreakerHalfOpen || !d.RetryAt.Equal(c.Now().Add(p.CoolDown)):
				t.Errorf("refused decision = %+v, want half-open, retry at %v", d, c.Now().Add(p.CoolDown))
			}
		}
		if probes != 1 {
			t.Fatalf("%d probes handed out, want exactly 1", probes)
		}
		if b := get(t, s, "s"); b.State != state.BreakerHalfOpen || !b.ProbeStartedAt.Equal(c.Now()) {
			t.Fatalf("BreakerGet = %+v, want half-open, probe started %v", b, c.Now())
		}
	}},
	{"ProbeSuccessCloses", func(t *testing.T, s state.Store) {
		c, p := probing(t, s)
		c.Advance(time.Second)
		b := report(t, s, "s", p, true)
		if b.State != state.BreakerClosed || len(b.FailureTimes) != 0 {
			t.Fatalf("after probe success: %+v, want closed with no failures", b)
		}
		if d := allow(t, s, "s", p); !d.Allowed || d.Probe || d.State != state.BreakerClosed {
			t.Fatalf("BreakerAllow after close = %+v, want allowed", d)
		}
		// Closing starts counting afresh.
		if b := report(t, s, "s", p, false); b.State != state.BreakerClosed || len(b.FailureTimes) != 1 {
			t.Fatalf("first failure after close: %+v", b)
		}
	}},
	{"ProbeFailureReopens", func(t *testing.T, s state.Store) {
		c, p := probing(t, s)
		c.Advance(5 * time.Second)
		reopened := c.Now()
		if b := report(t, s, "s", p, false); b.State != state.BreakerOpen || !b.OpenedAt.Equal(reopened) {
			t.Fatalf("after probe failure: %+v, want open at %v", b, reopened)
		}
		c.Advance(p.CoolDown - time.Second)
		if d := allow(t, s, "s", p); d.Allowed || d.State != state.BreakerOpen || !d.RetryAt.Equal(reopened.Add(p.CoolDown)) {
			t.Fatalf("BreakerAllow after reopen = %+v, want refused until %v", d, reopened.Add(p.CoolDown))
		}
		c.Advance(time.Second)
		if d := allow(t, s, "s", p); !d.Probe {
			t.Fatalf("no probe after the second cool-down: %+v", d)
		}
	}},
	{"LostProbeIsReissued", func(t *testing.T, s state.Store) {
		c, p := probing(t, s)
		c.Advance(p.CoolDown - time.Second)
		if d := allow(t, s, "s", p); d.Allowed {
			t.Fatalf("second caller allowed while the probe runs: %+v", d)
		}
		c.Advance(time.Second)
		if d := allow(t, s, "s", p); !d.Probe || !d.Allowed {
			t.Fatalf("probe not re-issued after it went unreported: %+v", d)
		}
	}},
	{"ConcurrentReportsAreAtomic", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		p.Failures = 1000
		ctx := ctxFor(t)
		var wg sync.WaitGroup
		errs := make(chan error, concurrency)
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.BreakerReport(ctx, "s", p, false); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("BreakerReport: %v", err)
		}
		if b := get(t, s, "s"); len(b.FailureTimes) != concurrency {
			t.Fatalf("%d failures recorded, want %d (lost updates)", len(b.FailureTimes), concurrency)
		}
	}},
	{"ListShowsWhatIsOnRecord", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		if got := list(t, s); len(got) != 0 {
			t.Fatalf("BreakerList of an empty store = %+v, want none", got)
		}
		long := strings.Repeat("gate:long/", 40) // stored by its digest in KV
		openBreaker(t, s, "repo:r1", c, p)
		openBreaker(t, s, long, c, p)
		report(t, s, "agent:claude:opus", p, false)
		report(t, s, "agent:idle", p, true) // idle: not stored, not listed
		got := list(t, s)
		var scopes []string
		for _, b := range got {
			scopes = append(scopes, b.Scope)
		}
		if want := []string{"agent:claude:opus", long, "repo:r1"}; strings.Join(scopes, " ") != strings.Join(want, " ") {
			t.Fatalf("BreakerList scopes = %q, want %q (sorted, idle left out)", scopes, want)
		}
		for _, b := range got {
			if want := get(t, s, b.Scope); !b.Breaker.Equal(want) {
				t.Errorf("listed %s = %+v, BreakerGet = %+v", b.Scope, b.Breaker, want)
			}
		}
		if got[0].State != state.BreakerClosed || len(got[0].FailureTimes) != 1 ||
			got[2].State != state.BreakerOpen || !got[2].OpenedAt.Equal(c.Now()) {
			t.Fatalf("BreakerList = %+v", got)
		}
	}},
	{"ResetCloses", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		ctx := ctxFor(t)
		openBreaker(t, s, "s", c, p)
		report(t, s, "other", p, false)
		before, err := s.BreakerReset(ctx, "s")
		if err != nil {
			t.Fatalf("BreakerReset: %v", err)
		}
		if before.State != state.BreakerOpen || !before.OpenedAt.Equal(c.Now()) {
			t.Fatalf("BreakerReset returned %+v, want the open breaker it reset", before)
		}
		if b := get(t, s, "s"); !b.Idle() {
			t.Fatalf("after reset: %+v, want closed with nothing on record", b)
		}
		if d := allow(t, s, "s", p); !d.Allowed || d.Probe || d.State != state.BreakerClosed {
			t.Fatalf("BreakerAllow after reset = %+v, want allowed, closed", d)
		}
		if got := list(t, s); len(got) != 1 || got[0].Scope != "other" {
			t.Fatalf("BreakerList after reset = %+v, want only the other scope", got)
		}
		// Counting starts afresh: it takes all the failures again to open.
		for range p.Failures - 1 {
			report(t, s, "s", p, false)
		}
		if b := get(t, s, "s"); b.State != state.BreakerClosed {
			t.Fatalf("after %d failures since the reset: %+v, want closed", p.Failures-1, b)
		}
		// A half-open breaker resets too, and an unknown one is no error.
		if _, err := s.BreakerReset(ctx, "s"); err != nil {
			t.Fatalf("BreakerReset: %v", err)
		}
		_, p2 := probing(t, s)
		if before, err := s.BreakerReset(ctx, "s"); err != nil || before.State != state.BreakerHalfOpen {
			t.Fatalf("BreakerReset of a half-open breaker = %+v, %v", before, err)
		}
		if d := allow(t, s, "s", p2); !d.Allowed || d.Probe {
			t.Fatalf("BreakerAllow after resetting a half-open breaker = %+v", d)
		}
		if before, err := s.BreakerReset(ctx, "never-seen"); err != nil || !before.Idle() {
			t.Fatalf("BreakerReset of an unknown scope = %+v, %v; want closed, no error", before, err)
		}
		if _, err := s.BreakerReset(ctx, ""); err == nil {
			t.Error("BreakerReset with an empty scope succeeded")
		}
	}},
	{"OddScopesAreDistinct", func(t *testing.T, s state.Store) {
		c := newClock()
		p := policy(c)
		p.Failures = 1
		for i, k := range oddKeys {
			if i%2 == 0 {
				report(t, s, k, p, false)
			}
		}
		for i, k := range oddKeys {
			want := state.BreakerClosed
			if i%2 == 0 {
				want = state.BreakerOpen
			}
			if b := get(t, s, k); b.State != want {
				t.Fatalf("scope %q: %+v, want %s", k, b, want)
			}
		}
	}},
}
