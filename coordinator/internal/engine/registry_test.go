package engine

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// These tests drive the gate registry and node-level gate changes through
// the real API (sup.api.gate-*) of an engine on embedded NATS, with the
// registry in its real KV bucket; the test plays the runners as
// engine_test.go does.

// lowerGates are a built-in "test" and a user "lint".
func lowerGates() *gates.Set {
	test := gates.New("test", "go", "test", "./...")
	test.Source = gates.Source{Origin: gates.OriginBuiltin, File: "configs/gates/go.yaml", Line: 3}
	lint := gates.New("lint", "golangci-lint", "run")
	lint.Source = gates.Source{Origin: gates.OriginUser, File: "/home/u/.supervisor/gates.yaml", Line: 2}
	return gates.NewSet(test, lint)
}

// apiError asserts err is an API error with code and returns it.
func wantAPIError(t *testing.T, err error, code int, what string) *api.Error {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: err = %v, want API error %d", what, err, code)
	}
	if ae.Code != code {
		t.Fatalf("%s: code %d (%s), want %d", what, ae.Code, ae, code)
	}
	return ae
}

func rawJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gatesByName(l api.GateListResponse) map[string]api.GateInfo {
	m := map[string]api.GateInfo{}
	for _, g := range l.Gates {
		m[g.Name] = g
	}
	return m
}

func gateNames(l api.GateListResponse) string {
	var out []string
	for _, g := range l.Gates {
		out = append(out, g.Name)
	}
	return strings.Join(out, ",")
}

