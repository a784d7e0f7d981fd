package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// HITL-06, S-2.12: show reports, per attempt, the feedback the attempt
// was given, with who retried it and their note, after a further round
// failed (which replaces the node's current feedback), and again after a
// restart has rebuilt the state from the event log.
func TestShowKeepsRetryNote(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	clk := testkit.NewClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	opts := startOptions{now: clk.Now, tick: 50 * time.Millisecond}
	e.start(opts)
	ctx := testkit.Context(t, 60*time.Second)
	wf := e.submit(loopYAML("note", "  max_attempts: 1\n"))

	e.failRound(wf, 1, map[string]string{"shout.go": shoutV1, "shout_test.go": shoutTest})
	e.waitEscalated(wf, "a")
	const note = "Shout must upper-case its argument: use strings.ToUpper"
	if _, err := e.client.Retry(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a", By: "ada", Note: note, Attempts: 1}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	e.failRound(wf, 1, map[string]string{"shout.go": shoutV1 + "\n// still wrong\n"})
	if n := e.waitEscalated(wf, "a"); n.Attempt != 2 {
		t.Fatalf("a escalated at attempt %d, want 2", n.Attempt)
	}

	check := func(when string) {
		t.Helper()
		d, err := e.client.Show(ctx, wf, "a")
		if err != nil {
			t.Fatalf("show %s: %v", when, err)
		}
		if len(d.Attempts) != 2 {
			t.Fatalf("show %s: %d attempts, want 2", when, len(d.Attempts))
		}
		a1, a2 := d.Attempts[0], d.Attempts[1]
		if a1.RetriedBy != "" || a1.RetryNote != "" || len(a1.ReceivedFeedback) != 0 {
			t.Errorf("show %s: attempt 1 started with %q %q %s; want nothing", when, a1.RetriedBy, a1.RetryNote, a1.ReceivedFeedback)
		}
		if a2.RetriedBy != "ada" || a2.RetryNote != note {
			t.Errorf("show %s: attempt 2 retried by %q with note %q; want ada's note", when, a2.RetriedBy, a2.RetryNote)
		}
		f := feedbackOf(t, a2.ReceivedFeedback)
		if f.Note == nil || f.Note.From != "ada" || f.Note.Text != note || f.Attempt != 1 || f.NextAttempt != 2 ||
			len(f.Gates) != 1 || f.Gates[0].Name != "test" {
			t.Errorf("show %s: attempt 2 received %s", when, a2.ReceivedFeedback)
		}
		// What the defect lost: the node's feedback now is attempt 2's
		// failure, and attempt 2's own feedback is that too, without the note.
		if cur := feedbackOf(t, d.Feedback); cur.Note != nil || cur.Attempt != 2 {
			t.Errorf("show %s: the node's current feedback = %s; want attempt 2's, no note", when, d.Feedback)
		}
		if strings.Contains(string(a2.Feedback), "strings.ToUpper") {
			t.Errorf("show %s: attempt 2's failure feedback carries the note: %s", when, a2.Feedback)
		}
	}
	check("after the second failure")
	e.stopEng()
	e.start(opts)
	e.waitEscalated(wf, "a")
	check("after a restart")
}
