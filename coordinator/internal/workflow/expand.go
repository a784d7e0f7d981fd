package workflow

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/shared/agentoutput"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/pathglob"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"gopkg.in/yaml.v3"
)

// output reads a task's output schema name (OUT-01).
func (p *parser) output(n *yaml.Node, what string) string {
	s, ok := p.Str(n, what)
	if !ok {
		return ""
	}
	if !agentoutput.Known(s) {
		p.Addf(n, "unknown %s %q (known: %s)", what, s, strings.Join(agentoutput.Names, ", "))
		return ""
	}
	return s
}

// MaxExpandPrompt is the largest expand prompt, in bytes (16 KiB): every
// node a plan adds repeats it.
const MaxExpandPrompt = 16 << 10

// expandDef is a planner task's expand template as parsed, with the nodes
// cross-checks point at.
type expandDef struct {
	spec     *protocol.ExpandSpec
	node     *yaml.Node
	refs     []string
	refNodes []*yaml.Node
	gatesSet bool
	// afterNodes are the nodes of the after list, in its order.
	afterNodes []*yaml.Node
}

// expand reads a planner task's expand template: the settings of the
// nodes its plan's components become (HIER-01). Unset agent, pool and
// timeout are the planner's own; unset max_attempts and allow_empty are
// the workflow's defaults; unset gates are every workflow gate, as for a
// task without a gates section; unset output is implementation. Context,
// max_cost_usd and may_change_interfaces are read as a task's are; unset,
// the added nodes have none (the planner's own are for planning).
func (p *parser) expand(n *yaml.Node, what string, planner protocol.TaskSpec, d defaultsDef) expandDef {
	what += " expand"
	e := defaultExpand(n, planner, d)
	f, ok := p.Fields(n, what, "agent", "prompt", "pool", "gates", "env", "timeout", "max_attempts", "output", "allow_empty",
		"context", "max_cost_usd", "may_change_interfaces", "role", "after")
	if !ok {
		return e
	}
	var ref *roleRef
	if x, ok := f["role"]; ok {
		if ref = p.role(x.Val, what+" role"); ref.role == nil {
			ref = nil
		}
	}
	// Layered as a task's agent is (layerAgent): the template's own agent
	// over defaults.agent over its role's; with neither its own agent nor a
	// role's, the planner's.
	x, own := f["agent"]
	var layered *agentDef
	switch {
	case own:
		if a, good := p.agent(x.Val, what+" agent"); good && !d.agentBad {
			layered = layerAgent(ref, d.agent, &a)
		}
	case roleAgentDef(ref) != nil && !d.agentBad:
		layered = layerAgent(ref, d.agent, nil)
	}
	if layered != nil {
		if spec, ok := p.checkAgent(layered, d.agent, what+" agent"); ok {
			e.spec.Command, e.spec.Adapter, e.spec.Agent = nil, "", spec
		}
	}
	if x, ok := f["prompt"]; ok {
		if s, good := p.Str(x.Val, what+" prompt"); good {
			if len(s) > MaxExpandPrompt {
				p.Addf(x.Val, "%s prompt is %d bytes; at most %d (every node the plan adds repeats it)", what, len(s), MaxExpandPrompt)
			}
			e.spec.Prompt = s
		}
	}
	if x, ok := f["pool"]; ok {
		if s, good := p.name(x.Val, what+" pool"); good {
			e.spec.Pool = s
		}
	}
	if x, ok := f["gates"]; ok {
		e.gatesSet = true
		e.refs, e.refNodes, _ = p.NameList(x.Val, what+" gates")
		e.spec.Gates = append([]string{}, e.refs...)
	}
	if x, ok := f["env"]; ok {
		e.spec.Env, _ = p.Env(x.Val, what+" env")
		p.checkEnvCredentials(x.Val, what+" env")
	}
	if x, ok := f["context"]; ok {
		// Resolved as a task's context is; targets default, per added
		// node, to its component's files (Expand).
		e.spec.Context = p.context(x.Val, what)
	}
	if x, ok := f["max_cost_usd"]; ok {
		e.spec.MaxCostUSD, _ = p.cost(x.Val, what+" max_cost_usd")
	}
	if _, ok := f["may_change_interfaces"]; ok {
		var t protocol.TaskSpec
		p.files(f, &t, what)
		e.spec.MayChangeInterfaces = t.MayChangeInterfaces()
	}
	if x, ok := f["timeout"]; ok {
		if s, good := p.timeout(x.Val, what+" timeout", MaxAgentTimeout); good {
			e.spec.TimeoutSeconds = s
		}
	}
	if x, ok := f["max_attempts"]; ok {
		if v, good := p.Int(x.Val, what+" max_attempts", 1, protocol.MaxMaxAttempts); good {
			e.spec.MaxAttempts = int(v)
		}
	}
	if x, ok := f["output"]; ok {
		s := p.output(x.Val, what+" output")
		if s == agentoutput.Plan {
			p.Addf(x.Val, "%s output cannot be plan: a plan's nodes do not plan again", what)
			s = ""
		}
		if s != "" {
			e.spec.Output = s
		}
	}
	if x, ok := f["allow_empty"]; ok {
		if v, good := p.Bool(x.Val, what+" allow_empty"); good {
			e.spec.AllowEmpty = v
		}
	}
	if x, ok := f["after"]; ok {
		// Checked against the workflow's tasks by checkExpandAfter.
		e.spec.After, e.afterNodes, _ = p.NameList(x.Val, what+" after")
	}
	if ref != nil {
		p.expandRole(&e, ref, f, d, what)
	}
	return e
}

