package testkit

import (
	"context"
	"testing"
	"time"
)

// Context returns a context that times out after d and is cancelled when
// the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor calls cond every interval until it holds, and fails the test if
// it does not within timeout; what names the awaited condition in the
// failure.
func WaitFor(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

// Receive returns the next value from ch, failing the test with "what
// within d" if none arrives within d (what says what did not happen).
func Receive[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s within %s", what, d)
		panic("unreachable")
	}
}
