package workflow

import (
	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/shared/gates"
)

// MaxIntegrationGates is the most gates integration_gates may name.
const MaxIntegrationGates = 20

// integrationGates parses the workflow's integration_gates: a list of
// names of gates defined in its gates section or by the built-in, user or
// project gates (resolved like a task's gates, depends_on included).
func (p *parser) integrationGates(n *yaml.Node, wfSet *gates.Set) []string {
	if n == nil || gates.IsNull(n) {
		return nil
	}
	names, nodes, _ := p.NameList(n, "integration_gates")
	if len(names) > MaxIntegrationGates {
		p.Addf(n, "integration_gates names %d gates; at most %d", len(names), MaxIntegrationGates)
		return nil
	}
	for i, name := range names {
		if _, known := wfSet.Get(name); !known {
			p.Addf(nodes[i], "integration_gates names unknown gate %q", name)
		}
	}
	if len(p.Problems) == 0 && len(names) > 0 {
		if _, err := gates.Resolve(wfSet, names); err != nil {
			p.Addf(n, "integration_gates: %v", err)
		}
	}
	return names
}

// onlyTaskGates is the workflow's gates but those integration_gates names:
// a task without a gates section runs those, not the integration gates.
func onlyTaskGates(wfGates []gates.Gate, integration []string) []gates.Gate {
	if len(integration) == 0 {
		return wfGates
	}
	skip := make(map[string]bool, len(integration))
	for _, n := range integration {
		skip[n] = true
	}
	out := make([]gates.Gate, 0, len(wfGates))
	for _, g := range wfGates {
		if !skip[g.Name] {
			out = append(out, g)
		}
	}
	return out
}