// The registry is a fleet-wide gate source: list shows the coordinator's
// built-in and user gates and the registry's, each with its source; add,
// update and remove change the KV bucket, with optimistic concurrency;
// built-in and user gates can be overridden but not removed.
func TestGateRegistryRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start(startOptions{gates: lowerGates()})
	ctx := testkit.Context(t, 30*time.Second)
	c := e.client

	l, err := c.GateList(ctx, api.GateListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := gatesByName(l); gateNames(l) != "lint,test" || got["test"].Source != api.SourceBuiltin || got["lint"].Source != api.SourceUser ||
		got["test"].DefinedAt != "configs/gates/go.yaml:3" || got["test"].Definition.TimeoutSeconds != 300 {
		t.Fatalf("initial list = %+v", l.Gates)
	}

	// add
	res, err := c.GateAdd(ctx, api.GateAddRequest{Definition: "name: vet\ncommand: [go, vet, ./...]\ntimeout: 2m\n"})
	if err != nil {
		t.Fatalf("add vet: %v", err)
	}
	if res.Action != api.GateAdded || res.Gate.Source != api.SourceRegistry || res.Gate.Revision == 0 ||
		res.Gate.DefinedAt != "sup-gates/vet" || res.Gate.Definition.TimeoutSeconds != 120 ||
		strings.Join(res.Gate.Definition.Command, " ") != "go vet ./..." || len(res.Gate.Overrides) != 0 {
		t.Fatalf("add vet = %+v", res)
	}
	// It is in the KV bucket as GateSpec JSON, defaults explicit.
	ent, err := e.b.Gates.Get(ctx, "vet")
	if err != nil {
		t.Fatal(err)
	}
	var stored protocol.GateSpec
	if err := json.Unmarshal(ent.Value(), &stored); err != nil || stored.Name != "vet" || stored.TimeoutSeconds != 120 ||
		stored.Retries() != 3 || stored.Pool != "default" || stored.Source != "sup-gates/vet" {
		t.Fatalf("stored vet = %s (%v)", ent.Value(), err)
	}
	if l, _ = c.GateList(ctx, api.GateListRequest{}); gateNames(l) != "lint,test,vet" || gatesByName(l)["vet"].Source != api.SourceRegistry {
		t.Fatalf("list after add = %+v", l.Gates)
	}

	// A name that exists, in the registry or below it, needs --replace.
	_, err = c.GateAdd(ctx, api.GateAddRequest{Definition: "name: vet\ncommand: [go, vet]\n"})
	if ae := wantAPIError(t, err, api.CodeConflict, "duplicate add"); !strings.Contains(ae.Description, "--replace") {
		t.Errorf("duplicate add: %s", ae.Description)
	}
	_, err = c.GateAdd(ctx, api.GateAddRequest{Definition: "name: test\ncommand: [go, test, -short, ./...]\n"})
	if ae := wantAPIError(t, err, api.CodeConflict, "add over a built-in gate"); !strings.Contains(ae.Description, "configs/gates/go.yaml:3") {
		t.Errorf("add over a built-in gate: %s", ae.Description)
	}
	res, err = c.GateAdd(ctx, api.GateAddRequest{Definition: "name: test\ncommand: [go, test, -short, ./...]\n", Replace: true})
	if err != nil || res.Action != api.GateAdded || strings.Join(res.Gate.Overrides, ",") != api.SourceBuiltin ||
		!strings.Contains(res.Note, "overrides the built-in gate") {
		t.Fatalf("replace built-in test = %+v, %v", res, err)
	}
	res, err = c.GateAdd(ctx, api.GateAddRequest{Definition: "name: vet\ncommand: [go, vet, ./cmd/...]\n", Replace: true})
	if err != nil || res.Action != api.GateReplaced || res.Gate.Definition.Command[2] != "./cmd/..." ||
		res.Gate.Definition.TimeoutSeconds != 300 {
		t.Fatalf("replace vet = %+v, %v", res, err)
	}
	rev := res.Gate.Revision

	// update: only the fields given change; the whole gate is validated.
	res, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "vet", Set: map[string]json.RawMessage{
		"timeout": rawJSON(t, 600), "max_retries": rawJSON(t, 5), "severity": rawJSON(t, "warning")}})
	if err != nil {
		t.Fatalf("update vet: %v", err)
	}
	d := res.Gate.Definition
	if res.Action != api.GateUpdated || d.TimeoutSeconds != 600 || d.Retries() != 5 || d.Severity != "warning" ||
		d.Command[2] != "./cmd/..." || res.Gate.Revision <= rev {
		t.Fatalf("update vet = %+v", res)
	}
	_, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "vet", Set: map[string]json.RawMessage{"timeout": rawJSON(t, "2h")}})
	ae := wantAPIError(t, err, api.CodeInvalid, "update beyond the maximum timeout")
	if len(ae.Problems) != 1 || ae.Problems[0].File != "gate update" || ae.Problems[0].Line == 0 ||
		!strings.Contains(ae.Problems[0].Message, "timeout 2h is out of range") {
		t.Errorf("update problems = %+v", ae.Problems)
	}
	_, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "vet", Set: map[string]json.RawMessage{"poll_interval": rawJSON(t, "2h"), "max_pending": rawJSON(t, "1h")}})
	_ = wantAPIError(t, err, api.CodeInvalid, "max_pending shorter than poll_interval")
	_, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "vet", Set: map[string]json.RawMessage{"name": rawJSON(t, "other")}})
	_ = wantAPIError(t, err, api.CodeBadRequest, "rename")
	_, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "nope", Set: map[string]json.RawMessage{"timeout": rawJSON(t, 60)}})
	_ = wantAPIError(t, err, api.CodeNotFound, "update of an unknown gate")
	res, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "vet", Unset: []string{"severity", "max_retries"}})
	if err != nil || res.Gate.Definition.Severity != "error" || res.Gate.Definition.Retries() != 3 || res.Gate.Definition.TimeoutSeconds != 600 {
		t.Fatalf("unset = %+v, %v", res, err)
	}

	// Updating a user gate copies it to the registry, overriding it.
	res, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "lint", Set: map[string]json.RawMessage{"timeout_secs": rawJSON(t, 900)}})
	if err != nil || res.Gate.Source != api.SourceRegistry || strings.Join(res.Gate.Overrides, ",") != api.SourceUser ||
		res.Gate.Definition.TimeoutSeconds != 900 || res.Gate.Definition.Command[0] != "golangci-lint" ||
		!strings.Contains(res.Note, "copied to the registry") {
		t.Fatalf("update of a user gate = %+v, %v", res, err)
	}

	// remove
	res, err = c.GateRemove(ctx, api.GateRemoveRequest{Name: "vet"})
	if err != nil || res.Action != api.GateRemoved || res.Gate.Name != "vet" {
		t.Fatalf("remove vet = %+v, %v", res, err)
	}
	_, err = c.GateRemove(ctx, api.GateRemoveRequest{Name: "vet"})
	_ = wantAPIError(t, err, api.CodeNotFound, "second remove")
	res, err = c.GateRemove(ctx, api.GateRemoveRequest{Name: "lint"})
	if err != nil || !strings.Contains(res.Note, "user gate") {
		t.Fatalf("remove the lint override = %+v, %v", res, err)
	}
	if _, err := c.GateRemove(ctx, api.GateRemoveRequest{Name: "test"}); err != nil {
		t.Fatalf("remove the test override: %v", err)
	}
	_, err = c.GateRemove(ctx, api.GateRemoveRequest{Name: "test"})
	ae = wantAPIError(t, err, api.CodeConflict, "remove a built-in gate")
	for _, want := range []string{"built-in gate", "configs/gates/go.yaml:3", "only gates added with `gate add` can be removed"} {
		if !strings.Contains(ae.Description, want) {
			t.Errorf("remove of a built-in gate: %q lacks %q", ae.Description, want)
		}
	}
	_, err = c.GateRemove(ctx, api.GateRemoveRequest{Name: "lint"})
	_ = wantAPIError(t, err, api.CodeConflict, "remove a user gate")
	l, _ = c.GateList(ctx, api.GateListRequest{})
	if got := gatesByName(l); gateNames(l) != "lint,test" || got["test"].Source != api.SourceBuiltin || got["lint"].Source != api.SourceUser ||
		got["lint"].Definition.TimeoutSeconds != 300 {
		t.Fatalf("list after removals = %+v", l.Gates)
	}
}

