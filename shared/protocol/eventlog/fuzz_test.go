package eventlog

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzDecode feeds any bytes to Decode, as the coordinator's replay and
// `supervisor watch` do with what they read from the event stream: it
// never panics; an event it accepts has a workflow id, a known type and a
// body that is a value (never a pointer); and it survives Encode and
// Decode again unchanged, its encoding stable from then on, so a decoded
// event is never one the log could not hold.
func FuzzDecode(f *testing.F) {
	for _, typ := range Types() {
		data, err := Encode(sample(f, typ))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"v":1,"type":"node.ready","workflow_id":"wf","node_id":"n","time":"2026-11-25T00:00:00Z","attempt":2}`))
	f.Add([]byte(`{"v":2,"type":"node.teleported","workflow_id":"wf","node_id":"n","time":"2026-11-25T00:00:00Z","data":{}}`))
	f.Add([]byte(`{"v":2,"type":"gate.finished","workflow_id":"wf","node_id":"n","time":"2026-11-25T00:00:00+01:00","data":{"result":null}}`))
	f.Add([]byte(`{"v":3}`))
	f.Add([]byte(`{"v":2,"type":"fleet.paused","workflow_id":"wf","time":"2026-11-25T00:00:00Z","data":{}} {}`))
	known := map[Type]bool{}
	for _, typ := range Types() {
		known[typ] = true
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := Decode(data)
		if err != nil {
			return
		}
		if ev.WorkflowID == "" || ev.Body == nil || !known[ev.Type()] {
			t.Fatalf("Decode(%q) accepted %+v", data, ev)
		}
		if reflect.TypeOf(ev.Body).Kind() == reflect.Pointer {
			t.Fatalf("Decode(%q): body is a pointer, %T", data, ev.Body)
		}
		enc, err := Encode(ev)
		if err != nil {
			t.Fatalf("Decode(%q) accepted an event Encode refuses: %v", data, err)
		}
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if back.Type() != ev.Type() || back.WorkflowID != ev.WorkflowID || back.NodeID != ev.NodeID || !back.Time.Equal(ev.Time) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", ev, back)
		}
		enc2, err := Encode(back)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable (%v):\n%s\n%s", err, enc, enc2)
		}
	})
}
