package jobrun

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

var lockSeq atomic.Int64

// lockStores opens each real backend of the state store.
func lockStores() map[string]func(t *testing.T) state.Store {
	return map[string]func(t *testing.T) state.Store{
		"kvstate": func(t *testing.T) state.Store {
			s, err := kvstate.New(context.Background(), testkit.JetStream(t, testkit.NATS(t)))
			if err != nil {
				t.Fatalf("kvstate: %v", err)
			}
			return s
		},
		"redisstate": func(t *testing.T) state.Store {
			prefix := fmt.Sprintf("filelocks:%d:%d:", time.Now().UnixNano(), lockSeq.Add(1))
			s, err := redisstate.Open(context.Background(), testkit.Redis(t), redisstate.WithPrefix(prefix))
			if err != nil {
				t.Fatalf("redisstate: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// DAG-07: jobs whose lock sets share a key never hold them at once; a job
// waits for the other's release (it never fails for it), takes them in
// the end from a holder whose lease lapsed, and one whose set shares no
// key takes its own alongside.
func TestHoldFileLocks(t *testing.T) {
	t.Parallel()
	const ttl = 1200 * time.Millisecond
	log := slog.New(slog.DiscardHandler)
	for name, open := range lockStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			ctx := testkit.Context(t, time.Minute)
			a, actx, err := HoldFileLocks(ctx, store, []string{"files/wf/a", "files/wf/b"}, "host-1 job-a@1", ttl, 0, log, nil)
			if err != nil {
				t.Fatal(err)
			}
			// c's set shares no key with a's: it is taken at once.
			c, _, err := HoldFileLocks(ctx, store, []string{"files/wf/c"}, "host-1 job-c@1", ttl, 0, log,
				func(key string) { t.Errorf("c waited for %s", key) })
			if err != nil {
				t.Fatal(err)
			}
			c.Release()

			// b's set shares files/wf/b: it waits until a releases.
			var mu sync.Mutex
			var order []string
			note := func(s string) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, s)
			}
			waited := make(chan string, 1)
			got := make(chan *FileLocks, 1)
			go func() {
				b, _, err := HoldFileLocks(ctx, store, []string{"files/wf/b", "files/wf/x"}, "host-2 job-b@1", ttl, 200*time.Millisecond, log,
					func(key string) { waited <- key })
				if err != nil {
					t.Error(err)
				}
				note("b took its locks")
				got <- b
			}()
			if key := testkit.Receive(t, waited, 30*time.Second, "b waiting"); key != "files/wf/b" {
				t.Errorf("b waited for %s", key)
			}
			if actx.Err() != nil {
				t.Fatal("a's locks lost while b waited")
			}
			note("a releases")
			a.Release()
			b := testkit.Receive(t, got, 30*time.Second, "b's locks")
			if fmt.Sprint(order) != "[a releases b took its locks]" {
				t.Errorf("order %v", order)
			}
			b.Release()

			// A holder whose lease lapsed (it stopped renewing) loses it.
			if _, err := store.Acquire(ctx, "files/wf/stale", "dead-host job@7", 300*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			s, _, err := HoldFileLocks(ctx, store, []string{"files/wf/stale"}, "host-3 job-s@1", ttl, 200*time.Millisecond, log, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.Release()
		})
	}
}

// A file lock lost while held stops the job: its context ends with
// lease.ErrLost, as when the job's own lease is lost.
func TestFileLockLostStopsTheJob(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond
	for name, open := range lockStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			ctx := testkit.Context(t, time.Minute)
			owner := "host-1 job@1"
			fl, jctx, err := HoldFileLocks(ctx, store, []string{"files/wf/lost"}, owner, ttl, 0, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer fl.Release()
			// Someone releases it underneath (as an expiry and a takeover would).
			l := state.Lease{Key: "files/wf/lost", Owner: owner, Token: fl.held[0].Token()}
			if err := store.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
			if !doneWithin(jctx, 10*time.Second) || !lease.Lost(jctx) {
				t.Fatalf("job context not cancelled with ErrLost: %v", context.Cause(jctx))
			}
		})
	}
}

