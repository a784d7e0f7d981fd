package agentoutput

import (
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/shared/graph"
)

// checkPlan finds what a schema cannot say about a plan: component and
// phase ids unique, dependencies naming components of the plan (not
// themselves), no dependency cycle among components (DAG-04, named in
// order), and interfaces named by components defined in some phase.
// Phase ordering edges (DAG-03) cannot make a cycle by themselves, but an
// explicit dependency on a component of a later phase can: Components
// computes those edges, and the cycle is looked for over all of them.
func checkPlan(p *PlanOutput) []Violation {
	var vs []Violation
	add := func(path, format string, args ...any) {
		vs = append(vs, Violation{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	phases := map[string]int{}
	where := map[string]string{}
	ifaces := map[string]bool{}
	for i, ph := range p.Phases {
		if j, dup := phases[ph.ID]; dup {
			add(fmt.Sprintf("/phases/%d/id", i), "phase id %q is also the id of phase %d", ph.ID, j)
		}
		phases[ph.ID] = i
		for j, it := range ph.Interfaces {
			ifaces[it.Name] = true
			if strings.TrimSpace(it.File) == "" {
				continue
			}
			if why := badGlob(it.File); why != "" {
				add(fmt.Sprintf("/phases/%d/interfaces/%d/file", i, j), "%q %s", it.File, why)
			}
		}
		for k, c := range ph.Components {
			path := fmt.Sprintf("/phases/%d/components/%d", i, k)
			if w, dup := where[c.ID]; dup {
				add(path+"/id", "component id %q is also used at %s", c.ID, w)
				continue
			}
			where[c.ID] = path
		}
	}
	for i, ph := range p.Phases {
		for k, c := range ph.Components {
			path := fmt.Sprintf("/phases/%d/components/%d", i, k)
			for d, dep := range c.DependsOn {
				switch {
				case dep == c.ID:
					add(fmt.Sprintf("%s/depends_on/%d", path, d), "component %q depends on itself", c.ID)
				case where[dep] == "":
					add(fmt.Sprintf("%s/depends_on/%d", path, d), "component %q depends on %q, which is no component of the plan", c.ID, dep)
				}
			}
			for f, glob := range c.Files {
				if why := badGlob(glob); why != "" {
					add(fmt.Sprintf("%s/files/%d", path, f), "%q %s", glob, why)
				}
			}
			for f, name := range c.Interfaces {
				if !ifaces[name] {
					add(fmt.Sprintf("%s/interfaces/%d", path, f), "component %q names interface %q, which no phase defines", c.ID, name)
				}
			}
		}
	}
	for i, d := range p.Dependencies {
		path := fmt.Sprintf("/dependencies/%d", i)
		switch {
		case where[d.Component] == "":
			add(path+"/component", "%q is no component of the plan", d.Component)
		case where[d.DependsOn] == "":
			add(path+"/depends_on", "%q is no component of the plan", d.DependsOn)
		case d.Component == d.DependsOn:
			add(path, "component %q depends on itself", d.Component)
		}
	}
	if len(vs) > 0 {
		return vs
	}
	ids, deps := p.Graph()
	if c := graph.FindCycle(ids, func(id string) []string { return deps[id] }); c != nil {
		add("", "the plan's components depend on each other in a cycle (phase order included): %s", graph.FormatCycle(c))
	}
	return vs
}

// badGlob says why a component's file glob is not a path relative to the
// repository root and inside it ("" when it is).
func badGlob(g string) string {
	n := strings.ReplaceAll(strings.TrimSpace(g), `\`, "/")
	switch {
	case n == "" || n == "." || n == "./":
		return "names no path below the repository root"
	case strings.HasPrefix(n, "/"):
		return "must be relative to the repository root, not absolute"
	case len(n) >= 2 && n[1] == ':':
		return "must be relative to the repository root, not a drive path"
	}
	for _, elem := range strings.Split(n, "/") {
		if elem == ".." {
			return "must stay inside the repository: '..' is not allowed"
		}
	}
	return ""
}

// Graph returns the plan's components in plan order and what each one
// waits for: its depends_on, the plan's dependencies naming it, and every
// component of the phase before its own (DAG-03), without duplicates, in
// that order.
func (p *PlanOutput) Graph() (ids []string, deps map[string][]string) {
	deps = map[string][]string{}
	var prev []string
	for _, ph := range p.Phases {
		var cur []string
		for _, c := range ph.Components {
			ids = append(ids, c.ID)
			cur = append(cur, c.ID)
			seen := map[string]bool{}
			addDep := func(d string) {
				if !seen[d] && d != c.ID {
					seen[d] = true
					deps[c.ID] = append(deps[c.ID], d)
				}
			}
			for _, d := range c.DependsOn {
				addDep(d)
			}
			for _, d := range p.Dependencies {
				if d.Component == c.ID {
					addDep(d.DependsOn)
				}
			}
			for _, d := range prev {
				addDep(d)
			}
		}
		prev = cur
	}
	return ids, deps
}

// Component returns the plan's component with id, and its phase.
func (p *PlanOutput) Component(id string) (Component, Phase, bool) {
	for _, ph := range p.Phases {
		for _, c := range ph.Components {
			if c.ID == id {
				return c, ph, true
			}
		}
	}
	return Component{}, Phase{}, false
}
