package sandbox

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name      string
		limit     int
		writes    []string
		want      string
		truncated bool
	}{
		{"empty", 8, nil, "", false},
		{"under limit", 8, []string{"abc", "de"}, "abcde", false},
		{"exactly limit", 8, []string{"abcd", "efgh"}, "abcdefgh", false},
		{"overflow across writes", 8, []string{"abcdef", "ghijk"}, "defghijk", true},
		{"single write over limit", 4, []string{"abcdefgh"}, "efgh", true},
		{"single write of limit after data", 4, []string{"xy", "abcd"}, "abcd", true},
		{"many small wraps", 3, []string{"a", "b", "c", "d", "e", "f", "g"}, "efg", true},
		{"wrap then big write", 5, []string{"abc", "def", "0123456789"}, "56789", true},
		{"empty writes", 4, []string{"", "ab", "", "cd", ""}, "abcd", false},
		{"limit one", 1, []string{"abc", "d"}, "d", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewTailBuffer(tt.limit)
			var total int
			for _, w := range tt.writes {
				n, err := b.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
				total += len(w)
			}
			if got := string(b.Bytes()); got != tt.want {
				t.Errorf("Bytes() = %q, want %q", got, tt.want)
			}
			if got := b.Truncated(); got != tt.truncated {
				t.Errorf("Truncated() = %v, want %v", got, tt.truncated)
			}
			if got := b.Len(); got != len(tt.want) {
				t.Errorf("Len() = %d, want %d", got, len(tt.want))
			}
			if got := b.Total(); got != int64(total) {
				t.Errorf("Total() = %d, want %d", got, total)
			}
		})
	}
}

func TestTailBufferDefaultLimit(t *testing.T) {
	b := NewTailBuffer(0)
	data := bytes.Repeat([]byte("x"), DefaultOutputLimit+10)
	_, _ = b.Write(data)
	if b.Len() != DefaultOutputLimit || !b.Truncated() {
		t.Fatalf("Len() = %d, Truncated() = %v; want %d, true", b.Len(), b.Truncated(), DefaultOutputLimit)
	}
}

// TestTailBufferRandom compares against the obvious implementation.
func TestTailBufferRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		limit := 1 + rng.IntN(40)
		b := NewTailBuffer(limit)
		var all []byte
		for range rng.IntN(30) {
			p := make([]byte, rng.IntN(2*limit))
			for i := range p {
				p[i] = byte('a' + rng.IntN(26))
			}
			_, _ = b.Write(p)
			all = append(all, p...)
		}
		want := all
		if len(want) > limit {
			want = want[len(want)-limit:]
		}
		if got := b.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("iteration %d (limit %d): Bytes() = %q, want %q", iter, limit, got, want)
		}
		if got := b.Truncated(); got != (len(all) > limit) {
			t.Fatalf("iteration %d: Truncated() = %v with %d bytes written, limit %d", iter, got, len(all), limit)
		}
	}
}

func TestTailBufferConcurrent(t *testing.T) {
	b := NewTailBuffer(100)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("0123456789"))
				_ = b.Bytes()
			}
		})
	}
	wg.Wait()
	if got := string(b.Bytes()); got != strings.Repeat("0123456789", 10) {
		t.Fatalf("Bytes() = %q", got)
	}
}
