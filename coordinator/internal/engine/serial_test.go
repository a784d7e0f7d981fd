package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Functions of one key run one at a time in order; a slow key does not
// hold up another; after Close nothing more is queued.
func TestSerialOrdersPerKey(t *testing.T) {
	s := newSerial()
	var mu sync.Mutex
	got := map[string][]int{}
	release := make(chan struct{})
	s.Go("slow", func() { <-release })
	for i := 0; i < 50; i++ {
		for _, k := range []string{"a", "b", "slow"} {
			s.Go(k, func() {
				mu.Lock()
				got[k] = append(got[k], i)
				mu.Unlock()
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// "a" finishes while "slow" is blocked.
	if err := s.Do(ctx, "a", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got["a"]) != 50 || len(got["slow"]) != 0 {
		t.Fatalf("a ran %d, slow ran %d before slow's first function returned", len(got["a"]), len(got["slow"]))
	}
	mu.Unlock()
	close(release)
	s.Close()
	for _, k := range []string{"a", "b", "slow"} {
		for i, v := range got[k] {
			if v != i {
				t.Fatalf("key %s ran %v, out of order", k, got[k])
			}
		}
	}
	if s.Go("a", func() {}) {
		t.Error("Go after Close queued a function")
	}
	if err := s.Do(ctx, "a", func() error { return nil }); !errors.Is(err, errStopped) {
		t.Errorf("Do after Close: %v", err)
	}
}
