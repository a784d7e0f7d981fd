// Package roles loads agent roles (ROLE-01…ROLE-09): YAML files in the
// built-in (configs/roles), user (~/.supervisor/roles) and project
// (.supervisor/roles, only when trusted) directories, each a base or an
// overlay that extends another role. A role sets the agent's defaults,
// the prompt template rendered around a task's prompt, the output schema,
// the context strategy and token budget, allowed tools, default gates, the
// feedback template and free-form config. The workflow parser applies a
// task's role at parse time, so a TaskSpec never needs a role file again.
package roles

import (
	"slices"
	"text/template"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Limits of a role's fields.
const (
	// MaxTimeout is the longest agent timeout a role may set (24 hours).
	MaxTimeout = 24 * time.Hour
	// MaxTurns is the most turns a role may allow an agent.
	MaxTurns = 10000
	// MaxCostUSD is the largest budget a role may set, in US dollars (a
	// workflow's limit too).
	MaxCostUSD = 1e6
)

// OutputSchemas are the output schema names a role may declare.
var OutputSchemas = []string{"generic", "plan", "implementation", "review"}

// Role is a resolved role: its chain of files merged (ROLE-07) and
// validated (ROLE-04).
type Role struct {
	// Name is the role's name; Files are the files merged, the role's own
	// first and its root ancestor last.
	Name  string
	Files []string
	// Layer is the layer the role's own file is in.
	Layer       overlay.Layer
	Description string
	// Agent holds the agent defaults; Adapter is "" when no file of the
	// chain sets one (the task or the workflow defaults must).
	Agent protocol.AgentSpec
	// Prompt is the prompt template (Go text/template); empty renders the
	// task's prompt alone.
	Prompt string
	// PromptAdditions are the chain's prompt_additions, the root's first.
	PromptAdditions string
	// Output is the output schema name, "" for none.
	Output string
	// Context is the context strategy and its token budget.
	Context Context
	// AllowedTools restrict the agent's tools, for adapters that can.
	AllowedTools []string
	// Gates are the gates a task of this role runs when it lists none;
	// GatesSet says whether some file of the chain sets gates at all (an
	// empty list then means none, as in a workflow).
	Gates    []string
	GatesSet bool
	// AllowEmpty accepts a round that changes no file (planners, reviewers).
	AllowEmpty bool
	// Feedback names the feedback template of retries (shared/feedback).
	Feedback string
	// TimeoutSeconds is the agent timeout; 0 leaves the workflow's.
	TimeoutSeconds int
	// MaxCostUSD is the budget of a task of this role that sets none
	// (max_cost_usd), in US dollars; 0 is none (an overlay's 0 clears its
	// parent's).
	MaxCostUSD float64
	// Strengths describe what the role is good at (for people and
	// planners; nothing decides on them).
	Strengths []string
	// Config is free-form settings, rendered into the prompt as .Config.
	Config map[string]any

	// pos is where each merged scalar was written, by key, for messages.
	pos  map[string]gates.Source
	tmpl *template.Template
}

// Context is a role's context strategy (configs/context) and token
// budget; a zero budget is the strategy's own.
type Context struct {
	Strategy string `json:"strategy,omitempty"`
	Budget   int    `json:"budget,omitempty"`
}

// Pos returns where the role's field key (e.g. "gates", "agent.adapter")
// was written, the role's own file when unknown.
func (r *Role) Pos(key string) gates.Source {
	if p, ok := r.pos[key]; ok {
		return p
	}
	if len(r.Files) > 0 {
		return gates.Source{File: r.Files[0]}
	}
	return gates.Source{}
}

// merge applies the chain, root first: scalars override, lists append
// (without repeating a name), maps merge deeply, prompt additions
// concatenate (ROLE-07).
func merge(name string, chain []*def) *Role {
	r := &Role{Name: name, pos: map[string]gates.Source{}}
	r.Layer = chain[0].file.Layer
	for _, d := range chain {
		r.Files = append(r.Files, d.file.Path)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		d := chain[i]
		set(&r.Description, r.pos, "description", d.description)
		set(&r.Agent.Adapter, r.pos, "agent.adapter", d.adapter)
		set(&r.Agent.Command, r.pos, "agent.command", d.command)
		set(&r.Agent.Model, r.pos, "agent.model", d.model)
		set(&r.Agent.MaxTurns, r.pos, "agent.max_turns", d.maxTurns)
		set(&r.Agent.Permission, r.pos, "agent.permission", d.permission)
		set(&r.Agent.OutputFormat, r.pos, "agent.output_format", d.format)
		set(&r.Prompt, r.pos, "prompt", d.prompt)
		set(&r.Output, r.pos, "output", d.output)
		set(&r.Context.Strategy, r.pos, "context.strategy", d.strategy)
		set(&r.Context.Budget, r.pos, "context.budget", d.budget)
		set(&r.Feedback, r.pos, "feedback", d.feedback)
		set(&r.TimeoutSeconds, r.pos, "timeout", d.timeout)
		set(&r.MaxCostUSD, r.pos, "max_cost_usd", d.maxCost)
		set(&r.AllowEmpty, r.pos, "allow_empty", d.allowEmpty)
		r.GatesSet = r.GatesSet || d.gates.set
		if d.additions != nil {
			r.PromptAdditions = concat(r.PromptAdditions, d.additions.v)
			r.pos["prompt_additions"] = d.additions.pos
		}
		if d.args.set {
			r.Agent.Args = append(r.Agent.Args, d.args.items...)
			r.pos["agent.args"] = d.args.pos
		}
		appendNames(&r.AllowedTools, r.pos, "allowed_tools", d.tools)
		appendNames(&r.Gates, r.pos, "gates", d.gates)
		appendNames(&r.Strengths, r.pos, "strengths", d.strengths)
		if d.config != nil {
			r.Config = overlay.MergeMaps(r.Config, d.config)
			r.pos["config"] = d.configPos
		}
	}
	return r
}

func set[T any](dst *T, pos map[string]gates.Source, key string, v *at[T]) {
	if v != nil {
		*dst = v.v
		pos[key] = v.pos
	}
}

func appendNames(dst *[]string, pos map[string]gates.Source, key string, l list) {
	if !l.set {
		return
	}
	for _, n := range l.items {
		if !slices.Contains(*dst, n) {
			*dst = append(*dst, n)
		}
	}
	pos[key] = l.pos
}

// concat joins two prompt texts with a blank line.
func concat(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	for len(a) > 0 && a[len(a)-1] == '\n' {
		a = a[:len(a)-1]
	}
	return a + "\n\n" + b
}
