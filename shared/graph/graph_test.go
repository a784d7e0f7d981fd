package graph

import (
	"reflect"
	"testing"
)

func deps(m map[string][]string) func(string) []string {
	return func(n string) []string { return m[n] }
}

// DAG-04 / DP-05: FindCycle names the cycle in order, deterministically.
func TestFindCycle(t *testing.T) {
	tests := []struct {
		name  string
		nodes []string
		edges map[string][]string
		want  []string
	}{
		{"acyclic", []string{"a", "b", "c"}, map[string][]string{"b": {"a"}, "c": {"a", "b"}}, nil},
		{"self loop", []string{"a"}, map[string][]string{"a": {"a"}}, []string{"a"}},
		{"three", []string{"a", "b", "c"}, map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}, []string{"a", "b", "c"}},
		{"starts where the search enters", []string{"x", "c", "a", "b"},
			map[string][]string{"x": {"b"}, "a": {"c"}, "b": {"a"}, "c": {"b"}}, []string{"b", "a", "c"}},
		{"unknown names ignored", []string{"a", "b"}, map[string][]string{"a": {"zz", "b"}, "b": {"zz"}}, nil},
		{"downstream of a cycle is not in it", []string{"d", "a", "b"},
			map[string][]string{"d": {"a"}, "a": {"b"}, "b": {"a"}}, []string{"a", "b"}},
	}
	for _, tc := range tests {
		if got := FindCycle(tc.nodes, deps(tc.edges)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: FindCycle = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := FormatCycle([]string{"a", "b", "c"}); got != "a -> b -> c -> a" {
		t.Errorf("FormatCycle = %q", got)
	}
	if got := FormatCycle(nil); got != "" {
		t.Errorf("FormatCycle(nil) = %q", got)
	}
	got := FindCycles([]string{"a", "b", "c", "d"}, deps(map[string][]string{"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}))
	if want := [][]string{{"a", "b"}, {"c", "d"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("FindCycles = %v, want %v", got, want)
	}
	if got := (&CycleError{Kind: "gate", Cycle: []string{"a", "b"}}).Error(); got != "gate dependency cycle: a -> b -> a" {
		t.Errorf("CycleError = %q", got)
	}
}

// DP-04: ties go to the smallest index.
func TestKahn(t *testing.T) {
	// 0 <- 2, 1 <- 2; 3 independent.
	deps := [][]int{nil, nil, {0, 1}, nil}
	down := [][]int{{2}, {2}, nil, nil}
	order, ok := Kahn(deps, down)
	if !ok || !reflect.DeepEqual(order, []int{0, 1, 2, 3}) {
		t.Errorf("Kahn = %v, %v", order, ok)
	}
	if _, ok := Kahn([][]int{{1}, {0}}, [][]int{{1}, {0}}); ok {
		t.Error("Kahn accepted a cycle")
	}
}
