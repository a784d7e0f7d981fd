package contextpack

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// MaxFileSize is the largest strategy file read (64 KiB).
const MaxFileSize = 64 << 10

// ParseFile parses one strategy file (YAML). The file name is used in
// messages and must be the strategy's name plus .yaml or .yml. On failure
// the error is a *gates.ValidationError listing every problem with its
// file:line:column; unknown keys are rejected.
//
//	name: reviewer_diff
//	description: the diff, the changed files in full, the plan
//	token_budget: 15000            # default 20000, at most 50000 (CTX-08)
//	exclude: ["**/*.lock"]         # left out of every part
//	parts:                         # gathered and printed in this order
//	  - {name: plan, kind: plan}
//	  - {name: diff, kind: diff}
//	  - {name: changed, kind: changed}
//	  - {name: standards, kind: files, include: [CONTRIBUTING.md]}
//	priority_order: [plan, diff, changed, standards]   # kept first to last
//	keep: [diff]                   # never dropped
func ParseFile(filename string, data []byte) (protocol.ContextStrategy, error) {
	c := gates.NewChecker(filename)
	s := parse(c, data)
	if err := c.Err(); err != nil {
		return protocol.ContextStrategy{}, err
	}
	return s, nil
}

func parse(c *gates.Checker, data []byte) protocol.ContextStrategy {
	var s protocol.ContextStrategy
	if len(data) > MaxFileSize {
		c.Addf(nil, "file is %d bytes; a context strategy file may be at most %d bytes", len(data), MaxFileSize)
		return s
	}
	root := c.Decode(data)
	if root == nil {
		if len(c.Problems) == 0 {
			c.Addf(nil, "file is empty; a context strategy needs name, parts and priority_order")
		}
		return s
	}
	f, ok := c.Fields(root, "context strategy", "name", "description", "token_budget", "exclude", "parts", "priority_order", "keep")
	if !ok {
		return s
	}
	if x, ok := f["name"]; ok {
		if v, good := c.Str(x.Val, "name"); good {
			s.Name = v
			want := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(c.File), ".yaml"), ".yml")
			switch {
			case !ValidName(v):
				c.Addf(x.Val, "name %q is not valid: lowercase letters, digits, '_' and '-', at most 64 characters", v)
			case want != v && (strings.HasSuffix(c.File, ".yaml") || strings.HasSuffix(c.File, ".yml")):
				c.Addf(x.Val, "name %q does not match the file name %s", v, filepath.Base(c.File))
			}
		}
	} else {
		c.Addf(root, "context strategy is missing required field \"name\"")
	}
	if x, ok := f["description"]; ok {
		s.Description, _ = c.Str(x.Val, "description")
	}
	s.TokenBudget = DefaultBudget
	if x, ok := f["token_budget"]; ok {
		if v, good := c.Int(x.Val, "token_budget", MinBudget, MaxBudget); good {
			s.TokenBudget = int(v)
		}
	}
	if x, ok := f["exclude"]; ok {
		s.Exclude = globs(c, x.Val, "exclude")
	}
	parts := map[string]protocol.ContextPart{}
	named := map[string]bool{} // parts with a name, valid or not: no knock-on problems
	if x, ok := f["parts"]; ok {
		if x.Val.Kind != yaml.SequenceNode || len(x.Val.Content) == 0 {
			c.Addf(x.Val, "parts must be a non-empty list, got %s", gates.Describe(x.Val))
		} else {
			for _, n := range x.Val.Content {
				p, good := part(c, n, parts)
				named[p.Name] = true
				if !good {
					continue
				}
				if _, dup := parts[p.Name]; dup {
					c.Addf(n, "part %q appears twice", p.Name)
					continue
				}
				parts[p.Name] = p
				s.Parts = append(s.Parts, p)
			}
		}
	} else {
		c.Addf(root, "context strategy is missing required field \"parts\"")
	}
	if x, ok := f["priority_order"]; ok {
		names, nodes, _ := c.NameList(x.Val, "priority_order")
		listed := map[string]bool{}
		for i, n := range names {
			if !named[n] {
				c.Addf(nodes[i], "priority_order names unknown part %q", n)
			}
			listed[n] = true
		}
		for _, p := range s.Parts {
			if !listed[p.Name] {
				c.Addf(x.Val, "priority_order does not list part %q: every part needs a priority", p.Name)
			}
		}
		s.PriorityOrder = names
	} else {
		c.Addf(root, "context strategy is missing required field \"priority_order\"")
	}
	if x, ok := f["keep"]; ok && !gates.IsNull(x.Val) {
		names, nodes, _ := c.NameList(x.Val, "keep")
		for i, n := range names {
			if !named[n] {
				c.Addf(nodes[i], "keep names unknown part %q", n)
			}
		}
		s.Keep = names
	}
	return s
}

// part parses one entry of parts; before holds the parts already read.
func part(c *gates.Checker, n *yaml.Node, before map[string]protocol.ContextPart) (protocol.ContextPart, bool) {
	var p protocol.ContextPart
	f, ok := c.Fields(n, "part", "name", "kind", "include", "exclude", "of")
	if !ok {
		return p, false
	}
	mark := len(c.Problems)
	if x, ok := f["name"]; ok {
		if v, good := c.Str(x.Val, "part name"); good {
			if !ValidName(v) {
				c.Addf(x.Val, "part name %q is not valid: lowercase letters, digits, '_' and '-', at most 64 characters", v)
			}
			p.Name = v
		}
	} else {
		c.Addf(n, "part is missing required field \"name\"")
	}
	if x, ok := f["kind"]; ok {
		if v, good := c.Str(x.Val, "part kind"); good {
			if !validKind(v) {
				c.Addf(x.Val, "unknown part kind %q (known: %s)", v, strings.Join(Kinds, ", "))
			}
			p.Kind = v
		}
	} else {
		c.Addf(n, "part is missing required field \"kind\"")
	}
	if x, ok := f["include"]; ok {
		p.Include = globs(c, x.Val, "include")
	}
	if x, ok := f["exclude"]; ok {
		p.Exclude = globs(c, x.Val, "exclude")
	}
	if x, ok := f["of"]; ok {
		p.Of, _ = c.Str(x.Val, "of")
	}
	if len(c.Problems) > mark {
		return p, false
	}
	if msg := checkPart(p, before); msg != "" {
		c.Addf(n, "part %q: %s", p.Name, msg)
		return p, false
	}
	return p, true
}

