package gates

import (
	"fmt"
	"sort"
	"strings"

	"github.com/supervisorhq/supervisor/shared/graph"
)

// Set is a collection of gate definitions by name. Adding a gate replaces
// the whole definition of that name (LD-04: fields are never merged). The
// zero value and nil are empty sets.
type Set struct {
	m map[string]Gate
}

// NewSet returns a set of gs; a later gate replaces an earlier one of the
// same name.
func NewSet(gs ...Gate) *Set {
	s := &Set{}
	for _, g := range gs {
		s.Add(g)
	}
	return s
}

// Add adds g, replacing any gate of the same name.
func (s *Set) Add(g Gate) {
	if s.m == nil {
		s.m = map[string]Gate{}
	}
	s.m[g.Name] = g
}

// Get returns the gate of that name.
func (s *Set) Get(name string) (Gate, bool) {
	if s == nil {
		return Gate{}, false
	}
	g, ok := s.m[name]
	return g, ok
}

// Len returns the number of gates.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.m)
}

// Names returns the gate names, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.m))
	for n := range s.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Gates returns the gates sorted by name.
func (s *Set) Gates() []Gate {
	names := s.Names()
	out := make([]Gate, len(names))
	for i, n := range names {
		out[i] = s.m[n]
	}
	return out
}

// Merge returns a new set holding the gates of sets, lowest precedence
// first: a gate in a later set replaces the whole gate of the same name in
// an earlier one (LD-04). Nil sets are skipped.
func Merge(sets ...*Set) *Set {
	out := &Set{}
	for _, s := range sets {
		if s == nil {
			continue
		}
		for _, g := range s.m {
			out.Add(g)
		}
	}
	return out
}

// NotFoundError is an unknown gate name (DP-06, LD-12): requested
// directly, or named in another gate's depends_on.
type NotFoundError struct {
	Name string
	// From is the gate whose depends_on names Name; "" when Name was
	// requested directly.
	From string
	// Where is where the reference was written, if known.
	Where Source
	// Known lists the gates that do exist, sorted.
	Known []string
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	if e.From != "" {
		fmt.Fprintf(&b, "gate %q depends on unknown gate %q", e.From, e.Name)
	} else {
		fmt.Fprintf(&b, "unknown gate %q", e.Name)
	}
	if w := e.Where.String(); w != "" {
		fmt.Fprintf(&b, " (at %s)", w)
	}
	if len(e.Known) > 0 {
		fmt.Fprintf(&b, "; defined gates: %s", strings.Join(e.Known, ", "))
	} else {
		b.WriteString("; no gates are defined")
	}
	return b.String()
}

// CycleError is a dependency cycle; Kind is "gate" for gates.
type CycleError = graph.CycleError

// Plan is the dependency closure of some requested gates, ordered.
type Plan struct {
	// Order holds every gate of the closure, each after its dependencies,
	// ties broken alphabetically (DP-04).
	Order []string
	// Deps holds each gate's direct dependencies, as written.
	Deps map[string][]string
}

// Lookup describes a gate to PlanWith: its dependencies, where each was
// written (for messages; may be shorter), and whether it exists.
type Lookup func(name string) (deps []string, where []Source, ok bool)

