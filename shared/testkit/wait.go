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
