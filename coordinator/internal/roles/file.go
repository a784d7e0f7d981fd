package roles

import (
	"math"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/shared/gates"
)

// at is a value with the position it was written at.
type at[T any] struct {
	v   T
	pos gates.Source
}

// list is a list field: its items and the position of the list.
type list struct {
	items []string
	pos   gates.Source
	set   bool
}

// def is one role file as written: only the fields it sets.
type def struct {
	file    overlay.File
	extends overlay.Parent

	description *at[string]
	adapter     *at[string]
	command     *at[[]string]
	model       *at[string]
	args        list
	maxTurns    *at[int]
	permission  *at[string]
	format      *at[string]
	prompt      *at[string]
	additions   *at[string]
	output      *at[string]
	strategy    *at[string]
	budget      *at[int]
	tools       list
	gates       list
	feedback    *at[string]
	allowEmpty  *at[bool]
	timeout     *at[int]
	maxCost     *at[float64]
	strengths   list
	config      map[string]any
	configPos   gates.Source
}

// roleFields are the keys of a role file.
var roleFields = []string{"extends", "description", "agent", "prompt", "prompt_additions", "output", "context",
	"allowed_tools", "gates", "allow_empty", "feedback", "timeout", "max_cost_usd", "strengths", "config"}

// parseFile parses one role file, reporting unknown keys and wrong types
// with their positions. A nil def means the file could not be read as a
// mapping at all.
func parseFile(f overlay.File) (*def, []gates.Problem) {
	c := gates.NewChecker(f.Path)
	root := c.Decode(f.Data)
	if root == nil {
		if len(c.Problems) == 0 {
			c.Addf(nil, "role file is empty; a role needs at least a description")
		}
		return nil, c.Problems
	}
	fs, ok := c.Fields(root, "role", roleFields...)
	if !ok {
		return nil, c.Problems
	}
	d := &def{file: f}
	if x, ok := fs["extends"]; ok {
		if s, good := c.Str(x.Val, "extends"); good {
			if !overlay.ValidName(s) {
				c.Addf(x.Val, "invalid extends %q: use %s", s, overlay.NameRule)
			} else {
				p := c.Position(x.Val)
				d.extends = overlay.Parent{Name: s, Line: p.Line, Column: p.Column}
			}
		}
	}
	d.description = str(c, fs, "description", "description")
	if x, ok := fs["agent"]; ok {
		parseAgent(c, d, x.Val)
	}
	d.prompt = str(c, fs, "prompt", "prompt")
	d.additions = str(c, fs, "prompt_additions", "prompt_additions")
	d.output = str(c, fs, "output", "output")
	if x, ok := fs["context"]; ok {
		if cf, good := c.Fields(x.Val, "context", "strategy", "budget"); good {
			d.strategy = str(c, cf, "strategy", "context strategy")
			d.budget = integer(c, cf, "budget", "context budget", 0, 1<<30)
		}
	}
	d.tools = names(c, fs, "allowed_tools", "allowed_tools")
	d.gates = names(c, fs, "gates", "gates")
	d.strengths = names(c, fs, "strengths", "strengths")
	d.feedback = str(c, fs, "feedback", "feedback")
	if x, ok := fs["allow_empty"]; ok && !gates.IsNull(x.Val) {
		if b, good := c.Bool(x.Val, "allow_empty"); good {
			d.allowEmpty = &at[bool]{v: b, pos: c.Position(x.Val)}
		}
	}
	if x, ok := fs["timeout"]; ok {
		if s, good := c.Seconds(x.Val, "timeout", 1e9, MaxTimeout); good {
			d.timeout = &at[int]{v: int(s.Seconds()), pos: c.Position(x.Val)}
		}
	}
	if x, ok := fs["max_cost_usd"]; ok && !gates.IsNull(x.Val) {
		if v, good := cost(c, x.Val); good {
			d.maxCost = &at[float64]{v: v, pos: c.Position(x.Val)}
		}
	}
	if x, ok := fs["config"]; ok && !gates.IsNull(x.Val) {
		if x.Val.Kind != yaml.MappingNode {
			c.Addf(x.Val, "config must be a mapping, got %s", gates.Describe(x.Val))
		} else {
			var m map[string]any
			if err := x.Val.Decode(&m); err != nil {
				c.Addf(x.Val, "config: %v", err)
			} else {
				d.config, d.configPos = m, c.Position(x.Val)
			}
		}
	}
	return d, c.Problems
}

func parseAgent(c *gates.Checker, d *def, n *yaml.Node) {
	fs, ok := c.Fields(n, "agent", "adapter", "command", "model", "args", "max_turns", "permission", "output_format")
	if !ok {
		return
	}
	d.adapter = str(c, fs, "adapter", "agent adapter")
	if x, ok := fs["command"]; ok {
		if argv, good := c.Command(x.Val, "agent command"); good && c.CheckCommand(x.Val, argv, "agent command", false, " (agent commands cannot allow a shell)") {
			d.command = &at[[]string]{v: argv, pos: c.Position(x.Val)}
		}
	}
	d.model = str(c, fs, "model", "agent model")
	if x, ok := fs["args"]; ok && !gates.IsNull(x.Val) {
		if x.Val.Kind != yaml.SequenceNode {
			c.Addf(x.Val, "agent args must be a list of strings, got %s", gates.Describe(x.Val))
		} else {
			d.args.set, d.args.pos = true, c.Position(x.Val)
			for _, item := range x.Val.Content {
				if s, good := c.Str(item, "agent args entry"); good {
					d.args.items = append(d.args.items, s)
				}
			}
		}
	}
	d.maxTurns = integer(c, fs, "max_turns", "agent max_turns", 1, MaxTurns)
	d.permission = str(c, fs, "permission", "agent permission")
	d.format = str(c, fs, "output_format", "agent output_format")
}

// cost parses a budget in US dollars: a number from 0 (none) to
// MaxCostUSD.
func cost(c *gates.Checker, n *yaml.Node) (float64, bool) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!float" && n.ShortTag() != "!!int") {
		c.Addf(n, "max_cost_usd must be a number of US dollars, e.g. 5 or 0.50, got %s", gates.Describe(n))
		return 0, false
	}
	var v float64
	if err := n.Decode(&v); err != nil || math.IsNaN(v) || v < 0 || v > MaxCostUSD {
		c.Addf(n, "max_cost_usd %s is out of range: must be at least 0 (no budget) and at most %.0f", n.Value, float64(MaxCostUSD))
		return 0, false
	}
	return v, true
}

func str(c *gates.Checker, fs map[string]gates.Field, key, what string) *at[string] {
	x, ok := fs[key]
	if !ok || gates.IsNull(x.Val) {
		return nil
	}
	s, good := c.Str(x.Val, what)
	if !good {
		return nil
	}
	return &at[string]{v: s, pos: c.Position(x.Val)}
}

func integer(c *gates.Checker, fs map[string]gates.Field, key, what string, lo, hi int64) *at[int] {
	x, ok := fs[key]
	if !ok || gates.IsNull(x.Val) {
		return nil
	}
	v, good := c.Int(x.Val, what, lo, hi)
	if !good {
		return nil
	}
	return &at[int]{v: int(v), pos: c.Position(x.Val)}
}

func names(c *gates.Checker, fs map[string]gates.Field, key, what string) list {
	x, ok := fs[key]
	if !ok || gates.IsNull(x.Val) {
		return list{}
	}
	items, _, _ := c.NameList(x.Val, what)
	return list{items: items, pos: c.Position(x.Val), set: true}
}
