package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
)

func TestProgressLine(t *testing.T) {
	start := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	s := api.WorkflowSummary{ID: "wf-1", Status: "running", SubmittedAt: start, Counts: map[string]int{
		"succeeded": 2, "skipped": 1, "failed": 1, "running": 1, "gating": 1, "escalated": 1, "awaiting_approval": 1,
		"pending": 2, "retrying": 1,
	}}
	got := progressLine(s, start.Add(2*time.Minute+13*time.Second+400*time.Millisecond))
	want := "wf-1 running: 4/11 nodes done, 2 running, 1 failed, 2 waiting for a human, 1 retrying, 2m13s"
	if got != want {
		t.Errorf("progressLine =\n%q, want\n%q", got, want)
	}
	end := start.Add(time.Minute)
	s.Status, s.FinishedAt, s.Counts = "succeeded", &end, map[string]int{"succeeded": 3}
	if got := progressLine(s, start.Add(time.Hour)); got != "wf-1 succeeded: 3/3 nodes done, 0 running, 0 failed, 0 waiting for a human, 1m0s" {
		t.Errorf("finished: %q", got)
	}
}

// TestLiveLine checks what reaches the terminal: lines written go above
// the progress line, which is erased before and drawn again after each,
// replaced in place, cut to the width, and left on the screen at the end.
func TestLiveLine(t *testing.T) {
	var term bytes.Buffer
	l := newLiveLine(&term, 20)
	fmt.Fprintf(l, "before any line\n")
	l.Set("progress 1")
	fmt.Fprintf(l, "event A\n")
	l.Set("progress 2, which is far too long for the terminal")
	l.Done()
	fmt.Fprintf(l, "after\n")
	want := "before any line\n" +
		"progress 1" +
		clearLine + "event A\nprogress 1" +
		clearLine + "progress 2, which …" +
		"\n" + "after\n"
	if got := term.String(); got != want {
		t.Fatalf("terminal got\n%q\nwant\n%q", got, want)
	}
	// What a terminal shows: each \r\x1b[2K erases the line so far.
	var screen []string
	for _, line := range strings.Split(term.String(), "\n") {
		if i := strings.LastIndex(line, clearLine); i >= 0 {
			line = line[i+len(clearLine):]
		}
		screen = append(screen, line)
	}
	if got := strings.Join(screen, "\n"); got != "before any line\nevent A\nprogress 2, which …\nafter\n" {
		t.Fatalf("screen shows\n%s", got)
	}
}
