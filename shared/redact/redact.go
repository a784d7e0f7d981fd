// Package redact removes secrets from text before it leaves a runner: the
// logs uploaded to the object store and the output tails in reports. The
// patterns cover CTX-07 (key/secret/password/token assignments, also in
// JSON and space-separated forms, GitHub and OpenAI tokens, private keys)
// and a few more common formats; a Redactor also masks known secret
// values, such as those of the runner's own environment, wherever they
// appear (OT-10).
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces every secret.
const Mask = "[REDACTED]"

type rule struct {
	re *regexp.Regexp
	// keep keeps the first submatch verbatim (the "Bearer " of a header)
	// and masks the rest; false masks the whole match.
	keep bool
	// need are literals one of which every match contains (in the lowered
	// text when fold is set): without any, the pattern is not run. Regular
	// expressions cost far more than a substring search on a long log.
	need []string
	fold bool
}

// may reports whether r's pattern can match s (lower is s in lower case,
// "" when s is not ASCII: case-insensitive patterns match letters such as
// U+017F, whose lower case is not an ASCII letter, so they always run then).
func (r rule) may(s, lower string) bool {
	in := s
	if r.fold {
		if lower == "" && s != "" {
			return true
		}
		in = lower
	}
	for _, n := range r.need {
		if strings.Contains(in, n) {
			return true
		}
	}
	return false
}

// keyRE matches the name and separator of an assignment whose value is
// masked (CTX-07): a name containing api_key, secret, password, passwd,
// token or access_key, in any case, possibly quoted as a JSON or YAML key
// ("password": , \"token\": ), then '=' or ':'. Blanks only ([ \t], not
// \s): an empty value must not reach into the next line. After a quoted
// key only a quoted value is masked, so JSON stays JSON
// ("token_budget": 25000 is a number, not a secret).
var keyRE = regexp.MustCompile(`(?i)(?:api[_-]?key|secret|password|passwd|token|access[_-]?key)[\w-]*(\\?["'])?[ \t]*[=:][ \t]*`)

// spacedKeyRE matches a name and the blanks separating it from its value
// (CTX-07, #12): an environment-style upper-case name containing SECRET,
// PASSWORD, PASSWD, TOKEN, API_KEY, ACCESS_KEY, PRIVATE_KEY or CREDENTIAL
// as a whole part (MAX_TOKENS does not count), as printed by env-dumping
// tools (AWS_SECRET_ACCESS_KEY fake-secret-123), or a command-line option
// such as --password or --api-key followed by its value.
var spacedKeyRE = regexp.MustCompile(`(?:\b[A-Z0-9_]*(?:SECRET|PASSWORD|PASSWD|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)(?:_[A-Z0-9_]*)?|(?i:--[a-z0-9-]*(?:password|passwd|secret|token|api-?key|access-?key)[a-z0-9-]*))[ \t]+`)

// proseRE matches a space-separated "value" that is a word of prose or a
// variable's name, not a secret.
var proseRE = regexp.MustCompile(`^(?:[a-z]+|[A-Z][A-Z0-9]*_[A-Z0-9_]*)[.,;:]?$`)

var rules = []rule{
	// CTX-07: private key blocks, whole.
	{re: regexp.MustCompile(`-----BEGIN ([A-Z]+ )?PRIVATE KEY-----[\s\S]*?(-----END ([A-Z]+ )?PRIVATE KEY-----|$)`), need: []string{"PRIVATE KEY-----"}},
	// CTX-07: GitHub tokens (classic ghp_, and gho_/ghu_/ghs_/ghr_, fine-grained github_pat_).
	{re: regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b`), need: []string{"gh", "github_pat_"}},
	// CTX-07: OpenAI and Anthropic keys (sk-…, sk-proj-…, sk-ant-…).
	{re: regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{20,}\b`), need: []string{"sk-"}},
	// AWS access key ids.
	{re: regexp.MustCompile(`\b(AKIA|ASIA)[A-Z0-9]{16}\b`), need: []string{"AKIA", "ASIA"}},
	// Slack tokens.
	{re: regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}\b`), need: []string{"xox"}},
	// Bearer tokens in headers.
	{re: regexp.MustCompile(`(?i)(authorization:\s*bearer\s+)[A-Za-z0-9._~+/=-]+`), keep: true, need: []string{"authorization:"}, fold: true},
	// Passwords in URLs: scheme://user:password@host.
	{re: regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(@)`), keep: true, need: []string{"://"}},
}

