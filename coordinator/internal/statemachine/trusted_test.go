package statemachine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// trustedTail ends the reason of a node escalated for a change to trusted
// configuration.
const trustedTail = "an agent may not change it unless a human accepts the change (approve --accept-config, reject, or retry) " +
	"(trusted_config: the patch changes .supervisor/)"

const trustedWF = "name: t\ndefaults:\n  agent: {command: [x]}\n" +
	"gates:\n  - {name: test, command: [t]}\n" +
	"tasks:\n  - {id: a, prompt: a, gates: [test]}\n  - {id: b, prompt: b, depends_on: [a], gates: []}\n"

// TRUST-CONFIG: a patch that changes .supervisor/ (gates, roles, templates,
// context) is not integrated though its gates pass: the node escalates,
// naming the files, as an integrity violation; a plain approve is refused;
// an approve that accepts the configuration (ApproveConfig) lands it and
// records the files accepted, through the log's encoding.
func TestTrustedConfigNeedsAHuman(t *testing.T) {
	w, _ := newWorld(t, trustedWF, true)
	w.patchStat = &protocol.PatchStat{Files: 2, Insertions: 2, Paths: []string{"src/a.go", ".supervisor/gates.yaml"}}
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	check(t, "gates pass", w.gateDone("a", "test", 1, protocol.GatePassed), lines(
		"gate.finished a/test passed",
		"node.escalated a",
	))
	n := w.node("a")
	wantReason := "integrity violation: the patch changes Supervisor's trusted configuration (.supervisor/gates.yaml); " + trustedTail
	if n.Status != protocol.NodeEscalated || n.Reason != wantReason || n.Integrated() {
		t.Fatalf("node a: %s %q integrated=%v, want escalated %q", n.Status, n.Reason, n.Integrated(), wantReason)
	}
	var fb feedback.Feedback
	if err := json.Unmarshal(n.Feedback(), &fb); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range fb.Gates {
		if g.Name == "trusted-config" && g.IntegrityViolation && strings.Join(g.Violations, ",") == ".supervisor/gates.yaml" {
			found = true
		}
	}
	if !found {
		t.Fatalf("feedback lacks the trusted-config violation: %s", n.Feedback())
	}

	check(t, "a plain approve", w.command(statemachine.Approve(w.wf(), "a", "ada", "", w.now)), lines(
		"refused conflict: node a: attempt 1's patch changes Supervisor's trusted configuration (.supervisor/gates.yaml); "+
			"approving it needs --accept-config, which accepts that change",
	))
	check(t, "approve accepting the configuration", w.command(statemachine.ApproveConfig(w.wf(), "a", "ada", "", w.now)), lines(
		"node.approved a",
		"integrate a",
		"node.integrated a",
		"node.finished a succeeded",
		"node.ready b",
		"publish agent b a1",
	))
	if got := w.node("a").AcceptedConfig(); strings.Join(got, ",") != ".supervisor/gates.yaml" {
		t.Fatalf("accepted config %q", got)
	}
	var approved *eventlog.NodeApproved
	for _, ev := range w.events {
		if b, ok := ev.Body.(eventlog.NodeApproved); ok {
			approved = &b
		}
	}
	if approved == nil || strings.Join(approved.AcceptedConfig, ",") != ".supervisor/gates.yaml" || approved.By != "ada" {
		t.Fatalf("node.approved event %+v", approved)
	}
}

// TRUST-CONFIG: which paths are trusted configuration: any path with a
// .supervisor component, in any case (a rename out of it counts: its old
// side is in the summary), and not names that merely resemble it; a
// patch whose summary is truncated may change it unseen.
func TestTrustedConfigPaths(t *testing.T) {
	for _, tc := range []struct {
		paths     []string
		truncated bool
		escalates bool
	}{
		{[]string{".supervisor/roles/dev.yaml"}, false, true},
		{[]string{".Supervisor/templates/x.yaml"}, false, true},
		{[]string{"svc/.supervisor/context/c.yaml"}, false, true},
		{[]string{".supervisor/gates.toml", "gates.toml"}, false, true},
		{[]string{".supervisor"}, false, true},
		{[]string{".supervisorrc", "docs/supervisor/gates.yaml", "a.supervisor/x"}, false, false},
		{[]string{"src/a.go"}, true, true},
	} {
		w, _ := newWorld(t, trustedWF)
		w.patchStat = &protocol.PatchStat{Files: len(tc.paths), Paths: tc.paths, PathsTruncated: tc.truncated}
		w.agentDone("a", 1, protocol.AgentSucceeded, true)
		w.gateDone("a", "test", 1, protocol.GatePassed)
		n := w.node("a")
		if escalated := n.Status == protocol.NodeEscalated; escalated != tc.escalates {
			t.Errorf("%v (truncated %v): node %s %q, want escalated=%v", tc.paths, tc.truncated, n.Status, n.Reason, tc.escalates)
		}
	}
}

// TRUST-CONFIG: a node that escalated for another reason (its gates failed,
// its attempts spent) and whose patch changes trusted configuration is
// not approved without accepting it either.
func TestTrustedConfigOnAnyEscalation(t *testing.T) {
	w, _ := newWorld(t, strings.Replace(trustedWF, "{id: a, prompt: a, gates: [test]}", "{id: a, prompt: a, gates: [test], max_attempts: 1}", 1))
	w.patchStat = &protocol.PatchStat{Files: 1, Paths: []string{".supervisor/context/repo.yaml"}}
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	w.gateDone("a", "test", 1, protocol.GateFailed)
	if n := w.node("a"); n.Status != protocol.NodeEscalated {
		t.Fatalf("node a %s %q, want escalated", n.Status, n.Reason)
	}
	got := w.command(statemachine.Approve(w.wf(), "a", "ada", "flaky test", w.now))
	if len(got) != 1 || !strings.Contains(got[0], "refused conflict") || !strings.Contains(got[0], ".supervisor/context/repo.yaml") {
		t.Fatalf("plain approve: %q", got)
	}
	got = w.command(statemachine.ApproveConfig(w.wf(), "a", "ada", "flaky test", w.now))
	if w.node("a").Status != protocol.NodeSucceeded {
		t.Fatalf("approve --accept-config: %q; node %s", got, w.node("a").Status)
	}
}

// An approval recorded before accepted_config existed decodes and folds:
// the field is optional in version 2 events.
func TestApprovalWithoutAcceptedConfigDecodes(t *testing.T) {
	data := []byte(`{"v":2,"type":"node.approved","workflow_id":"wf","node_id":"a","time":"2026-11-24T09:00:00Z",` +
		`"data":{"attempt":1,"by":"ada"}}`)
	ev, err := eventlog.Decode(data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	b, ok := ev.Body.(eventlog.NodeApproved)
	if !ok || b.By != "ada" || b.AcceptedConfig != nil {
		t.Fatalf("decoded %#v", ev.Body)
	}
	out, err := eventlog.Encode(eventlog.Event{WorkflowID: "wf", NodeID: "a", Time: t0, Body: eventlog.NodeApproved{Attempt: 1, By: "ada"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "accepted_config") {
		t.Fatalf("an approval accepting nothing encodes accepted_config: %s", out)
	}
}
