package bench

import (
	"reflect"
	"strings"
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

// The watcher reads, during a measurement, only the messages that can end
// a wait; wait returns on workflow.finished with the other messages still
// kept, and collect reads them all, in log order, into the same figures a
// reading on arrival gives.
func TestWatcherReadsTheRestAfterTheWindow(t *testing.T) {
	at := time.Date(2026, 11, 29, 3, 4, 5, 0, time.UTC)
	enc := func(node string, d time.Duration, b eventlog.Body) []byte {
		data, err := eventlog.Encode(eventlog.Event{WorkflowID: "wf-w", NodeID: node, Time: at.Add(d), Body: b})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	batch, err := eventlog.JoinEncoded([][]byte{
		enc("a", 0, eventlog.NodeReady{Attempt: 1}),
		enc("b", 0, eventlog.NodeReady{Attempt: 1}),
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := [][]byte{batch}
	for i, n := range []string{"a", "b"} {
		d := time.Duration(i+1) * time.Millisecond
		msgs = append(msgs,
			enc(n, d, eventlog.NodeStarted{Attempt: 1, Host: "h", LatencyMicros: int64(100 * (i + 1))}),
			enc(n, 2*d, eventlog.NodeAgentDone{Attempt: 1}),
			enc(n, 3*d, eventlog.NodeFinished{Attempt: 1, Status: protocol.NodeSucceeded}))
	}
	msgs = append(msgs, enc("", 10*time.Millisecond, eventlog.WorkflowFinished{Status: protocol.WorkflowSucceeded}))

	w := &watcher{changed: make(chan struct{}, 1), wfs: map[string]*wfEvents{}}
	for _, m := range msgs {
		w.receive(m)
	}
	end, err := w.wait(t.Context(), []string{"wf-w"})
	if err != nil {
		t.Fatal(err)
	}
	if want := at.Add(10 * time.Millisecond); !end.Equal(want) {
		t.Fatalf("wait returned %v, want the workflow.finished time %v", end, want)
	}
	if len(w.pending) != len(msgs) || w.wfs["wf-w"].succeeded != 0 {
		t.Fatalf("the window read more than it needs: %d of %d messages kept, %d nodes counted",
			len(w.pending), len(msgs), w.wfs["wf-w"].succeeded)
	}
	st := w.collect([]string{"wf-w"})
	if st.succeeded != 2 || len(st.nodeLatency) != 2 || len(st.turnaround) != 2 || st.agentHosts["h"] != 2 {
		t.Fatalf("collect read %+v, want 2 nodes succeeded, started and turned around on host h", st)
	}
	if len(w.pending) != 0 {
		t.Fatalf("%d messages still kept after collect", len(w.pending))
	}

	// A failure is explained from the kept messages.
	w = &watcher{changed: make(chan struct{}, 1), wfs: map[string]*wfEvents{}}
	w.receive(enc("a", 0, eventlog.NodeFinished{Attempt: 1, Status: protocol.NodeFailed, Reason: "gate vet failed"}))
	w.receive(enc("", time.Millisecond, eventlog.WorkflowFinished{Status: protocol.WorkflowFailed, Reason: "1 node failed"}))
	if _, err := w.wait(t.Context(), []string{"wf-w"}); err == nil || !strings.Contains(err.Error(), "gate vet failed") {
		t.Fatalf("wait on a failed workflow: %v, want the first node's failure", err)
	}
}
