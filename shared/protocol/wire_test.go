package protocol

import (
	"bytes"
	stdjson "encoding/json"
	"reflect"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol/internal/wirecheck"
)

// Jobs and reports are written and read with goccy/go-json (PERF-65); a
// runner or coordinator of a build that used encoding/json must not see
// the difference. Every field of every message filled (escapes, invalid
// UTF-8, floats at notation boundaries, maps, values of type any), and
// about half of them left empty in every other variant (omitempty), Encode
// gives encoding/json's bytes and Decode reads them to encoding/json's
// value. The test fails if a field it can reach was never given a value.
func TestWireAgreesWithEncodingJSON(t *testing.T) {
	fresh := map[string]func() message{
		"agent job": func() message { return &AgentJob{} },
		"gate job":  func() message { return &GateJob{} },
		"report":    func() message { return &Report{} },
	}
	fill := wirecheck.NewFiller()
	for name, mk := range fresh {
		for variant := range 2 * len(wirecheck.Strings) {
			m := mk()
			fill.Fill(m, variant)
			got, err := Encode(m)
			if err != nil {
				t.Fatalf("%s %d: Encode: %v", name, variant, err)
			}
			want, err := stdjson.Marshal(m)
			if err != nil {
				t.Fatalf("%s %d: encoding/json: %v", name, variant, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s %d: Encode wrote\n%s\nencoding/json writes\n%s", name, variant, got, want)
			}
			ours, theirs := mk(), mk()
			if err := Decode(want, ours); err != nil {
				t.Fatalf("%s %d: Decode: %v", name, variant, err)
			}
			if err := stdjson.Unmarshal(want, theirs); err != nil {
				t.Fatalf("%s %d: encoding/json: %v", name, variant, err)
			}
			if !reflect.DeepEqual(ours, theirs) {
				t.Fatalf("%s %d: Decode read\n%+v\nencoding/json reads\n%+v", name, variant, ours, theirs)
			}
		}
	}
	if unset := fill.Unset(); len(unset) > 0 {
		t.Fatalf("fields never given a value, so never compared: %v", unset)
	}
}

// FuzzDecodeAgreesWithEncodingJSON: whatever the bytes, Decode accepts
// what encoding/json's Unmarshal accepts (for a version this build
// speaks) and reads the same value, and refuses what it refuses (PERF-65).
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	for kind := range uint8(3) {
		m := newMessage(kind)
		wirecheck.NewFiller().Fill(m, 2*int(kind))
		data, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, kind)
	}
	f.Add([]byte(`{"v":1,"job_id":"\ud800","env":{"A":"1","A":"2"},"attempt":1e2}`), uint8(0))
	f.Add([]byte(`{"V":1,"Job_ID":"x","timeout_seconds":-0,"published_at":"2026-11-25T00:00:00+05:30"}`), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		ours, theirs := newMessage(kind), newMessage(kind)
		errOurs := Decode(data, ours)
		errTheirs := stdjson.Unmarshal(data, theirs)
		if errTheirs == nil {
			if v := theirs.version(); v < 1 || v > Version {
				return // Decode refuses it for its version
			}
		}
		if (errOurs == nil) != (errTheirs == nil) {
			t.Fatalf("Decode(%q) = %v; encoding/json: %v", data, errOurs, errTheirs)
		}
		if errOurs == nil && !reflect.DeepEqual(ours, theirs) {
			t.Fatalf("Decode(%q) read\n%+v\nencoding/json reads\n%+v", data, ours, theirs)
		}
	})
}
