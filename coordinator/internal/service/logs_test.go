package service

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

// fitLogs keeps a reply of many long logs under its limit, even when JSON
// escaping makes the tails several times their length; every tail is the
// end of its log, marked truncated; logs that fit whole are whole.
func TestFitLogs(t *testing.T) {
	const limit = 1<<20 - replyHeadroom
	plain := bytes.Repeat([]byte("line of a gate's output\n"), 20000) // 480 KB
	control := bytes.Repeat([]byte{0x01, 0x02, '<', '>'}, 100000)     // 6 escaped bytes each
	var entries []api.LogEntry
	var logs [][]byte
	for i := 0; i < 6; i++ {
		entries = append(entries, api.LogEntry{Name: "gate g", Object: "o"})
		logs = append(logs, plain)
	}
	entries = append(entries, api.LogEntry{Name: "agent", Object: "o"}, api.LogEntry{Name: "context", Object: "o"})
	logs = append(logs, control, []byte("short\n"))

	out := fitLogs(entries, logs, limit)
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > limit {
		t.Fatalf("reply of %d bytes, over the %d-byte limit", len(data), limit)
	}
	for i, e := range out.Logs[:7] {
		if !e.Truncated || len(e.Content) == 0 || !bytes.HasSuffix(logs[i], []byte(e.Content)) {
			t.Errorf("log %d: truncated %v, %d bytes; want a non-empty tail of it", i, e.Truncated, len(e.Content))
		}
	}
	if c := out.Logs[7]; c.Truncated || c.Content != "short\n" {
		t.Errorf("a short log: %+v; want it whole", c)
	}

	// Logs that fit together keep their full logTailBytes tails.
	small := fitLogs([]api.LogEntry{{Name: "agent"}}, [][]byte{plain}, limit)
	if got := small.Logs[0].Content; len(got) != logTailBytes || !strings.HasSuffix(string(plain), got) {
		t.Errorf("one long log: a %d-byte tail; want the last %d bytes", len(got), logTailBytes)
	}
}
