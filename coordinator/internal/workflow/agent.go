package workflow

import (
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"gopkg.in/yaml.v3"
)

// agentFields are the keys of an agent section (a task's agent or
// defaults.agent).
var agentFields = []string{"adapter", "command", "model", "args", "max_turns", "permission", "output_format"}

// MaxAgentTurns bounds an agent's max_turns.
const MaxAgentTurns = 10000

// agentDef is a parsed agent section: the fields it sets, each with the
// node it was written at (for the positions of later checks).
type agentDef struct {
	spec  protocol.AgentSpec
	nodes map[string]*yaml.Node // by field name
	// node is the section itself.
	node *yaml.Node
}

// agent parses an agent section: {adapter, command, model, args,
// max_turns, permission, output_format}. A command without an adapter
// means the command adapter. Settings are checked once merged with the
// defaults (checkAgent).
func (p *parser) agent(n *yaml.Node, what string) (agentDef, bool) {
	a := agentDef{nodes: map[string]*yaml.Node{}, node: n}
	f, ok := p.Fields(n, what, agentFields...)
	if !ok {
		return a, false
	}
	good := true
	for key, x := range f {
		if gates.IsNull(x.Val) {
			continue
		}
		a.nodes[key] = x.Val
		switch key {
		case "adapter":
			name, ok := p.Str(x.Val, what+" adapter")
			if ok {
				if _, known := agentcli.Lookup(name); !known {
					p.Addf(x.Val, "unknown %s adapter %q (known: %s)", what, name, strings.Join(agentcli.Names(), ", "))
					ok = false
				}
			}
			a.spec.Adapter, good = name, good && ok
		case "command":
			argv, ok := p.command(x.Val, what+" command")
			a.spec.Command, good = argv, good && ok
		case "model":
			s, ok := p.Str(x.Val, what+" model")
			a.spec.Model, good = s, good && ok
		case "permission":
			s, ok := p.Str(x.Val, what+" permission")
			a.spec.Permission, good = s, good && ok
		case "output_format":
			s, ok := p.Str(x.Val, what+" output_format")
			a.spec.OutputFormat, good = s, good && ok
		case "max_turns":
			v, ok := p.Int(x.Val, what+" max_turns", 0, MaxAgentTurns)
			a.spec.MaxTurns, good = int(v), good && ok
		case "args":
			args, ok := p.args(x.Val, what+" args")
			a.spec.Args, good = args, good && ok
		}
	}
	if a.spec.Adapter == "" && a.spec.Command != nil {
		a.spec.Adapter = "command"
	}
	return a, good
}

// MaxCostUSD bounds a budget (max_cost_usd), in US dollars: a role's
// limit.
const MaxCostUSD = roles.MaxCostUSD

// cost parses a budget in US dollars: a positive number.
func (p *parser) cost(n *yaml.Node, what string) (float64, bool) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!float" && n.ShortTag() != "!!int") {
		p.Addf(n, "%s must be a number of US dollars, e.g. 5 or 0.50, got %s", what, gates.Describe(n))
		return 0, false
	}
	var v float64
	if err := n.Decode(&v); err != nil || math.IsNaN(v) || v <= 0 || v > MaxCostUSD {
		p.Addf(n, "%s %s is out of range: must be more than 0 and at most %.0f", what, n.Value, float64(MaxCostUSD))
		return 0, false
	}
	return v, true
}

