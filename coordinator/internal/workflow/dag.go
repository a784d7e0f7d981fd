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

// Graph is the task DAG of a workflow: an edge dep → task for every
// depends_on entry (DAG-02). It is immutable once built.
type Graph struct {
	ids   []string // declaration order
	index map[string]int
	deps  [][]int // direct dependencies, as listed
	down  [][]int // direct dependents, in declaration order
	topo  []int
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
		c := graph.FindCycle(g.ids, func(id string) []string { return g.Deps(id) })
		return nil, &CycleError{Kind: "task", Cycle: c}
	}
	g.topo = topo
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

// GateLayers returns the gates a task runs, grouped in dependency layers:
// layer 0 holds the gates with no dependencies, and every other gate sits
// one layer after its deepest dependency, so the gates of a layer may run
// in parallel once the earlier layers are done (each gate job has its own
// workspace, so nothing forces them to run one at a time). Names
// within a layer are sorted alphabetically (DP-04).
//
// names is the task's gate list; it is closed over depends_on, so a task
// that lists "test" where test depends_on "vet" runs vet too, even though
// it does not list it (DP-01). Duplicate definitions, unknown gate names
// and cycles are errors (DP-05, DP-06; a cycle is a *CycleError naming
// it); the closure, the order and the errors are the gate schema's
// (gates.PlanWith). No names means no gates: the result is nil. specs are
// the definitions in effect for the task: spec.GateDefinitions(task) when
// the task defines gates of its own (front matter); spec.Gates alone does
// not hold those.
func GateLayers(specs []protocol.GateSpec, names []string) ([][]string, error) {
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
	return plan.Layers(), nil
}