// A definition is validated exactly like an entry of a gate file: every
// problem positioned in the text given, named "gate add" (or the file).
func TestGateRegistryValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start(startOptions{gates: lowerGates()})
	ctx := testkit.Context(t, 30*time.Second)
	c := e.client

	cases := []struct {
		name, def string
		line, col int
		want      string
	}{
		{"string command", "name: vet\ncommand: go vet ./...\n", 2, 10, "must be an argv list, e.g. [go, vet, ./...]"},
		{"shell", "name: vet\ncommand: [sh, -c, go vet ./...]\n", 2, 10, "runs a shell"},
		{"typo", "name: vet\ncommand: [go, vet]\ntimout: 5m\n", 3, 1, `did you mean "timeout"?`},
		{"reserved", "name: vet\ncommand: [go, vet]\nrequired: true\n", 3, 1, "up to the task"},
		{"unknown dependency", "name: vet\ncommand: [go, vet]\ndepends_on: [build]\n", 3, 14, `depends on unknown gate "build"`},
		{"bad name", "name: a.b\ncommand: [x]\n", 1, 7, "invalid gate name"},
		{"denied env", "name: vet\ncommand: [go, vet]\nenv: {PATH: /x}\n", 3, 7, "may not set PATH"},
		{"yaml", "name: [vet\n", 0, 0, "invalid YAML"},
		{"two gates", "gates:\n  - {name: a, command: [a]}\n  - {name: b, command: [b]}\n", 2, 3, "give exactly one"},
	}
	for _, tc := range cases {
		_, err := c.GateAdd(ctx, api.GateAddRequest{Definition: tc.def})
		ae := wantAPIError(t, err, api.CodeInvalid, tc.name)
		found := false
		for _, p := range ae.Problems {
			if strings.Contains(p.Message, tc.want) {
				found = true
				if p.File != "gate add" || (tc.line != 0 && (p.Line != tc.line || p.Column != tc.col)) {
					t.Errorf("%s: problem at %s:%d:%d, want gate add:%d:%d", tc.name, p.File, p.Line, p.Column, tc.line, tc.col)
				}
			}
		}
		if !found {
			t.Errorf("%s: problems %+v lack %q", tc.name, ae.Problems, tc.want)
		}
	}
	_, err := c.GateAdd(ctx, api.GateAddRequest{Definition: "name: vet\ncommand: go vet\n", Filename: "vet.yaml"})
	if ae := wantAPIError(t, err, api.CodeInvalid, "file name"); ae.Problems[0].File != "vet.yaml" || !strings.Contains(err.Error(), "vet.yaml:2:10:") {
		t.Errorf("problems named %q: %v", ae.Problems[0].File, err)
	}
	_, err = c.GateAdd(ctx, api.GateAddRequest{Definition: "  \n"})
	_ = wantAPIError(t, err, api.CodeBadRequest, "empty definition")

	// JSON works as well, and a one-gate file.
	res, err := c.GateAdd(ctx, api.GateAddRequest{Definition: `{"name": "fmt", "command": ["gofmt", "-l", "."], "timeout": 60}`})
	if err != nil || res.Gate.Definition.TimeoutSeconds != 60 {
		t.Fatalf("JSON add = %+v, %v", res, err)
	}
	if _, err := c.GateAdd(ctx, api.GateAddRequest{Definition: "gates:\n  - name: unit\n    command: [go, test, -short, ./...]\n    depends_on: [fmt, test]\n"}); err != nil {
		t.Fatalf("one-gate file: %v", err)
	}
	// A gate others depend on stays.
	_, err = c.GateRemove(ctx, api.GateRemoveRequest{Name: "fmt"})
	if ae := wantAPIError(t, err, api.CodeConflict, "remove a dependency"); !strings.Contains(ae.Description, "needed by unit") {
		t.Errorf("remove a dependency: %s", ae.Description)
	}
	// Cycles through registry gates are refused where they are written.
	_, err = c.GateUpdate(ctx, api.GateUpdateRequest{Name: "fmt", Set: map[string]json.RawMessage{"depends_on": rawJSON(t, []string{"unit"})}})
	if ae := wantAPIError(t, err, api.CodeInvalid, "cycle"); !strings.Contains(ae.Error(), "cycle") {
		t.Errorf("cycle: %v", ae)
	}
	_, err = c.GateAdd(ctx, api.GateAddRequest{Definition: "name: x\ncommand: [x]\n", Optional: true})
	_ = wantAPIError(t, err, api.CodeBadRequest, "optional at fleet level")
}

