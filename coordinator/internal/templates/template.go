// Package templates expands workflow templates (TPL-01…TPL-08): YAML files
// in the built-in (configs/templates), user (~/.supervisor/templates) and
// project (.supervisor/templates, only when trusted) directories, each a
// set of steps (tasks with a role, dependencies, gates and approvals) that
// may extend another template. A template and a feature description (a
// Markdown file, optionally with YAML front matter) expand into an
// ordinary workflow document, which then goes through the workflow parser
// like any submitted file.
package templates

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/shared/gates"
	"gopkg.in/yaml.v3"
)

// Options selects the template directories Load reads.
type Options struct {
	// BuiltinDir is configs/templates; "" skips it.
	BuiltinDir string
	// UserDir is ~/.supervisor/templates; "" skips it.
	UserDir string
	// Project are the project's template files, passed only when the
	// project is trusted.
	Project []overlay.File
}

// Catalogue holds every template of the loaded layers, resolved.
type Catalogue struct {
	byName map[string]*Template
	names  []string
}

// Get returns the template called name.
func (c *Catalogue) Get(name string) (*Template, bool) {
	t, ok := c.byName[name]
	return t, ok
}

// Names returns the templates' names, sorted.
func (c *Catalogue) Names() []string { return append([]string(nil), c.names...) }

// Template is a template's chain of files, its own first.
type Template struct {
	Name string
	// Chain names the template and its ancestors, its own name first.
	Chain []string
	// Files are the files of the chain, in the same order.
	Files []string
	// Description is the merged description.
	Description string
	layers      []*layer // root first
}

// Load reads the template directories and resolves every template: the
// highest layer's file of a name wins (as for roles, ROLE-08), extends is
// followed with cycles rejected and named, the chain merged (TPL-08) and
// checked. Every problem comes back in one *gates.ValidationError.
func Load(o Options) (*Catalogue, error) {
	files, problems := overlay.ReadLayers(o.BuiltinDir, o.UserDir)
	return FromFiles(append(files, o.Project...), problems)
}

// FromFiles resolves templates from files already read.
func FromFiles(files []overlay.File, problems []gates.Problem) (*Catalogue, error) {
	ix, ps := overlay.NewIndex(files)
	problems = append(problems, ps...)
	type key struct {
		l overlay.Layer
		n string
	}
	layers := map[key]*layer{}
	for _, f := range files {
		k := key{f.Layer, f.Name}
		if _, done := layers[k]; done {
			continue
		}
		c := gates.NewChecker(f.Path)
		root := c.Decode(f.Data)
		var l *layer
		if root != nil {
			l = parseLayer(c, root, "template", templateFields)
		} else if len(c.Problems) == 0 {
			c.Addf(nil, "template file is empty; a template needs a description and steps")
		}
		problems = append(problems, c.Problems...)
		if l != nil && len(c.Problems) == 0 {
			layers[k] = l
		} else {
			layers[k] = nil
		}
	}
	cat := &Catalogue{byName: map[string]*Template{}}
	for _, name := range ix.Names() {
		chain, p := ix.Chain("template", name, func(f overlay.File) (overlay.Parent, bool) {
			l := layers[key{f.Layer, f.Name}]
			if l == nil {
				return overlay.Parent{}, false
			}
			return l.extends, true
		})
		if p != nil && !slices.Contains(problems, *p) {
			problems = append(problems, *p)
		}
		if chain == nil {
			continue
		}
		t := &Template{Name: name}
		for i := len(chain) - 1; i >= 0; i-- {
			t.layers = append(t.layers, layers[key{chain[i].Layer, chain[i].Name}])
		}
		for _, f := range chain {
			t.Chain = append(t.Chain, f.Name)
			t.Files = append(t.Files, f.Path)
		}
		m, ps := mergeLayers(t.layers)
		if strings.TrimSpace(m.description) == "" {
			ps = append(ps, gates.Problem{File: t.Files[0], Message: fmt.Sprintf("template %q has no description", name)})
		}
		if len(ps) == 0 {
			ps = m.check(sampleData(name))
		}
		problems = append(problems, ps...)
		if len(ps) > 0 {
			continue
		}
		t.Description = m.description
		cat.byName[name] = t
		cat.names = append(cat.names, name)
	}
	if len(problems) > 0 {
		return cat, &gates.ValidationError{Problems: problems}
	}
	return cat, nil
}

// merged is a chain of layers merged.
type merged struct {
	description string
	defaults    map[string]any
	gates       []string
	steps       []*stepDef
}

