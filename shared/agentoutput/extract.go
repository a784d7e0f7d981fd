package agentoutput

import (
	"encoding/json"
	"strings"
)

// Extract returns the JSON block an agent's final message ends with
// (OUT-09). The rule:
//
//  1. If the message has fenced code blocks (``` or ~~~, CommonMark's
//     rules: up to three spaces of indent, closed by a fence of the same
//     character at least as long) labelled json, or unlabelled ones whose
//     content starts with '{', the last of them is the block. An
//     unclosed fence runs to the end of the message.
//  2. Otherwise the block is the last balanced top-level {...} of the
//     message that is valid JSON (braces inside JSON strings do not
//     count; an object nested in another {...} is not top-level).
//
// A fenced block wins over any bare object, wherever they stand: a fence
// is what the instructions ask for, and prose after it may quote JSON.
// Extract returns ErrNoBlock when the message has neither, and an
// *InvalidError (with an empty Schema) when the chosen fenced block is
// not valid JSON. The block is returned compacted.
func Extract(text string) (json.RawMessage, error) {
	if block, ok := lastFence(text); ok {
		if !json.Valid([]byte(block)) {
			var v any
			err := json.Unmarshal([]byte(block), &v)
			msg := "the fenced json block is not valid JSON"
			if err != nil {
				msg += ": " + err.Error()
			}
			return nil, &InvalidError{Violations: []Violation{{Message: msg}}}
		}
		return compact([]byte(block)), nil
	}
	if block, ok := lastObject(text); ok {
		return compact([]byte(block)), nil
	}
	return nil, ErrNoBlock
}

// lastFence returns the content of the last fenced block that holds JSON.
func lastFence(text string) (string, bool) {
	lines := strings.SplitAfter(text, "\n")
	var (
		found    string
		ok       bool
		open     bool
		char     byte
		n        int
		keep     bool // a json or unlabelled fence
		labelled bool // a json fence
		content  strings.Builder
	)
	take := func() {
		s := strings.TrimSpace(content.String())
		if keep && s != "" && (labelled || strings.HasPrefix(s, "{")) {
			found, ok = s, true
		}
	}
	for _, raw := range lines {
		line := strings.TrimRight(raw, "\r\n")
		c, length, info, isFence := fenceLine(line)
		switch {
		case !open && isFence:
			open, char, n = true, c, length
			labelled = strings.EqualFold(strings.Fields(info + " x")[0], "json")
			keep = labelled || info == ""
			content.Reset()
		case open && isFence && c == char && length >= n && strings.TrimSpace(info) == "":
			open = false
			take()
		case open:
			content.WriteString(raw)
		}
	}
	if open {
		take()
	}
	return found, ok
}

// fenceLine reports whether line opens or closes a fenced code block, with
// its character, length and info string.
func fenceLine(line string) (c byte, n int, info string, ok bool) {
	indent := 0
	for indent < len(line) && line[indent] == ' ' {
		indent++
	}
	if indent > 3 || indent == len(line) {
		return 0, 0, "", false
	}
	c = line[indent]
	if c != '`' && c != '~' {
		return 0, 0, "", false
	}
	for n = 0; indent+n < len(line) && line[indent+n] == c; n++ {
	}
	if n < 3 {
		return 0, 0, "", false
	}
	info = strings.TrimSpace(line[indent+n:])
	if c == '`' && strings.Contains(info, "`") {
		return 0, 0, "", false
	}
	return c, n, info, true
}

// lastObject returns the last balanced top-level {...} of text that is
// valid JSON.
func lastObject(text string) (string, bool) {
	var (
		found           string
		ok              bool
		depth, start    int
		inString, escap bool
	)
	for i := 0; i < len(text); i++ {
		ch := text[i]
		if depth == 0 {
			if ch == '{' {
				depth, start, inString, escap = 1, i, false, false
			}
			continue
		}
		switch {
		case escap:
			escap = false
		case inString && ch == '\\':
			escap = true
		case ch == '"':
			inString = !inString
		case inString:
		case ch == '{':
			depth++
		case ch == '}':
			depth--
			if depth == 0 {
				if cand := text[start : i+1]; json.Valid([]byte(cand)) {
					found, ok = cand, true
				}
			}
		}
	}
	return found, ok
}
