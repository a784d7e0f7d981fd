package agentcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// decodeObject decodes one JSON object into v leniently: unknown fields
// are skipped, and a field of an unexpected type is left unset (reported
// in the returned note) while the rest is kept. ok is false when line is
// not a JSON object at all.
func decodeObject(line []byte, v any) (ok bool, note string) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return false, ""
	}
	err := json.Unmarshal(line, v)
	if err == nil {
		return true, ""
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return true, fmt.Sprintf("field %q has an unexpected type (%s)", te.Field, te.Value)
	}
	return false, ""
}

// missing lists the names whose flag is set, in order.
func missing(pairs ...any) []string {
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1].(bool) {
			out = append(out, pairs[i].(string))
		}
	}
	return out
}

// firstMatch returns the class of the first pattern matching any of texts,
// with the matched text; "" when none matches.
func firstMatch(patterns []classPattern, texts ...string) (Class, string) {
	joined := strings.Join(texts, "\n")
	for _, p := range patterns {
		if m := p.re.FindString(joined); m != "" {
			return p.class, m
		}
	}
	return "", ""
}

// classPattern maps text a CLI prints to a failure class.
type classPattern struct {
	class Class
	re    *regexp.Regexp
}

// shorten caps s for an error or warning message.
func shorten(s string) string {
	s = strings.TrimSpace(s)
	const maxLen = 500
	if len(s) > maxLen {
		return s[:maxLen] + "…"
	}
	return s
}

// lastJSONObject returns the last JSON object in text that starts a line
// (Gemini's json mode writes its error object, pretty-printed, to stderr,
// possibly among other lines), or nil.
func lastJSONObject(text []byte) []byte {
	var found []byte
	for off := 0; off < len(text); {
		rest := text[off:]
		indent := len(rest) - len(bytes.TrimLeft(rest, " \t"))
		if indent < len(rest) && rest[indent] == '{' {
			dec := json.NewDecoder(bytes.NewReader(rest[indent:]))
			var raw json.RawMessage
			if dec.Decode(&raw) == nil {
				found = raw
				off += indent + int(dec.InputOffset())
				continue
			}
		}
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			break
		}
		off += nl + 1
	}
	return found
}

// lines is what the parsers of JSON-lines output share: in json mode the
// output is only kept, to be read whole at the end; otherwise each
// non-blank line is decoded on its own, malformed ones counted and
// oddities noted.
type lines struct {
	json     bool
	buf      bytes.Buffer // the whole output, in json mode
	warnings []string
	bad      int
}

// decode reads line into v, a pointer to the message type, and says
// whether there is a message to handle (not in json mode, not blank, a
// JSON object). kind names the message for a note, with its type.
func (l *lines) decode(line []byte, v any, kind func() string) bool {
	if l.json {
		l.buf.Write(line)
		l.buf.WriteByte('\n')
		return false
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return false
	}
	ok, note := decodeObject(line, v)
	if !ok {
		l.bad++
		return false
	}
	if note != "" {
		l.warnings = append(l.warnings, kind()+": "+note)
	}
	return true
}