// keyWords are literals one of which, in lower case, every match of keyRE
// and spacedKeyRE contains.
var keyWords = []string{"key", "secret", "passw", "token", "credential"}

// String returns s with every secret its patterns find replaced by Mask.
func String(s string) string {
	lower := asciiLower(s)
	if (rule{need: keyWords, fold: true}).may(s, lower) {
		s = maskValues(s, keyRE, false)
		s = maskValues(s, spacedKeyRE, true)
		lower = asciiLower(s)
	}
	for _, r := range rules {
		if !r.may(s, lower) {
			continue
		}
		if r.keep {
			s = r.re.ReplaceAllStringFunc(s, func(m string) string {
				sub := r.re.FindStringSubmatch(m)
				out := sub[1] + Mask
				if len(sub) > 2 && sub[len(sub)-1] == "@" {
					out += "@"
				}
				return out
			})
			continue
		}
		s = r.re.ReplaceAllString(s, Mask)
	}
	return s
}

// asciiLower is s in lower case, or "" when s holds a byte that is not
// ASCII.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return ""
		}
	}
	return strings.ToLower(s)
}

// Bytes is String for byte slices.
func Bytes(b []byte) []byte { return []byte(String(string(b))) }

// maskValues masks the value after every match of key: a quoted value
// ("…", '…', \"…\") up to its closing quote on the same line, or to the
// line's end when it has none; else the run of characters up to the next
// blank or quote. spaced skips values that begin with '=' or ':' (the
// assignment rule has handled them) or are already masked, and prose: a
// value of lower-case letters only ("OPENAI_API_KEY from the job") or
// another variable's name ("ANTHROPIC_API_KEY OPENAI_API_KEY").
func maskValues(s string, key *regexp.Regexp, spaced bool) string {
	var b strings.Builder
	pos := 0
	for pos < len(s) {
		loc := key.FindStringSubmatchIndex(s[pos:])
		if loc == nil {
			break
		}
		start := pos + loc[1]
		end := valueEnd(s, start)
		v := s[start:end]
		b.WriteString(s[pos:start])
		pos = end
		quotedKey := len(loc) > 2 && loc[2] >= 0
		if v == "" || v == Mask || (quotedKey && !strings.ContainsAny(v[:1], `"'\`)) ||
			(spaced && (strings.HasPrefix(v, "=") || strings.HasPrefix(v, ":") || strings.HasPrefix(v, Mask) || proseRE.MatchString(v))) {
			b.WriteString(v)
			if end == start {
				// Nothing consumed: step on so the scan ends.
				if pos < len(s) {
					b.WriteByte(s[pos])
				}
				pos++
			}
			continue
		}
		b.WriteString(maskQuoted(v))
	}
	if pos < len(s) {
		b.WriteString(s[pos:])
	}
	return b.String()
}

// valueEnd is where the value starting at s[i] ends.
func valueEnd(s string, i int) int {
	line := strings.IndexByte(s[i:], '\n')
	eol := len(s)
	if line >= 0 {
		eol = i + line
	}
	rest := s[i:eol]
	switch {
	case strings.HasPrefix(rest, `\"`):
		if j := strings.Index(rest[2:], `\"`); j >= 0 {
			return i + 2 + j + 2
		}
		return eol
	case strings.HasPrefix(rest, `"`):
		for j := 1; j < len(rest); j++ {
			switch rest[j] {
			case '\\':
				j++
			case '"':
				return i + j + 1
			}
		}
		return eol
	case strings.HasPrefix(rest, `'`):
		if j := strings.IndexByte(rest[1:], '\''); j >= 0 {
			return i + 1 + j + 1
		}
		return eol
	}
	j := strings.IndexAny(rest, " \t\r'\"")
	if j < 0 {
		return eol
	}
	return i + j
}

// maskQuoted masks a value, keeping the quotes around it.
func maskQuoted(v string) string {
	for _, q := range []string{`\"`, `"`, `'`} {
		if strings.HasPrefix(v, q) {
			if len(v) >= 2*len(q) && strings.HasSuffix(v, q) {
				return q + Mask + q
			}
			return q + Mask
		}
	}
	return Mask
}