// A submission may name registry gates: the registry is read at every
// submission, so a change shows in the next workflow, and the gate runs.
func TestSubmissionUsesRegistryGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start(startOptions{gates: lowerGates()})
	ctx := testkit.Context(t, 30*time.Second)
	if _, err := e.client.GateAdd(ctx, api.GateAddRequest{Definition: "name: vet\ncommand: [go, vet, ./...]\ntimeout: 2m\n"}); err != nil {
		t.Fatal(err)
	}
	wfYAML := "name: reg\ndefaults:\n  " + agentCmd + "gates: [vet, test]\ntasks:\n  - id: a\n    prompt: a\n    gates: [vet]\n"
	wf := e.submit(wfYAML)
	n := e.node(wf, "a")
	if strings.Join(n.GateOrder(), ",") != "vet" || n.GateSpecs()["vet"].Source != "sup-gates/vet" || n.GateSpecs()["vet"].TimeoutSeconds != 120 {
		t.Fatalf("node a gates = %v %+v", n.GateOrder(), n.GateSpecs()["vet"])
	}
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(j, 1)
	e.agentDone(j, 1, protocol.AgentSucceeded, e.makePatch(j, "a.txt", "a\n"))
	g := e.next(protocol.KindGate, "default", 5*time.Second)
	if g.gate.Gate != "vet" || strings.Join(g.gate.Command, " ") != "go vet ./..." || g.gate.TimeoutSeconds != 120 {
		t.Fatalf("gate job = %+v", g.gate)
	}
	e.started(g, 2)
	e.gateDone(g, 2, protocol.GatePassed)
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)

	// The next submission sees the updated definition.
	if _, err := e.client.GateUpdate(ctx, api.GateUpdateRequest{Name: "vet", Set: map[string]json.RawMessage{"timeout": rawJSON(t, "7m")}}); err != nil {
		t.Fatal(err)
	}
	wf2 := e.submit(wfYAML)
	a2 := e.node(wf2, "a")
	if got := a2.GateSpecs()["vet"].TimeoutSeconds; got != 420 {
		t.Errorf("timeout after update = %d, want 420", got)
	}
	// A removed registry gate is unknown to the next submission.
	if _, err := e.client.GateRemove(ctx, api.GateRemoveRequest{Name: "vet"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.Submit(ctx, api.SubmitRequest{Filename: "wf.yaml", YAML: wfYAML, Repo: e.repo})
	if ae := wantAPIError(t, err, api.CodeInvalid, "submission after removal"); !strings.Contains(ae.Error(), `"vet"`) {
		t.Errorf("submission after removal: %v", ae)
	}
}

// A running workflow's node gates change through node.gates_changed: a
// gate added to a gating node is dispatched in its layer (required, and as
// an error gate its failure is retried with feedback, RETRY-09); one added to a
// pending node runs once its agent succeeds, as optional with on_fail
// warn; a removal that would orphan a dependent is refused; a finished
// node is refused; the changes survive a restart (they are events).
func TestNodeGateChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start(startOptions{gates: lowerGates()})
	ctx := testkit.Context(t, 60*time.Second)
	c := e.client
	if _, err := c.GateAdd(ctx, api.GateAddRequest{Definition: "name: fmt\ncommand: [gofmt, -l, .]\n"}); err != nil {
		t.Fatal(err)
	}
	wf := e.submit("name: nodes\ndefaults:\n  " + agentCmd + "gates:\n  - {name: vet, command: [go, vet, ./...]}\n" +
		"tasks:\n  - id: a\n    prompt: a\n    gates: [vet]\n  - id: b\n    prompt: b\n    depends_on: [a]\n    gates: []\n")

	// a gating with vet running.
	ja := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(ja, 1)
	e.agentDone(ja, 1, protocol.AgentSucceeded, e.makePatch(ja, "a.txt", "a\n"))
	vet := e.next(protocol.KindGate, "default", 5*time.Second)
	if vet.gate.Gate != "vet" {
		t.Fatalf("first gate = %s", vet.gate.Gate)
	}
	e.started(vet, 2)

	// Added to a gating node: dispatched now.
	res, err := c.GateAdd(ctx, api.GateAddRequest{WorkflowID: wf, NodeID: "a", Definition: "name: extra\ncommand: [make, check]\n"})
	if err != nil {
		t.Fatalf("node add: %v", err)
	}
	if res.Action != api.GateAdded || res.Gate.Source != api.SourceTask || res.Gate.Required == nil || !*res.Gate.Required ||
		res.Gate.OnFail != string(gates.RetryWithFeedback) || !strings.Contains(res.Note, "gating") {
		t.Fatalf("node add = %+v", res)
	}
	extra := e.next(protocol.KindGate, "default", 5*time.Second)
	if extra.gate.Gate != "extra" || extra.gate.NodeID != "a" || strings.Join(extra.gate.Command, " ") != "make check" {
		t.Fatalf("added gate job = %+v", extra.gate)
	}
	e.started(extra, 3)
	// A gate depending on it waits for it.
	if _, err := c.GateAdd(ctx, api.GateAddRequest{WorkflowID: wf, NodeID: "a",
		Definition: "name: late\ncommand: [make, late]\ndepends_on: [extra]\n"}); err != nil {
		t.Fatalf("node add late: %v", err)
	}
	e.noJob(protocol.KindGate, "default", 300*time.Millisecond, "late before extra passed")
	l, err := c.GateList(ctx, api.GateListRequest{WorkflowID: wf, NodeID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if gateNames(l) != "extra,vet,late" || l.NodeStatus != protocol.NodeGating || *gatesByName(l)["late"].Layer != 1 ||
		gatesByName(l)["vet"].Source != api.SourceWorkflow {
		t.Fatalf("node list = %+v", l)
	}
	_, err = c.GateAdd(ctx, api.GateAddRequest{WorkflowID: wf, NodeID: "a", Definition: "name: extra\ncommand: [x]\n"})
	_ = wantAPIError(t, err, api.CodeConflict, "node add of an existing gate")
	_, err = c.GateAdd(ctx, api.GateAddRequest{WorkflowID: wf, NodeID: "a", Definition: "name: bad\ncommand: [x]\ndepends_on: [nope]\n"})
	if ae := wantAPIError(t, err, api.CodeInvalid, "node add with an unknown dependency"); ae.Problems[0].Line != 3 {
		t.Errorf("unknown dependency problem = %+v", ae.Problems)
	}
	_, err = c.GateRemove(ctx, api.GateRemoveRequest{WorkflowID: wf, NodeID: "a", Name: "extra"})
	if ae := wantAPIError(t, err, api.CodeConflict, "remove a needed gate"); !strings.Contains(ae.Description, "needed by late") {
		t.Errorf("remove a needed gate: %s", ae.Description)
	}
	if _, err := c.GateRemove(ctx, api.GateRemoveRequest{WorkflowID: wf, NodeID: "a", Name: "late"}); err != nil {
		t.Fatalf("remove late: %v", err)
	}
	_, err = c.GateRemove(ctx, api.GateRemoveRequest{WorkflowID: wf, NodeID: "a", Name: "late"})
	_ = wantAPIError(t, err, api.CodeNotFound, "remove twice")

	// b is pending: a fleet gate by name, optional, warn; then updated.
	res, err = c.GateAdd(ctx, api.GateAddRequest{WorkflowID: wf, NodeID: "b", Name: "fmt", Optional: true, OnFail: "warn"})
	if err != nil || res.Gate.Required == nil || *res.Gate.Required || res.Gate.OnFail != "warn" || res.Gate.DefinedAt != "sup-gates/fmt" ||
		!strings.Contains(res.Note, "once its agent succeeds") {
		t.Fatalf("node add by name = %+v, %v", res, err)
	}
	res, err = c.GateUpdate(ctx, api.GateUpdateRequest{WorkflowID: wf, NodeID: "b", Name: "fmt", Set: map[string]json.RawMessage{"timeout": rawJSON(t, 45)}})
	if err != nil || res.Gate.Definition.TimeoutSeconds != 45 || res.Gate.OnFail != "warn" {
		t.Fatalf("node update = %+v, %v", res, err)
	}
	_, err = c.GateUpdate(ctx, api.GateUpdateRequest{WorkflowID: wf, NodeID: "b", Name: "fmt", Set: map[string]json.RawMessage{"command": rawJSON(t, "gofmt -l .")}})
	_ = wantAPIError(t, err, api.CodeInvalid, "node update with a string command")

	// The changes are events: a restarted coordinator has them.
	e.stopEng()
	e.start(startOptions{gates: lowerGates()})
	if n := e.node(wf, "a"); strings.Join(n.GateOrder(), ",") != "extra,vet" || n.Status != protocol.NodeGating {
		t.Fatalf("a after restart: %v %s", n.GateOrder(), n.Status)
	}
	if n := e.node(wf, "b"); strings.Join(n.GateOrder(), ",") != "fmt" || n.OnFail()["fmt"] != gates.Warn || n.GateSpecs()["fmt"].TimeoutSeconds != 45 {
		t.Fatalf("b after restart: %v %v %+v", n.GateOrder(), n.OnFail(), n.GateSpecs()["fmt"])
	}

	e.gateDone(vet, 2, protocol.GatePassed)
	e.gateDone(extra, 3, protocol.GatePassed)
	e.waitNode(wf, "a", protocol.NodeSucceeded)
	_, err = c.GateAdd(ctx, api.GateAddRequest{WorkflowID: wf, NodeID: "a", Definition: "name: more\ncommand: [x]\n"})
	if ae := wantAPIError(t, err, api.CodeConflict, "add to a finished node"); !strings.Contains(ae.Description, "already succeeded") {
		t.Errorf("add to a finished node: %s", ae.Description)
	}
	_, err = c.GateRemove(ctx, api.GateRemoveRequest{WorkflowID: wf, NodeID: "a", Name: "vet"})
	_ = wantAPIError(t, err, api.CodeConflict, "remove from a finished node")

	// b runs its added gate; its failure only warns.
	jb := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(jb, 4)
	e.agentDone(jb, 4, protocol.AgentSucceeded, e.makePatch(jb, "b.txt", "b\n"))
	f := e.next(protocol.KindGate, "default", 5*time.Second)
	if f.gate.Gate != "fmt" || f.gate.NodeID != "b" || f.gate.TimeoutSeconds != 45 {
		t.Fatalf("b's gate job = %+v", f.gate)
	}
	e.started(f, 5)
	e.gateDone(f, 5, protocol.GateFailed)
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if g := gateOf(nodeOf(s, "b"), "fmt"); g.Status != protocol.GateFailed {
		t.Errorf("b's fmt = %+v", g)
	}
	if n := countEvents(e.events(wf), eventlog.TypeNodeGatesChanged, "a"); n != 3 {
		t.Errorf("node.gates_changed events of a = %d, want 3", n)
	}
}

// gateDoneRound reports a gate result carrying its job's round, as real
// gate runners do, and acks the job.
func (e *env) gateDoneRound(j *taken, token uint64, st protocol.GateStatus) {
	e.t.Helper()
	g := j.gate
	exit := 1
	if st == protocol.GatePassed {
		exit = 0
	}
	e.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: g.JobID, WorkflowID: g.WorkflowID, NodeID: g.NodeID, Gate: g.Gate, Attempt: g.Attempt,
		LeaseToken: token, Host: "test-runner", Status: st, ExitCode: &exit, Round: g.Round,
		StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(),
	}}, g.JobID+".result."+string(st))
	if err := j.msg.Ack(); err != nil {
		e.t.Fatal(err)
	}
}