// expandRole fills what the expand template leaves unset from its role,
// as a task's role does (applyRole): gates, timeout and allow_empty (unless the defaults
// set them), the budget (max_cost_usd), the output schema, the context, the feedback template, and
// the role's prompt, carried to be rendered around each added node's
// prompt. A role whose output is plan is refused: a plan's nodes do not
// plan again.
func (p *parser) expandRole(e *expandDef, ref *roleRef, f map[string]gates.Field, d defaultsDef, what string) {
	r := ref.role
	e.spec.Role, e.spec.FeedbackTemplate, e.spec.RolePrompt = r.Name, r.Feedback, r.PromptOf()
	if _, set := f["gates"]; !set && r.GatesSet {
		e.gatesSet = true
		e.refs = append([]string(nil), r.Gates...)
		e.refNodes = make([]*yaml.Node, len(r.Gates))
		for i := range e.refNodes {
			e.refNodes[i] = ref.node
		}
		e.spec.Gates = append([]string{}, r.Gates...)
	}
	if _, set := f["timeout"]; !set && !d.written["timeout"] && r.TimeoutSeconds > 0 {
		e.spec.TimeoutSeconds = r.TimeoutSeconds
	}
	if _, set := f["allow_empty"]; !set && !d.written["allow_empty"] {
		e.spec.AllowEmpty = r.AllowEmpty || e.spec.AllowEmpty
	}
	if _, set := f["max_cost_usd"]; !set && r.MaxCostUSD > 0 {
		e.spec.MaxCostUSD = r.MaxCostUSD
	}
	if _, set := f["output"]; !set && r.Output != "" {
		if r.Output == agentoutput.Plan {
			p.Addf(ref.node, "%s role %q has output plan: a plan's nodes do not plan again", what, r.Name)
		} else {
			e.spec.Output = r.Output
		}
	}
	if _, set := f["context"]; !set && r.Context.Strategy != "" {
		spec, err := p.strategies.Spec(r.Context.Strategy, r.Context.Budget, nil, nil)
		if err != nil {
			p.Addf(ref.node, "role %q context: %v", r.Name, err)
		}
		e.spec.Context = spec
	}
}

// defaultExpand is the expand template of a planner that sets nothing:
// its agent, pool and timeout, the workflow's max_attempts and
// allow_empty, output implementation (gates are filled in by checkExpand).
func defaultExpand(n *yaml.Node, planner protocol.TaskSpec, d defaultsDef) expandDef {
	return expandDef{node: n, spec: &protocol.ExpandSpec{Command: planner.Command(), Adapter: planner.Adapter(),
		Agent: planner.Agent, Pool: planner.Pool, TimeoutSeconds: planner.TimeoutSeconds, Output: agentoutput.Implementation,
		MaxAttempts: d.retry.maxAttempts, AllowEmpty: d.retry.allowEmpty}}
}