// args parses a list of strings (possibly empty).
func (p *parser) args(n *yaml.Node, what string) ([]string, bool) {
	if n.Kind != yaml.SequenceNode {
		p.Addf(n, "%s must be a list of strings, got %s", what, gates.Describe(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok := true
	for _, item := range n.Content {
		s, good := p.Str(item, what+" entry")
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// mergeAgent is one agent section over another (either may be nil): a
// task's over defaults.agent, or defaults.agent over a role's. An upper
// section that names an adapter other than the lower's (a command means
// the command adapter) replaces it as a whole: the lower settings are
// another CLI's. Otherwise the upper fields override the lower's field by
// field, args included as a whole list.
func mergeAgent(def, task *agentDef) *agentDef {
	switch {
	case task == nil:
		return def
	case def == nil || (task.spec.Adapter != "" && task.spec.Adapter != def.spec.Adapter):
		return task
	}
	out := &agentDef{spec: def.spec, nodes: map[string]*yaml.Node{}, node: task.node}
	for k, v := range def.nodes {
		out.nodes[k] = v
	}
	for k, v := range task.nodes {
		out.nodes[k] = v
	}
	t := task.spec
	if t.Command != nil {
		out.spec.Command = t.Command
	}
	if t.Model != "" {
		out.spec.Model = t.Model
	}
	if t.Args != nil {
		out.spec.Args = t.Args
	}
	if _, ok := task.nodes["max_turns"]; ok {
		out.spec.MaxTurns = t.MaxTurns
	}
	if t.Permission != "" {
		out.spec.Permission = t.Permission
	}
	if t.OutputFormat != "" {
		out.spec.OutputFormat = t.OutputFormat
	}
	return out
}

// roleAgentDef is a role's agent as an agent section, nil when the role
// sets no adapter. The role was checked when it was loaded; its fields are
// placed at the role field that named it, where a problem the merge with
// the workflow's settings brings out is reported.
func roleAgentDef(ref *roleRef) *agentDef {
	if ref == nil || ref.role == nil {
		return nil
	}
	if ref.role.Agent.Adapter == "" {
		return nil
	}
	s := &ref.role.Agent
	a := &agentDef{spec: *s, nodes: map[string]*yaml.Node{}, node: ref.node}
	for k, set := range map[string]bool{"adapter": true, "command": s.Command != nil, "model": s.Model != "",
		"args": s.Args != nil, "max_turns": s.MaxTurns != 0, "permission": s.Permission != "",
		"output_format": s.OutputFormat != ""} {
		if set {
			a.nodes[k] = ref.node
		}
	}
	return a
}

// layerAgent is the agent a task (or an expand template) runs: its own
// agent section (nil when it has none) over defaults.agent over its
// role's agent, each layer merged over the one below it by mergeAgent —
// field by field, or replacing it whole when it names another adapter.
// The flags of the role's allowed_tools follow the merged args while the
// adapter is still the role's.
func layerAgent(ref *roleRef, def, own *agentDef) *agentDef {
	out := mergeAgent(mergeAgent(roleAgentDef(ref), def), own)
	if out == nil || ref == nil || ref.role == nil || out.spec.Adapter != ref.role.Agent.Adapter {
		return out
	}
	if tools := ref.role.ToolArgs(out.spec.Adapter); tools != nil {
		cp := *out
		cp.spec.Args = append(slices.Clone(out.spec.Args), tools...)
		out = &cp
	}
	return out
}

// checkAgent checks a merged agent section: it names an adapter, a
// command goes with the command adapter only, and the adapter can build
// its invocation from the settings (tried with a placeholder prompt), the
// adapter's objection placed at the field it concerns.
// A problem found in the defaults' settings is reported once, at them.
func (p *parser) checkAgent(a, def *agentDef, what string) (*protocol.AgentSpec, bool) {
	s := a.spec
	add := func(at *yaml.Node, format string, args ...any) {
		if def != nil && (at == def.node || slices.Contains(slices.Collect(maps.Values(def.nodes)), at)) {
			if p.agentSeen[at] {
				return
			}
			p.agentSeen[at] = true
			what = "defaults agent"
		}
		p.Addf(at, "%s"+format, append([]any{what}, args...)...)
	}
	switch {
	case s.Adapter == "":
		add(a.node, " needs an adapter (%s) or a command", strings.Join(agentcli.Names(), ", "))
		return nil, false
	case s.Adapter != "command" && s.Command != nil:
		add(a.nodes["command"], ": command is the argv of the command adapter; the %s adapter builds its own (use args for extra flags)",
			s.Adapter)
		return nil, false
	case s.Adapter == "command" && s.Command == nil:
		add(a.node, ": the command adapter needs a command (an argv list)")
		return nil, false
	}
	ad, _ := agentcli.Lookup(s.Adapter)
	_, err := ad.Invocation("placeholder prompt", agentcli.Settings{Model: s.Model, MaxTurns: s.MaxTurns,
		Permission: s.Permission, OutputFormat: s.OutputFormat, Args: s.Args, Command: s.Command})
	if err != nil {
		at := a.node
		msg := err.Error()
		for _, k := range []struct{ field, word string }{{"permission", "permission"}, {"permission", "sandbox"},
			{"permission", "approval"}, {"max_turns", "max_turns"}, {"output_format", "output format"}, {"model", "model"},
			{"args", "arg"}} {
			if n, ok := a.nodes[k.field]; ok && strings.Contains(msg, k.word) {
				at = n
				break
			}
		}
		add(at, ": %s", msg)
		return nil, false
	}
	out := s
	out.Args = append([]string(nil), s.Args...)
	out.Command = append([]string(nil), s.Command...)
	if len(out.Args) == 0 {
		out.Args = nil
	}
	if len(out.Command) == 0 {
		out.Command = nil
	}
	return &out, true
}

// checkEnvCredentials rejects a provider credential (agentcli.IsCredential)
// in a workflow's env: keys reach an agent only from its worker's
// environment or secrets file, never from a workflow file (or the event
// log it becomes).
func (p *parser) checkEnvCredentials(n *yaml.Node, what string) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; agentcli.IsCredential(k.Value) {
			p.Addf(k, "%s may not set %s: provider credentials reach an agent only from its worker (its environment allow-list or secrets_file), never from a workflow file", what, k.Value)
		}
	}
}
