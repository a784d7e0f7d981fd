package statemachine_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// agentPatch reports node's agent succeeding with a patch whose reference
// says it is size bytes.
func (w *world) agentPatch(node string, token uint64, size int64) []string {
	n := w.node(node)
	return w.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: protocol.AgentJobID(w.id, node, n.Attempt), WorkflowID: w.id, NodeID: node, Attempt: n.Attempt,
		LeaseToken: token, Host: "h", Status: protocol.AgentSucceeded, FinishedAt: w.now,
		Patch: &protocol.PatchRef{NodeID: node, Object: fmt.Sprintf("%s/%s/a%d.patch", w.id, node, n.Attempt),
			SHA256: fmt.Sprintf("sha-%d", size), Size: size}}})
}

// A patch over protocol.MaxPatchBytes is never gated nor integrated: the
// round fails before any gate is dispatched, and the next attempt's
// feedback says the patch was too large and by how much. A patch of
// exactly the limit is gated as usual.
func TestPatchOverLimitIsNotIntegrated(t *testing.T) {
	const yaml = "name: big\n" + agent + "gates:\n  - {name: test, command: [t]}\ntasks:\n  - {id: a, prompt: a, gates: [test]}\n"
	w, _ := newWorld(t, yaml)
	got := w.agentPatch("a", 1, protocol.MaxPatchBytes+1)
	if want := lines("node.agent_done a succeeded", "node.retry_scheduled a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("an oversized patch: %q; want %q", got, want)
	}
	if w.commits != 0 {
		t.Fatalf("an oversized patch was integrated (%d commits)", w.commits)
	}
	w.later(time.Hour)
	f := feedbackOf(t, w.job("a").Feedback)
	want := protocol.PatchTooLarge(protocol.MaxPatchBytes + 1)
	if len(f.Gates) != 1 || f.Gates[0].Name != "agent" || f.Gates[0].Error != want ||
		!strings.Contains(want, fmt.Sprintf("%d bytes, over the %d-byte limit", protocol.MaxPatchBytes+1, protocol.MaxPatchBytes)) {
		t.Fatalf("feedback after an oversized patch: %+v; want the agent's error %q", f.Gates, want)
	}
	if r := w.node("a").History()[0].Reason; r != want {
		t.Errorf("attempt 1's reason %q; want %q", r, want)
	}

	w2, _ := newWorld(t, yaml)
	got = w2.agentPatch("a", 1, protocol.MaxPatchBytes)
	if want := lines("node.agent_done a succeeded", "gate.dispatched a/test r1", "publish gate a/test r1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("a patch of exactly the limit: %q; want %q", got, want)
	}
}