// Run takes the job's file locks before it reports the job started: a
// job whose lock another job holds reports nothing until that job lets
// go, then runs with its locks held, and gives them up when it ends.
func TestRunHoldsFileLocks(t *testing.T) {
	t.Parallel()
	e := newRunEnvAckWait(t, 10*time.Second)
	e.deps.FileLockWait = 200 * time.Millisecond
	m := e.meta()
	m.FileLocks = []string{protocol.FileLockKey(m.WorkflowID, "node"), protocol.FileLockKey(m.WorkflowID, "other")}
	ctx := testkit.Context(t, time.Minute)
	other, err := e.Store.Acquire(ctx, m.FileLocks[1], "other-runner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan bus.Disposition, 1)
	go func() {
		done <- Run(context.Background(), e.deps, nil, &bus.Delivery{Number: 1, MaxDeliver: 3}, m,
			func(ctx context.Context, token uint64) Outcome {
				// Both locks are held while the work runs.
				for _, k := range m.FileLocks {
					if _, err := e.Store.Acquire(ctx, k, "intruder", time.Second); err == nil {
						t.Errorf("lock %s free while the job runs", k)
					}
				}
				return Outcome{Report: result(m, token, protocol.GatePassed, "")}
			}, e.errReport(m))
	}()
	e.NoReports(500 * time.Millisecond)
	if err := e.Store.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	s := e.expectStarted(m, 1)
	e.expectResult(m, s.LeaseToken, protocol.GatePassed)
	if d := testkit.Receive(t, done, 30*time.Second, "disposition"); d.String() != "ack" {
		t.Fatalf("disposition %s", d)
	}
	for _, k := range m.FileLocks {
		l, err := e.Store.Acquire(ctx, k, "checker", time.Second)
		if err != nil {
			t.Fatalf("lock %s not released: %v", k, err)
		}
		_ = e.Store.Release(ctx, l)
	}
}

// Jobs run through Run at once whose lock sets pairwise share a key never
// do their work at the same time, and each runs in the end.
func TestRunFileLockedJobsNeverOverlap(t *testing.T) {
	t.Parallel()
	e := newRunEnvAckWait(t, 10*time.Second)
	e.deps.FileLockWait = 100 * time.Millisecond
	base := e.meta()
	key := func(n string) string { return protocol.FileLockKey(base.WorkflowID, n) }
	sets := [][]string{{key("a"), key("b")}, {key("b"), key("c")}, {key("a"), key("c")}}
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for i, set := range sets {
		m := e.meta()
		m.FileLocks = set
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := Run(context.Background(), e.deps, nil, &bus.Delivery{Number: 1, MaxDeliver: 3}, m,
				func(ctx context.Context, token uint64) Outcome {
					n := inside.Add(1)
					for {
						old := most.Load()
						if n <= old || most.CompareAndSwap(old, n) {
							break
						}
					}
					time.Sleep(100 * time.Millisecond) // a while inside, for another job to try its luck
					inside.Add(-1)
					return Outcome{Report: result(m, token, protocol.GatePassed, fmt.Sprint(i))}
				}, e.errReport(m))
			if d.String() != "ack" {
				t.Errorf("job %d: disposition %s", i, d)
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d jobs sharing lock keys worked at once", most.Load())
	}
	// Every job reported started and its result.
	results := 0
	for range 2 * len(sets) {
		if e.next().Type == protocol.ReportGateResult {
			results++
		}
	}
	if results != len(sets) {
		t.Fatalf("%d results, want %d", results, len(sets))
	}
}

// unreachable is a store whose renewals fail, once cut, as if it could not
// be reached.
type unreachable struct {
	state.Locks
	cut atomic.Bool
}

func (u *unreachable) Renew(ctx context.Context, l state.Lease, ttl time.Duration) (state.Lease, error) {
	if u.cut.Load() {
		return state.Lease{}, fmt.Errorf("test: store unreachable: %w", state.ErrUnavailable)
	}
	return u.Locks.Renew(ctx, l, ttl)
}

// A holder cut off from the store stops its job (lease.ErrLost) instead
// of carrying on: by the time its locks lapse and another job can take
// them, its agent is no longer running.
func TestFileLockHolderCutOffStops(t *testing.T) {
	t.Parallel()
	for name, open := range lockStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &unreachable{Locks: open(t)}
			ctx := testkit.Context(t, time.Minute)
			fl, jctx, err := HoldFileLocks(ctx, store, []string{"files/wf/cut"}, "host-1 job@1", 900*time.Millisecond, 0,
				slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer fl.Release()
			store.cut.Store(true)
			if !doneWithin(jctx, 10*time.Second) || !lease.Lost(jctx) {
				t.Fatalf("job context not cancelled with ErrLost: %v", context.Cause(jctx))
			}
		})
	}
}
