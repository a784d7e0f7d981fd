package statemachine_test

import (
	"bufio"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// recordedLog reads testdata/v1-events.jsonl: an event log of 115 events
// over six workflows (layered gates and patches, a gate rerun reopening a
// failed node, warnings and an integrity violation, pending gates polled
// and timed out, node gate changes, an agent failure and a dead-lettered
// gate, a cancellation, and one still running), recorded from the real
// coordinator — engine, embedded NATS, git — at the last commit before
// events were typed (version 1, one flat record per event).
// testdata/v1-status.json is what `status -o json` showed of each
// workflow at the end of the recording.
func recordedLog(t *testing.T) []eventlog.Event {
	t.Helper()
	f, err := os.Open("testdata/v1-events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []eventlog.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var rec struct {
			Seq     uint64          `json:"seq"`
			Subject string          `json:"subject"`
			Data    json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("v1-events.jsonl:%d: %v", line, err)
		}
		ev, err := eventlog.Decode(rec.Data)
		if err != nil {
			t.Fatalf("v1-events.jsonl:%d: the recorded event does not decode: %v", line, err)
		}
		if !strings.HasSuffix(rec.Subject, "."+ev.WorkflowID) {
			t.Fatalf("v1-events.jsonl:%d: event of %s on subject %s", line, ev.WorkflowID, rec.Subject)
		}
		ev.Seq = rec.Seq
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A log written by the coordinator before events were typed replays into
// exactly the state that coordinator reported: every workflow, node and
// gate as status showed it, times and reasons included. Re-encoding the
// events in the current version and replaying them gives the same state
// again.
func TestRecordedV1LogReplays(t *testing.T) {
	events := recordedLog(t)
	if len(events) != 115 {
		t.Fatalf("read %d events, want the 115 recorded", len(events))
	}
	st := statemachine.New()
	for _, ev := range events {
		if err := st.Apply(ev); err != nil {
			t.Fatalf("seq %d (%s): %v", ev.Seq, ev.Type(), err)
		}
	}
	var got []api.WorkflowSummary
	for _, w := range st.Workflows() {
		s := service.Summary(w, true)
		for i := range s.Nodes {
			// Added to the status after the recording: every node has the
			// default budget, and none is retrying.
			if s.Nodes[i].MaxAttempts != 3 || s.Nodes[i].RetryAt != nil {
				t.Errorf("node %s/%s: budget %d, retry at %v", s.ID, s.Nodes[i].ID, s.Nodes[i].MaxAttempts, s.Nodes[i].RetryAt)
			}
			s.Nodes[i].MaxAttempts = 0
		}
		got = append(got, s)
	}
	data, err := os.ReadFile("testdata/v1-status.json")
	if err != nil {
		t.Fatal(err)
	}
	var want []api.WorkflowSummary
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.MarshalIndent(got, "", "  ")
	wantJSON, _ := json.MarshalIndent(want, "", "  ")
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("replayed state differs from what the recording coordinator reported:\n%s", lineDiff(string(wantJSON), string(gotJSON)))
	}

	// Version 2 round trip: encode every event anew, decode, replay.
	again := statemachine.New()
	for _, ev := range events {
		data, err := eventlog.Encode(ev)
		if err != nil {
			t.Fatalf("encode seq %d: %v", ev.Seq, err)
		}
		back, err := eventlog.Decode(data)
		if err != nil {
			t.Fatalf("decode seq %d: %v", ev.Seq, err)
		}
		back.Seq = ev.Seq
		if err := again.Apply(back); err != nil {
			t.Fatalf("seq %d: %v", ev.Seq, err)
		}
	}
	if !reflect.DeepEqual(st, again) {
		t.Fatal("replaying the re-encoded log gave another state")
	}
}

// lineDiff shows the first lines where two texts differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + itoa(i+1) + ":\n  want " + a + "\n  got  " + b
		}
	}
	return "(no line differs)"
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