// PlanWith computes the closure of requested over depends_on (DP-01) and
// orders it with Kahn's algorithm, ties alphabetical (DP-04). An unknown
// name is a *NotFoundError (DP-06) naming where it was referenced; a cycle
// is a *CycleError naming its gates in order (DP-05). Cycles outside the
// closure do not matter. known lists every defined gate, for messages.
func PlanWith(lookup Lookup, known []string, requested []string) (*Plan, error) {
	plan := &Plan{Deps: map[string][]string{}}
	in := map[string]bool{}
	var members []string
	type item struct {
		name, from string
		where      Source
	}
	queue := make([]item, 0, len(requested))
	for _, r := range requested {
		queue = append(queue, item{name: r})
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if in[it.name] {
			continue
		}
		deps, where, ok := lookup(it.name)
		if !ok {
			return nil, &NotFoundError{Name: it.name, From: it.from, Where: it.where, Known: known}
		}
		in[it.name] = true
		members = append(members, it.name)
		seen := map[string]bool{}
		for i, d := range deps {
			if seen[d] {
				continue
			}
			seen[d] = true
			plan.Deps[it.name] = append(plan.Deps[it.name], d)
			var w Source
			if i < len(where) {
				w = where[i]
			}
			queue = append(queue, item{name: d, from: it.name, where: w})
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
		for _, d := range plan.Deps[n] {
			deps[i] = append(deps[i], index[d])
			down[index[d]] = append(down[index[d]], i)
		}
	}
	order, ok := graph.Kahn(deps, down)
	if !ok {
		c := graph.FindCycle(members, func(n string) []string { return plan.Deps[n] })
		return nil, &CycleError{Kind: "gate", Cycle: c}
	}
	for _, i := range order {
		plan.Order = append(plan.Order, members[i])
	}
	return plan, nil
}

// Layers groups the plan in dependency layers: layer 0 holds the gates
// with no dependencies, and every other gate sits one layer after its
// deepest dependency, so a layer's gates may run in parallel once the
// earlier layers are done: each gate job has a workspace of its own, so
// nothing forces them to run one at a time. Names within a layer are
// sorted. An empty plan has no layers (nil).
func (p *Plan) Layers() [][]string {
	depth := make(map[string]int, len(p.Order))
	var layers [][]string
	for _, n := range p.Order {
		l := 0
		for _, d := range p.Deps[n] {
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
	return layers
}

// lookup adapts a set to PlanWith.
func (s *Set) lookup(name string) ([]string, []Source, bool) {
	g, ok := s.Get(name)
	if !ok {
		return nil, nil, false
	}
	where := make([]Source, len(g.DependsOn))
	for i := range g.DependsOn {
		where[i] = g.depSource(i)
	}
	return g.DependsOn, where, true
}

// Resolve returns the requested gates and everything they depend on,
// transitively (DP-01), in a deterministic topological order: Kahn's
// algorithm with alphabetical ties (DP-04). Unknown names are a
// *NotFoundError naming where they were referenced (DP-06, LD-12); cycles
// a *CycleError naming the gates in order (DP-05).
func Resolve(set *Set, requested []string) ([]string, error) {
	p, err := PlanWith(set.lookup, set.Names(), requested)
	if err != nil {
		return nil, err
	}
	return p.Order, nil
}

// CheckDeps reports, at the position of each depends_on entry, the
// dependencies of local gates that depend on themselves or on a gate not
// in set, and every dependency cycle through a local gate, at the first
// local gate of the cycle. set is every gate in effect, local ones
// included. local is searched first, in its order, so the cycles named
// are deterministic.
func (c *Checker) CheckDeps(local []Gate, set *Set) {
	isLocal := map[string]Source{}
	var nodes []string
	for _, g := range local {
		if _, dup := isLocal[g.Name]; dup || g.Name == "" {
			continue
		}
		isLocal[g.Name] = g.Source
		nodes = append(nodes, g.Name)
		for i, d := range g.DependsOn {
			switch _, known := set.Get(d); {
			case d == g.Name:
				c.AddAt(g.depSource(i), "gate %q depends on itself", d)
			case !known:
				c.AddAt(g.depSource(i), "gate %q depends on unknown gate %q", g.Name, d)
			}
		}
	}
	for _, n := range set.Names() {
		if _, ok := isLocal[n]; !ok {
			nodes = append(nodes, n)
		}
	}
	deps := func(n string) []string {
		g, _ := set.Get(n)
		var out []string
		for _, d := range g.DependsOn {
			if d != n { // self-dependencies are reported above
				out = append(out, d)
			}
		}
		return out
	}
	for _, cyc := range graph.FindCycles(nodes, deps) {
		at, found := Source{}, false
		for _, n := range cyc {
			if s, ok := isLocal[n]; ok {
				at, found = s, true
				break
			}
		}
		if !found {
			continue
		}
		c.AddAt(at, "%s", (&CycleError{Kind: "gate", Cycle: cyc}).Error())
	}
}
