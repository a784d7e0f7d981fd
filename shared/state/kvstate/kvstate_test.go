package kvstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/statetest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

func connect(t *testing.T) jetstream.JetStream {
	t.Helper()
	return testkit.JetStream(t, testkit.NATS(t))
}

func TestConformance(t *testing.T) {
	js := connect(t)
	var seq atomic.Int64
	statetest.Run(t, func(t *testing.T) state.Store {
		bucket := fmt.Sprintf("sup-state-test-%d", seq.Add(1))
		s, err := New(context.Background(), js, WithBucket(bucket))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

func TestDefaultBucket(t *testing.T) {
	js := connect(t)
	ctx := context.Background()
	s, err := New(ctx, js)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if s.Backend() != "jetstream-kv" {
		t.Fatalf("Backend = %q", s.Backend())
	}
	kv, err := js.KeyValue(ctx, protocol.BucketState)
	if err != nil {
		t.Fatalf("bucket %s: %v", protocol.BucketState, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 {
		t.Errorf("history = %d, want 1", st.History())
	}
	if got := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Storage; got != jetstream.FileStorage {
		t.Errorf("storage = %v, want file", got)
	}
	// New again on the existing bucket works.
	if _, err := New(ctx, js); err != nil {
		t.Fatalf("second New: %v", err)
	}
}

func TestEncodeKey(t *testing.T) {
	long := strings.Repeat("x", maxRawKey+1)
	for in, want := range map[string]string{
		"abc-DEF_123":           "r.abc-DEF_123",
		"lease:wf-abc.node1.a1": "b.bGVhc2U6d2YtYWJjLm5vZGUxLmEx",
		"a.b":                   "b.YS5i",
		"YS5i":                  "r.YS5i",
	} {
		if got := encodeKey(in); got != want {
			t.Errorf("encodeKey(%q) = %q, want %q", in, got, want)
		}
	}
	if got := encodeKey(long); !strings.HasPrefix(got, "h.") || len(got) != 66 {
		t.Errorf("encodeKey(long) = %q, want h.<sha256>", got)
	}
}

func TestUnavailableAfterDisconnect(t *testing.T) {
	js := connect(t)
	ctx := context.Background()
	s, err := New(ctx, js, WithBucket("unavail"))
	if err != nil {
		t.Fatal(err)
	}
	js.Conn().Close()
	_, err = s.CacheGet(ctx, "k")
	t.Logf("error: %v", err)
	if !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("CacheGet on a closed connection: err = %v, want ErrUnavailable", err)
	}
	if _, err := New(ctx, js, WithBucket("other")); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("New on a closed connection: err = %v, want ErrUnavailable", err)
	}
}

func TestLeaseTokenIsAcquisitionRevision(t *testing.T) {
	js := connect(t)
	ctx := context.Background()
	s, err := New(ctx, js, WithBucket("tokens"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "k", "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Unrelated writes advance the bucket's revisions.
	for i := range 3 {
		if err := s.CachePut(ctx, fmt.Sprint(i), []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Renew(ctx, l, time.Minute)
	if err != nil || r.Token != l.Token {
		t.Fatalf("Renew = %+v, %v; want token %d", r, err, l.Token)
	}
	e, err := s.kv.Get(ctx, lockKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() == l.Token {
		t.Fatalf("renew did not write a new revision")
	}
	if err := s.Release(ctx, r); err != nil {
		t.Fatalf("Release after renew: %v", err)
	}
	l2, err := s.Acquire(ctx, "k", "bob", time.Minute)
	if err != nil || l2.Token <= e.Revision() {
		t.Fatalf("re-acquire = %+v, %v; want token above %d", l2, err, e.Revision())
	}
}

// NextEpoch counts from 1 and hands concurrent callers distinct values.
func TestNextEpochDistinct(t *testing.T) {
	t.Parallel()
	s, err := New(context.Background(), connect(t), WithBucket("epochs-test"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	got := make(chan uint64, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			e, err := s.NextEpoch(context.Background(), "redis:sup:")
			got <- e
			errs <- err
		}()
	}
	seen := map[uint64]bool{}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("NextEpoch: %v", err)
		}
		seen[<-got] = true
	}
	for e := uint64(1); e <= n; e++ {
		if !seen[e] {
			t.Fatalf("epochs %v: %d missing; want 1..%d each once", seen, e, n)
		}
	}
	if e, err := s.NextEpoch(context.Background(), "other"); err != nil || e != 1 {
		t.Fatalf("another counter's first epoch = %d, %v; want 1", e, err)
	}
}