// checkExpand reports an expand template's unknown gates and fills in its
// gate list: every workflow gate when it has no gates section.
func (p *parser) checkExpand(label string, e *expandDef, wfGates []gates.Gate, wfSet *gates.Set) {
	for k, g := range e.refs {
		if _, known := wfSet.Get(g); !known {
			p.Addf(e.refNodes[k], "%s expand uses unknown gate %q", label, g)
		}
	}
	if !e.gatesSet {
		e.spec.Gates = []string{}
		for _, g := range wfGates {
			e.spec.Gates = append(e.spec.Gates, g.Name)
		}
	}
}

// checkExpandAfter reports names of an expand template's after list that
// are not tasks of the workflow, or are the planner itself (NameList has
// reported those given twice).
func (p *parser) checkExpandAfter(label, planner string, e *expandDef, known map[string]int) {
	for k, a := range e.spec.After {
		switch _, ok := known[a]; {
		case a == planner:
			p.Addf(e.afterNodes[k], "%s expand after names the planner itself; its nodes wait for it anyway", label)
		case !ok:
			p.Addf(e.afterNodes[k], "%s expand after names unknown task %q", label, a)
		}
	}
}

// MaxExpansionBytes bounds the JSON encoding of the tasks one plan adds:
// they travel in one event, which must fit a NATS message (1 MiB by
// default) with room to spare.
const MaxExpansionBytes = 768 << 10

// Expansion is what a planner's valid plan adds to a workflow: one task
// per component, in plan order, and the workflow's tasks that depended on
// the planner (but no after task waits for), which now wait for every
// added task too.
type Expansion struct {
	Tasks      []protocol.TaskSpec
	Dependents []string
}

// ExpandedID is the id of the node a planner's component becomes:
// "<planner>--<component>". Node ids travel in job ids, subjects and
// object names, which use '.' and '/' as separators, so the id keeps to
// the rule of every task id (protocol.ValidName); Expand rejects one
// that would be longer than it allows.
func ExpandedID(planner, component string) string { return planner + "--" + component }

