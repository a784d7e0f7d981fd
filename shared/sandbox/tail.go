package sandbox

import (
	"io"
	"sync"
)

// TailBuffer is an io.Writer that keeps only the last Limit bytes written to
// it, in a fixed-size ring, and remembers whether anything was dropped. It
// never returns a write error, so it can sit behind a pipe without stalling
// the writer. It is safe for concurrent use.
type TailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte // grows up to limit, then used as a ring
	start int    // index of the oldest byte once buf is full
	total int64  // bytes ever written
}

// NewTailBuffer returns a TailBuffer keeping the last limit bytes; a limit
// of zero or less means DefaultOutputLimit.
func NewTailBuffer(limit int) *TailBuffer {
	if limit <= 0 {
		limit = DefaultOutputLimit
	}
	return &TailBuffer{limit: limit}
}

// Write appends p, discarding the oldest bytes beyond the limit. It always
// reports len(p) bytes written and a nil error.
func (b *TailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(n)
	if n >= b.limit {
		// p alone fills the buffer: keep its tail and restart the ring.
		b.buf = append(b.buf[:0], p[n-b.limit:]...)
		b.start = 0
		return n, nil
	}
	if room := b.limit - len(b.buf); room > 0 {
		k := min(room, len(p))
		b.buf = append(b.buf, p[:k]...)
		p = p[k:]
	}
	// The buffer is full: overwrite the oldest bytes, wrapping around.
	for len(p) > 0 {
		k := copy(b.buf[b.start:], p)
		p = p[k:]
		b.start = (b.start + k) % b.limit
	}
	return n, nil
}

// Bytes returns a copy of the retained bytes, oldest first.
func (b *TailBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]byte, len(b.buf))
	k := copy(out, b.buf[b.start:])
	copy(out[k:], b.buf[:b.start])
	return out
}

// Len returns the number of retained bytes (at most the limit).
func (b *TailBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

// Total returns the number of bytes ever written, retained or not.
func (b *TailBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Truncated reports whether bytes were dropped to respect the limit.
func (b *TailBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > int64(len(b.buf))
}

// teeWriter feeds a TailBuffer and, until it fails, an optional sink.
type teeWriter struct {
	tail    *TailBuffer
	sink    io.Writer
	mu      *sync.Mutex // serializes writes to sinks
	sinkErr error
}

func (w *teeWriter) Write(p []byte) (int, error) {
	_, _ = w.tail.Write(p)
	if w.sink != nil && w.sinkErr == nil {
		w.mu.Lock()
		_, w.sinkErr = w.sink.Write(p)
		w.mu.Unlock()
	}
	return len(p), nil
}
