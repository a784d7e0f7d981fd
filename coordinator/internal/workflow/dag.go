package workflow

import (
	"container/heap"
	"fmt"
	"sort"
	"strings"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// CycleError reports a dependency cycle among tasks or gates (DAG-04).
type CycleError struct {
	// Kind is "task" or "gate".
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
// first). A node depending on itself is a cycle of one. Task and gate
// validation both use it.
func FindCycle(nodes []string, deps func(string) []string) []string {
	if c := cycles(nodes, deps, true); len(c) > 0 {
		return c[0]
	}
	return nil
}

// findCycles returns node-disjoint cycles among nodes, in the order the
// search meets them: at least one for every group of mutually dependent
// nodes, so a validator can report them all at once.
func findCycles(nodes []string, deps func(string) []string) [][]string {
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

// kahn orders nodes 0..n-1 so every node follows its dependencies, breaking
// ties by the smallest index. It returns false if the graph has a cycle.
func kahn(deps, down [][]int) ([]int, bool) {
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

// Graph is the task DAG of a workflow: an edge dep → task for every
// depends_on entry (DAG-02). It is immutable once built.
type Graph struct {
	ids   []string // declaration order
	index map[string]int
	deps  [][]int // direct dependencies, as listed
	down  [][]int // direct dependents, in declaration order
	topo  []int
	rank  []int // position of each node in topo
}

// NewGraph builds the task graph of a spec. It fails on an empty or
// duplicate task id, a dependency on an unknown task or on itself, or a
// cycle (a *CycleError naming it, DAG-04). Parse already rejects all of
// these; NewGraph checks again so a graph is never built from bad input.
func NewGraph(spec *protocol.WorkflowSpec) (*Graph, error) {
	if spec == nil {
		return nil, fmt.Errorf("workflow: nil spec")
	}
	g := &Graph{index: make(map[string]int, len(spec.Tasks))}
	for i, t := range spec.Tasks {
		if t.ID == "" {
			return nil, fmt.Errorf("workflow: task %d has no id", i+1)
		}
		if _, dup := g.index[t.ID]; dup {
			return nil, fmt.Errorf("workflow: duplicate task id %q", t.ID)
		}
		g.index[t.ID] = i
		g.ids = append(g.ids, t.ID)
	}
	g.deps = make([][]int, len(g.ids))
	g.down = make([][]int, len(g.ids))
	for i, t := range spec.Tasks {
		seen := map[int]bool{}
		for _, d := range t.DependsOn {
			j, ok := g.index[d]
			switch {
			case d == t.ID:
				return nil, fmt.Errorf("workflow: task %q depends on itself", d)
			case !ok:
				return nil, fmt.Errorf("workflow: task %q depends on unknown task %q", t.ID, d)
			case seen[j]:
				continue
			}
			seen[j] = true
			g.deps[i] = append(g.deps[i], j)
			g.down[j] = append(g.down[j], i)
		}
	}
	topo, ok := kahn(g.deps, g.down)
	if !ok {
		c := FindCycle(g.ids, func(id string) []string { return g.Deps(id) })
		return nil, &CycleError{Kind: "task", Cycle: c}
	}
	g.topo = topo
	g.rank = make([]int, len(topo))
	for r, i := range topo {
		g.rank[i] = r
	}
	return g, nil
}

func (g *Graph) names(idx []int) []string {
	if len(idx) == 0 {
		return nil
	}
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = g.ids[i]
	}
	return out
}

// TopoOrder returns every task id, each after all of its dependencies.
// Ties are broken by declaration order, so the order is deterministic.
func (g *Graph) TopoOrder() []string { return g.names(g.topo) }

// Deps returns the ids a task directly depends on, in the order listed,
// or nil for an unknown id.
func (g *Graph) Deps(id string) []string {
	i, ok := g.index[id]
	if !ok {
		return nil
	}
	return g.names(g.deps[i])
}

// Dependents returns every task downstream of id, directly or transitively,
// in topological order: the tasks to skip when id fails. It returns nil for
// an unknown id.
func (g *Graph) Dependents(id string) []string {
	i, ok := g.index[id]
	if !ok {
		return nil
	}
	seen := make([]bool, len(g.ids))
	stack := append([]int(nil), g.down[i]...)
	var out []int
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[j] {
			continue
		}
		seen[j] = true
		out = append(out, j)
		stack = append(stack, g.down[j]...)
	}
	sort.Slice(out, func(a, b int) bool { return g.rank[out[a]] < g.rank[out[b]] })
	return g.names(out)
}

// Ready returns the tasks that may start now, in topological order: those
// pending whose dependencies have all succeeded (DAG-05). A task missing
// from status counts as pending; a task with a failed, skipped or otherwise
// unfinished dependency is not ready.
func (g *Graph) Ready(status map[string]protocol.NodeStatus) []string {
	var out []string
	for _, i := range g.topo {
		if st, ok := status[g.ids[i]]; ok && st != protocol.NodePending {
			continue
		}
		ready := true
		for _, d := range g.deps[i] {
			if status[g.ids[d]] != protocol.NodeSucceeded {
				ready = false
				break
			}
		}
		if ready {
			out = append(out, g.ids[i])
		}
	}
	return out
}

// gatePlan is the dependency closure of a task's gates, in topological
// order with alphabetical ties.
type gatePlan struct {
	order []string
	deps  map[string][]string
}

// planGates computes the closure of names over depends_on (DP-01) and
// orders it (DP-04), rejecting unknown names and cycles (DP-05, DP-06).
func planGates(gates []protocol.GateSpec, names []string) (*gatePlan, error) {
	defs := make(map[string]*protocol.GateSpec, len(gates))
	for i := range gates {
		if _, dup := defs[gates[i].Name]; dup {
			return nil, fmt.Errorf("workflow: duplicate gate %q", gates[i].Name)
		}
		defs[gates[i].Name] = &gates[i]
	}
	plan := &gatePlan{deps: map[string][]string{}}
	inClosure := map[string]bool{}
	type edge struct{ from, to string }
	seenEdge := map[edge]bool{}
	var members []string
	queue := append([]string(nil), names...)
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if inClosure[n] {
			continue
		}
		def, ok := defs[n]
		if !ok {
			return nil, fmt.Errorf("workflow: unknown gate %q", n)
		}
		inClosure[n] = true
		members = append(members, n)
		for _, d := range def.DependsOn {
			if _, ok := defs[d]; !ok {
				return nil, fmt.Errorf("workflow: gate %q depends on unknown gate %q", n, d)
			}
			if !seenEdge[edge{n, d}] {
				seenEdge[edge{n, d}] = true
				plan.deps[n] = append(plan.deps[n], d)
				queue = append(queue, d)
			}
		}
	}
	sort.Strings(members)
	index := make(map[string]int, len(members))
	for i, n := range members {
		index[n] = i
	}
	deps := make([][]int, len(members))
	down := make([][]int, len(members))
	for i, n := range members {
		for _, d := range plan.deps[n] {
			deps[i] = append(deps[i], index[d])
			down[index[d]] = append(down[index[d]], i)
		}
	}
	order, ok := kahn(deps, down)
	if !ok {
		c := FindCycle(members, func(n string) []string { return plan.deps[n] })
		return nil, &CycleError{Kind: "gate", Cycle: c}
	}
	for _, i := range order {
		plan.order = append(plan.order, members[i])
	}
	return plan, nil
}

// GateLayers returns the gates a task runs, grouped in dependency layers:
// layer 0 holds the gates with no dependencies, and every other gate sits
// one layer after its deepest dependency, so the gates of a layer may run
// in parallel once the earlier layers are done (DESIGN decision 6). Names
// within a layer are sorted alphabetically (DP-04).
//
// names is the task's gate list; it is closed over depends_on, so a task
// that lists "test" where test depends_on "vet" runs vet too, even though
// it does not list it (DP-01). Unknown gate names and cycles are errors
// (DP-05, DP-06; a cycle is a *CycleError naming it). No names means no
// gates: the result is nil.
func GateLayers(gates []protocol.GateSpec, names []string) ([][]string, error) {
	plan, err := planGates(gates, names)
	if err != nil {
		return nil, err
	}
	depth := make(map[string]int, len(plan.order))
	var layers [][]string
	for _, n := range plan.order {
		l := 0
		for _, d := range plan.deps[n] {
			l = max(l, depth[d]+1)
		}
		depth[n] = l
		if l == len(layers) {
			layers = append(layers, nil)
		}
		layers[l] = append(layers[l], n)
	}
	for _, layer := range layers {
		sort.Strings(layer)
	}
	return layers, nil
}

// ReadyGates decides, for one task's gates (names, closed over depends_on
// as in GateLayers), which gates to dispatch now and which to skip.
//
// status holds what is known of each gate: a gate absent from it has not
// been dispatched; a dispatched gate without a final result should be
// recorded as protocol.GatePending. A gate absent from status is
//   - skipped when a dependency did not pass (failed, timeout, error or
//     skipped) — skips propagate transitively within one call (DP-07, DP-08);
//   - ready when every dependency passed;
//   - left waiting otherwise.
//
// The workflow schema has no on_fail yet, so every failure blocks its
// dependents. Both lists are in topological order with alphabetical ties.
func ReadyGates(gates []protocol.GateSpec, names []string, status map[string]protocol.GateStatus) (ready, skip []string, err error) {
	plan, err := planGates(gates, names)
	if err != nil {
		return nil, nil, err
	}
	skipped := map[string]bool{}
	for _, n := range plan.order {
		if _, known := status[n]; known {
			continue
		}
		blocked, waiting := false, false
		for _, d := range plan.deps[n] {
			st, known := status[d]
			switch {
			case skipped[d]:
				blocked = true
			case !known || st == protocol.GatePending:
				waiting = true
			case st != protocol.GatePassed:
				blocked = true
			}
		}
		switch {
		case blocked:
			skipped[n] = true
			skip = append(skip, n)
		case !waiting:
			ready = append(ready, n)
		}
	}
	return ready, skip, nil
}