// Expand turns planner's plan into the tasks it adds to spec (HIER-01,
// DAG-02, DAG-03): component c becomes task "<planner>--<c>", whose prompt
// is the expand template's prompt followed by the component's description
// (and the interfaces it names, with their definitions), whose
// dependencies are the planner and the components it waits for (its
// depends_on, the plan's dependencies, every component of the phase
// before) and the template's after tasks, and whose other settings are the
// template's. The tasks that depended on the planner wait for every added
// task too, except those an after task waits for. The result is
// checked like a submitted workflow: ids unique, no cycle (named), at most
// MaxTasks tasks in all; a problem is an error saying what was wrong.
func Expand(spec *protocol.WorkflowSpec, planner string, plan *agentoutput.PlanOutput) (Expansion, error) {
	var pt *protocol.TaskSpec
	for i := range spec.Tasks {
		if spec.Tasks[i].ID == planner {
			pt = &spec.Tasks[i]
		}
	}
	if pt == nil {
		return Expansion{}, fmt.Errorf("workflow has no task %q", planner)
	}
	tmpl := pt.Expand()
	if tmpl == nil {
		tmpl = &protocol.ExpandSpec{Command: pt.Command(), Adapter: pt.Adapter(), Agent: pt.Agent, Pool: pt.Pool,
			TimeoutSeconds: pt.TimeoutSeconds, Gates: pt.Gates, Output: agentoutput.Implementation}
	}
	ids, deps := plan.Graph()
	if total := len(spec.Tasks) + len(ids); total > MaxTasks {
		return Expansion{}, fmt.Errorf("the plan has %d components; with the workflow's %d tasks that makes %d, more than the %d a workflow may have",
			len(ids), len(spec.Tasks), total, MaxTasks)
	}
	ifaces := map[string]agentoutput.Interface{}
	for _, ph := range plan.Phases {
		for _, it := range ph.Interfaces {
			ifaces[it.Name] = it
		}
	}
	defines, err := interfaceDefiners(plan)
	if err != nil {
		return Expansion{}, err
	}
	var x Expansion
	for _, id := range ids {
		c, ph, _ := plan.Component(id)
		if nid := ExpandedID(planner, id); !protocol.ValidName(nid) {
			return Expansion{}, fmt.Errorf("component %q would become node %q, longer than a task id may be (%s)", id, nid, protocol.NameRule)
		}
		var iface []string
		for _, it := range defines[id] {
			iface = append(iface, it.File)
		}
		t := protocol.TaskSpec{
			ID: ExpandedID(planner, id), Agent: tmpl.Agent,
			Prompt: componentPrompt(tmpl.Prompt, planner, ph, c, ifaces, defines[id]), DependsOn: []string{planner},
			Gates: tmpl.Gates, Required: tmpl.Gates, Pool: tmpl.Pool, Env: tmpl.Env, TimeoutSeconds: tmpl.TimeoutSeconds,
			MaxAttempts: tmpl.MaxAttempts, Retry: pt.Retry, AllowEmpty: tmpl.AllowEmpty,
			Output: tmpl.Output, Files: componentFiles(c.Files), GateDefs: pt.GateDefs,
		}
		t.SetRare(func(r *protocol.TaskRare) {
			r.Command, r.Adapter, r.RetryFrom, r.Planner = tmpl.Command, tmpl.Adapter, pt.RetryFrom(), planner
			r.MaxCostUSD, r.MayChangeInterfaces = tmpl.MaxCostUSD, tmpl.MayChangeInterfaces
			r.Role, r.FeedbackTemplate, r.Interface = tmpl.Role, tmpl.FeedbackTemplate, iface
		})
		if t.Required == nil {
			t.Required = []string{}
		}
		if tmpl.RolePrompt != nil {
			// The role's prompt around the component's (ROLE-01), as a
			// task's role renders it at parse time.
			s, err := roles.RenderCarried(tmpl.Role, tmpl.RolePrompt, roles.PromptData{Prompt: t.Prompt, ID: t.ID, Targets: t.Files})
			if err != nil {
				return Expansion{}, err
			}
			if len(s) > MaxPromptSize {
				return Expansion{}, fmt.Errorf("component %q's prompt is %d bytes with its role's; at most %d (256 KiB)", id, len(s), MaxPromptSize)
			}
			t.Prompt = s
		}
		if tmpl.Context != nil {
			cs := *tmpl.Context
			if len(cs.Targets) == 0 {
				// $TARGET: the component's own files (CTX-10).
				cs.Targets = t.Files
			}
			t.Context = &cs
		}
		t.DependsOn = append(t.DependsOn, tmpl.After...)
		for _, d := range deps[id] {
			t.DependsOn = append(t.DependsOn, ExpandedID(planner, d))
		}
		x.Tasks = append(x.Tasks, t)
	}
	before := awaited(spec, tmpl.After)
	for _, t := range spec.Tasks {
		if before[t.ID] {
			continue // an after task waits for it: it cannot wait for the nodes
		}
		for _, d := range t.DependsOn {
			if d == planner {
				x.Dependents = append(x.Dependents, t.ID)
				break
			}
		}
	}
	if data, err := json.Marshal(x.Tasks); err != nil || len(data) > MaxExpansionBytes {
		return Expansion{}, fmt.Errorf("the plan's %d nodes take %d bytes, more than the %d (768 KiB) one plan may add: "+
			"shorten the descriptions, or plan fewer components", len(x.Tasks), len(data), MaxExpansionBytes)
	}
	grown := Grow(spec, x)
	if _, err := NewGraph(grown); err != nil {
		return Expansion{}, err
	}
	return x, nil
}

// awaited returns the tasks of spec that any of after waits for, directly
// or not, and after's own.
func awaited(spec *protocol.WorkflowSpec, after []string) map[string]bool {
	deps := make(map[string][]string, len(spec.Tasks))
	for _, t := range spec.Tasks {
		deps[t.ID] = t.DependsOn
	}
	out := map[string]bool{}
	stack := append([]string(nil), after...)
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if out[id] {
			continue
		}
		out[id] = true
		stack = append(stack, deps[id]...)
	}
	return out
}

// Grow returns a copy of spec with the expansion applied: its tasks
// appended, and each dependent depending on every one of them too.
func Grow(spec *protocol.WorkflowSpec, x Expansion) *protocol.WorkflowSpec {
	out := *spec
	out.Tasks = make([]protocol.TaskSpec, 0, len(spec.Tasks)+len(x.Tasks))
	dependent := map[string]bool{}
	for _, d := range x.Dependents {
		dependent[d] = true
	}
	for _, t := range spec.Tasks {
		if dependent[t.ID] {
			deps := append([]string(nil), t.DependsOn...)
			for _, n := range x.Tasks {
				deps = append(deps, n.ID)
			}
			t.DependsOn = deps
		}
		out.Tasks = append(out.Tasks, t)
	}
	out.Tasks = append(out.Tasks, x.Tasks...)
	return &out
}

