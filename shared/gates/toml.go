package gates

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"gopkg.in/yaml.v3"
)

// TOML gate files (.supervisor/gates.toml, one [[gate]] table per gate) are
// converted into the same node tree a YAML file gives, with each key and
// value at its position in the TOML file, so both formats go through one
// schema walk and report the same problems at the same kind of place.

// decodeTOML returns the root of a TOML document as YAML nodes, or nil
// after recording why it could not: syntax errors at go-toml's line and
// column, a key defined twice at its second definition. An empty document
// gives an empty mapping.
func (c *Checker) decodeTOML(data []byte) *yaml.Node {
	var probe map[string]any
	if err := toml.Unmarshal(data, &probe); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			l, cl := c.mapPos(line, col)
			c.Problems = append(c.Problems, Problem{File: c.File, Line: l, Column: cl,
				Message: "invalid TOML: " + strings.TrimPrefix(de.Error(), "toml: ")})
			return nil
		}
		// go-toml reports redefinitions without a position: find the
		// repeated key while building, else report the file.
		b := &tomlBuilder{data: data}
		b.build()
		if b.dup != nil {
			c.Addf(b.dup, "invalid TOML: key %s is already defined", b.dup.Value)
		} else {
			c.Addf(nil, "invalid TOML: %s", strings.TrimPrefix(err.Error(), "toml: "))
		}
		return nil
	}
	b := &tomlBuilder{data: data}
	root := b.build()
	if err := b.p.Error(); err != nil {
		c.Addf(nil, "invalid TOML: %v", err)
		return nil
	}
	return root
}

// build converts the document into YAML nodes.
func (b *tomlBuilder) build() *yaml.Node {
	b.p.Reset(b.data)
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1, Column: 1}
	cur := root
	for b.p.NextExpression() {
		e := b.p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			b.keyValue(cur, e)
		case unstable.Table, unstable.ArrayTable:
			parent, last := b.path(root, e.Key())
			if last == nil {
				continue
			}
			if e.Kind == unstable.Table {
				cur = b.child(parent, last)
				continue
			}
			seq := lookupKey(parent, last.Value)
			if seq == nil {
				seq = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: last.Line, Column: last.Column}
				parent.Content = append(parent.Content, last, seq)
			}
			line, col := b.tableStart(last)
			cur = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line, Column: col}
			seq.Content = append(seq.Content, cur)
		}
	}
	return root
}

type tomlBuilder struct {
	p    unstable.Parser
	data []byte
	dup  *yaml.Node // the first key defined twice
}

// at returns the 1-based line and column of a byte offset.
func (b *tomlBuilder) at(off int) (int, int) {
	if off > len(b.data) {
		off = len(b.data)
	}
	lead := b.data[:off]
	return bytes.Count(lead, []byte{'\n'}) + 1, off - bytes.LastIndexByte(lead, '\n')
}

// keys converts a (dotted) key to scalar nodes.
func (b *tomlBuilder) keys(it unstable.Iterator) []*yaml.Node {
	var out []*yaml.Node
	for it.Next() {
		k := it.Node()
		line, col := b.at(int(k.Raw.Offset))
		out = append(out, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(k.Data), Line: line, Column: col})
	}
	return out
}

// path follows a (dotted) key from table t: it returns the table holding
// the key's last part, creating the tables on the way, and that last
// part; nil, nil for an empty key.
func (b *tomlBuilder) path(t *yaml.Node, it unstable.Iterator) (parent, last *yaml.Node) {
	keys := b.keys(it)
	if len(keys) == 0 {
		return nil, nil
	}
	for _, k := range keys[:len(keys)-1] {
		t = b.child(t, k)
	}
	return t, keys[len(keys)-1]
}

// tableStart finds the '[' that opens a table header, from its key node.
func (b *tomlBuilder) tableStart(key *yaml.Node) (int, int) {
	off := offsetOf(b.data, key.Line, key.Column)
	for off > 0 && strings.IndexByte(" \t[", b.data[off-1]) >= 0 {
		off--
		if b.data[off] == '[' && (off == 0 || b.data[off-1] != '[') {
			break
		}
	}
	return b.at(off)
}

// offsetOf is the inverse of at.
func offsetOf(data []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	return min(off+col-1, len(data))
}

// lookupKey returns the value of key in a mapping node, or nil.
func lookupKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// child returns the mapping under key in parent, creating it; for an
// array of tables it is the last table (TOML's [a.b] after [[a]]).
func (b *tomlBuilder) child(parent, key *yaml.Node) *yaml.Node {
	v := lookupKey(parent, key.Value)
	switch {
	case v == nil:
		line, col := b.tableStart(key)
		v = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line, Column: col}
		parent.Content = append(parent.Content, key, v)
	case v.Kind == yaml.SequenceNode && len(v.Content) > 0:
		v = v.Content[len(v.Content)-1]
	}
	return v
}

// keyValue adds a key = value expression to table cur.
func (b *tomlBuilder) keyValue(cur *yaml.Node, e *unstable.Node) {
	target, last := b.path(cur, e.Key())
	if last == nil {
		return
	}
	// The value starts after '=' and blanks.
	off := offsetOf(b.data, last.Line, last.Column) + len(last.Value)
	if eq := bytes.IndexByte(b.data[off:], '='); eq >= 0 {
		off += eq + 1
		for off < len(b.data) && (b.data[off] == ' ' || b.data[off] == '\t') {
			off++
		}
	}
	line, col := b.at(off)
	if lookupKey(target, last.Value) != nil && b.dup == nil {
		b.dup = last
	}
	target.Content = append(target.Content, last, b.value(e.Value(), line, col))
}

// value converts a TOML value; line and col are its position when the
// parser does not record one (arrays).
func (b *tomlBuilder) value(v *unstable.Node, line, col int) *yaml.Node {
	if v.Raw.Length > 0 {
		line, col = b.at(int(v.Raw.Offset))
	} else if len(v.Data) > 0 && v.Kind != unstable.String {
		line, col = b.at(int(b.p.Range(v.Data).Offset))
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Line: line, Column: col}
	switch v.Kind {
	case unstable.String:
		n.Tag, n.Value, n.Style = "!!str", string(v.Data), yaml.DoubleQuotedStyle
	case unstable.Bool:
		n.Tag, n.Value = "!!bool", string(v.Data)
	case unstable.Integer:
		n.Tag, n.Value = "!!int", string(v.Data)
		if i, err := strconv.ParseInt(string(v.Data), 0, 64); err == nil {
			n.Value = strconv.FormatInt(i, 10)
		}
	case unstable.Float:
		n.Tag, n.Value = "!!float", strings.ReplaceAll(string(v.Data), "_", "")
	case unstable.LocalDate, unstable.LocalTime, unstable.LocalDateTime, unstable.DateTime:
		n.Tag, n.Value = "!!timestamp", string(v.Data)
	case unstable.Array:
		n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
		it := v.Children()
		for it.Next() {
			ch := it.Node()
			if ch.Kind == unstable.Comment {
				continue
			}
			n.Content = append(n.Content, b.value(ch, line, col))
		}
	case unstable.InlineTable:
		n.Kind, n.Tag = yaml.MappingNode, "!!map"
		it := v.Children()
		for it.Next() {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				b.keyValue(n, kv)
			}
		}
	default:
		n.Tag, n.Value = "!!str", string(v.Data)
	}
	return n
}
