// Package graph holds the dependency-graph algorithms shared by the
// workflow DAG and gate dependencies: cycle detection that names the cycle
// in order (DAG-04, DP-05) and Kahn's topological sort with deterministic
// ties (DP-04). It is the one implementation both use.
package graph

import (
	"container/heap"
	"fmt"
	"strings"
)

// CycleError reports a dependency cycle among tasks or gates.
type CycleError struct {
	// Kind is what the nodes are: "task" or "gate".
	Kind string
	// Cycle lists the nodes in order, each depending on the next and the
	// last on the first.
	Cycle []string
}

// Error names the cycle, e.g. "task dependency cycle: a -> b -> c -> a",
// where "->" reads "depends on".
func (e *CycleError) Error() string {
	return fmt.Sprintf("%s dependency cycle: %s", e.Kind, FormatCycle(e.Cycle))
}

// FormatCycle renders a cycle as "a -> b -> c -> a".
func FormatCycle(cycle []string) string {
	if len(cycle) == 0 {
		return ""
	}
	return strings.Join(append(append([]string(nil), cycle...), cycle[0]), " -> ")
}

// FindCycle returns one dependency cycle among nodes, or nil if there is
// none. deps(n) lists what n depends on; names not in nodes are ignored.
// The search visits nodes and dependencies in the order given, so the
// result is deterministic: it starts at the first node of the cycle the
// search entered, and each element depends on the next (the last on the
// first). A node depending on itself is a cycle of one. Nodes merely
// downstream of a cycle are not in it, so a message names only the loop.
func FindCycle(nodes []string, deps func(string) []string) []string {
	if c := cycles(nodes, deps, true); len(c) > 0 {
		return c[0]
	}
	return nil
}

// FindCycles returns node-disjoint cycles among nodes, in the order the
// search meets them: at least one for every group of mutually dependent
// nodes, so a validator can report them all at once.
func FindCycles(nodes []string, deps func(string) []string) [][]string {
	return cycles(nodes, deps, false)
}

func cycles(nodes []string, deps func(string) []string, firstOnly bool) [][]string {
	const (
		unvisited = iota
		onPath
		done
	)
	state := make(map[string]int, len(nodes))
	for _, n := range nodes {
		state[n] = unvisited
	}
	var (
		found [][]string
		path  []string
		pos   = map[string]int{}
		// foundAt holds, in increasing order, the path positions of nodes
		// already in a reported cycle, so the disjointness of a new cycle
		// path[pos[d]:] is one comparison and nothing is copied unless it
		// is reported: the search stays O(nodes + edges).
		foundAt []int
	)
	var visit func(n string) bool
	visit = func(n string) bool {
		state[n] = onPath
		pos[n] = len(path)
		path = append(path, n)
		for _, d := range deps(n) {
			st, known := state[d]
			if !known {
				continue
			}
			switch st {
			case unvisited:
				if visit(d) {
					return true
				}
			case onPath:
				start := pos[d]
				if len(foundAt) > 0 && foundAt[len(foundAt)-1] >= start {
					continue
				}
				found = append(found, append([]string(nil), path[start:]...))
				if firstOnly {
					return true
				}
				for i := start; i < len(path); i++ {
					foundAt = append(foundAt, i)
				}
			}
		}
		path = path[:len(path)-1]
		if k := len(foundAt); k > 0 && foundAt[k-1] == len(path) {
			foundAt = foundAt[:k-1]
		}
		state[n] = done
		return false
	}
	for _, n := range nodes {
		if state[n] == unvisited && visit(n) {
			break
		}
	}
	return found
}

// intHeap is a min-heap of indexes, used to break ties in Kahn's algorithm.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Kahn orders nodes 0..n-1 so every node follows its dependencies, breaking
// ties by the smallest index (so callers choose the tie order by how they
// number nodes: declaration order for tasks, alphabetical for gates).
// deps[i] lists the nodes i depends on and down[i] the nodes depending on
// i; each edge appears once in each. It returns false if the graph has a
// cycle, with the order of the nodes it could place.
func Kahn(deps, down [][]int) ([]int, bool) {
	n := len(deps)
	indeg := make([]int, n)
	for i := range deps {
		indeg[i] = len(deps[i])
	}
	h := &intHeap{}
	for i := range n {
		if indeg[i] == 0 {
			*h = append(*h, i)
		}
	}
	heap.Init(h)
	order := make([]int, 0, n)
	for h.Len() > 0 {
		i := heap.Pop(h).(int)
		order = append(order, i)
		for _, j := range down[i] {
			if indeg[j]--; indeg[j] == 0 {
				heap.Push(h, j)
			}
		}
	}
	return order, len(order) == n
}
