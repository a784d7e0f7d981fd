package workflow

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParse500Tasks parses a workflow of 500 no-op tasks (the most a
// workflow may hold), as the coordinator does on every submission.
func BenchmarkParse500Tasks(b *testing.B) {
	var y strings.Builder
	y.WriteString("name: bench\ndefaults:\n  agent:\n    command: [\"true\"]\n  timeout: 1m\n  allow_empty: true\ntasks:\n")
	for i := range 500 {
		fmt.Fprintf(&y, "  - id: t%04d\n    prompt: no-op\n", i)
	}
	data := []byte(y.String())
	if _, err := Parse("bench.yaml", data); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
