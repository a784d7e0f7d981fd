package eventlog

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/internal/wirecheck"
)

// stdStrict is strictUnmarshal with encoding/json.
func stdStrict(data []byte, v any) error {
	dec := stdjson.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// The log is written and read with goccy/go-json (PERF-65); a log written
// by a build that used encoding/json, or read by one, must not differ.
// Every event type, its body's every field filled (escapes, invalid UTF-8,
// floats at notation boundaries, maps, values of type any), and about half
// of them left empty in every other variant (omitempty): Encode gives
// encoding/json's bytes, and Decode reads them to encoding/json's strict
// reading. The test fails if a field it can reach was never given a value.
func TestWireAgreesWithEncodingJSON(t *testing.T) {
	fill := wirecheck.NewFiller()
	for _, typ := range Types() {
		for variant := range 2 * len(wirecheck.Strings) {
			ev := sample(t, typ)
			b, err := newBody(typ)
			if err != nil {
				t.Fatal(err)
			}
			fill.Fill(b, variant)
			required(b)
			ev.Body = deref(b)
			got, err := Encode(ev)
			if err != nil {
				t.Fatalf("%s %d: Encode: %v", typ, variant, err)
			}
			want, err := stdjson.Marshal(outEnvelope{V: Version, Type: ev.Type(), WorkflowID: ev.WorkflowID,
				NodeID: ev.NodeID, Time: ev.Time, Data: ev.Body})
			if err != nil {
				t.Fatalf("%s %d: encoding/json: %v", typ, variant, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s %d: Encode wrote\n%s\nencoding/json writes\n%s", typ, variant, got, want)
			}
			ours, err := Decode(want)
			if err != nil {
				t.Fatalf("%s %d: Decode: %v", typ, variant, err)
			}
			var env eventEnvelope
			theirs, _ := newBody(typ)
			if err := stdStrict(want, &env); err != nil {
				t.Fatalf("%s %d: encoding/json: %v", typ, variant, err)
			}
			if err := stdStrict(env.Data, theirs); err != nil {
				t.Fatalf("%s %d: encoding/json: %v", typ, variant, err)
			}
			if !reflect.DeepEqual(ours.Body, deref(theirs)) || ours.WorkflowID != env.WorkflowID ||
				ours.NodeID != env.NodeID || !ours.Time.Equal(env.Time) {
				t.Fatalf("%s %d: Decode read\n%+v\nencoding/json reads\n%+v %+v", typ, variant, ours, env, theirs)
			}
		}
	}
	if unset := fill.Unset(); len(unset) > 0 {
		t.Fatalf("fields never given a value, so never compared: %v", unset)
	}
}

// required gives the fields Decode insists on a value where Fill left
// them empty.
func required(b Body) {
	switch x := b.(type) {
	case *WorkflowSubmitted:
		if x.Workflow == nil {
			x.Workflow = &protocol.WorkflowSpec{Name: "w"}
		}
	case *NodeAgentDone:
		if x.Result == nil {
			x.Result = &protocol.AgentResult{Status: protocol.AgentSucceeded}
		}
	case *GateFinished:
		if x.Result == nil {
			x.Result = &protocol.GateResult{Status: protocol.GatePassed}
		}
	case *IntegrationDispatched:
		x.Gate, x.Speculation = x.Gate+"g", x.Speculation+"s"
	case *IntegrationFinished:
		x.Speculation += "s"
		if x.Result == nil {
			x.Result = &protocol.GateResult{Status: protocol.GateFailed}
		}
	}
}

// FuzzDecodeAgreesWithEncodingJSON: whatever the bytes, the strict
// reading of an envelope, a batch, a version-1 event and every event
// type's body accepts
// what encoding/json's strict reading accepts and reads the same value,
// and refuses what it refuses (PERF-65).
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	for i, typ := range Types() {
		ev := sample(f, typ)
		b, _ := newBody(typ)
		wirecheck.NewFiller().Fill(b, 2*i)
		required(b)
		ev.Body = deref(b)
		data, err := Encode(ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		var env eventEnvelope
		if err := stdStrict(data, &env); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(env.Data))
	}
	f.Add([]byte(`{"v":2,"events":[{"a":1},{"b":"\ud800"}]} `))
	f.Add([]byte(`{"V":2,"Type":"node.ready","workflow_id":"w","workflow_id":"x","time":"2026-11-25T00:00:00.5+01:00"}`))
	targets := []func() any{func() any { return new(eventEnvelope) }, func() any { return new(batchEnvelope) },
		func() any { return new(eventV1) }}
	for _, typ := range Types() {
		targets = append(targets, func() any { b, _ := newBody(typ); return b })
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mk := range targets {
			ours, theirs := mk(), mk()
			errOurs, errTheirs := strictUnmarshal(data, ours), stdStrict(data, theirs)
			if (errOurs == nil) != (errTheirs == nil) {
				t.Fatalf("%T: strictUnmarshal(%q) = %v; encoding/json: %v", ours, data, errOurs, errTheirs)
			}
			if errOurs == nil && !reflect.DeepEqual(ours, theirs) {
				t.Fatalf("%T: strictUnmarshal(%q) read\n%+v\nencoding/json reads\n%+v", ours, data, ours, theirs)
			}
		}
	})
}
