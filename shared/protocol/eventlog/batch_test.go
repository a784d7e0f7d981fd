package eventlog

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// encodeAll encodes each event with Encode.
func encodeAll(t testing.TB, evs []Event) [][]byte {
	t.Helper()
	out := make([][]byte, len(evs))
	for i, ev := range evs {
		data, err := Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = data
	}
	return out
}

// PERF-57: a batch of every event type of one workflow decodes back to the
// same events in the same order; a single event joins to exactly its own
// encoding, which Decode and DecodeAll both read.
func TestBatchRoundTrips(t *testing.T) {
	var evs []Event
	for _, typ := range Types() {
		evs = append(evs, sample(t, typ))
	}
	data, err := JoinEncoded(encodeAll(t, evs))
	if err != nil {
		t.Fatal(err)
	}
	if !IsBatch(data) {
		t.Fatalf("a join of %d events is not a batch: %.80s", len(evs), data)
	}
	back, err := DecodeAll(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, evs) {
		t.Fatalf("the batch changed its events:\n%+v\n%+v", evs, back)
	}
	if _, err := Decode(data); !errors.Is(err, ErrBatch) {
		t.Fatalf("Decode of a batch: %v, want ErrBatch", err)
	}

	one := encodeAll(t, evs[:1])
	single, err := JoinEncoded(one)
	if err != nil || !bytes.Equal(single, one[0]) || IsBatch(single) {
		t.Fatalf("a join of one event is %s (%v), want its own encoding %s", single, err, one[0])
	}
	got, err := DecodeAll(single)
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], evs[0]) {
		t.Fatalf("DecodeAll of a single event: %+v, %v", got, err)
	}
}

// A batch is refused whole when it is empty, too long, mixes workflows,
// nests a batch, or holds one event that does not decode; and joining
// refuses what it could not write.
func TestBatchRefused(t *testing.T) {
	a, b := sample(t, TypeNodeReady), sample(t, TypeNodeStarted)
	other := b
	other.WorkflowID = "wf-2"
	enc := encodeAll(t, []Event{a, b, other})
	inner, err := JoinEncoded(enc[:2])
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte(`{"v":2,"type":"node.teleported","workflow_id":"wf-1","node_id":"n","time":"2026-11-25T00:00:00Z","data":{}}`)
	mixed, err := JoinEncoded(enc)
	if err != nil {
		t.Fatal(err)
	}
	tooMany := make([][]byte, MaxBatchEvents+1)
	for i := range tooMany {
		tooMany[i] = enc[0]
	}
	long := append(append([]byte(nil), batchPrefix...), bytes.Join(tooMany, []byte(","))...)
	long = append(long, ']', '}')
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":         {[]byte(`{"v":2,"events":[]}`), "holds no event"},
		"two workflows": {mixed, "is of workflow wf-2"},
		"nested":        {[]byte(`{"v":2,"events":[` + string(enc[0]) + `,` + string(inner) + `]}`), "event 1 is a batch"},
		"bad event":     {[]byte(`{"v":2,"events":[` + string(enc[0]) + `,` + string(bad) + `]}`), "event 1"},
		"unknown field": {[]byte(`{"v":2,"events":[` + string(enc[0]) + `,` + string(enc[1]) + `],"x":1}`), "unknown field"},
		"trailing":      {append(append([]byte(nil), inner...), []byte(` {}`)...), "trailing data"},
		"stray bracket": {append(append([]byte(nil), inner...), []byte(`]]garbage`)...), "trailing data"},
		"stray brace":   {append(append([]byte(nil), enc[0]...), []byte(` }`)...), "decode event"},
		"too many":      {long, "at most"},
	} {
		t.Run(name, func(t *testing.T) {
			evs, err := DecodeAll(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeAll = %d events, %v; want an error with %q", len(evs), err, tc.want)
			}
		})
	}
	if _, err := JoinEncoded(nil); !errors.Is(err, ErrEmptyBatch) {
		t.Fatalf("JoinEncoded(nil): %v", err)
	}
	if _, err := JoinEncoded(tooMany); err == nil {
		t.Fatalf("JoinEncoded took %d events", len(tooMany))
	}
}

// FuzzDecodeAll feeds any bytes to DecodeAll, as the replay does with what
// it reads from the log: it never panics; what it accepts is at least one
// event, all of one workflow, each one Decode accepts alone, and joining
// their encodings gives a message that decodes to the same events.
func FuzzDecodeAll(f *testing.F) {
	a, b := sample(f, TypeNodeReady), sample(f, TypeNodeFinished)
	enc := encodeAll(f, []Event{a, b})
	two, err := JoinEncoded(enc)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(two)
	f.Add(enc[0])
	f.Add([]byte(`{"v":2,"events":[]}`))
	f.Add([]byte(`{"v":2,"events":[{"v":2,"events":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := DecodeAll(data)
		if err != nil {
			return
		}
		if len(evs) == 0 || len(evs) > MaxBatchEvents {
			t.Fatalf("DecodeAll(%q) accepted %d events", data, len(evs))
		}
		for _, ev := range evs {
			if ev.WorkflowID != evs[0].WorkflowID {
				t.Fatalf("DecodeAll(%q) mixed workflows %s and %s", data, evs[0].WorkflowID, ev.WorkflowID)
			}
		}
		joined, err := JoinEncoded(encodeAll(t, evs))
		if err != nil {
			t.Fatalf("DecodeAll(%q) accepted events JoinEncoded refuses: %v", data, err)
		}
		back, err := DecodeAll(joined)
		if err != nil || len(back) != len(evs) {
			t.Fatalf("re-decoding %s: %d events, %v", joined, len(back), err)
		}
		for i := range evs {
			if back[i].Type() != evs[i].Type() || back[i].NodeID != evs[i].NodeID || !back[i].Time.Equal(evs[i].Time) {
				t.Fatalf("round trip changed event %d:\n%+v\n%+v", i, evs[i], back[i])
			}
		}
	})
}
