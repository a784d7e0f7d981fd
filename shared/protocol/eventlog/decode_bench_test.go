package eventlog

import (
	"testing"
	"time"
)

// BenchmarkDecode decodes an event of this version as the log holds it
// (PERF-48: the envelope is read once).
func BenchmarkDecode(b *testing.B) {
	data, err := Encode(Event{WorkflowID: "wf-bench", NodeID: "n1", Time: time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC),
		Body: NodeStarted{Attempt: 1, LeaseToken: 7, Host: "worker-1", LatencyMicros: 812}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
