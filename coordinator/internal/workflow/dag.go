package workflow

import (
	"errors"
	"fmt"
	"sort"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/graph"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// CycleError reports a dependency cycle among tasks or gates (DAG-04,
// DP-05): Kind is "task" or "gate", Cycle the nodes in order. It is the
// one type of shared/graph, which the gate loader uses too.
type CycleError = graph.CycleError

// FormatCycle renders a cycle as "a -> b -> c -> a".
func FormatCycle(cycle []string) string { return graph.FormatCycle(cycle) }

// FindCycle returns one dependency cycle among nodes, or nil if there is
// none (see graph.FindCycle): deterministic, starting where the search
// entered the cycle, each element depending on the next.
func FindCycle(nodes []string, deps func(string) []string) []string {
	return graph.FindCycle(nodes, deps)
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
	topo, ok := graph.Kahn(g.deps, g.down)
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

// planGates computes the closure of names over depends_on (DP-01) and
// orders it (DP-04), rejecting duplicate definitions, unknown names and
// cycles (DP-05, DP-06), with the gate schema's one implementation.
func planGates(specs []protocol.GateSpec, names []string) (*gates.Plan, error) {
	defs := make(map[string]*protocol.GateSpec, len(specs))
	known := make([]string, 0, len(specs))
	for i := range specs {
		if _, dup := defs[specs[i].Name]; dup {
			return nil, fmt.Errorf("workflow: duplicate gate %q", specs[i].Name)
		}
		defs[specs[i].Name] = &specs[i]
		known = append(known, specs[i].Name)
	}
	sort.Strings(known)
	lookup := func(name string) ([]string, []gates.Source, bool) {
		def, ok := defs[name]
		if !ok {
			return nil, nil, false
		}
		return def.DependsOn, nil, true
	}
	plan, err := gates.PlanWith(lookup, known, names)
	if err != nil {
		var nf *gates.NotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("workflow: %w", err)
		}
		return nil, err
	}
	return plan, nil
}

// GateLayers returns the gates a task runs, grouped in dependency layers:
// layer 0 holds the gates with no dependencies, and every other gate sits
// one layer after its deepest dependency, so the gates of a layer may run
// in parallel once the earlier layers are done (each gate job has its own
// workspace, so nothing forces them to run one at a time). Names
// within a layer are sorted alphabetically (DP-04).
//
// names is the task's gate list; it is closed over depends_on, so a task
// that lists "test" where test depends_on "vet" runs vet too, even though
// it does not list it (DP-01). Unknown gate names and cycles are errors
// (DP-05, DP-06; a cycle is a *CycleError naming it). No names means no
// gates: the result is nil. specs are the definitions in effect for the
// task: spec.GateDefinitions(task) when the task defines gates of its own
// (front matter); spec.Gates alone does not hold those.
func GateLayers(specs []protocol.GateSpec, names []string) ([][]string, error) {
	plan, err := planGates(specs, names)
	if err != nil {
		return nil, err
	}
	return plan.Layers(), nil
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
// Every failure blocks its dependents here: a task's on_fail (a warn
// failure counts as passed for dependents, DP-07) and a gate's
// skip_on_dependency_failure: false are not applied yet. Both lists are in
// topological order with alphabetical ties. For a task with gates of its
// own, pass spec.GateDefinitions(task).
func ReadyGates(specs []protocol.GateSpec, names []string, status map[string]protocol.GateStatus) (ready, skip []string, err error) {
	plan, err := planGates(specs, names)
	if err != nil {
		return nil, nil, err
	}
	skipped := map[string]bool{}
	for _, n := range plan.Order {
		if _, known := status[n]; known {
			continue
		}
		blocked, waiting := false, false
		for _, d := range plan.Deps[n] {
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
