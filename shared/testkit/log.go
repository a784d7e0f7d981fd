package testkit

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLog sends log lines to t.Log until the test's cleanup ends it.
type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Logger returns a text logger at level Info that writes each line to
// t.Log until the test's cleanup, and discards lines logged after it (by
// goroutines that outlive the test).
func Logger(t testing.TB) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Buffer is a bytes.Buffer safe for concurrent writers: a log destination
// or a live output stream a test reads once the writers are done, or
// while they run. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// LogRecord returns the first record of log, a JSON log (an object a line,
// as slog.JSONHandler writes), whose msg is msg and whose attribute key is
// value; it fails t when there is none or a line is not JSON.
func LogRecord(t testing.TB, log, msg, key, value string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if l == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if r["msg"] == msg && r[key] == value {
			return r
		}
	}
	t.Fatalf("no record %q with %s=%s in the log:\n%s", msg, key, value, log)
	return nil
}
