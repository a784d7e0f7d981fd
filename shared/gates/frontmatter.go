package gates

import (
	"strings"
)

// Task-level gates: a
// task's prompt (context) may start with YAML front matter,
//
//	---
//	gates:
//	  - name: integration-tests
//	    command: [npm, run, test:integration]
//	    timeout_secs: 900
//	---
//	Implement the new caching layer…
//
// The front matter runs from a first line of exactly "---" (a CR before
// its newline ignored) to the next line of exactly "---" (trailing blanks
// and a CR ignored); its only key is
// gates, in either shape of a gates section; the text after the closing
// line is the prompt. Text that does not start with a "---" line has no
// front matter. Front matter that is not closed, not valid YAML or not a
// mapping is an error, not prompt text (D-32).

// isDelimiter reports whether a line (without its newline) is "---".
func isDelimiter(line string) bool {
	return strings.TrimRight(line, " \t\r") == "---"
}

// FrontMatter splits text (at c's position) into its front matter gates
// and the rest. found reports whether text has front matter; problems are
// recorded in c. Names must be unique within the front matter.
func (c *Checker) FrontMatter(text string, o ParseOptions) (gates []Gate, rest string, found bool) {
	first, after, hasNL := strings.Cut(text, "\n")
	if !hasNL || strings.TrimSuffix(first, "\r") != "---" {
		return nil, text, false
	}
	body, rest := "", ""
	closed := false
	off := 0
	for off <= len(after) {
		line, next, more := strings.Cut(after[off:], "\n")
		if isDelimiter(line) {
			body = after[:off]
			if more {
				rest = next
			}
			closed = true
			break
		}
		if !more {
			break
		}
		off += len(line) + 1
	}
	if !closed {
		l, col := c.mapPos(1, 1)
		c.Problems = append(c.Problems, Problem{File: c.File, Line: l, Column: col,
			Message: "front matter opened by '---' is not closed by a '---' line"})
		return nil, text, true
	}
	sub := c.Sub(2, 1)
	root := sub.Decode([]byte(body))
	if root != nil {
		if f, ok := sub.Fields(root, "front matter", "gates"); ok {
			if x, ok := f["gates"]; ok {
				gates = sub.GateList(x.Val, "front matter gates", o)
			}
		}
	}
	c.Adopt(sub)
	return gates, rest, true
}
