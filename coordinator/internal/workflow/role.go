package workflow

import (
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// roleRef is a role named in the workflow: the resolved role (nil when the
// name is unknown: bad is then set and the problem reported) and the node
// that names it.
type roleRef struct {
	role *roles.Role
	node *yaml.Node
	bad  bool
}

// role resolves a role field against the catalogue.
func (p *parser) role(n *yaml.Node, what string) *roleRef {
	name, ok := p.Str(n, what)
	if !ok {
		return &roleRef{node: n, bad: true}
	}
	r, known := p.roles.Get(name)
	if !known {
		known := "no roles were loaded"
		if names := p.roles.Names(); len(names) > 0 {
			known = "known: " + strings.Join(names, ", ")
		}
		p.Addf(n, "unknown %s %q (%s)", what, name, known)
		return &roleRef{node: n, bad: true}
	}
	return &roleRef{role: r, node: n}
}

// taskRole is the task's role: its own role field, else defaults.role
// (which a human task ignores: a human task takes no role).
func (p *parser) taskRole(f map[string]gates.Field, d defaultsDef, human bool, what string) *roleRef {
	if x, ok := f["role"]; ok {
		if human {
			p.Addf(x.Key, "%s is a human task: it runs no agent, so it takes no role", what)
			return nil
		}
		return p.role(x.Val, what+" role")
	}
	if human {
		return nil
	}
	return d.role
}

// rolePrompt renders the role's prompt around the task's prompt; the
// task's files are its targets.
func (p *parser) rolePrompt(ref *roleRef, at *yaml.Node, t protocol.TaskSpec, what string) string {
	out, err := ref.role.RenderPrompt(roles.PromptData{Prompt: t.Prompt, ID: t.ID, Targets: t.Files})
	switch {
	case err != nil:
		p.Addf(at, "%v", err)
		return t.Prompt
	case len(out) > MaxPromptSize:
		p.Addf(at, "%s prompt is %d bytes with its role's; at most %d (256 KiB)", what, len(out), MaxPromptSize)
		return t.Prompt
	}
	return out
}

// applyRole fills what neither the task nor the workflow's defaults set
// from the task's role: gates (when the task has no gates section and the
// role sets some), timeout, the budget (max_cost_usd), allow_empty, the output schema and the context
// (the role's strategy and budget, resolved against the loaded strategies
// like a task's context); it sets the feedback template and records the
// role's name (ROLE-01). A workflow is more specific than a reusable role, so what it
// writes wins (ROLE-06).
func (p *parser) applyRole(t *taskDef, ref *roleRef, f map[string]gates.Field, defaults map[string]bool) {
	r := ref.role
	t.spec.SetRare(func(tr *protocol.TaskRare) { tr.Role = r.Name })
	human := t.spec.Type == protocol.TaskHuman
	if _, set := f["gates"]; !set && !human && r.GatesSet {
		t.gatesSet = true
		t.gatesRole = r.Name
		t.refs = append([]string(nil), r.Gates...)
		t.refNodes = make([]*yaml.Node, len(r.Gates))
		for i := range t.refNodes {
			t.refNodes[i] = ref.node
		}
		t.spec.Required = append([]string(nil), r.Gates...)
	}
	if _, set := f["timeout"]; !set && !defaults["timeout"] && r.TimeoutSeconds > 0 {
		t.spec.TimeoutSeconds = r.TimeoutSeconds
	}
	if _, set := f["max_cost_usd"]; !set && !defaults["max_cost_usd"] && r.MaxCostUSD > 0 {
		t.spec.SetRare(func(tr *protocol.TaskRare) { tr.MaxCostUSD = r.MaxCostUSD })
	}
	if _, set := f["allow_empty"]; !set && !defaults["allow_empty"] && r.AllowEmpty {
		t.spec.AllowEmpty = true
	}
	if _, set := f["output"]; !set {
		t.spec.Output = r.Output
	}
	t.spec.SetRare(func(tr *protocol.TaskRare) { tr.FeedbackTemplate = r.Feedback })
	if _, set := f["context"]; !set && r.Context.Strategy != "" {
		spec, err := p.strategies.Spec(r.Context.Strategy, r.Context.Budget, nil, nil)
		if err != nil {
			p.Addf(ref.node, "role %q context: %v", r.Name, err)
		}
		t.spec.Context = spec
	}
}

// reviewRole resolves a review gate's role: its agent, its prompt
// additions as the review's instructions (its prompt template is a task's,
// which a gate, run for many tasks, has none of) and its context strategy,
// resolved against the loaded strategies.
func (p *parser) reviewRole(n *yaml.Node, what string) (gates.ReviewRole, bool) {
	ref := p.role(n, what)
	if ref.bad {
		return gates.ReviewRole{}, false
	}
	r := ref.role
	rr := gates.ReviewRole{Name: r.Name, Agent: r.AgentSpec(), Prompt: strings.TrimSpace(r.PromptAdditions), Output: r.Output}
	if r.Context.Strategy != "" {
		spec, err := p.strategies.Spec(r.Context.Strategy, r.Context.Budget, nil, nil)
		if err != nil {
			p.Addf(n, "role %q context: %v", r.Name, err)
			return rr, false
		}
		rr.Context = spec
	}
	return rr, true
}
