package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// TestProgressRedraws runs the progress line's drawing goroutine while
// lines are written: the line follows the status it is given, and Stop
// leaves the latest one on the screen.
func TestProgressRedraws(t *testing.T) {
	var term lockedBuffer
	live := newLiveLine(&term, 200)
	var asked atomic.Int64
	start := time.Now().Add(-time.Minute)
	p := startProgress(live, func(context.Context) (api.WorkflowSummary, error) {
		n := int(asked.Add(1))
		return api.WorkflowSummary{ID: "wf-1", Status: "running", SubmittedAt: start,
			Counts: map[string]int{"succeeded": n, "pending": 100 - n}}, nil
	})
	for i := 0; i < 3; i++ {
		fmt.Fprintf(live, "event %d\n", i)
		p.Changed()
		time.Sleep(progressTick + 100*time.Millisecond)
	}
	p.Stop()
	shown := term.String()
	final := fmt.Sprintf("wf-1 running: %d/100 nodes done", asked.Load())
	lines := strings.Split(strings.TrimSuffix(shown, "\n"), "\n")
	last := lines[len(lines)-1]
	if i := strings.LastIndex(last, clearLine); i >= 0 {
		last = last[i+len(clearLine):]
	}
	if !strings.HasPrefix(last, final) || !strings.HasSuffix(shown, "\n") {
		t.Fatalf("the screen ends on %q, want the latest status %q:\n%q", last, final, shown)
	}
	if asked.Load() < 2 { // the first draw and Stop's, whatever the ticks did
		t.Errorf("status asked %d times", asked.Load())
	}
	for i := 0; i < 3; i++ {
		if !strings.Contains(shown, fmt.Sprintf("event %d\n", i)) {
			t.Errorf("event %d missing:\n%q", i, shown)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for the drawing goroutine and the
// test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProgressStopWaitsForTheEnd: once the events say the workflow has
// finished, Stop's last line waits for the coordinator's status to say so
// too (it folds the event after a watcher may have read it), for at most
// two seconds.
func TestProgressStopWaitsForTheEnd(t *testing.T) {
	var term lockedBuffer
	live := newLiveLine(&term, 200)
	start := time.Now().Add(-time.Minute)
	var asked atomic.Int64
	p := startProgress(live, func(context.Context) (api.WorkflowSummary, error) {
		s := api.WorkflowSummary{ID: "wf-1", Status: "running", SubmittedAt: start, Counts: map[string]int{"succeeded": 2}}
		if asked.Add(1) > 3 { // the coordinator folds the end late
			end := start.Add(30 * time.Second)
			s.Status, s.FinishedAt = "succeeded", &end
		}
		return s, nil
	})
	p.Ended(true)
	p.Stop()
	shown := term.String()
	lines := strings.Split(strings.TrimSuffix(shown, "\n"), "\n")
	last := lines[len(lines)-1]
	if i := strings.LastIndex(last, clearLine); i >= 0 {
		last = last[i+len(clearLine):]
	}
	if want := "wf-1 succeeded: 2/2 nodes done"; !strings.HasPrefix(last, want) {
		t.Fatalf("the screen ends on %q, want %q:\n%q", last, want, shown)
	}
}
