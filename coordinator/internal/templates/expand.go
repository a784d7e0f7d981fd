package templates

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Data is what a step's prompt template sees.
type Data struct {
	// Feature is the feature description (Markdown, front matter cut).
	Feature string
	// Title is the feature's first "# " heading ("" if none).
	Title string
	// Name is the workflow's name.
	Name string
	// Step is the step's name.
	Step string
	// Template is the template's name.
	Template string
}

func sampleData(template string) Data {
	return Data{Feature: "# Feature\n\nDescription.", Title: "Feature", Name: "feature", Template: template}
}

// Feature is a feature description: its text and what its front matter
// sets.
type Feature struct {
	// File is the description's file name, for messages.
	File string
	// Name is the workflow name: the front matter's name, else the title
	// or the file name made into a name.
	Name  string
	Title string
	// Body is the Markdown after the front matter.
	Body string
	// Pool, if set, becomes the workflow's defaults.pool.
	Pool string
	// over is the front matter's gates (replacing the template's workflow
	// gates), disable and steps (merged like one more layer: TPL-07).
	over *layer
}

// featureFields are the keys of a feature's front matter.
var featureFields = []string{"name", "pool", "gates", "disable", "steps"}

// ParseFeature reads a feature description: Markdown that may start with
// YAML front matter between "---" lines setting name, pool, gates (the
// workflow's gate list, replacing the template's), disable (steps to drop)
// and steps (overrides and extra steps, merged as a template extending the
// chosen one would be). Problems carry the feature file's line numbers.
func ParseFeature(file string, data []byte) (*Feature, error) {
	c := gates.NewChecker(file)
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	f := &Feature{File: file, Body: text}
	if rest, ok := strings.CutPrefix(text, "---\n"); ok {
		end := -1
		off := 0
		for off <= len(rest) {
			line, _, more := strings.Cut(rest[off:], "\n")
			if strings.TrimRight(line, " \t") == "---" {
				end = off
				break
			}
			if !more {
				break
			}
			off += len(line) + 1
		}
		if end < 0 {
			c.Addf(nil, "front matter opened by '---' is not closed by a '---' line")
			return nil, c.Err()
		}
		front := rest[:end]
		f.Body = strings.TrimPrefix(rest[end:], strings.SplitN(rest[end:], "\n", 2)[0])
		f.Body = strings.TrimPrefix(f.Body, "\n")
		sub := c.Sub(2, 1)
		if root := sub.Decode([]byte(front)); root != nil {
			if fs, ok := sub.Fields(root, "front matter", featureFields...); ok {
				if x, ok := fs["name"]; ok {
					if s, good := sub.Str(x.Val, "name"); good {
						if !protocol.ValidName(s) {
							sub.Addf(x.Val, "invalid name %q: use %s", s, protocol.NameRule)
						}
						f.Name = s
					}
				}
				if x, ok := fs["pool"]; ok {
					if s, good := sub.Str(x.Val, "pool"); good {
						f.Pool = s
					}
				}
				f.over = parseLayer(sub, root, "front matter", featureFields)
			}
		}
		c.Adopt(sub)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	for _, line := range strings.Split(f.Body, "\n") {
		if t, ok := strings.CutPrefix(line, "# "); ok {
			f.Title = strings.TrimSpace(t)
			break
		}
	}
	if strings.TrimSpace(f.Body) == "" {
		c.Addf(nil, "the feature description is empty")
		return nil, c.Err()
	}
	if f.Name == "" {
		f.Name = slug(f.Title)
	}
	if f.Name == "" {
		f.Name = slug(strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)))
	}
	if f.Name == "" {
		f.Name = "feature"
	}
	return f, nil
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// slug makes s a workflow name: lowercase, runs of other characters as
// one '-', at most 64 characters.
func slug(s string) string {
	s = strings.Trim(nonName.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 64 {
		s = strings.TrimRight(s[:64], "-")
	}
	return s
}

// Expand turns the template and a feature into a workflow document: name,
// defaults, gates and one task per step, in step order, each with its
// role, dependencies, gates, approval and its prompt rendered with the
// feature. The result is meant for the workflow parser, which checks it
// like any workflow file.
func (t *Template) Expand(f *Feature) ([]byte, error) {
	layers := t.layers
	if f.over != nil {
		layers = append(append([]*layer(nil), layers...), f.over)
	}
	m, ps := mergeLayers(layers)
	if f.over != nil && f.over.gatesSet {
		m.gates = f.over.gates
	}
	d := Data{Feature: strings.TrimSpace(f.Body), Title: f.Title, Name: f.Name, Template: t.Name}
	if len(ps) == 0 {
		ps = m.check(d)
	}
	if len(ps) > 0 {
		return nil, &gates.ValidationError{Problems: ps}
	}
	defaults := m.defaults
	if f.Pool != "" {
		defaults = mergeDefaults(defaults, map[string]any{"pool": f.Pool})
	}

	root := mapping()
	from := t.Name
	if len(t.Chain) > 1 {
		from += " (extends " + strings.Join(t.Chain[1:], ", ") + ")"
	}
	root.HeadComment = fmt.Sprintf("Expanded from template %s and %s.", from, filepath.Base(f.File))
	add(root, "name", scalar(f.Name))
	if len(defaults) > 0 {
		var n yaml.Node
		if err := n.Encode(defaults); err != nil {
			return nil, fmt.Errorf("encode defaults: %w", err)
		}
		add(root, "defaults", &n)
	}
	if len(m.gates) > 0 {
		add(root, "gates", flowList(m.gates))
	}
	tasks := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range m.steps {
		task := mapping()
		add(task, "id", scalar(s.name))
		if s.human() {
			add(task, "type", scalar("human"))
		}
		if s.role != nil {
			add(task, "role", scalar(*s.role))
		}
		if len(s.dependsOn) > 0 {
			names := make([]string, len(s.dependsOn))
			for i, n := range s.dependsOn {
				names[i] = n.name
			}
			add(task, "depends_on", flowList(names))
		}
		if s.gatesSet {
			add(task, "gates", flowList(s.gates))
		}
		if s.timeout != nil {
			add(task, "timeout", scalar(*s.timeout))
		}
		if s.allowEmpty != nil {
			add(task, "allow_empty", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(*s.allowEmpty)})
		}
		if s.approval != nil {
			add(task, "approval", plain(s.approval))
		}
		if s.expand != nil {
			add(task, "expand", plain(s.expand))
		}
		prompt := d.Feature
		if s.tmpl != nil {
			var b bytes.Buffer
			d.Step = s.name
			if err := s.tmpl.Execute(&b, d); err != nil {
				return nil, fmt.Errorf("step %q prompt template: %w", s.name, err)
			}
			prompt = b.String()
		}
		prompt = strings.TrimRight(prompt, "\n") + "\n"
		add(task, "prompt", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: prompt, Style: yaml.LiteralStyle})
		tasks.Content = append(tasks.Content, task)
	}
	add(root, "tasks", tasks)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encode workflow: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode workflow: %w", err)
	}
	return b.Bytes(), nil
}

func mergeDefaults(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, scalar(key), v)
}

func flowList(items []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, it := range items {
		n.Content = append(n.Content, scalar(it))
	}
	return n
}

// plain copies a node without positions, comments or styles.
func plain(n *yaml.Node) *yaml.Node {
	c := &yaml.Node{Kind: n.Kind, Tag: n.Tag, Value: n.Value}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		c.Style = yaml.DoubleQuotedStyle
	}
	for _, k := range n.Content {
		c.Content = append(c.Content, plain(k))
	}
	return c
}
