package feedback

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
)

func intp(n int) *int { return &n }

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func encode(t *testing.T, f Feedback) []byte {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sampleInput is a round with one gate of each kind, and a passed, a
// skipped and a pending gate that must not appear.
func sampleInput(t *testing.T) Input {
	return Input{
		WorkflowID: "wf-1", NodeID: "api", Attempt: 2, MaxAttempts: 5,
		Note: &Note{From: "alice", Text: "Keep the public API."},
		Gates: []GateInput{
			{Result: protocol.GateResult{Gate: "unit", Status: protocol.GateFailed, ExitCode: intp(1), Attempt: 2, Stdout: fixture(t, "go-test.txt"), Log: "wf-1/api/unit/2.log"},
				Spec: protocol.GateSpec{Name: "unit", Command: []string{"go", "test", "./..."}, MaxRetries: intp(4)}, RoundsFailed: 2},
			{Result: protocol.GateResult{Gate: "lint", Status: protocol.GateFailed, ExitCode: intp(1), Attempt: 2, Stdout: "x.go:3:1: exported func X should have comment (revive)"},
				Spec: protocol.GateSpec{Command: []string{"golangci-lint", "run"}}, RoundsFailed: 1},
			{Result: protocol.GateResult{Gate: "e2e", Status: protocol.GateTimeout, TimedOut: true, Attempt: 2, Stdout: "waiting for server"}, RoundsFailed: 4, Escalated: true},
			{Result: protocol.GateResult{Gate: "guard", Status: protocol.GateFailed, ExitCode: intp(1), Attempt: 2, IntegrityViolation: true, Violations: []string{".supervisor/gates.toml", "go.sum"}}},
			{Result: protocol.GateResult{Gate: "docker", Status: protocol.GateError, Attempt: 2, Error: "sandbox: out of memory"}},
			{Result: protocol.GateResult{Gate: "script", Status: protocol.GateFailed, ExitCode: intp(2), Attempt: 2, Stderr: "check.sh: config missing"}},
			{Result: protocol.GateResult{Gate: "fmt", Status: protocol.GatePassed, ExitCode: intp(0)}},
			{Result: protocol.GateResult{Gate: "deps", Status: protocol.GateSkipped}},
			{Result: protocol.GateResult{Gate: "deploy", Status: protocol.GatePending, ExitCode: intp(75)}},
		},
	}
}

func gateNames(f Feedback) []string {
	var out []string
	for _, g := range f.Gates {
		out = append(out, g.Name)
	}
	return out
}

// TestBuildFields covers Q-10 and FB-01: per failed gate its name, status,
// exit code, attempt, max_retries, rounds failed, escalation and tails;
// passed, skipped and pending gates are left out; the order puts integrity
// violations first, then failures, timeouts and errors, each by name.
func TestBuildFields(t *testing.T) {
	f := Build(sampleInput(t))
	if f.V != 1 || f.WorkflowID != "wf-1" || f.NodeID != "api" || f.Attempt != 2 || f.NextAttempt != 3 || f.MaxAttempts != 5 {
		t.Errorf("header = v%d %s/%s attempt %d next %d max %d", f.V, f.WorkflowID, f.NodeID, f.Attempt, f.NextAttempt, f.MaxAttempts)
	}
	if f.Untrusted != UntrustedNotice || len(f.Constraints) == 0 || f.Note == nil || f.Note.From != "alice" {
		t.Errorf("notice, constraints or note missing: %+v", f)
	}
	if got, want := gateNames(f), []string{"guard", "lint", "script", "unit", "e2e", "docker"}; !slices.Equal(got, want) {
		t.Fatalf("gates = %v, want %v", got, want)
	}
	byName := map[string]Gate{}
	for _, g := range f.Gates {
		byName[g.Name] = g
	}
	tests := []struct {
		gate       string
		kind       string
		status     protocol.GateStatus
		exit       *int
		maxRetries int
		rounds     int
		escalated  bool
		stdout     string // a substring of the stdout tail
		stderr     string
	}{
		{"unit", KindTests, protocol.GateFailed, intp(1), 4, 2, false, "--- FAIL: TestAdd", ""},
		{"lint", KindLint, protocol.GateFailed, intp(1), 3, 1, false, "exported func X", ""},
		{"e2e", KindTimeout, protocol.GateTimeout, nil, 3, 4, true, "waiting for server", ""},
		{"guard", KindIntegrity, protocol.GateFailed, intp(1), 3, 0, false, "", ""},
		{"docker", KindError, protocol.GateError, nil, 3, 0, false, "", ""},
		{"script", KindGeneric, protocol.GateFailed, intp(2), 3, 0, false, "", "config missing"},
	}
	for _, tc := range tests {
		g := byName[tc.gate]
		if g.Kind != tc.kind || g.Status != tc.status || g.MaxRetries != tc.maxRetries || g.RoundsFailed != tc.rounds || g.Escalated != tc.escalated || g.Attempt != 2 {
			t.Errorf("%s: kind %s status %s retries %d rounds %d escalated %v attempt %d", tc.gate, g.Kind, g.Status, g.MaxRetries, g.RoundsFailed, g.Escalated, g.Attempt)
		}
		if (g.ExitCode == nil) != (tc.exit == nil) || g.ExitCode != nil && *g.ExitCode != *tc.exit {
			t.Errorf("%s: exit code %v, want %v", tc.gate, g.ExitCode, tc.exit)
		}
		if !strings.Contains(g.StdoutTail, tc.stdout) || !strings.Contains(g.StderrTail, tc.stderr) {
			t.Errorf("%s: tails %q / %q", tc.gate, g.StdoutTail, g.StderrTail)
		}
	}
	if g := byName["unit"]; len(g.Tests) != 4 || g.Tests[2].Name != "TestAdd" || g.Log != "wf-1/api/unit/2.log" {
		t.Errorf("unit: tests %+v, log %q", g.Tests, g.Log)
	}
	if g := byName["guard"]; !g.IntegrityViolation || !slices.Equal(g.Violations, []string{".supervisor/gates.toml", "go.sum"}) {
		t.Errorf("guard: %+v", g)
	}
	if g := byName["docker"]; g.Error != "sandbox: out of memory" {
		t.Errorf("docker: error %q", g.Error)
	}
	if f.Truncated {
		t.Error("truncated, with nothing to cut")
	}

	// Every key of the document, as the agent sees it.
	var doc map[string]any
	if err := json.Unmarshal(encode(t, f), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "workflow_id", "node_id", "attempt", "next_attempt", "max_attempts", "untrusted", "gates", "priority_fixes", "constraints", "note", "truncated"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("no %q in the document", k)
		}
	}
	gate := doc["gates"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "kind", "status", "exit_code", "attempt", "max_retries", "rounds_failed", "escalated", "stdout_tail", "stderr_tail", "tests", "integrity_violation", "violations"} {
		if _, ok := gate[k]; !ok {
			t.Errorf("no %q in a gate", k)
		}
	}
}

