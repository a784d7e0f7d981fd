package redisstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/state/statetest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// epochStore opens a Redis store at url drawing its epochs from a
// JetStream KV bucket on a real NATS server reached through js.
func epochStore(t *testing.T, url string, epochs redisstate.EpochSource, opts ...redisstate.Option) *redisstate.Store {
	t.Helper()
	s, err := redisstate.Open(context.Background(), url, append([]redisstate.Option{redisstate.WithEpochs(epochs)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func kvEpochs(t *testing.T) *kvstate.Store {
	t.Helper()
	kv, err := kvstate.New(context.Background(), testkit.JetStream(t, testkit.NATS(t)))
	if err != nil {
		t.Fatalf("kvstate.New: %v", err)
	}
	return kv
}

// flush loses all of the Redis server's data, as a restart without
// persistence does.
func flush(t *testing.T, url string) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
}

// takeAndRelease acquires key and gives it back, returning the token.
func takeAndRelease(t *testing.T, s state.Locks, key, owner string) uint64 {
	t.Helper()
	ctx := context.Background()
	l, err := s.Acquire(ctx, key, owner, time.Minute)
	if err != nil {
		t.Fatalf("Acquire %s: %v", key, err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatalf("Release %s: %v", key, err)
	}
	return l.Token
}

// The store with epochs still meets every promise of state.Store.
func TestConformanceWithEpochs(t *testing.T) {
	t.Parallel()
	url := testkit.Redis(t)
	epochs := kvEpochs(t)
	statetest.Run(t, func(t *testing.T) state.Store {
		return epochStore(t, url, epochs, redisstate.WithPrefix(uniquePrefix()))
	})
}

// Redis losing its data does not restart the fencing tokens: every token
// after each loss, from any process, exceeds every token before it.
func TestTokensSurviveDataLoss(t *testing.T) {
	url := testkit.PrivateRedis(t)
	epochs := kvEpochs(t)
	a := epochStore(t, url, epochs)
	b := epochStore(t, url, epochs) // another process on the same servers
	const key = "job/wf-1/n1"
	var highest uint64
	for i := range 3 {
		highest = takeAndRelease(t, a, key, "worker-a")
		if i == 0 && highest != 1 {
			t.Fatalf("first token ever = %d, want 1 (epochs leave a fresh store's numbering alone)", highest)
		}
	}
	for loss := 1; loss <= 2; loss++ {
		flush(t, url)
		got := takeAndRelease(t, b, key, "worker-b")
		if got <= highest {
			t.Fatalf("after data loss %d the token is %d, not above %d issued before it", loss, got, highest)
		}
		again := takeAndRelease(t, a, key, "worker-a")
		if again <= got {
			t.Fatalf("after data loss %d the next token is %d, not above %d", loss, again, got)
		}
		highest = again
		t.Logf("data loss %d: tokens continue at %d", loss, got)
	}
}

// Without epochs the same loss restarts the tokens at 1: what the epochs
// prevent, and proof that the flush above is a real loss.
func TestTokensRestartWithoutEpochs(t *testing.T) {
	url := testkit.PrivateRedis(t)
	s, err := redisstate.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 {
		takeAndRelease(t, s, "k", "o")
	}
	flush(t, url)
	if got := takeAndRelease(t, s, "k", "o"); got != 1 {
		t.Fatalf("token after the loss = %d, want 1", got)
	}
}
