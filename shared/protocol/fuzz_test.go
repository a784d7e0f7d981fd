package protocol

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// message is what Decode and Encode take: a job or a report.
type message interface {
	version() int
	setVersion()
}

// newMessage returns an empty message of the kind a fuzz input names:
// an agent job, a gate job or a report (kind modulo 3).
func newMessage(kind uint8) message {
	switch kind % 3 {
	case 0:
		return &AgentJob{}
	case 1:
		return &GateJob{}
	}
	return &Report{}
}

// FuzzDecode feeds any bytes to Decode as an agent job, a gate job and a
// report, as the worker, the gate runner and the coordinator do with what
// they pull from the bus: it never panics; a message it accepts has a
// version this build speaks (1…Version), and ErrUnsupportedVersion is
// only ever said of a version it does not; an accepted message survives Encode and Decode
// again, its encoding stable from then on; and a report's Validate and
// WorkflowID answer the same after the round trip.
func FuzzDecode(f *testing.F) {
	at := time.Date(2026, 11, 25, 1, 2, 3, 0, time.UTC)
	seeds := []message{
		&AgentJob{JobID: "j", WorkflowID: "wf", NodeID: "n", Attempt: 1, Pool: "default",
			Repo: RepoRef{ID: "r", BaseCommit: "abc", Bundle: "b"}, Prompt: "do it", Env: map[string]string{"A": "1"},
			TimeoutSeconds: 60, PublishedAt: at, Patches: []PatchRef{{NodeID: "m", Object: "o", SHA256: "s", Size: 3}},
			Feedback: []byte(`{"gate":"unit","output":"FAIL"}`), FileLocks: []string{"src/**"}},
		&GateJob{JobID: "g", WorkflowID: "wf", NodeID: "n", Attempt: 1, Gate: "unit", Pool: "default",
			Command: []string{"go", "test", "./..."}, TimeoutSeconds: 30, PublishedAt: at, Round: 2},
		&Report{Type: ReportStarted, Started: &Started{JobID: "j", WorkflowID: "wf", NodeID: "n"}},
		&Report{Type: ReportGateResult, Gate: &GateResult{JobID: "g", WorkflowID: "wf", NodeID: "n", Gate: "unit", Status: GateFailed}},
		&Report{Type: ReportDeadLetter, DeadLetter: &DeadLetter{JobID: "j", WorkflowID: "wf"}},
	}
	for i, m := range seeds {
		data, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(i))
	}
	f.Add([]byte(`{"v":0,"job_id":"j"}`), uint8(0))
	f.Add([]byte(`{"v":99,"type":"started"}`), uint8(2))
	f.Add([]byte(`{"v":2,"type":"agent_result"}`), uint8(2))
	f.Add([]byte(`{"v":1,"type":"waiting","waiting":{"workflow_id":"wf"}}`), uint8(2))
	f.Add([]byte(`{"v":1,"published_at":"2026-11-25T00:00:00+05:30","feedback":[1, 2]}`), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		fresh := func() message { return newMessage(kind) }
		m := fresh()
		if err := Decode(data, m); err != nil {
			if errors.Is(err, ErrUnsupportedVersion) && m.version() >= 1 && m.version() <= Version {
				t.Fatalf("Decode(%q) = %v, for version %d", data, err, m.version())
			}
			return
		}
		if v := m.version(); v < 1 || v > Version {
			t.Fatalf("Decode(%q) accepted version %d", data, v)
		}
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("Decode(%q) accepted a %T that Encode refuses: %v", data, m, err)
		}
		back := fresh()
		if err := Decode(enc, back); err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		enc2, err := Encode(back)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable (%v):\n%s\n%s", err, enc, enc2)
		}
		if r, ok := m.(*Report); ok {
			b := back.(*Report)
			if (r.Validate() == nil) != (b.Validate() == nil) || r.WorkflowID() != b.WorkflowID() {
				t.Fatalf("round trip changed the report: %+v, %+v", r, b)
			}
		}
	})
}
