package bench

import (
	"reflect"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// The watcher's lenient reading gives, for a single event and for a
// batch, the events watcher.applyLocked counts with the bodies the strict
// reading gives (but the two whose fields it does not use, left empty),
// and leaves out the others.
func TestWatchDecodeAgreesWithTheLog(t *testing.T) {
	at := time.Date(2026, 11, 29, 3, 4, 5, 6000, time.UTC)
	ev := func(node string, b eventlog.Body) eventlog.Event {
		return eventlog.Event{WorkflowID: "wf-w", NodeID: node, Time: at, Body: b}
	}
	events := []eventlog.Event{
		ev("n", eventlog.NodeReady{Attempt: 2}),
		ev("n", eventlog.NodeStarted{Attempt: 2, LeaseToken: 3, Host: "h", LatencyMicros: 41}),
		ev("n", eventlog.NodeAgentDone{Attempt: 2, LeaseToken: 3, Result: &protocol.AgentResult{Status: protocol.AgentSucceeded}}),
		ev("n", eventlog.GateDispatched{Gate: "vet", Attempt: 2}),
		ev("n", eventlog.GateStarted{Gate: "vet", Attempt: 2, LeaseToken: 4, Host: "g", LatencyMicros: 9}),
		ev("n", eventlog.GateFinished{Gate: "vet", Attempt: 2, Round: 1, Result: &protocol.GateResult{Status: protocol.GateFailed, Error: "x"}}),
		ev("n", eventlog.NodeRetryScheduled{Attempt: 2, NotBefore: at.Add(time.Second), FailedGates: []string{"vet"}}),
		ev("n", eventlog.NodeEscalated{Attempt: 3, Reason: "r"}),
		ev("n", eventlog.NodeIntegrated{Attempt: 3, Commit: "c"}),
		ev("n", eventlog.NodeFinished{Attempt: 3, Status: protocol.NodeFailed, Reason: "why"}),
		ev("", eventlog.WorkflowFinished{Status: protocol.WorkflowFailed, Reason: "r"}),
	}
	var want []eventlog.Event
	for _, e := range events {
		switch e.Body.(type) {
		case eventlog.NodeIntegrated:
			continue // not counted
		case eventlog.NodeAgentDone:
			e.Body = eventlog.NodeAgentDone{}
		case eventlog.GateDispatched:
			e.Body = eventlog.GateDispatched{}
		}
		want = append(want, e)
	}
	encoded := make([][]byte, len(events))
	for i, e := range events {
		data, err := eventlog.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		encoded[i] = data
	}
	batch, err := eventlog.JoinEncoded(encoded)
	if err != nil {
		t.Fatal(err)
	}
	got, err := watchDecode(batch)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("batch read as\n%+v\nwant\n%+v", got, want)
	}
	var one []eventlog.Event
	for _, data := range encoded {
		evs, err := watchDecode(data)
		if err != nil {
			t.Fatal(err)
		}
		one = append(one, evs...)
	}
	if !reflect.DeepEqual(one, want) {
		t.Fatalf("single events read as\n%+v\nwant\n%+v", one, want)
	}
	if _, err := watchDecode([]byte(`{"v":2,"type":"node.ready","workflow_id":"w","time":"x","data":{}}`)); err == nil {
		t.Fatal("a malformed time was read")
	}
}
