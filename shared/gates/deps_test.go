package gates

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// set builds a set from "name:dep,dep" strings.
func set(defs ...string) *Set {
	s := &Set{}
	for _, d := range defs {
		name, deps, _ := strings.Cut(d, ":")
		g := New(name, "true")
		g.Source = Source{Origin: OriginUser, File: "gates.yaml", Line: len(s.Names()) + 2}
		if deps != "" {
			g.DependsOn = strings.Split(deps, ",")
		}
		s.Add(g)
	}
	return s
}

// DP-01 and DP-04: the transitive closure, in topological order with alphabetical ties.
func TestResolve(t *testing.T) {
	all := set("vet", "build", "test:build,vet", "lint", "race:test", "e2e:build", "docs", "type_check:lint")
	tests := []struct {
		name      string
		requested []string
		order     []string
		layers    [][]string
	}{
		{"Q-3 no gates", nil, nil, nil},
		{"DP-04 independent gates alphabetical", []string{"vet", "lint", "docs"}, []string{"docs", "lint", "vet"}, [][]string{{"docs", "lint", "vet"}}},
		{"DP-01 closure adds dependencies", []string{"test"}, []string{"build", "vet", "test"}, [][]string{{"build", "vet"}, {"test"}}},
		{"DP-01 transitive closure", []string{"race"}, []string{"build", "vet", "test", "race"}, [][]string{{"build", "vet"}, {"test"}, {"race"}}},
		{"DP-04 ties alphabetical across depths", []string{"race", "e2e", "type_check"},
			[]string{"build", "e2e", "lint", "type_check", "vet", "test", "race"},
			[][]string{{"build", "lint", "vet"}, {"e2e", "test", "type_check"}, {"race"}}},
		{"listing a dependency too changes nothing", []string{"test", "vet", "build", "test"}, []string{"build", "vet", "test"}, [][]string{{"build", "vet"}, {"test"}}},
	}
	for _, tc := range tests {
		order, err := Resolve(all, tc.requested)
		if err != nil || !reflect.DeepEqual(order, tc.order) {
			t.Errorf("%s: Resolve = %v, %v; want %v", tc.name, order, err, tc.order)
		}
		p, err := PlanWith(all.lookup, all.Names(), tc.requested)
		if err != nil || !reflect.DeepEqual(p.Layers(), tc.layers) {
			t.Errorf("%s: Plan.Layers = %v, %v; want %v", tc.name, p.Layers(), err, tc.layers)
		}
	}
}

// DP-05 names the cycle in order (without gates merely downstream of it);
// DP-06/LD-12 names the unknown gate
// and where it was referenced.
func TestResolveErrors(t *testing.T) {
	cyc := set("a:c", "b:a", "c:b", "d:a", "ok")
	_, err := Resolve(cyc, []string{"d"})
	var ce *CycleError
	if !errors.As(err, &ce) || ce.Kind != "gate" || !reflect.DeepEqual(ce.Cycle, []string{"a", "c", "b"}) ||
		err.Error() != "gate dependency cycle: a -> c -> b -> a" {
		t.Errorf("DP-05 cycle: %v", err)
	}
	if _, err := Resolve(set("a:a"), []string{"a"}); err == nil || err.Error() != "gate dependency cycle: a -> a" {
		t.Errorf("DP-05 self cycle: %v", err)
	}
	if order, err := Resolve(cyc, []string{"ok"}); err != nil || !reflect.DeepEqual(order, []string{"ok"}) {
		t.Errorf("a cycle outside the closure matters: %v, %v", order, err)
	}

	_, err = Resolve(set("vet", "test"), []string{"lint"})
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Name != "lint" || nf.From != "" ||
		err.Error() != `unknown gate "lint"; defined gates: test, vet` {
		t.Errorf("DP-06 requested: %v", err)
	}
	src := "gates:\n  test:\n    command: [go, test]\n    depends_on: [vet, build]\n  vet: {command: [go, vet]}\n"
	gs, _ := parseYAML(t, src)
	_, err = Resolve(NewSet(gs...), []string{"test"})
	if !errors.As(err, &nf) || nf.Name != "build" || nf.From != "test" ||
		err.Error() != `gate "test" depends on unknown gate "build" (at g.yaml:4); defined gates: test, vet` {
		t.Errorf("DP-06 dependency: %v", err)
	}
	if _, err := Resolve(nil, []string{"x"}); err == nil || !strings.Contains(err.Error(), "no gates are defined") {
		t.Errorf("empty set: %v", err)
	}
}