// TestBuildDefaults: names from the spec or "unknown" (FB-08), the next
// attempt, the combined output as the only tail, timeouts from TimedOut.
func TestBuildDefaults(t *testing.T) {
	f := Build(Input{Attempt: 3, NextAttempt: 7, Gates: []GateInput{
		{Result: protocol.GateResult{Status: protocol.GateFailed, Output: "combined output"}, Spec: protocol.GateSpec{Name: "from-spec"}},
		{Result: protocol.GateResult{Status: protocol.GateFailed, TimedOut: true}},
		{Result: protocol.GateResult{Status: "weird"}},
		{Result: protocol.GateResult{Gate: "clean-but-wrote", Status: protocol.GatePassed, IntegrityViolation: true}},
	}})
	if f.NextAttempt != 7 {
		t.Errorf("next attempt %d, want 7", f.NextAttempt)
	}
	if got, want := gateNames(f), []string{"clean-but-wrote", "from-spec", "unknown", "unknown"}; !slices.Equal(got, want) {
		t.Fatalf("gates = %v, want %v", got, want)
	}
	if f.Gates[1].StdoutTail != "combined output" || f.Gates[1].Attempt != 3 {
		t.Errorf("from-spec: %+v", f.Gates[1])
	}
	if f.Gates[2].Status != "weird" || f.Gates[3].Status != protocol.GateTimeout || f.Gates[3].Kind != KindTimeout {
		t.Errorf("statuses: %s (%s), %s (%s)", f.Gates[2].Status, f.Gates[2].Kind, f.Gates[3].Status, f.Gates[3].Kind)
	}
	if f.Gates[0].Kind != KindIntegrity {
		t.Errorf("a passed gate with a violation: kind %s", f.Gates[0].Kind)
	}
	empty := encode(t, Build(Input{}))
	for _, k := range []string{`"gates":[]`, `"priority_fixes":[]`} {
		if !bytes.Contains(empty, []byte(k)) {
			t.Errorf("an empty round lacks %s: %s", k, empty)
		}
	}
}