// globs parses a list of globs.
func globs(c *gates.Checker, n *yaml.Node, what string) []string {
	if n.Kind != yaml.SequenceNode {
		c.Addf(n, "%s must be a list of globs, got %s", what, gates.Describe(n))
		return nil
	}
	var out []string
	for _, item := range n.Content {
		g, ok := c.Str(item, what+" entry")
		if !ok {
			continue
		}
		if msg := checkGlob(g); msg != "" {
			c.Addf(item, "%s", msg)
			continue
		}
		out = append(out, g)
	}
	return out
}

// Catalogue is a set of strategies by name.
type Catalogue struct {
	byName map[string]protocol.ContextStrategy
	files  map[string]string
}

// Lookup returns the strategy of that name.
func (c *Catalogue) Lookup(name string) (protocol.ContextStrategy, bool) {
	if c == nil {
		return protocol.ContextStrategy{}, false
	}
	s, ok := c.byName[name]
	return s, ok
}

// Names returns the strategies' names, sorted.
func (c *Catalogue) Names() []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.byName))
	for n := range c.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// File returns the file a strategy was read from.
func (c *Catalogue) File(name string) string {
	if c == nil {
		return ""
	}
	return c.files[name]
}

// Add puts a strategy into the catalogue, replacing one of the same name.
func (c *Catalogue) Add(s protocol.ContextStrategy, file string) {
	if c.byName == nil {
		c.byName, c.files = map[string]protocol.ContextStrategy{}, map[string]string{}
	}
	c.byName[s.Name] = s
	c.files[s.Name] = file
}

// Load reads every *.yaml and *.yml file of each directory, the lowest
// precedence first: a strategy of a later directory replaces the one of
// the same name (built-in < user < project). Missing directories are
// skipped. Every problem of every file is collected into one
// *gates.ValidationError.
func Load(dirs ...string) (*Catalogue, error) {
	cat := &Catalogue{}
	var problems []gates.Problem
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			problems = append(problems, gates.Problem{File: dir, Message: err.Error()})
			continue
		}
		var files []Source
		for _, e := range entries {
			ext := strings.ToLower(filepath.Ext(e.Name()))
			if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			data, err := readFile(path)
			if err != nil {
				problems = append(problems, gates.Problem{File: path, Message: err.Error()})
				continue
			}
			files = append(files, Source{Path: path, Data: data})
		}
		problems = append(problems, cat.addLayer(files)...)
	}
	if len(problems) > 0 {
		return nil, &gates.ValidationError{Problems: problems}
	}
	return cat, nil
}

// Source is a strategy file read by the caller: its path (for messages)
// and content.
type Source struct {
	Path string
	Data []byte
}

// LoadLayers builds a catalogue from files already read, one list per
// layer, the lowest precedence first (built-in, user, project): a
// strategy of a later layer replaces the one of the same name, two of one
// layer is an error. Problems are collected as Load's are.
func LoadLayers(layers ...[]Source) (*Catalogue, error) {
	return (&Catalogue{}).Over(layers...)
}

// Over returns a copy of c with the strategies of each layer of files
// added over it, as LoadLayers adds them: how a trusted project's
// .supervisor/context/ files overlay the coordinator's strategies for one
// submission. c itself is not changed.
func (c *Catalogue) Over(layers ...[]Source) (*Catalogue, error) {
	out := &Catalogue{}
	if c != nil {
		for name, s := range c.byName {
			out.Add(s, c.files[name])
		}
	}
	var problems []gates.Problem
	for _, files := range layers {
		problems = append(problems, out.addLayer(files)...)
	}
	if len(problems) > 0 {
		return nil, &gates.ValidationError{Problems: problems}
	}
	return out, nil
}

// addLayer parses one layer's files into c, replacing strategies of lower
// layers of the same name; it returns the problems.
func (c *Catalogue) addLayer(files []Source) []gates.Problem {
	var problems []gates.Problem
	inLayer := map[string]string{}
	for _, f := range files {
		s, err := ParseFile(f.Path, f.Data)
		var ve *gates.ValidationError
		if errors.As(err, &ve) {
			problems = append(problems, ve.Problems...)
			continue
		}
		if err != nil {
			problems = append(problems, gates.Problem{File: f.Path, Message: err.Error()})
			continue
		}
		if prev, dup := inLayer[s.Name]; dup {
			problems = append(problems, gates.Problem{File: f.Path, Message: fmt.Sprintf("strategy %q is also defined in %s", s.Name, prev)})
			continue
		}
		inLayer[s.Name] = f.Path
		c.Add(s, f.Path)
	}
	return problems
}

// readFile reads a regular file of at most MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	return data, nil
}

// DefaultUserDir returns ~/.supervisor/context, or "" if the home
// directory is unknown.
func DefaultUserDir() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".supervisor", "context")
}