// Removing a gate from a gating node drops its run: the node folds
// without it. Re-adding a removed gate dispatches a new round (new job
// id), and a late result of the removed round is ignored.
func TestNodeGateRemoveAndReAdd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	ctx := testkit.Context(t, 30*time.Second)
	const wfYAML = "name: readd\ndefaults:\n  " + agentCmd + "gates:\n  - {name: vet, command: [go, vet]}\n  - {name: slow, command: [sleep, 1000]}\n" +
		"tasks:\n  - id: a\n    prompt: a\n"
	gating := func(wf string, token uint64) map[string]*taken {
		j := e.next(protocol.KindAgent, "default", 5*time.Second)
		e.started(j, token)
		e.agentDone(j, token, protocol.AgentSucceeded, e.makePatch(j, "a.txt", "a\n"))
		out := e.nextN(protocol.KindGate, 2)
		jobs := map[string]*taken{"vet": out["a/vet"], "slow": out["a/slow"]}
		if jobs["vet"] == nil || jobs["slow"] == nil {
			t.Fatalf("gate jobs of %s = %v", wf, out)
		}
		return jobs
	}

	wf := e.submit(wfYAML)
	jobs := gating(wf, 1)
	e.started(jobs["vet"], 2)
	e.gateDoneRound(jobs["vet"], 2, protocol.GatePassed)
	e.settle()
	if _, err := e.client.GateRemove(ctx, api.GateRemoveRequest{WorkflowID: wf, NodeID: "a", Name: "slow"}); err != nil {
		t.Fatal(err)
	}
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if g := nodeOf(s, "a").Gates; len(g) != 1 || g[0].Name != "vet" {
		t.Errorf("gates of a = %+v", g)
	}
	_ = jobs["slow"].msg.Ack()

	wf2 := e.submit(wfYAML)
	jobs = gating(wf2, 3)
	if _, err := e.client.GateRemove(ctx, api.GateRemoveRequest{WorkflowID: wf2, NodeID: "a", Name: "slow"}); err != nil {
		t.Fatal(err)
	}
	res, err := e.client.GateAdd(ctx, api.GateAddRequest{WorkflowID: wf2, NodeID: "a", Definition: "name: slow\ncommand: [sleep, 1]\n"})
	if err != nil || res.Gate.Source != api.SourceTask {
		t.Fatalf("re-add = %+v, %v", res, err)
	}
	again := e.next(protocol.KindGate, "default", 5*time.Second)
	if again.gate.Gate != "slow" || again.gate.Round != 2 || again.gate.JobID != protocol.GateJobID(wf2, "a", 1, "slow", 2) ||
		strings.Join(again.gate.Command, " ") != "sleep 1" {
		t.Fatalf("re-added gate job = %+v", again.gate)
	}
	e.gateDoneRound(jobs["slow"], 4, protocol.GateFailed) // the removed round: ignored
	e.started(jobs["vet"], 5)
	e.gateDoneRound(jobs["vet"], 5, protocol.GatePassed)
	e.settle()
	if n := e.node(wf2, "a"); n.Status != protocol.NodeGating || n.Gates["slow"].Status != "" {
		t.Fatalf("after the stale result: %s, slow %+v", n.Status, n.Gates["slow"])
	}
	e.started(again, 6)
	e.gateDoneRound(again, 6, protocol.GatePassed)
	e.waitNode(wf2, "a", protocol.NodeSucceeded)
}