// TestGateKind covers FB-02: the kind that picks a gate's template.
func TestGateKind(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		g       Gate
		want    string
	}{
		{"unit", nil, Gate{Status: protocol.GateFailed}, KindTests},
		{"check", []string{"pytest", "-q"}, Gate{Status: protocol.GateFailed}, KindTests},
		{"check", []string{"npm", "run", "lint"}, Gate{Status: protocol.GateFailed}, KindLint},
		{"golangci", []string{"golangci-lint", "run"}, Gate{Status: protocol.GateFailed}, KindLint},
		{"vet", []string{"go", "vet", "./..."}, Gate{Status: protocol.GateFailed, Tests: []TestFailure{{Name: "x [build failed]"}}}, KindLint},
		{"check", []string{"make", "check"}, Gate{Status: protocol.GateFailed, Tests: []TestFailure{{Name: "TestX"}}}, KindTests},
		{"check", []string{"make", "check"}, Gate{Status: protocol.GateFailed}, KindGeneric},
		{"unit", nil, Gate{Status: protocol.GateTimeout}, KindTimeout},
		{"unit", nil, Gate{Status: protocol.GateError}, KindError},
		{"unit", nil, Gate{Status: protocol.GateTimeout, IntegrityViolation: true}, KindIntegrity},
	}
	for _, tc := range tests {
		tc.g.Name = tc.name
		if got := gateKind(tc.g, protocol.GateSpec{Command: tc.command}); got != tc.want {
			t.Errorf("gateKind(%s %v, %s) = %s, want %s", tc.name, tc.command, tc.g.Status, got, tc.want)
		}
	}
}

