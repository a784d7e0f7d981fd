package gates

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one validation problem, positioned in a file. Line and Column
// are 1-based; Column is 0 when unknown (YAML syntax errors), and both are
// 0 for problems about the whole file.
type Problem struct {
	File    string
	Line    int
	Column  int
	Message string
}

// String formats the problem as file:line:col: message, leaving out what
// is unknown.
func (p Problem) String() string {
	switch {
	case p.Line == 0:
		return fmt.Sprintf("%s: %s", p.File, p.Message)
	case p.Column == 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	}
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

// ValidationError is every problem found in one or more files: within a
// file sorted by position, files in the order they were read.
type ValidationError struct {
	Problems []Problem
}

// Error prints one problem per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// sortProblems orders problems by position, keeping the order of files as
// they first appear.
func sortProblems(ps []Problem) {
	fileRank := map[string]int{}
	for _, p := range ps {
		if _, ok := fileRank[p.File]; !ok {
			fileRank[p.File] = len(fileRank)
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.File != b.File {
			return fileRank[a.File] < fileRank[b.File]
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

// Checker walks YAML nodes and collects every problem it meets, each with
// the exact position of the offending node. The workflow parser and the
// gate loader share it, so one schema gives the same messages everywhere.
//
// A Checker may parse text embedded in a file (a prompt's front matter):
// Sub and Pinned derive checkers that map positions back into the file.
type Checker struct {
	// File names the file in messages.
	File string
	// Problems collects what was found, in the order found.
	Problems []Problem
	// Warnings collects what is suspicious but valid.
	Warnings []Problem

	lineBase, colBase int // file position of the parsed text's line 1, column 1
	pinned            bool
	pinLine, pinCol   int
}

// NewChecker returns a checker for a whole file.
func NewChecker(file string) *Checker {
	return &Checker{File: file, lineBase: 1, colBase: 1}
}

// Sub returns a checker for text that starts at line `line`, column `col`
// of c's text (1-based): positions in that text map to the file. Its
// problems are separate; add them back with Adopt.
func (c *Checker) Sub(line, col int) *Checker {
	s := &Checker{File: c.File, pinned: c.pinned, pinLine: c.pinLine, pinCol: c.pinCol}
	s.lineBase = c.lineBase + max(line, 1) - 1
	s.colBase = c.colBase + max(col, 1) - 1
	return s
}

// Pinned returns a checker whose problems are all placed at n's position
// in c's text: for embedded text whose own positions cannot be mapped to
// the file (a quoted or folded YAML string).
func (c *Checker) Pinned(n *yaml.Node) *Checker {
	line, col := c.pos(n)
	return &Checker{File: c.File, lineBase: 1, colBase: 1, pinned: true, pinLine: line, pinCol: col}
}

// Adopt appends the problems of a derived checker.
func (c *Checker) Adopt(s *Checker) {
	c.Problems = append(c.Problems, s.Problems...)
	c.Warnings = append(c.Warnings, s.Warnings...)
}

// pos maps a node's position to the file.
func (c *Checker) pos(n *yaml.Node) (int, int) {
	if n == nil {
		return 0, 0
	}
	return c.mapPos(n.Line, n.Column)
}

func (c *Checker) mapPos(line, col int) (int, int) {
	if c.pinned {
		return c.pinLine, c.pinCol
	}
	if line == 0 {
		return 0, 0
	}
	l := c.lineBase + line - 1
	if col == 0 {
		return l, 0
	}
	return l, c.colBase + col - 1
}

// Position returns the file position of n as a Source (without origin).
func (c *Checker) Position(n *yaml.Node) Source {
	line, col := c.pos(n)
	return Source{File: c.File, Line: line, Column: col}
}

// Addf records a problem at n's position (the whole file if n is nil).
func (c *Checker) Addf(n *yaml.Node, format string, args ...any) {
	line, col := c.pos(n)
	c.Problems = append(c.Problems, Problem{File: c.File, Line: line, Column: col, Message: fmt.Sprintf(format, args...)})
}

// AddAt records a problem at a position already mapped to a file (a
// Gate's Source, say).
func (c *Checker) AddAt(at Source, format string, args ...any) {
	file := at.File
	if file == "" {
		file = c.File
	}
	c.Problems = append(c.Problems, Problem{File: file, Line: at.Line, Column: at.Column, Message: fmt.Sprintf(format, args...)})
}

// Err returns the problems as a *ValidationError sorted by position, or
// nil if there are none.
func (c *Checker) Err() error {
	if len(c.Problems) == 0 {
		return nil
	}
	ps := append([]Problem(nil), c.Problems...)
	sortProblems(ps)
	return &ValidationError{Problems: ps}
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlParserProblems are yaml.v3's parser (as opposed to scanner) error
// messages. For these yaml.v3 prints a 0-based line (go-yaml issue #205):
// that of the block the error occurred in, or of the problem itself when
// the block starts on the first line. Scanner errors are already 1-based.
var yamlParserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
}

// Decode reads a single YAML document (LD-06: into nodes, never into
// arbitrary types) and returns its root node. It returns nil for an empty
// document (nothing, comments only, or null), and nil after recording why
// when the text is not valid YAML. Several documents are reported, and so
// are aliases: the schema walk never follows them, so positions stay exact
// and no alias can expand the input.
func (c *Checker) Decode(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			c.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		c.Addf(&extra, "file holds more than one YAML document; expected exactly one")
		return nil
	case !errors.Is(err, io.EOF):
		c.yamlError(err)
		return nil
	}
	if len(doc.Content) != 1 || IsNull(doc.Content[0]) {
		return nil
	}
	before := len(c.Problems)
	c.rejectAliases(doc.Content[0])
	if len(c.Problems) > before {
		return nil
	}
	return doc.Content[0]
}

// yamlError records a syntax error at the line yaml.v3 reports, made
// 1-based. yaml.v3 does not report a column.
func (c *Checker) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			line, msg = n, m[2]
		}
	}
	if yamlParserProblems[msg] {
		line++
	}
	l, _ := c.mapPos(line, 0)
	c.Problems = append(c.Problems, Problem{File: c.File, Line: l, Message: "invalid YAML: " + msg})
}

func (c *Checker) rejectAliases(n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		c.Addf(n, "YAML aliases (*%s) are not supported; write the value out", n.Value)
		return
	}
	for _, k := range n.Content {
		c.rejectAliases(k)
	}
}