// componentFiles are a component's file globs as a task's files are
// parsed: normalized, with a trailing / meaning everything under it (the
// plan's checks already refused absolute paths and '..').
func componentFiles(globs []string) []string {
	if len(globs) == 0 {
		return nil
	}
	out := make([]string, 0, len(globs))
	for _, g := range globs {
		g = pathglob.Normalize(strings.ReplaceAll(strings.TrimSpace(g), `\`, "/"))
		if g != "/" && strings.HasSuffix(g, "/") {
			g = strings.TrimRight(g, "/") + "/**"
		}
		out = append(out, g)
	}
	return out
}

// interfaceDefiners finds, for each of the plan's interfaces with a file,
// the component that defines it (HIER-03): the first, in plan order,
// whose files cover the interface's file. Its node's interface globs are
// those files, so once it has succeeded no other node may change them
// unless its may_change_interfaces allows it. An interface no component's
// files cover is defined by nobody: its definition reaches the components
// naming it in their prompts only. A file naming a directory is an
// error.
func interfaceDefiners(plan *agentoutput.PlanOutput) (map[string][]agentoutput.Interface, error) {
	out := map[string][]agentoutput.Interface{}
	for _, ph := range plan.Phases {
		for _, it := range ph.Interfaces {
			if strings.TrimSpace(it.File) == "" {
				continue
			}
			// The plan's checks refused absolute paths and '..'.
			file := pathglob.Normalize(strings.ReplaceAll(strings.TrimSpace(it.File), `\`, "/"))
			if file == "" || strings.HasSuffix(file, "/") {
				return nil, fmt.Errorf("interface %q: file %q names no file", it.Name, it.File)
			}
			it.File = file
		comps:
			for _, p := range plan.Phases {
				for _, c := range p.Components {
					for _, g := range componentFiles(c.Files) {
						if _, ok := pathglob.Overlap(g, file); ok {
							out[c.ID] = append(out[c.ID], it)
							break comps
						}
					}
				}
			}
		}
	}
	return out, nil
}

// componentPrompt is the prompt of a component's node: the expand
// template's prompt, the component, the interfaces it names and those it
// defines.
func componentPrompt(prefix, planner string, ph agentoutput.Phase, c agentoutput.Component, ifaces map[string]agentoutput.Interface,
	defines []agentoutput.Interface) string {
	var b strings.Builder
	if s := strings.TrimSpace(prefix); s != "" {
		b.WriteString(s)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "## Component %s (phase %s", c.ID, ph.ID)
	if ph.Title != "" {
		fmt.Fprintf(&b, ": %s", ph.Title)
	}
	fmt.Fprintf(&b, ") of the plan of %s\n\n%s\n", planner, strings.TrimSpace(c.Description))
	if len(c.Files) > 0 {
		fmt.Fprintf(&b, "\nFiles of this component: %s\n", strings.Join(c.Files, ", "))
	}
	for _, name := range c.Interfaces {
		it := ifaces[name]
		fmt.Fprintf(&b, "\nInterface %s (%s", it.Name, it.Type)
		if it.File != "" {
			fmt.Fprintf(&b, ", in %s", it.File)
		}
		fmt.Fprintf(&b, "), fixed by the plan: implement or use it as defined.\n\n```\n%s\n```\n", strings.TrimSpace(it.Definition))
	}
	for _, it := range defines {
		named := false
		for _, name := range c.Interfaces {
			named = named || name == it.Name
		}
		if !named {
			fmt.Fprintf(&b, "\nInterface %s (%s, in %s), fixed by the plan:\n\n```\n%s\n```\n", it.Name, it.Type, it.File, strings.TrimSpace(it.Definition))
		}
		fmt.Fprintf(&b, "\nThis component defines interface %s in %s: once it is accepted, that file is locked for the rest of the workflow.\n", it.Name, it.File)
	}
	return b.String()
}
