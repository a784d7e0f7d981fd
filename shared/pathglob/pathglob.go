// Package pathglob matches repository-relative paths against git-like glob
// patterns (PM-01…PM-06): anchored, case-sensitive, whole
// path. `*` matches within one path segment, `?` one character of a
// segment, `[...]` a character class; `**/` at the start matches any depth,
// a lone `**` everything, `a/**/b` zero or more segments, `a/**` everything
// under a. Gates use it for allowed_writes and cache_inputs.
package pathglob

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Pattern is a compiled glob.
type Pattern struct {
	re  *regexp.Regexp
	src string // the normalized pattern
	lit string // used when the pattern cannot compile (PM-06)
}

// Normalize strips leading "./" and collapses repeated slashes (PM-02).
func Normalize(p string) string {
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	return p
}

// Compile compiles a pattern. It never fails: a pattern whose translation
// does not compile, or that is not valid UTF-8 (which a regular expression
// cannot match byte for byte), matches only itself, literally (PM-06).
func Compile(pattern string) *Pattern {
	p := Normalize(pattern)
	if !utf8.ValidString(p) {
		return &Pattern{lit: p}
	}
	// (?s): "**" matches a newline too, which a file name may hold.
	re, err := regexp.Compile(`(?s)^` + translate(p) + "$")
	if err != nil {
		return &Pattern{lit: p}
	}
	return &Pattern{re: re, src: p}
}

// Match reports whether path matches the pattern.
func (p *Pattern) Match(path string) bool {
	path = Normalize(path)
	if p.re == nil {
		return path == p.lit
	}
	return p.re.MatchString(path)
}

// Match compiles pattern and matches path against it.
func Match(pattern, path string) bool { return Compile(pattern).Match(path) }

// HasMeta reports whether s contains glob syntax.
func HasMeta(s string) bool { return strings.ContainsAny(s, "*?[") }

// translate turns a normalized glob into a regular expression body (PM-03, PM-04).
func translate(p string) string {
	if p == "**" {
		return ".*"
	}
	var b strings.Builder
	i := 0
	if strings.HasPrefix(p, "**/") {
		b.WriteString("(?:.*/)?")
		i = 3
	}
	for i < len(p) {
		c := p[i]
		switch {
		case strings.HasPrefix(p[i:], "/**/"):
			b.WriteString("/(?:.*/)?")
			i += 4
		case strings.HasPrefix(p[i:], "/**") && i+3 == len(p):
			b.WriteString("/.*")
			i += 3
		case strings.HasPrefix(p[i:], "**"):
			// Not on a segment boundary: two single-segment stars.
			b.WriteString("[^/]*")
			i += 2
		case c == '*':
			b.WriteString("[^/]*")
			i++
		case c == '?':
			b.WriteString("[^/]")
			i++
		case c == '[':
			end := strings.IndexByte(p[i+1:], ']')
			if end < 0 {
				b.WriteString(`\[`) // unterminated: literal (PM-03)
				i++
				continue
			}
			class := p[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 2
		default:
			// One whole character: string(c) of a byte would turn each byte
			// of a multi-byte UTF-8 character into a character of its own.
			_, size := utf8.DecodeRuneInString(p[i:])
			b.WriteString(regexp.QuoteMeta(p[i : i+size]))
			i += size
		}
	}
	return b.String()
}