// TestPriorityFixes covers S-8.2: integrity violations, then failing tests
// with file:line, then other failed gates, then timeouts, then errors.
func TestPriorityFixes(t *testing.T) {
	f := Build(sampleInput(t))
	want := []string{
		"Stop the code run by gate \"guard\" from changing paths it may not write: .supervisor/gates.toml, go.sum.",
		"Fix the build error at broken/broken.go:5: undefined: y",
		"Make TestThird pass (go) at " + fx + "gotest/boom/boom.go:5: panic: runtime error: index out of range [3] with length 3",
		"Make TestAdd pass (go) at calc_test.go:7: Add(2, 2) = 5, want 4",
		"Make TestDiv/by_zero pass (go) at calc_test.go:25: Div(1, 0) = 0, true; want 0, false",
		"Fix every finding reported by gate \"lint\" (exit code 1).",
		"Make gate \"script\" pass (exit code 2): its output below shows what went wrong.",
		"Find out why gate \"e2e\" ran past its time limit (a hang, a deadlock, an endless or slow loop) and fix it.",
		"Gate \"docker\" could not run (sandbox: out of memory); this is not a failure of your code: keep your work unless something else needs fixing.",
	}
	if !slices.Equal(f.PriorityFixes, want) {
		t.Errorf("priority fixes:\n%s\nwant:\n%s", strings.Join(f.PriorityFixes, "\n"), strings.Join(want, "\n"))
	}
	// Each fix is one line that starts with our words, never with output:
	// rendered as a list item, it cannot open a heading or a fence.
	for _, fix := range f.PriorityFixes {
		if strings.Contains(fix, "\n") || !slices.ContainsFunc([]string{"Stop ", "Fix ", "Make ", "Find ", "Gate "}, func(p string) bool { return strings.HasPrefix(fix, p) }) {
			t.Errorf("fix %q does not start with a verb of ours on one line", fix)
		}
	}

	// Many failing tests: a few lines, then one that counts the rest.
	var out strings.Builder
	for i := range 30 {
		fmt.Fprintf(&out, "--- FAIL: Test%02d (0.00s)\n    x_test.go:%d: bad\n", i, i+1)
	}
	f = Build(Input{Gates: []GateInput{{Result: protocol.GateResult{Gate: "unit", Status: protocol.GateFailed, Stdout: out.String()}}}})
	if len(f.PriorityFixes) != maxFixTests+1 || f.PriorityFixes[maxFixTests] != "Fix the 22 other failing tests listed under the gates below." {
		t.Errorf("priority fixes for 30 tests: %q", f.PriorityFixes)
	}
	if g := f.Gates[0]; len(g.Tests) != maxTests || g.TestsOmitted != 10 || !f.Truncated {
		t.Errorf("30 tests: kept %d, omitted %d, truncated %v", len(g.Tests), g.TestsOmitted, f.Truncated)
	}
}

// TestBuildSanitizes covers FB-03 and FB-04: secrets, escapes and bidi
// controls are gone from every text of the document.
func TestBuildSanitizes(t *testing.T) {
	secret := "ghp_" + strings.Repeat("Zx9", 12)
	dirty := "\x1b[31mtoken=s3cr3t\x1b[0m \u202eevil\u202c " + secret + "\x00"
	f := Build(Input{
		WorkflowID: "wf\u202e", NodeID: "n\x1b[1m",
		Note: &Note{From: "ops\u2066", Text: "use password=opsecret\x1b[0m"},
		Gates: []GateInput{{Result: protocol.GateResult{
			Gate: "unit" + dirty, Status: protocol.GateFailed,
			Stdout:     "--- FAIL: TestX (0.00s)\n    x_test.go:3: " + dirty + "\n",
			Stderr:     dirty,
			Error:      dirty,
			Violations: []string{"a" + dirty},
			Log:        "log" + dirty,
		}}},
	})
	doc := string(encode(t, f))
	for _, bad := range []string{"s3cr3t", secret, "opsecret", "\\u001b", "\\u0000", "\u202e", "\u202c", "\u2066", "[31m"} {
		if strings.Contains(doc, bad) {
			t.Errorf("the document contains %q: %s", bad, doc)
		}
	}
	if !strings.Contains(doc, redact.Mask) || len(f.Gates) != 1 || len(f.Gates[0].Tests) != 1 {
		t.Errorf("expected masked secrets and one parsed test: %s", doc)
	}
}

