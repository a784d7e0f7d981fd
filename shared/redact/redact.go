// Package redact removes secrets from text before it leaves a runner: the
// logs uploaded to the object store and the output tails in reports. The
// patterns cover CTX-07 (key/secret/password/token assignments,
// GitHub and OpenAI tokens, private keys) and a few more common formats.
package redact

import "regexp"

// Mask replaces every secret.
const Mask = "[REDACTED]"

type rule struct {
	re *regexp.Regexp
	// keep keeps the first submatch verbatim (the "password=" part of an
	// assignment) and masks the rest; false masks the whole match.
	keep bool
}

var rules = []rule{
	// CTX-07: name = value assignments of keys, secrets, passwords, tokens.
	// Blanks only ([ \t], not \s): an empty value must not reach into the next line.
	{regexp.MustCompile(`(?i)((?:api[_-]?key|secret|password|passwd|token|access[_-]?key)[\w-]*[ \t]*[=:][ \t]*['"]?)[^\s'"]+`), true},
	// CTX-07: private key blocks, whole.
	{regexp.MustCompile(`-----BEGIN ([A-Z]+ )?PRIVATE KEY-----[\s\S]*?(-----END ([A-Z]+ )?PRIVATE KEY-----|$)`), false},
	// CTX-07: GitHub tokens (classic ghp_, and gho_/ghu_/ghs_/ghr_, fine-grained github_pat_).
	{regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b`), false},
	// CTX-07: OpenAI and Anthropic keys (sk-…, sk-proj-…, sk-ant-…).
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{20,}\b`), false},
	// AWS access key ids.
	{regexp.MustCompile(`\b(AKIA|ASIA)[A-Z0-9]{16}\b`), false},
	// Slack tokens.
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}\b`), false},
	// Bearer tokens in headers.
	{regexp.MustCompile(`(?i)(authorization:\s*bearer\s+)[A-Za-z0-9._~+/=-]+`), true},
	// Passwords in URLs: scheme://user:password@host.
	{regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(@)`), true},
}

// String returns s with every secret replaced by Mask.
func String(s string) string {
	for _, r := range rules {
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

// Bytes is String for byte slices.
func Bytes(b []byte) []byte { return []byte(String(string(b))) }
