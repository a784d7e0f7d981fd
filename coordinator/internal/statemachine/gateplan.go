package statemachine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// PlanGateChange computes the task and gate layers node n has after change
// c, without changing anything. A removal is refused while another of the
// node's gates depends on the gate.
func (w *Workflow) PlanGateChange(n *Node, c eventlog.GateChange) (protocol.TaskSpec, [][]string, error) {
	t := cloneTask(n.Task)
	switch {
	case (c.Definition == nil) == (c.Remove == ""):
		return t, nil, fmt.Errorf("node.gates_changed for %s/%s must either define or remove one gate", w.ID, n.ID)
	case c.Definition != nil:
		def := *c.Definition
		replaced := false
		for i := range t.GateDefs {
			if t.GateDefs[i].Name == def.Name {
				t.GateDefs[i], replaced = def, true
			}
		}
		if !replaced {
			t.GateDefs = append(t.GateDefs, def)
		}
		if _, inPlan := n.GateSpecs[def.Name]; !inPlan {
			if t.Required == nil && t.Optional == nil {
				t.Required = append([]string{}, t.Gates...) // make the old all-required form explicit
			}
			if c.Optional {
				t.Optional = append(t.Optional, def.Name)
			} else {
				t.Required = append(t.Required, def.Name)
			}
			t.Gates = append(t.Gates, def.Name)
		}
		if c.OnFail != "" {
			if t.OnFail == nil {
				t.OnFail = map[string]string{}
			}
			t.OnFail[def.Name] = c.OnFail
		}
	default:
		name := c.Remove
		t.Gates, t.Required, t.Optional = listWithout(t.Gates, name), listWithout(t.Required, name), listWithout(t.Optional, name)
		// Refused while the gates the node keeps still pull it in.
		if kept, err := workflow.GateLayers(w.Spec.GateDefinitions(t), t.Gates); err == nil {
			var needers []string
			for _, layer := range kept {
				for _, g := range layer {
					if slices.Contains(gateSpecOf(w, t, g).DependsOn, name) {
						needers = append(needers, g)
					}
				}
			}
			if len(needers) > 0 {
				return t, nil, fmt.Errorf("gate %q of node %s is needed by %s (depends_on); remove those first",
					name, n.ID, strings.Join(needers, ", "))
			}
		}
		defs := t.GateDefs[:0:0]
		for _, d := range t.GateDefs {
			if d.Name != name {
				defs = append(defs, d)
			}
		}
		t.GateDefs = defs
		delete(t.OnFail, name)
	}
	layers, err := workflow.GateLayers(w.Spec.GateDefinitions(t), t.Gates)
	if err != nil {
		return t, nil, fmt.Errorf("node %s: %w", n.ID, err)
	}
	return t, layers, nil
}

func gateSpecOf(w *Workflow, t protocol.TaskSpec, name string) protocol.GateSpec {
	for _, d := range w.Spec.GateDefinitions(t) {
		if d.Name == name {
			return d
		}
	}
	return protocol.GateSpec{}
}

// applyGateChange folds a node.gates_changed event: the node's task and
// gate plan change; a gate the node no longer runs keeps only its round
// counter (so a gate added again gets new job ids), and a gate added to
// the plan starts afresh, for Decide to dispatch in its layer.
func (w *Workflow) applyGateChange(n *Node, c eventlog.GateChange) error {
	t, _, err := w.PlanGateChange(n, c)
	if err != nil {
		return err
	}
	before := n.GateSpecs
	if err := n.setTask(w.Spec, t); err != nil {
		return err
	}
	for name, g := range n.Gates {
		_, was := before[name]
		_, is := n.GateSpecs[name]
		if was != is {
			*g = GateRun{Name: name, Round: g.Round}
		}
	}
	return nil
}

func cloneTask(t protocol.TaskSpec) protocol.TaskSpec {
	c := t
	c.Gates = slices.Clone(t.Gates)
	c.Required = slices.Clone(t.Required)
	c.Optional = slices.Clone(t.Optional)
	c.GateDefs = slices.Clone(t.GateDefs)
	if t.OnFail != nil {
		c.OnFail = make(map[string]string, len(t.OnFail))
		for k, v := range t.OnFail {
			c.OnFail[k] = v
		}
	}
	return c
}

// listWithout returns list without name; nil stays nil (a task written
// without required/optional keeps that form).
func listWithout(list []string, name string) []string {
	if list == nil {
		return nil
	}
	out := []string{}
	for _, x := range list {
		if x != name {
			out = append(out, x)
		}
	}
	return out
}