// bigInput is a round whose output is far over any budget: gates with
// long tails and many tests, long violation lists, a long note and ids of
// characters json.Marshal escapes into six bytes.
func bigInput(gates int) Input {
	var tail strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&tail, "log line %04d <&> \"quoted\" \\ \u00e9\n", i)
	}
	tail.WriteString("FINAL LINE: the failure is here")
	var tests strings.Builder
	for i := range 40 {
		fmt.Fprintf(&tests, "--- FAIL: TestCase%02d (0.00s)\n    case_test.go:%d: %s\n", i, 10+i, strings.Repeat("<wrong> ", 100))
	}
	in := Input{
		WorkflowID: strings.Repeat("<", 500), NodeID: strings.Repeat("&", 500), Attempt: 1, MaxAttempts: 3,
		Note: &Note{From: strings.Repeat(">", 200), Text: strings.Repeat("<note>\n", 2000)},
	}
	for i := range gates {
		var viol []string
		for j := range 80 {
			viol = append(viol, fmt.Sprintf("dir/<%d>/file%d", i, j))
		}
		in.Gates = append(in.Gates, GateInput{Result: protocol.GateResult{
			Gate: fmt.Sprintf("gate-%02d-%s", i, strings.Repeat("<", 40)), Status: protocol.GateFailed, ExitCode: intp(1),
			Stdout: tests.String() + tail.String(), Stderr: tail.String(), Error: strings.Repeat("<err>", 400),
			IntegrityViolation: i%3 == 0, Violations: viol, Log: strings.Repeat("l", 400),
		}})
	}
	return in
}

// TestBudget covers FB-04 and S-8.5: whatever the input, the encoded
// document fits the budget (a small budget is raised to MinBudget).
func TestBudget(t *testing.T) {
	tests := []struct {
		name   string
		budget int
		gates  int
		limit  int
	}{
		{"default budget, one gate", 0, 1, DefaultBudget},
		{"default budget, five gates", 0, 5, DefaultBudget},
		{"minimum budget, five gates", MinBudget, 5, MinBudget},
		{"below the minimum", 100, 3, MinBudget},
		{"6 KiB, twelve gates", 6 << 10, 12, 6 << 10},
		{"64 KiB, three gates", 64 << 10, 3, 64 << 10},
		{"no gates, minimum budget", MinBudget, 0, MinBudget},
	}
	// Every budget in a range, to the byte: the fitting's own count of the
	// encoding must match json.Marshal's.
	for budget := MinBudget; budget <= 20<<10; budget += 97 {
		in := sampleInput(t)
		in.Budget = budget
		if n := len(encode(t, Build(in))); n > budget {
			t.Fatalf("budget %d: encoded document is %d bytes", budget, n)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := bigInput(tc.gates)
			in.Budget = tc.budget
			f := Build(in)
			if n := len(encode(t, f)); n > tc.limit {
				t.Errorf("encoded document is %d bytes, budget %d", n, tc.limit)
			}
			if !f.Truncated {
				t.Error("not marked truncated")
			}
			if f.Untrusted != UntrustedNotice || len(f.Constraints) != len(constraints) {
				t.Error("the notice or the constraints were cut")
			}
		})
	}
}

// TestBudgetKeepsTheEnd covers C13: a trimmed tail is the end of the log,
// after the marker line.
func TestBudgetKeepsTheEnd(t *testing.T) {
	var log strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&log, "log line %04d\n", i)
	}
	log.WriteString("FINAL LINE: the failure is here")
	for _, budget := range []int{MinBudget, 6 << 10, DefaultBudget} {
		f := Build(Input{Budget: budget, Gates: []GateInput{{Result: protocol.GateResult{
			Gate: "unit", Status: protocol.GateFailed, Stdout: log.String(), Stderr: log.String(),
		}}}})
		g := f.Gates[0]
		for _, tail := range []string{g.StdoutTail, g.StderrTail} {
			if !strings.HasPrefix(tail, TrimMarker+"\nlog line ") || !strings.HasSuffix(tail, "\nFINAL LINE: the failure is here") {
				t.Errorf("budget %d: tail is not the end of the log, from a line start, after the marker: %.60q … %.60q", budget, tail, tail[max(0, len(tail)-60):])
			}
			if strings.Contains(tail, "log line 0000") {
				t.Errorf("budget %d: the start of the log was kept", budget)
			}
		}
		if !f.Truncated || len(encode(t, f)) > budget {
			t.Errorf("budget %d: truncated %v, %d bytes", budget, f.Truncated, len(encode(t, f)))
		}
	}
}

