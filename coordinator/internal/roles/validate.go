package roles

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// toolFlags are the adapters that take a list of tools to pre-approve, and
// how: Claude Code one comma-separated --allowedTools, Gemini CLI one
// --allowed-tools per tool.
var toolFlags = map[string]func([]string) []string{
	"claude-code": func(tools []string) []string { return []string{"--allowedTools", strings.Join(tools, ",")} },
	"gemini": func(tools []string) []string {
		var out []string
		for _, t := range tools {
			out = append(out, "--allowed-tools="+t)
		}
		return out
	},
}

// validate checks a merged role (ROLE-04) and parses its prompt template.
// Each problem is reported where the offending value was written.
func (r *Role) validate() []gates.Problem {
	var ps []gates.Problem
	add := func(key, format string, args ...any) {
		at := r.Pos(key)
		ps = append(ps, gates.Problem{File: at.File, Line: at.Line, Column: at.Column,
			Message: fmt.Sprintf("role %q: ", r.Name) + fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(r.Description) == "" {
		add("description", "description is missing; say what the role does")
	}
	a := r.Agent
	switch ad, known := agentcli.Lookup(a.Adapter); {
	case a.Adapter == "":
		for _, k := range []string{"agent.command", "agent.model", "agent.args", "agent.max_turns", "agent.permission", "agent.output_format"} {
			if _, set := r.pos[k]; set {
				add(k, "%s is set but no file of the role sets agent.adapter (one of %s)", k, strings.Join(agentcli.Names(), ", "))
				break
			}
		}
		if len(r.AllowedTools) > 0 {
			add("allowed_tools", "allowed_tools needs an agent adapter that takes them (claude-code, gemini)")
		}
	case !known:
		add("agent.adapter", "unknown agent adapter %q (known: %s)", a.Adapter, strings.Join(agentcli.Names(), ", "))
	default:
		switch {
		case a.Adapter == "command" && len(a.Command) == 0:
			add("agent.adapter", "the command adapter needs agent.command")
		case a.Adapter != "command" && len(a.Command) > 0:
			add("agent.command", "agent.command is only for the command adapter, not %s", a.Adapter)
		}
		if _, err := ad.Invocation("probe", settings(a)); err != nil {
			add("agent.adapter", "agent settings: %v", err)
		}
		if len(r.AllowedTools) > 0 && toolFlags[a.Adapter] == nil {
			add("allowed_tools", "adapter %s has no flag for allowed tools (claude-code and gemini do)", a.Adapter)
		}
	}
	if r.Output != "" && !slices.Contains(OutputSchemas, r.Output) {
		add("output", "unknown output schema %q (known: %s)", r.Output, strings.Join(OutputSchemas, ", "))
	}
	switch c := r.Context; {
	case c.Strategy == "" && c.Budget != 0:
		add("context.budget", "context budget is set but no strategy")
	case c.Strategy != "" && !protocol.ValidName(c.Strategy):
		add("context.strategy", "invalid context strategy %q: use %s", c.Strategy, protocol.NameRule)
	case c.Strategy != "" && c.Budget != 0 && (c.Budget < contextpack.MinBudget || c.Budget > contextpack.MaxBudget):
		add("context.budget", "context budget %d is out of range: must be between %d and %d tokens", c.Budget, contextpack.MinBudget, contextpack.MaxBudget)
	}
	for _, g := range r.Gates {
		if !gates.ValidName(g) {
			add("gates", "invalid gate name %q", g)
		}
	}
	if r.Feedback != "" && !slices.Contains(feedback.Templates(), r.Feedback) {
		add("feedback", "unknown feedback template %q (known: %s)", r.Feedback, strings.Join(feedback.Templates(), ", "))
	}
	if r.Prompt != "" {
		t, err := template.New(r.Name).Option("missingkey=error").Parse(r.Prompt)
		if err != nil {
			add("prompt", "prompt template: %v", err)
		} else {
			r.tmpl = t
			// A trial run finds fields the data does not have.
			if err := t.Execute(&bytes.Buffer{}, PromptData{Prompt: "p", ID: "t", Targets: []string{"x"}, Role: r.Name, Config: r.Config}); err != nil {
				add("prompt", "prompt template: %v", err)
			}
		}
	}
	return ps
}

// settings are an AgentSpec's settings for agentcli.
func settings(a protocol.AgentSpec) agentcli.Settings {
	return agentcli.Settings{Model: a.Model, MaxTurns: a.MaxTurns, Permission: a.Permission,
		OutputFormat: a.OutputFormat, Args: a.Args, Command: a.Command}
}

// AgentSpec returns the role's agent settings for a task, a fresh copy, with
// the allowed tools turned into the adapter's flag; nil when the role sets
// no adapter.
func (r *Role) AgentSpec() *protocol.AgentSpec {
	if r.Agent.Adapter == "" {
		return nil
	}
	a := r.Agent
	a.Command = slices.Clone(a.Command)
	a.Args = append(slices.Clone(a.Args), r.ToolArgs(a.Adapter)...)
	return &a
}

// ToolArgs are the flags that limit the adapter's CLI to the role's
// allowed_tools: nil when the role allows every tool or the adapter takes
// no such flag.
func (r *Role) ToolArgs(adapter string) []string {
	if f := toolFlags[adapter]; f != nil && len(r.AllowedTools) > 0 {
		return f(r.AllowedTools)
	}
	return nil
}

// PromptData is what a role's prompt template sees.
type PromptData struct {
	// Prompt is the task's own prompt (front matter already cut).
	Prompt string
	// ID is the task's id.
	ID string
	// Targets are the globs of the files the task works on (its files).
	Targets []string
	// Role is the role's name.
	Role string
	// Config is the role's merged config map.
	Config map[string]any
}

// RenderPrompt builds a task's prompt: the role's prompt additions, then
// its prompt template rendered with d (the task's prompt alone when the
// role has no template). The output schema's instructions are not part of
// it: they follow TaskSpec.Output, which the role sets, when the agent's
// job is built.
func (r *Role) RenderPrompt(d PromptData) (string, error) {
	d.Role = r.Name
	d.Config = r.Config
	body := d.Prompt
	if r.tmpl != nil {
		var b bytes.Buffer
		if err := r.tmpl.Execute(&b, d); err != nil {
			return "", fmt.Errorf("role %q prompt template: %w", r.Name, err)
		}
		body = b.String()
	}
	return concat(r.PromptAdditions, body), nil
}

// PromptOf is the role's prompt as a planner's expand template carries it
// (protocol.RolePrompt): RenderCarried renders it as RenderPrompt would.
func (r *Role) PromptOf() *protocol.RolePrompt {
	return &protocol.RolePrompt{Template: r.Prompt, Additions: r.PromptAdditions, Config: r.Config}
}

// RenderCarried renders a role's prompt carried in a task spec (PromptOf)
// with d, as RenderPrompt renders the role's own.
func RenderCarried(role string, p *protocol.RolePrompt, d PromptData) (string, error) {
	d.Role = role
	d.Config = p.Config
	body := d.Prompt
	if p.Template != "" {
		t, err := template.New(role).Option("missingkey=error").Parse(p.Template)
		if err != nil {
			return "", fmt.Errorf("role %q prompt template: %w", role, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return "", fmt.Errorf("role %q prompt template: %w", role, err)
		}
		body = b.String()
	}
	return concat(p.Additions, body), nil
}
