package statemachine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// gatePlan is a node's gate plan (PERF-38): its gates in dependency
// layers, their definitions and what each one's failure does. It is
// derived from the task and the workflow's gates, never changed once
// built, and shared by the nodes whose tasks give the same one.
type gatePlan struct {
	order  []string
	specs  map[string]protocol.GateSpec
	onFail map[string]gates.FailAction
}

// GateOrder is the node's gates in dispatch order (dependency layers,
// ties alphabetical), including gates pulled in through depends_on.
// Read-only.
func (n *Node) GateOrder() []string {
	if n.plan == nil {
		return nil
	}
	return n.plan.order
}

// GateSpecs are the gate definitions in effect for the node (workflow
// gates, with the task's own front-matter gates replacing them), by name.
// Read-only.
func (n *Node) GateSpecs() map[string]protocol.GateSpec {
	if n.plan == nil {
		return nil
	}
	return n.plan.specs
}

// OnFail is what each gate's failure does to the node, by gate name.
// Read-only.
func (n *Node) OnFail() map[string]gates.FailAction {
	if n.plan == nil {
		return nil
	}
	return n.plan.onFail
}

// newGatePlan computes task t's gate plan in workflow spec.
func newGatePlan(spec *protocol.WorkflowSpec, t *protocol.TaskSpec) (*gatePlan, error) {
	defs := spec.GateDefinitions(*t)
	layers, err := workflow.GateLayers(defs, t.Gates)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]protocol.GateSpec, len(defs))
	for _, d := range defs {
		byName[d.Name] = d
	}
	p := &gatePlan{specs: map[string]protocol.GateSpec{}, onFail: map[string]gates.FailAction{}}
	for _, layer := range layers {
		p.order = append(p.order, layer...)
		for _, g := range layer {
			p.specs[g] = byName[g]
			p.onFail[g] = gates.TaskOnFail(*t, byName[g])
		}
	}
	return p, nil
}

// gatePlans shares the gate plans of one workflow's tasks, by planKey.
type gatePlans map[string]*gatePlan

// planKey is what task t's gate plan depends on besides the workflow's
// gates: its gate list, required and optional lists and on_fail, nil and
// empty told apart. A task with gate definitions of its own has none
// (false): its plan is its own.
func planKey(t *protocol.TaskSpec) (string, bool) {
	if len(t.GateDefs) > 0 {
		return "", false
	}
	var b strings.Builder
	list := func(l []string) {
		if l == nil {
			b.WriteString("-;")
			return
		}
		b.WriteString(strconv.Itoa(len(l)) + ":")
		for _, x := range l {
			b.WriteString(strconv.Itoa(len(x)) + ":" + x)
		}
		b.WriteString(";")
	}
	list(t.Gates)
	list(t.Required)
	list(t.Optional)
	if t.OnFail == nil {
		b.WriteString("-;")
	} else {
		keys := make([]string, 0, len(t.OnFail))
		for k := range t.OnFail {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString(strconv.Itoa(len(keys)) + ":")
		for _, k := range keys {
			v := t.OnFail[k]
			b.WriteString(strconv.Itoa(len(k)) + ":" + k + strconv.Itoa(len(v)) + ":" + v)
		}
	}
	return b.String(), true
}

// setTask points the node at task t, which it must never write through,
// and gives it t's gate plan in workflow spec: one from plans when a task
// of the same workflow had the same gates (plans may be nil: none
// shared).
func (n *Node) setTask(spec *protocol.WorkflowSpec, t *protocol.TaskSpec, plans gatePlans) error {
	key, shareable := planKey(t)
	shareable = shareable && plans != nil
	p := plans[key]
	if !shareable || p == nil {
		var err error
		if p, err = newGatePlan(spec, t); err != nil {
			return err
		}
		if shareable {
			p = internPlan(p)
			plans[key] = p
		}
	}
	n.Task, n.plan = t, p
	return nil
}

// plansInUse are the shareable gate plans nodes point at, by content, so
// that workflows with the same gates (the same repository's, say) share
// one too (PERF-39). An entry holds its plan weakly: it goes once no node
// points at the plan. Every State of the process shares it, hence the lock.
var plansInUse = struct {
	sync.Mutex
	m map[string]weak.Pointer[gatePlan]
}{m: map[string]weak.Pointer[gatePlan]{}}

// internPlan returns the plan in use equal to p, or p, now in use.
func internPlan(p *gatePlan) *gatePlan {
	content, err := json.Marshal(struct {
		Order  []string
		Specs  map[string]protocol.GateSpec
		OnFail map[string]gates.FailAction
	}{p.order, p.specs, p.onFail})
	if err != nil {
		return p // not shared: the plan is still right
	}
	key := string(content)
	plansInUse.Lock()
	defer plansInUse.Unlock()
	if q := plansInUse.m[key].Value(); q != nil && reflect.DeepEqual(p, q) {
		return q
	}
	wp := weak.Make(p)
	plansInUse.m[key] = wp
	runtime.AddCleanup(p, func(key string) {
		plansInUse.Lock()
		defer plansInUse.Unlock()
		if plansInUse.m[key] == wp {
			delete(plansInUse.m, key)
		}
	}, key)
	return p
}

// relink derives again what a snapshot leaves out of the workflow's
// nodes: each node's task (its own, or its entry in the spec) and its
// gate plan, shared as a fold shares them, and shares the spec's equal
// agent definitions, gate lists and pools again.
func (w *Workflow) relink() error {
	shareAgents(w.Spec.Tasks)
	shareLists(w.Spec.Tasks)
	plans := gatePlans{}
	for i := range w.Spec.Tasks {
		t := &w.Spec.Tasks[i]
		n := w.Nodes[t.ID]
		if n == nil {
			continue
		}
		if n.ownTask() != nil {
			t = n.ownTask()
		}
		if err := n.setTask(w.Spec, t, plans); err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
	}
	for id, n := range w.Nodes {
		if n == nil || n.Task == nil {
			return fmt.Errorf("node %s is not a task of the spec", id)
		}
	}
	return nil
}

// PlanGateChange computes the task and gate layers node n has after change
// c, without changing anything. A removal is refused while another of the
// node's gates depends on the gate.
func (w *Workflow) PlanGateChange(n *Node, c eventlog.GateChange) (protocol.TaskSpec, [][]string, error) {
	t := cloneTask(*n.Task)
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
		if _, inPlan := n.GateSpecs()[def.Name]; !inPlan {
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
	before := n.GateSpecs()
	// The node's own task from now on: the spec's entry, and the plan
	// the node shared with others, stay as they were.
	if err := n.setTask(w.Spec, &t, nil); err != nil {
		return err
	}
	n.setOwnTask(&t)
	for name, g := range n.Gates {
		_, was := before[name]
		_, is := n.GateSpecs()[name]
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
