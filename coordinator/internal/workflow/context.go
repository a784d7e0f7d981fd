package workflow

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// context parses a task's context field (CTX-01, CTX-09):
//
//	context: reviewer_diff                  # a strategy by name
//	context: {strategy: implementer_targeted, budget: 30000,
//	          targets: [internal/store/*.go], interfaces: [api/*.go]}
//
// and resolves it against the loaded strategies (Options.Strategies), so
// the task carries the strategy's whole definition.
func (p *parser) context(n *yaml.Node, what string) *protocol.ContextSpec {
	what += " context"
	var (
		name                string
		nameNode            = n
		budget              int
		targets, interfaces []string
	)
	if n.Kind == yaml.ScalarNode {
		s, ok := p.Str(n, what)
		if !ok {
			return nil
		}
		name = s
	} else {
		f, ok := p.Fields(n, what, "strategy", "budget", "targets", "interfaces")
		if !ok {
			return nil
		}
		x, ok := f["strategy"]
		if !ok {
			p.Addf(n, "%s is missing required field \"strategy\"", what)
			return nil
		}
		nameNode = x.Val
		if name, ok = p.Str(x.Val, what+" strategy"); !ok {
			return nil
		}
		if x, ok := f["budget"]; ok {
			v, good := p.Int(x.Val, what+" budget", contextpack.MinBudget, contextpack.MaxBudget)
			if !good {
				return nil
			}
			budget = int(v)
		}
		for key, dst := range map[string]*[]string{"targets": &targets, "interfaces": &interfaces} {
			x, ok := f[key]
			if !ok || gates.IsNull(x.Val) {
				continue
			}
			list, good := p.contextGlobs(x.Val, what+" "+key)
			if !good {
				return nil
			}
			*dst = list
		}
	}
	spec, err := p.strategies.Spec(name, budget, targets, interfaces)
	if err != nil {
		p.Addf(nameNode, "%s: %v", what, err)
		return nil
	}
	return spec
}

// contextGlobs parses a list of target or interface globs.
func (p *parser) contextGlobs(n *yaml.Node, what string) ([]string, bool) {
	if n.Kind != yaml.SequenceNode {
		p.Addf(n, "%s must be a list of globs, got %s", what, gates.Describe(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok := true
	for _, item := range n.Content {
		s, good := p.Str(item, what+" entry")
		if !good {
			ok = false
			continue
		}
		if err := contextpack.CheckGlob(s); err != nil {
			p.Addf(item, "%s: %v", what, err)
			ok = false
			continue
		}
		out = append(out, s)
	}
	return out, ok
}

// humanContext is the problem of a human task with a context.
func humanContext(what string) string {
	return fmt.Sprintf("%s is a human task: it runs no agent to give a context to", what)
}
