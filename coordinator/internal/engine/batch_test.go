package engine

import (
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// PERF-57: a decision's events go to the log as one message. Four
// independent nodes become ready in one decision: their four node.ready
// events share one message (one sequence), each job is published once
// that message is in the log, and a new engine replaying the log folds
// the batch into the same nodes, then finishes the workflow.
func TestDecisionEventsShareOneMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: batch
defaults:
  ` + agentCmd + `gates: []
tasks:
  - {id: a, prompt: a}
  - {id: b, prompt: b}
  - {id: c, prompt: c}
  - {id: d, prompt: d}
`)
	var jobs []*taken
	for range 4 {
		jobs = append(jobs, e.next(protocol.KindAgent, "default", 5*time.Second))
	}
	readySeq := map[string]uint64{}
	for _, ev := range e.events(wf) {
		if ev.Type() == eventlog.TypeNodeReady {
			readySeq[ev.NodeID] = ev.Seq
		}
	}
	if len(readySeq) != 4 {
		t.Fatalf("node.ready events: %v, want one for each of a, b, c, d", readySeq)
	}
	for id, seq := range readySeq {
		if seq != readySeq["a"] {
			t.Fatalf("node.ready of %s at %d, of a at %d: not one message", id, seq, readySeq["a"])
		}
	}
	evs := e.events(wf)
	if msgs := e.count(protocol.StreamEvents, protocol.EventSubject(wf)); msgs != 2 || len(evs) != 5 {
		t.Fatalf("%d log messages holding %d events, want 2 holding 5 (the submission, then the batch)", msgs, len(evs))
	}
	before := map[string]time.Time{}
	for _, id := range []string{"a", "b", "c", "d"} {
		before[id] = e.node(wf, id).ReadyAt
	}

	e.stopEng()
	e.start()
	for _, id := range []string{"a", "b", "c", "d"} {
		n := e.node(wf, id)
		if n.Status != protocol.NodeReady || n.Attempt != 1 || !n.ReadyAt.Equal(before[id]) {
			t.Fatalf("%s after replay: %s attempt %d ready %v, want ready, attempt 1, %v", id, n.Status, n.Attempt, n.ReadyAt, before[id])
		}
	}
	for _, j := range jobs {
		e.started(j, 1)
		e.agentDone(j, 1, protocol.AgentSucceeded, nil)
	}
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	final := e.events(wf)
	if msgs := e.count(protocol.StreamEvents, protocol.EventSubject(wf)); msgs >= uint64(len(final)) {
		t.Fatalf("%d log messages for %d events: nothing was batched", msgs, len(final))
	}
}
