package eventlog

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// sample is an event of type t with what its type needs.
func sample(t testing.TB, typ Type) Event {
	t.Helper()
	b, err := newBody(typ)
	if err != nil {
		t.Fatal(err)
	}
	ev := Event{WorkflowID: "wf-1", NodeID: "n", Time: time.Date(2026, 11, 25, 1, 2, 3, 0, time.UTC)}
	switch x := b.(type) {
	case *WorkflowSubmitted:
		x.Workflow, ev.NodeID = &protocol.WorkflowSpec{Name: "w"}, ""
	case *WorkflowCancelRequested, *WorkflowFinished, *FleetPaused, *FleetResumed,
		*WorkflowMergeRequested, *WorkflowMerged, *WorkflowMergeFailed:
		ev.NodeID = ""
	case *NodeAgentDone:
		x.Result = &protocol.AgentResult{Status: protocol.AgentSucceeded}
	case *GateFinished:
		x.Result = &protocol.GateResult{Status: protocol.GatePassed}
	case *IntegrationDispatched:
		x.Gate, x.Speculation, x.Ahead = "combined", "0123abcd", []string{"a"}
	case *IntegrationFinished:
		x.Gate, x.Speculation, x.Result = "combined", "0123abcd", &protocol.GateResult{Status: protocol.GateFailed}
	}
	ev.Body = deref(b)
	return ev
}

// Every event type encodes and decodes back to the same value, its body a
// value of its own type (not a pointer): what folds the log switches on
// the body's type.
func TestEveryTypeRoundTrips(t *testing.T) {
	types := Types()
	if len(types) < 20 {
		t.Fatalf("only %d event types", len(types))
	}
	for _, typ := range types {
		ev := sample(t, typ)
		data, err := Encode(ev)
		if err != nil {
			t.Fatalf("%s: encode: %v", typ, err)
		}
		back, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: decode %s: %v", typ, data, err)
		}
		if back.Type() != typ || reflect.TypeOf(back.Body).Kind() == reflect.Pointer {
			t.Errorf("%s: decoded as %s, body %T", typ, back.Type(), back.Body)
		}
		if !reflect.DeepEqual(back, ev) {
			t.Errorf("%s: round trip changed the event:\n%+v\n%+v", typ, ev, back)
		}
	}
}

// Encode writes, in one pass, the bytes of encoding the body first and
// embedding it in the envelope (as earlier builds did, and as the log's
// readers expect), for every type, with strings that JSON escapes.
func TestEncodeInOnePassKeepsTheBytes(t *testing.T) {
	for _, typ := range Types() {
		ev := sample(t, typ)
		if _, ok := ev.Body.(NodeEscalated); ok {
			ev.Body = NodeEscalated{Attempt: 2, Reason: "<gate> \"vet\" & \u2028 é\n"}
		}
		got, err := Encode(ev)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		body, err := json.Marshal(ev.Body)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(eventEnvelope{V: Version, Type: ev.Type(), WorkflowID: ev.WorkflowID,
			NodeID: ev.NodeID, Time: ev.Time, Data: body})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: encoded as\n%s\nwant\n%s", typ, got, want)
		}
	}
}

// Decoding is strict: an unknown type or field, a body that does not fit,
// and a node event without its node are errors.
func TestDecodeStrict(t *testing.T) {
	for name, data := range map[string]string{
		"unknown type":  `{"v":2,"type":"node.teleported","workflow_id":"wf","node_id":"n","time":"2026-11-25T00:00:00Z","data":{}}`,
		"unknown field": `{"v":2,"type":"node.ready","workflow_id":"wf","node_id":"n","time":"2026-11-25T00:00:00Z","data":{"attempt":1,"color":"red"}}`,
		"no node":       `{"v":2,"type":"node.ready","workflow_id":"wf","time":"2026-11-25T00:00:00Z","data":{"attempt":1}}`,
		"wrong shape":   `{"v":2,"type":"node.ready","workflow_id":"wf","node_id":"n","time":"2026-11-25T00:00:00Z","data":{"attempt":"one"}}`,
		"newer version": `{"v":3,"type":"node.ready","workflow_id":"wf","node_id":"n","time":"2026-11-25T00:00:00Z","data":{}}`,
	} {
		if _, err := Decode([]byte(data)); err == nil {
			t.Errorf("%s: decoded", name)
		} else if name == "unknown type" && !strings.Contains(err.Error(), "unknown event type") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
