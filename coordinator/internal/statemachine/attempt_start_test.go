package statemachine_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// S-2.12, HITL-06: every attempt keeps what it was started with, the feedback its
// agent job carried and the human retry (who, with what note) that started
// it, in its history record once it ends: a further failed round, which
// replaces the node's feedback, loses neither, and a replay of the log
// (encoded and decoded) rebuilds them.
func TestAttemptKeepsWhatItWasGiven(t *testing.T) {
	w, _ := newWorld(t, "name: l\n"+agent+"  max_attempts: 1\ngates:\n  - {name: test, command: [t]}\n"+
		"tasks:\n  - {id: a, prompt: a, gates: [test]}\n", true)
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	w.gateDone("a", "test", 2, protocol.GateFailed)
	if n := w.node("a"); n.Status != protocol.NodeEscalated {
		t.Fatalf("a is %s, want escalated", n.Status)
	}
	const note = "use strings.ToUpper"
	w.command(statemachine.Retry(w.wf(), "a", "ada", note, 1, w.now))
	job := w.job("a")
	if n := w.node("a"); n.Given().RetriedBy != "ada" || n.Given().Note != note || string(n.Given().Feedback) != string(job.Feedback) {
		t.Errorf("attempt 2 in flight was given %+v; its job carries %s", n.Given(), job.Feedback)
	}
	w.agentDone("a", 3, protocol.AgentSucceeded, true)
	w.gateDone("a", "test", 4, protocol.GateFailed)
	w.later(time.Minute)

	n := w.node("a")
	if n.Status != protocol.NodeEscalated || n.Attempt != 2 || len(n.History()) != 2 {
		t.Fatalf("a: %s at attempt %d, %d attempts recorded; want escalated at 2, 2 recorded", n.Status, n.Attempt, len(n.History()))
	}
	if f := feedbackOf(t, n.Feedback()); f.Note != nil || f.Attempt != 2 {
		t.Errorf("the node's feedback after attempt 2 = %s; want attempt 2's, without the note", n.Feedback())
	}
	if g := n.History()[0].Given; g.RetriedBy != "" || g.Note != "" || len(g.Feedback) != 0 {
		t.Errorf("attempt 1 was given %+v, want nothing", g)
	}
	g := n.History()[1].Given
	if g.RetriedBy != "ada" || g.Note != note || string(g.Feedback) != string(job.Feedback) {
		t.Errorf("attempt 2's record: given %+v; want ada's retry and the feedback its job carried, %s", g, job.Feedback)
	}
	if f := feedbackOf(t, g.Feedback); f.Note == nil || f.Note.From != "ada" || f.Note.Text != note || f.NextAttempt != 2 {
		t.Errorf("attempt 2 received %s", g.Feedback)
	}

	replayed := statemachine.New()
	for _, ev := range w.events {
		if err := replayed.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	wf, _ := replayed.Workflow(testWF)
	if got := wf.Nodes["a"].History(); !reflect.DeepEqual(got, n.History()) {
		t.Errorf("replayed history differs:\n%+v\nwant\n%+v", got, n.History())
	}
}
