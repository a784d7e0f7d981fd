package sandbox

import (
	"os"
	"testing"
)

// BenchmarkAllProcs is what a sweep reads of the host per round.
func BenchmarkAllProcs(b *testing.B) {
	self := os.Getpid()
	for b.Loop() {
		if len(allProcs(self)) == 0 {
			b.Fatal("no process read")
		}
	}
}
