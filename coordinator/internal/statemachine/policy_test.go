package statemachine_test

import (
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// TestApprovalPolicy: an approval step's policy (HITL-05) approves a
// patch within its limits that touches no sensitive path, recorded as the
// policy's with its reason, and the node integrates without a human;
// any other patch waits for one, told why the policy declined. Without
// a policy, every approval step waits for a human.
func TestApprovalPolicy(t *testing.T) {
	const gates = "gates:\n  - {name: test, command: [t]}\n"
	stat := func(files, ins, del int, paths ...string) *protocol.PatchStat {
		return &protocol.PatchStat{Files: files, Insertions: ins, Deletions: del, Paths: paths}
	}
	task := func(approval string) string {
		return "name: p\n" + agent + gates + "tasks:\n  - id: a\n    prompt: a\n    gates: [test]\n    approval: " + approval +
			"\n  - {id: b, prompt: b, depends_on: [a], gates: []}\n"
	}
	for _, tc := range []struct {
		name, approval string
		stat           *protocol.PatchStat
		// reason is the node's reason after its gates passed: the
		// approval's, or why it awaits a human.
		approved bool
		reason   string
	}{
		{"small and harmless: approved", "{auto_approve: true}", stat(1, 3, 1, "docs/intro.md"), true,
			"approved by policy"},
		{"at the limits: approved", "{auto_approve: {max_files: 2, max_lines: 10}}", stat(2, 6, 4, "a.go", "b.go"), true,
			"approved by policy"},
		{"one file too many", "{auto_approve: true}", stat(3, 3, 0, "a.go", "b.go", "c.go"), false,
			"an approval step: its gates passed; the approval policy declined: 3 files changed, more than max_files 2"},
		{"one line too many", "{auto_approve: {max_lines: 10}}", stat(1, 6, 5, "a.go"), false,
			"an approval step: its gates passed; the approval policy declined: 11 lines changed, more than max_lines 10"},
		{"a built-in sensitive path, in any case", "{auto_approve: true}", stat(1, 1, 0, "internal/OAuth/handler.go"), false,
			"an approval step: its gates passed; the approval policy declined: internal/OAuth/handler.go is a sensitive path (**/*auth*)"},
		{"the old side of a rename counts", "{auto_approve: true}", stat(1, 0, 0, "certs/server.pem", "notes.txt"), false,
			"an approval step: its gates passed; the approval policy declined: certs/server.pem is a sensitive path (**/*.pem)"},
		// Trusted configuration, or a patch that may change it unseen,
		// escalates before the approval step (TRUST-CONFIG, trusted_test.go).
		{"the gates' own configuration", "{auto_approve: true}", stat(1, 1, 0, ".supervisor/gates.yaml"), false,
			"integrity violation: the patch changes Supervisor's trusted configuration (.supervisor/gates.yaml); " + trustedTail},
		{"the task's own sensitive paths", "{auto_approve: {sensitive_paths: [db/migrations/**]}}", stat(1, 2, 0, "db/migrations/0042.sql"), false,
			"an approval step: its gates passed; the approval policy declined: db/migrations/0042.sql is a sensitive path (db/migrations/**)"},
		{"a binary change", "{auto_approve: true}", &protocol.PatchStat{Files: 1, Binary: true, Paths: []string{"logo.png"}}, false,
			"an approval step: its gates passed; the approval policy declined: the patch changes a binary file"},
		{"too many names to check", "{auto_approve: {max_files: 1000, max_lines: 100000}}",
			&protocol.PatchStat{Files: 300, Paths: []string{"x"}, PathsTruncated: true}, false,
			"integrity violation: the patch changes Supervisor's trusted configuration (the patch's summary does not list every file " +
				"it changes, so it may change .supervisor/); " + trustedTail},
		{"a patch without a summary (an older worker)", "{auto_approve: true}", nil, false,
			"integrity violation: the patch changes Supervisor's trusted configuration (the patch's summary does not list every file " +
				"it changes, so it may change .supervisor/); " + trustedTail},
		{"no policy: a human decides", "required", stat(1, 1, 0, "a.go"), false,
			"an approval step: its gates passed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := newWorld(t, task(tc.approval))
			w.patchStat, w.noStat = tc.stat, tc.stat == nil
			w.agentDone("a", 1, protocol.AgentSucceeded, true)
			got := w.gateDone("a", "test", 1, protocol.GatePassed)
			n := w.node("a")
			if n.Reason != tc.reason {
				t.Errorf("reason %q, want %q", n.Reason, tc.reason)
			}
			if strings.HasPrefix(tc.reason, "integrity violation") {
				if n.Status != protocol.NodeEscalated || w.wf().Status != protocol.WorkflowNeedsAttention {
					t.Errorf("node %s, workflow %s: want escalated, needs_attention (effects %q)", n.Status, w.wf().Status, got)
				}
				return
			}
			if !tc.approved {
				if n.Status != protocol.NodeAwaitingApproval || w.wf().Status != protocol.WorkflowNeedsAttention {
					t.Errorf("node %s, workflow %s: want awaiting_approval, needs_attention (effects %q)", n.Status, w.wf().Status, got)
				}
				return
			}
			want := "gate.finished a/test passed|node.approved a|integrate a|node.integrated a|node.finished a succeeded|node.ready b|publish agent b a1"
			if strings.Join(got, "|") != want {
				t.Errorf("effects\n%q\nwant\n%q", strings.Join(got, "|"), want)
			}
			if n.ApprovedBy() != statemachine.PolicyApprover || n.Status != protocol.NodeSucceeded {
				t.Errorf("approved by %q, status %s", n.ApprovedBy(), n.Status)
			}
			if note := n.History(); len(note) != 0 {
				t.Logf("history %+v", note)
			}
			if got := w.job("b").Approvals["a"]; got != statemachine.PolicyApprover {
				t.Errorf("b's job says a was approved by %q", got)
			}
		})
	}
}

// The names decisions no person made are recorded under cannot be taken
// by a person (HITL-05, HITL-02): the record would lie.
func TestReservedApproverNames(t *testing.T) {
	w, _ := newWorld(t, "name: p\n"+agent+"tasks:\n  - {id: a, prompt: a, gates: [], approval: required}\n")
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	if w.node("a").Status != protocol.NodeAwaitingApproval {
		t.Fatalf("a is %s", w.node("a").Status)
	}
	for _, by := range []string{statemachine.PolicyApprover, statemachine.TimeoutApprover} {
		_, err := statemachine.Approve(w.wf(), "a", by, "", w.now)
		if err == nil || !strings.Contains(err.Error(), "decide as yourself") {
			t.Errorf("approve as %q: %v", by, err)
		}
	}
}
