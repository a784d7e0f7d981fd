package workflow

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// tasks builds a spec from "id:dep,dep" strings, in declaration order.
func tasks(defs ...string) *protocol.WorkflowSpec {
	spec := &protocol.WorkflowSpec{Name: "t"}
	for _, d := range defs {
		id, deps, _ := strings.Cut(d, ":")
		t := protocol.TaskSpec{ID: id}
		if deps != "" {
			t.DependsOn = strings.Split(deps, ",")
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	return spec
}

func mustGraph(t *testing.T, spec *protocol.WorkflowSpec) *Graph {
	t.Helper()
	g, err := NewGraph(spec)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// DAG-02: every depends_on entry is an edge; Deps lists them as written.
func TestGraphDeps_DAG02(t *testing.T) {
	g := mustGraph(t, tasks("a", "b", "c:b,a", "d:c,c"))
	for id, want := range map[string][]string{"a": {}, "c": {"b", "a"}, "d": {"c"}, "zz": nil} {
		got := g.Deps(id)
		if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("Deps(%s) = %v, want %v", id, got, want)
		}
	}
}

func TestNewGraphErrors(t *testing.T) {
	tests := []struct {
		name string
		spec *protocol.WorkflowSpec
		want string
	}{
		{"nil", nil, "nil spec"},
		{"empty id", tasks("a", ""), "task 2 has no id"},
		{"duplicate", tasks("a", "a"), `duplicate task id "a"`},
		{"unknown dep", tasks("a:b"), `task "a" depends on unknown task "b"`},
		{"self dep", tasks("a:a"), `task "a" depends on itself`},
		{"DAG-04 cycle named", tasks("x", "a:c", "b:a", "c:b", "d:c"), "task dependency cycle: a -> c -> b -> a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewGraph(tc.spec)
			if err == nil || g != nil {
				t.Fatalf("NewGraph = %v, %v; want error", g, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
	_, err := NewGraph(tasks("a:b", "b:a"))
	var ce *CycleError
	if !errors.As(err, &ce) || ce.Kind != "task" || !reflect.DeepEqual(ce.Cycle, []string{"a", "b"}) {
		t.Errorf("cycle error = %#v, want *CycleError{task, [a b]}", err)
	}
}

func TestTopoOrderDeterministic(t *testing.T) {
	tests := []struct {
		spec *protocol.WorkflowSpec
		want []string
	}{
		// Independent tasks keep declaration order.
		{tasks("d", "c", "b", "a"), []string{"d", "c", "b", "a"}},
		// A dependency declared later moves ahead; ties stay in declaration order.
		{tasks("z:y", "y", "x", "w:x"), []string{"y", "z", "x", "w"}},
		// Diamond.
		{tasks("top", "left:top", "right:top", "bottom:right,left"), []string{"top", "left", "right", "bottom"}},
		// A later-declared root that becomes ready first still waits its turn.
		{tasks("c:a", "b", "a"), []string{"b", "a", "c"}},
	}
	for _, tc := range tests {
		g := mustGraph(t, tc.spec)
		for range 20 {
			if got := g.TopoOrder(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("TopoOrder() = %v, want %v", got, tc.want)
			}
		}
	}
}

// The demo workflow builds a graph; its docs task runs last.
func TestGraphFromParsedDemo(t *testing.T) {
	spec := parseValid(t, "demo.yaml")
	g := mustGraph(t, spec)
	if got, want := g.TopoOrder(), []string{"add-greeting", "add-farewell", "docs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("TopoOrder = %v, want %v", got, want)
	}
	layers, err := GateLayers(spec.Gates, spec.Tasks[0].Gates)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"lint", "vet"}, {"test"}}; !reflect.DeepEqual(layers, want) {
		t.Errorf("GateLayers(add-greeting) = %v, want %v", layers, want)
	}
}

// gateSpecs builds gate specs from "name:dep,dep" strings.
func gateSpecs(defs ...string) []protocol.GateSpec {
	var out []protocol.GateSpec
	for _, d := range defs {
		name, deps, _ := strings.Cut(d, ":")
		g := protocol.GateSpec{Name: name, Command: []string{"true"}}
		if deps != "" {
			g.DependsOn = strings.Split(deps, ",")
		}
		out = append(out, g)
	}
	return out
}

func TestGateLayers(t *testing.T) {
	all := gateSpecs("vet", "build", "test:build,vet", "lint", "race:test", "e2e:build", "docs")
	tests := []struct {
		name  string
		names []string
		want  [][]string
	}{
		{"Q-3 step 2: no gates", nil, nil},
		{"DP-04 independent gates: one layer, alphabetical", []string{"vet", "lint", "docs"}, [][]string{{"docs", "lint", "vet"}}},
		{"DP-01 closure adds dependencies", []string{"test"}, [][]string{{"build", "vet"}, {"test"}}},
		{"DP-01 transitive closure", []string{"race"}, [][]string{{"build", "vet"}, {"test"}, {"race"}}},
		{"DP-04 layers by depth, ties alphabetical", []string{"race", "e2e", "lint"},
			[][]string{{"build", "lint", "vet"}, {"e2e", "test"}, {"race"}}},
		{"listing a dependency too changes nothing", []string{"test", "vet", "build", "test"}, [][]string{{"build", "vet"}, {"test"}}},
	}
	for _, tc := range tests {
		got, err := GateLayers(all, tc.names)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: GateLayers = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestGateLayersErrors(t *testing.T) {
	tests := []struct {
		name  string
		gates []protocol.GateSpec
		names []string
		want  string
	}{
		{"DP-06 unknown gate", gateSpecs("vet"), []string{"lint"}, `unknown gate "lint"`},
		{"DP-06 unknown dependency", gateSpecs("test:build"), []string{"test"}, `gate "test" depends on unknown gate "build"`},
		{"duplicate definition", gateSpecs("vet", "vet"), []string{"vet"}, `duplicate gate "vet"`},
		{"DP-05 cycle named", gateSpecs("a:c", "b:a", "c:b", "d:a"), []string{"d"}, "gate dependency cycle: a -> c -> b -> a"},
		{"DP-05 self cycle", gateSpecs("a:a"), []string{"a"}, "gate dependency cycle: a -> a"},
	}
	for _, tc := range tests {
		layers, err := GateLayers(tc.gates, tc.names)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: GateLayers = %v, %v; want error containing %q", tc.name, layers, err, tc.want)
		}
	}
	// A cycle outside the requested closure does not matter.
	if _, err := GateLayers(gateSpecs("a:b", "b:a", "ok"), []string{"ok"}); err != nil {
		t.Errorf("unrelated cycle: %v", err)
	}
}
