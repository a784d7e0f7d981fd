package statemachine

import (
	"strings"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// contextSpec is the context of node n's agent job: the task's, with Plan
// set to the prompts of the nodes n depends on directly, in the order the
// task lists them — the work a reviewer checks the change against (CTX-06).
// A task that names no targets gets its declared files as $TARGET, and one
// that names no interface globs gets those of the interfaces locked for
// it as $INTERFACES. It is nil when the task packs no context, and an
// error only when a dependency's prompt left in the log cannot be read.
func (w *Workflow) contextSpec(n *Node) (*protocol.ContextSpec, error) {
	if n.Task.Context == nil {
		return nil, nil
	}
	spec := *n.Task.Context
	var plan strings.Builder
	for _, dep := range n.Task.DependsOn {
		d, ok := w.Nodes[dep]
		if !ok {
			continue
		}
		if plan.Len() > 0 {
			plan.WriteString("\n")
		}
		prompt, err := w.TaskPrompt(d)
		if err != nil {
			return nil, err
		}
		plan.WriteString("### Task " + dep + "\n\n" + strings.TrimRight(prompt, "\n") + "\n")
	}
	spec.Plan = plan.String()
	if len(spec.Targets) == 0 {
		// $TARGET: the files the task declares it works on (DAG-07).
		spec.Targets = append([]string(nil), n.Task.Files...)
	}
	if len(spec.Interfaces) == 0 {
		// $INTERFACES: the interface files locked for this node (HIER-03),
		// which its change must respect.
		seen := map[string]bool{}
		_, locked := w.lockedInterfaces(n)
		for _, globs := range locked {
			for _, g := range globs {
				if !seen[g] {
					seen[g] = true
					spec.Interfaces = append(spec.Interfaces, g)
				}
			}
		}
	}
	return &spec, nil
}