// Describe names a node's YAML type for "got ..." messages.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!bool":
			return "a boolean"
		case "!!int", "!!float":
			return "a number"
		}
		return "a string"
	}
	return "an unexpected value"
}

// IsNull reports whether n is a null scalar (~, null, or nothing).
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// Field is one key/value pair of a mapping.
type Field struct {
	Key, Val *yaml.Node
}

// Fields checks that n is a mapping whose keys are all in known, reporting
// unknown and repeated keys (with a suggestion for likely typos), and
// returns its fields by key.
func (c *Checker) Fields(n *yaml.Node, what string, known ...string) (map[string]Field, bool) {
	return c.FieldsReserved(n, what, nil, known...)
}

// FieldsReserved is Fields where some keys are reserved: they are reported
// with the given explanation instead of as unknown.
func (c *Checker) FieldsReserved(n *yaml.Node, what string, reserved map[string]string, known ...string) (map[string]Field, bool) {
	if n.Kind != yaml.MappingNode {
		c.Addf(n, "%s must be a mapping, got %s", what, Describe(n))
		return nil, false
	}
	out := make(map[string]Field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || IsNull(k) {
			c.Addf(k, "%s keys must be strings, got %s", what, Describe(k))
			continue
		}
		if why, ok := reserved[k.Value]; ok {
			c.Addf(k, "%q is not allowed in %s: %s", k.Value, what, why)
			continue
		}
		if !contains(known, k.Value) {
			msg := fmt.Sprintf("unknown field %q in %s", k.Value, what)
			if s := suggest(k.Value, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			c.Addf(k, "%s", msg)
			continue
		}
		if prev, dup := out[k.Value]; dup {
			c.Addf(k, "field %q appears twice in %s (first at line %d)", k.Value, what, c.line(prev.Key))
			continue
		}
		out[k.Value] = Field{Key: k, Val: v}
	}
	return out, true
}

// line returns n's line in the file.
func (c *Checker) line(n *yaml.Node) int {
	l, _ := c.pos(n)
	return l
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the known word closest to s, if it is close enough to be
// a likely typo.
func suggest(s string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestDist && d < len(k) {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
