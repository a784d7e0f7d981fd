package statemachine_test

import (
	"slices"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// PERF-45: the engine's hint that it published a node's current job spares
// Decide its lookup of that job; a hint naming another job (an older
// attempt's) spares nothing, and hints about unknown workflows or nodes
// are ignored.
func TestMarkPublishedSparesTheLookup(t *testing.T) {
	w, _ := newWorld(t, agent+"name: two\ntasks:\n  - id: a\n    prompt: do a\n  - id: b\n    prompt: do b\n")
	jobA, jobB := protocol.AgentJobID(testWF, "a", 1), protocol.AgentJobID(testWF, "b", 1)
	if !w.published[jobA] || !w.published[jobB] {
		t.Fatalf("published after submit: %v, want both agent jobs", w.published)
	}
	decide := func() (asked []string, effects int) {
		d := statemachine.Decide(w.wf(), w.now, func(id string) bool {
			asked = append(asked, id)
			return w.published[id]
		})
		slices.Sort(asked)
		return asked, len(d.Effects)
	}
	if asked, n := decide(); !slices.Equal(asked, []string{jobA, jobB}) || n != 0 {
		t.Fatalf("before any hint: asked %v, %d effects; want both jobs asked, none", asked, n)
	}

	w.st.MarkPublished(testWF, "a", "", jobA)
	w.st.MarkPublished(testWF, "nope", "", jobA)
	w.st.MarkPublished("wf-unknown", "a", "", jobA)
	if asked, n := decide(); !slices.Equal(asked, []string{jobB}) || n != 0 {
		t.Fatalf("a's job hinted: asked %v, %d effects; want only b's job asked, none", asked, n)
	}

	// A hint about another attempt's job is no hint about this one's.
	w.st.MarkPublished(testWF, "a", "", protocol.AgentJobID(testWF, "a", 2))
	if asked, _ := decide(); !slices.Equal(asked, []string{jobA, jobB}) {
		t.Fatalf("a hinted with another attempt's job: asked %v, want both jobs asked", asked)
	}

	// Not published and not hinted: Decide publishes it again.
	delete(w.published, jobB)
	d := statemachine.Decide(w.wf(), w.now, func(id string) bool { return w.published[id] })
	if len(d.Effects) != 1 || d.Effects[0].(statemachine.Publish).JobID() != jobB {
		t.Fatalf("b's job forgotten: effects %v, want b's job published again", d.Effects)
	}
}
