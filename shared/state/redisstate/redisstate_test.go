package redisstate_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/state/statetest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

var prefixSeq atomic.Int64

// uniquePrefix keeps tests sharing one server (SUPERVISOR_TEST_REDIS_URL)
// apart.
func uniquePrefix() string {
	return fmt.Sprintf("suptest:%d:%d:", time.Now().UnixNano(), prefixSeq.Add(1))
}

func TestConformance(t *testing.T) {
	t.Parallel()
	url := testkit.Redis(t)
	statetest.Run(t, func(t *testing.T) state.Store {
		s, err := redisstate.Open(context.Background(), url, redisstate.WithPrefix(uniquePrefix()))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

// Every key the store writes is under its prefix.
func TestPrefix(t *testing.T) {
	url := testkit.Redis(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	prefix := uniquePrefix()
	s, err := redisstate.Open(context.Background(), url, redisstate.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if s.Backend() != "redis" {
		t.Fatalf("Backend = %q", s.Backend())
	}
	ctx := context.Background()
	if err := s.CachePut(ctx, "k", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := client.Get(ctx, prefix+"cache:k").Result(); err != nil || got != "v" {
		t.Fatalf("raw key = %q, %v; want the value under the prefix", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	url := "redis://:s3cret@" + addr + "/0"
	start := time.Now()
	s, err := redisstate.Open(context.Background(), url)
	elapsed := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatal("Open of an unreachable server succeeded")
	}
	if !errors.Is(err, state.ErrUnavailable) {
		t.Errorf("err = %v, want it to wrap state.ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("err = %v, want it to name %s", err, addr)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("err = %v leaks the password", err)
	}
	t.Logf("error: %v", err)
	if limit := redisstate.DefaultOpenTimeout + 2*time.Second; elapsed > limit {
		t.Errorf("Open took %s, want at most %s", elapsed, limit)
	}
}

func TestOpenHonoursContext(t *testing.T) {
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = redisstate.Open(ctx, fmt.Sprintf("redis://127.0.0.1:%d", port))
	if !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Fatalf("Open ignored its context: took %s", elapsed)
	}
}

func TestOpenInvalidURL(t *testing.T) {
	_, err := redisstate.Open(context.Background(), "http://user:s3cret@localhost:6379")
	if err == nil {
		t.Fatal("Open accepted an http:// URL")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v leaks the password", err)
	}
	if !strings.Contains(err.Error(), "localhost:6379") {
		t.Fatalf("err = %v, want it to name the URL", err)
	}
}

func TestUnavailableAfterClose(t *testing.T) {
	s, err := redisstate.Open(context.Background(), testkit.Redis(t), redisstate.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.CacheGet(context.Background(), "k")
	if !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("CacheGet on a closed store: err = %v, want ErrUnavailable", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://localhost:6379/0":           "redis://localhost:6379/0",
		"redis://:pw@localhost:6379/0":       "redis://:xxxxx@localhost:6379/0",
		"rediss://user:pw@host:6380":         "rediss://user:xxxxx@host:6380",
		"redis://host:6379?password=pw&db=1": "redis://host:6379?db=1&password=xxxxx",
		"redis://user:p%zzw@host:6379":       "redis://xxxxx@host:6379",
		"unix:///run/redis.sock":             "unix:///run/redis.sock",
	} {
		if got := redisstate.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