// TestBudgetTestsBeforeTails: parsed tests survive when the raw tails have
// to go; the least important gate's tails are cut first.
func TestBudgetTestsBeforeTails(t *testing.T) {
	var out strings.Builder
	out.WriteString("--- FAIL: TestA (0.00s)\n    a_test.go:3: a broke\n--- FAIL: TestB (0.00s)\n    b_test.go:4: b broke\n")
	for i := range 2000 {
		fmt.Fprintf(&out, "noise %04d\n", i)
	}
	gate := func(name string) GateInput {
		return GateInput{Result: protocol.GateResult{Gate: name, Status: protocol.GateFailed, Stdout: out.String(), Stderr: out.String()}}
	}
	f := Build(Input{Budget: MinBudget, Gates: []GateInput{gate("a"), gate("b")}})
	for _, g := range f.Gates {
		if len(g.Tests) != 2 || g.Tests[1].Name != "TestB" || g.Tests[1].Line != 4 {
			t.Errorf("gate %s lost its tests: %+v", g.Name, g.Tests)
		}
	}
	if len(f.Gates[1].StdoutTail) >= len(f.Gates[0].StdoutTail) && f.Gates[0].StdoutTail != "" {
		t.Errorf("the second gate's tail (%d bytes) was not cut before the first's (%d)", len(f.Gates[1].StdoutTail), len(f.Gates[0].StdoutTail))
	}

	// With room for some tail: the first gate keeps more than the floor
	// only once the second is down to it.
	f = Build(Input{Budget: 10 << 10, Gates: []GateInput{gate("a"), gate("b")}})
	a, b := f.Gates[0], f.Gates[1]
	if len(a.StdoutTail)+len(a.StderrTail) <= len(b.StdoutTail)+len(b.StderrTail) {
		t.Errorf("gate a kept %d bytes of tail, gate b %d", len(a.StdoutTail)+len(a.StderrTail), len(b.StdoutTail)+len(b.StderrTail))
	}
	if n := len(encode(t, f)); n > 10<<10 {
		t.Errorf("%d bytes over a 10 KiB budget", n)
	}
}

// TestBuildDeterministic: the same input gives the same bytes, and the
// order of gates with distinct names in the input does not matter.
func TestBuildDeterministic(t *testing.T) {
	for _, budget := range []int{0, MinBudget, 7 << 10} {
		in := sampleInput(t)
		in.Budget = budget
		first := encode(t, Build(in))
		if second := encode(t, Build(in)); !bytes.Equal(first, second) {
			t.Fatalf("budget %d: two builds differ:\n%s\n%s", budget, first, second)
		}
		slices.Reverse(in.Gates)
		if reversed := encode(t, Build(in)); !bytes.Equal(first, reversed) {
			t.Fatalf("budget %d: the input order changed the document:\n%s\n%s", budget, first, reversed)
		}
	}
	big := bigInput(4)
	if !bytes.Equal(encode(t, Build(big)), encode(t, Build(big))) {
		t.Fatal("two builds of a trimmed document differ")
	}
}

// Build must not change its input (the coordinator keeps the results).
func TestBuildLeavesInputAlone(t *testing.T) {
	in := sampleInput(t)
	code := *in.Gates[0].Result.ExitCode
	f := Build(in)
	*f.Gates[3].ExitCode = 99 // unit's, shared with the input if it were not copied
	f.Constraints[0] = "changed"
	if *in.Gates[0].Result.ExitCode != code || constraints[0] == "changed" {
		t.Error("Build's output shares memory with its input or package state")
	}
}
