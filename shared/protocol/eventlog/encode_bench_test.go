package eventlog

import (
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// BenchmarkEncode encodes the events a no-op node appends, one after the
// other, as the coordinator does.
func BenchmarkEncode(b *testing.B) {
	at := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	events := []Event{
		{WorkflowID: "wf-bench", NodeID: "n1", Time: at, Body: NodeReady{Attempt: 1}},
		{WorkflowID: "wf-bench", NodeID: "n1", Time: at, Body: NodeStarted{Attempt: 1, LeaseToken: 7, Host: "worker-1", LatencyMicros: 812}},
		{WorkflowID: "wf-bench", NodeID: "n1", Time: at, Body: NodeAgentDone{Attempt: 1, LeaseToken: 7, Host: "worker-1",
			Result: &protocol.AgentResult{JobID: "job-1", WorkflowID: "wf-bench", NodeID: "n1", Attempt: 1, LeaseToken: 7,
				Host: "worker-1", Status: protocol.AgentSucceeded, StartedAt: at, FinishedAt: at}}},
		{WorkflowID: "wf-bench", NodeID: "n1", Time: at, Body: NodeIntegrated{Attempt: 1}},
		{WorkflowID: "wf-bench", NodeID: "n1", Time: at, Body: NodeFinished{Attempt: 1, Status: protocol.NodeSucceeded}},
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, e := range events {
			if _, err := Encode(e); err != nil {
				b.Fatal(err)
			}
		}
	}
}
