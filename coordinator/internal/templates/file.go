package templates

import (
	"text/template"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// layer is one template file, or a feature's front matter, as written:
// only what it sets.
type layer struct {
	file        string
	extends     overlay.Parent
	description string
	defaults    map[string]any
	gates       []string
	gatesSet    bool
	disable     []named
	steps       []*stepDef
}

// named is a name with its position.
type named struct {
	name string
	pos  gates.Source
}

// stepDef is one step as a layer writes it.
type stepDef struct {
	name       string
	pos        gates.Source
	role       *string
	kind       *string
	prompt     *string
	promptPos  gates.Source
	tmpl       *template.Template
	dependsOn  []named
	gates      []string
	gatesSet   bool
	approval   *yaml.Node
	expand     *yaml.Node
	expandFile string // the file expand was read from
	timeout    *string
	allowEmpty *bool
}

var templateFields = []string{"extends", "description", "defaults", "gates", "disable", "steps"}

var stepFields = []string{"role", "type", "prompt", "depends_on", "gates", "approval", "expand", "timeout", "allow_empty"}

// parseLayer reads a template file's (or front matter's) mapping; keys
// limits the top-level keys allowed.
func parseLayer(c *gates.Checker, root *yaml.Node, what string, keys []string) *layer {
	fs, ok := c.Fields(root, what, keys...)
	if !ok {
		return nil
	}
	l := &layer{file: c.File}
	if x, ok := fs["extends"]; ok {
		if s, good := c.Str(x.Val, "extends"); good {
			if !overlay.ValidName(s) {
				c.Addf(x.Val, "invalid extends %q: use %s", s, overlay.NameRule)
			} else {
				p := c.Position(x.Val)
				l.extends = overlay.Parent{Name: s, Line: p.Line, Column: p.Column}
			}
		}
	}
	if x, ok := fs["description"]; ok {
		l.description, _ = c.Str(x.Val, "description")
	}
	if x, ok := fs["defaults"]; ok && !gates.IsNull(x.Val) {
		if x.Val.Kind != yaml.MappingNode {
			c.Addf(x.Val, "defaults must be a mapping (the workflow's defaults), got %s", gates.Describe(x.Val))
		} else if err := x.Val.Decode(&l.defaults); err != nil {
			c.Addf(x.Val, "defaults: %v", err)
		}
	}
	if x, ok := fs["gates"]; ok && !gates.IsNull(x.Val) {
		l.gates, _, _ = c.NameList(x.Val, "gates")
		l.gatesSet = true
	}
	if x, ok := fs["disable"]; ok && !gates.IsNull(x.Val) {
		names, nodes, _ := c.NameList(x.Val, "disable")
		for i, n := range names {
			l.disable = append(l.disable, named{n, c.Position(nodes[i])})
		}
	}
	if x, ok := fs["steps"]; ok && !gates.IsNull(x.Val) {
		if x.Val.Kind != yaml.MappingNode {
			c.Addf(x.Val, "steps must be a mapping from step name to step, got %s", gates.Describe(x.Val))
		} else {
			seen := map[string]int{}
			for i := 0; i+1 < len(x.Val.Content); i += 2 {
				k, v := x.Val.Content[i], x.Val.Content[i+1]
				name, good := c.Str(k, "step name")
				if !good {
					continue
				}
				if !protocol.ValidName(name) {
					c.Addf(k, "invalid step name %q: use %s", name, protocol.NameRule)
					continue
				}
				if line, dup := seen[name]; dup {
					c.Addf(k, "step %q appears twice (first at line %d)", name, line)
					continue
				}
				seen[name] = c.Position(k).Line
				if s := parseStep(c, name, k, v); s != nil {
					l.steps = append(l.steps, s)
				}
			}
		}
	}
	return l
}

func parseStep(c *gates.Checker, name string, k, n *yaml.Node) *stepDef {
	what := "step " + name
	s := &stepDef{name: name, pos: c.Position(k)}
	if gates.IsNull(n) {
		return s
	}
	fs, ok := c.Fields(n, what, stepFields...)
	if !ok {
		return nil
	}
	str := func(key string) *string {
		x, ok := fs[key]
		if !ok || gates.IsNull(x.Val) {
			return nil
		}
		v, good := c.Str(x.Val, what+" "+key)
		if !good {
			return nil
		}
		return &v
	}
	s.role = str("role")
	s.kind = str("type")
	if s.kind != nil && *s.kind != "agent" && *s.kind != protocol.TaskHuman {
		c.Addf(fs["type"].Val, "%s type must be agent or human, got %q", what, *s.kind)
	}
	s.timeout = str("timeout")
	if s.prompt = str("prompt"); s.prompt != nil {
		s.promptPos = c.Position(fs["prompt"].Val)
		t, err := template.New(name).Option("missingkey=error").Parse(*s.prompt)
		if err != nil {
			c.Addf(fs["prompt"].Val, "%s prompt template: %v", what, err)
		} else {
			s.tmpl = t
		}
	}
	if x, ok := fs["depends_on"]; ok && !gates.IsNull(x.Val) {
		names, nodes, _ := c.NameList(x.Val, what+" depends_on")
		for i, d := range names {
			s.dependsOn = append(s.dependsOn, named{d, c.Position(nodes[i])})
		}
	}
	if x, ok := fs["gates"]; ok {
		if gates.IsNull(x.Val) {
			c.Addf(x.Val, "%s gates has no value: write [] for no gates, or omit it to run the workflow's gates", what)
		} else {
			s.gates, _, _ = c.NameList(x.Val, what+" gates")
			s.gatesSet = true
		}
	}
	if x, ok := fs["approval"]; ok && !gates.IsNull(x.Val) {
		s.approval = x.Val
	}
	if x, ok := fs["expand"]; ok && !gates.IsNull(x.Val) {
		s.expand, s.expandFile = x.Val, c.Position(x.Val).File
	}
	if x, ok := fs["allow_empty"]; ok && !gates.IsNull(x.Val) {
		if b, good := c.Bool(x.Val, what+" allow_empty"); good {
			s.allowEmpty = &b
		}
	}
	return s
}