// mergeLayers merges layers, root first (TPL-08, with ROLE-07's rules):
// scalars override, lists append, maps merge deeply; a step of a name
// already present is merged into it, a new step is added after the
// others; then the steps each layer disables are removed, and a step that
// depended on one depends on what it depended on instead.
func mergeLayers(layers []*layer) (*merged, []gates.Problem) {
	m := &merged{}
	index := map[string]*stepDef{}
	var disable []named
	for _, l := range layers {
		if l.description != "" {
			m.description = l.description
		}
		if l.defaults != nil {
			m.defaults = overlay.MergeMaps(m.defaults, l.defaults)
		}
		if l.gatesSet {
			m.gates = appendNew(m.gates, l.gates...)
		}
		disable = append(disable, l.disable...)
		for _, s := range l.steps {
			cur, ok := index[s.name]
			if !ok {
				c := *s
				c.dependsOn = slices.Clone(s.dependsOn)
				c.gates = slices.Clone(s.gates)
				index[s.name] = &c
				m.steps = append(m.steps, &c)
				continue
			}
			mergeStep(cur, s)
		}
	}
	var problems []gates.Problem
	for _, d := range disable {
		s, ok := index[d.name]
		if !ok {
			problems = append(problems, gates.Problem{File: d.pos.File, Line: d.pos.Line, Column: d.pos.Column,
				Message: fmt.Sprintf("disable names step %q, which the template does not have", d.name)})
			continue
		}
		delete(index, d.name)
		m.steps = slices.DeleteFunc(m.steps, func(x *stepDef) bool { return x == s })
		for _, other := range m.steps {
			i := slices.IndexFunc(other.dependsOn, func(n named) bool { return n.name == d.name })
			if i < 0 {
				continue
			}
			deps := slices.Delete(slices.Clone(other.dependsOn), i, i+1)
			for _, up := range s.dependsOn {
				if up.name != other.name && !slices.ContainsFunc(deps, func(n named) bool { return n.name == up.name }) {
					deps = append(deps, up)
				}
			}
			other.dependsOn = deps
		}
		for _, other := range m.steps {
			other.expand = replaceAfter(other.expand, s, other.name)
		}
	}
	return m, problems
}

// afterList returns the sequence of an expand mapping's after key, or nil.
func afterList(expand *yaml.Node) *yaml.Node {
	if expand == nil || expand.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(expand.Content); i += 2 {
		if expand.Content[i].Value == "after" && expand.Content[i+1].Kind == yaml.SequenceNode {
			return expand.Content[i+1]
		}
	}
	return nil
}

// replaceAfter returns expand with the disabled step gone from its after
// list and the steps gone depended on in its place (those not listed
// already, and not self, whose expand it is), as a dependency on gone is
// rewritten. The layer's node is left as it is: other templates share it.
func replaceAfter(expand *yaml.Node, gone *stepDef, self string) *yaml.Node {
	after := afterList(expand)
	if after == nil || !slices.ContainsFunc(after.Content, func(n *yaml.Node) bool { return n.Value == gone.name }) {
		return expand
	}
	c := deepCopy(expand)
	after = afterList(c)
	var items []*yaml.Node
	listed := func(name string) bool {
		return slices.ContainsFunc(items, func(n *yaml.Node) bool { return n.Value == name })
	}
	for _, n := range after.Content {
		if n.Value != gone.name {
			items = append(items, n)
			continue
		}
		for _, up := range gone.dependsOn {
			if up.name != self && !listed(up.name) {
				items = append(items, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: up.name, Line: n.Line, Column: n.Column})
			}
		}
	}
	after.Content = items
	return c
}

func deepCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = deepCopy(k)
	}
	return &c
}

func mergeStep(cur, s *stepDef) {
	if s.role != nil {
		cur.role = s.role
	}
	if s.kind != nil {
		cur.kind = s.kind
	}
	if s.prompt != nil {
		cur.prompt, cur.tmpl, cur.promptPos = s.prompt, s.tmpl, s.promptPos
	}
	if s.timeout != nil {
		cur.timeout = s.timeout
	}
	if s.allowEmpty != nil {
		cur.allowEmpty = s.allowEmpty
	}
	if s.approval != nil {
		cur.approval = s.approval
	}
	if s.expand != nil {
		cur.expand, cur.expandFile = s.expand, s.expandFile
	}
	for _, d := range s.dependsOn {
		if !slices.ContainsFunc(cur.dependsOn, func(n named) bool { return n.name == d.name }) {
			cur.dependsOn = append(cur.dependsOn, d)
		}
	}
	if s.gatesSet {
		cur.gatesSet = true
		cur.gates = appendNew(cur.gates, s.gates...)
	}
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// check reports steps that depend on unknown steps, agent steps without a
// role, and prompts that do not render with d.
func (m *merged) check(d Data) []gates.Problem {
	var ps []gates.Problem
	add := func(at gates.Source, format string, args ...any) {
		ps = append(ps, gates.Problem{File: at.File, Line: at.Line, Column: at.Column, Message: fmt.Sprintf(format, args...)})
	}
	if len(m.steps) == 0 {
		ps = append(ps, gates.Problem{Message: "the template has no steps"})
	}
	known := map[string]bool{}
	for _, s := range m.steps {
		known[s.name] = true
	}
	for _, s := range m.steps {
		for _, dep := range s.dependsOn {
			if !known[dep.name] {
				add(dep.pos, "step %q depends on unknown step %q", s.name, dep.name)
			}
		}
		if after := afterList(s.expand); after != nil {
			for _, a := range after.Content {
				if a.Kind == yaml.ScalarNode && !known[a.Value] {
					add(gates.Source{File: s.expandFile, Line: a.Line, Column: a.Column},
						"step %q expand after names unknown step %q", s.name, a.Value)
				}
			}
		}
		if s.role == nil && !s.human() {
			add(s.pos, "step %q has no role: an agent step needs one (a human step says type: human)", s.name)
		}
		if s.tmpl != nil {
			d.Step = s.name
			if err := s.tmpl.Execute(&bytes.Buffer{}, d); err != nil {
				add(s.promptPos, "step %q prompt template: %v", s.name, err)
			}
		}
	}
	return ps
}

func (s *stepDef) human() bool { return s.kind != nil && *s.kind == "human" }