// OF-01…OF-03 and EN-04: explicit on_fail first, then the severity
// default; a required gate never warns.
func TestResolveOnFail(t *testing.T) {
	gate := func(s Severity) Gate { g := New("g", "x"); g.Severity = s; return g }
	tests := []struct {
		name     string
		severity Severity
		required bool
		explicit FailAction
		want     FailAction
	}{
		{"EN-04 error defaults to retry with feedback", SeverityError, false, "", RetryWithFeedback},
		{"EN-04 warning defaults to warn", SeverityWarning, false, "", Warn},
		{"EN-04 info defaults to warn", SeverityInfo, false, "", Warn},
		{"OF-01 explicit wins over severity", SeverityError, false, RetryWithFeedback, RetryWithFeedback},
		{"OF-01 explicit warn on an optional error gate", SeverityError, false, Warn, Warn},
		{"OF-01 explicit block on a warning gate", SeverityWarning, false, Block, Block},
		{"OF-02 required: explicit warn upgraded to retry with feedback", SeverityError, true, Warn, RetryWithFeedback},
		{"OF-02 required warning gate blocks (retried with feedback)", SeverityWarning, true, "", RetryWithFeedback},
		{"OF-02 required info gate blocks (retried with feedback)", SeverityInfo, true, "", RetryWithFeedback},
		{"OF-02 required keeps retry_with_feedback", SeverityWarning, true, RetryWithFeedback, RetryWithFeedback},
		{"OF-03 optional error gate blocks (retried with feedback)", SeverityError, false, "", RetryWithFeedback},
		{"unknown explicit falls back to severity", SeverityInfo, false, "ignore", Warn},
		{"empty severity is error", "", false, "", RetryWithFeedback},
	}
	for _, tc := range tests {
		if got := ResolveOnFail(gate(tc.severity), tc.required, tc.explicit); got != tc.want {
			t.Errorf("%s: ResolveOnFail = %s, want %s", tc.name, got, tc.want)
		}
	}
	for in, want := range map[string]FailAction{"BLOCK": Block, "Retry_With_Feedback": RetryWithFeedback, "warn": Warn} {
		if got, ok := ParseFailAction(in); !ok || got != want {
			t.Errorf("RC-04 ParseFailAction(%q) = %s, %v", in, got, ok)
		}
	}
	// OF-04: the engine's view, from wire forms.
	task := protocol.TaskSpec{Gates: []string{"test", "lint"}, Required: []string{"test"}, Optional: []string{"lint"},
		OnFail: map[string]string{"lint": "retry_with_feedback"}}
	warnSpec := func(name string) protocol.GateSpec {
		g := New(name, "x")
		g.Severity = SeverityWarning
		return g.Spec()
	}
	for _, tc := range []struct {
		gate string
		want FailAction
	}{{"test", RetryWithFeedback}, {"lint", RetryWithFeedback}, {"dep-only", Warn}} {
		if got := TaskOnFail(task, warnSpec(tc.gate)); got != tc.want {
			t.Errorf("TaskOnFail(%s) = %s, want %s", tc.gate, got, tc.want)
		}
	}
	if _, ok := ParseFailAction("skip"); ok {
		t.Error("ParseFailAction accepted skip")
	}
	if got, ok := ParseSeverity("INFO"); !ok || got != SeverityInfo {
		t.Errorf("GC-06 ParseSeverity(INFO) = %s, %v", got, ok)
	}
}

// The wire form: Spec has every default explicit, FromSpec restores the
// gate, and an event written before the new fields decodes to defaults.
func TestSpecConversion(t *testing.T) {
	src := "gates:\n  g:\n    command: [x]\n    severity: info\n    cache: false\n    max_retries: 0\n    resources: {memory: 512m}\n    cache_inputs: [go.sum]\n"
	gs, err := parseYAML(t, src)
	if err != nil {
		t.Fatal(err)
	}
	g := gs[0]
	s := g.Spec()
	if s.Severity != "info" || s.UsesCache() || s.Retries() != 0 || !s.SkipsOnDependencyFailure() ||
		s.PollInterval() != 30*time.Second || s.MaxPending() != 24*time.Hour || s.Resources.MemoryBytes != 512<<20 ||
		s.Source != "g.yaml:2" || s.TimeoutSeconds != 300 || s.Pool != "default" {
		t.Errorf("Spec = %+v", s)
	}
	back := FromSpec(s)
	g.Source, g.depPos = Source{File: "g.yaml:2"}, nil
	if !reflect.DeepEqual(back, g) {
		t.Errorf("FromSpec =\n%+v\nwant\n%+v", back, g)
	}
	// Backward compatibility: an old event's gate has none of the new fields.
	var old protocol.GateSpec
	if err := json.Unmarshal([]byte(`{"name":"vet","command":["go","vet"],"timeout_seconds":120,"pool":"default"}`), &old); err != nil {
		t.Fatal(err)
	}
	og := FromSpec(old)
	if og.Severity != SeverityError || !og.Cache || !og.SkipOnDependencyFailure || og.MaxRetries != 3 ||
		og.PollInterval != DefaultPollInterval || og.MaxPending != DefaultMaxPending || og.Timeout != 120*time.Second {
		t.Errorf("old spec = %+v", og)
	}
	data, err := json.Marshal(protocol.GateSpec{Name: "vet", Command: []string{"go"}, TimeoutSeconds: 1, Pool: "default"})
	if err != nil || string(data) != `{"name":"vet","command":["go"],"timeout_seconds":1,"pool":"default"}` {
		t.Errorf("new fields are not omitempty: %s", data)
	}
	task := protocol.TaskSpec{Gates: []string{"a", "b"}}
	if !task.GateRequired("a") || task.GateRequired("c") {
		t.Error("RC-03 an old task requires every listed gate")
	}
	task = protocol.TaskSpec{Gates: []string{"a", "b"}, Required: []string{"a"}, Optional: []string{"b"}}
	if !task.GateRequired("a") || task.GateRequired("b") {
		t.Error("Required/Optional ignored")
	}
}
