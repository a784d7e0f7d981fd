package redact

import (
	"net/url"
	"sort"
	"strings"
)

// MinValueLen is the shortest known value a Redactor masks literally:
// shorter ones would mask ordinary words.
const MinValueLen = 8

// Redactor masks known secret values wherever they appear, then applies
// String's patterns (OT-10). The nil *Redactor applies the patterns
// only.
type Redactor struct {
	// values are masked longest first, so a value containing another is
	// masked whole.
	values []string
}

// New returns a Redactor masking values; those shorter than MinValueLen
// (after trimming blanks) are dropped, duplicates kept once.
func New(values ...string) *Redactor {
	seen := map[string]bool{}
	r := &Redactor{}
	for _, v := range values {
		v = strings.TrimSpace(v)
		if len(v) < MinValueLen || seen[v] {
			continue
		}
		seen[v] = true
		r.values = append(r.values, v)
	}
	sort.Slice(r.values, func(i, j int) bool { return len(r.values[i]) > len(r.values[j]) })
	return r
}

// String masks r's values in s, then String's patterns.
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, v := range r.values {
			s = strings.ReplaceAll(s, v, Mask)
		}
	}
	return String(s)
}

// Bytes is (*Redactor).String for byte slices.
func (r *Redactor) Bytes(b []byte) []byte { return []byte(r.String(string(b))) }

// Len is how many values r masks.
func (r *Redactor) Len() int {
	if r == nil {
		return 0
	}
	return len(r.values)
}

// secretParts are the words of a variable name (split at '_' and '-',
// any case) that make its value a secret.
var secretParts = map[string]bool{
	"SECRET": true, "SECRETS": true, "PASSWORD": true, "PASSWD": true, "PASSPHRASE": true,
	"PASS": true, "TOKEN": true, "AUTH": true, "COOKIE": true, "CREDENTIAL": true,
	"CREDENTIALS": true, "APIKEY": true, "PAT": true,
}

// SecretName reports whether an environment variable's name says its
// value is a secret: one of its words (split at '_' and '-', any case)
// is SECRET(S), PASSWORD, PASSWD, PASSPHRASE, PASS, TOKEN, AUTH, COOKIE,
// CREDENTIAL(S), APIKEY or PAT, or its last word is KEY (ANTHROPIC_API_KEY,
// AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, REDIS_PASSWORD). Words only:
// GIT_AUTHOR_NAME and MAX_TOKENS are not secrets.
func SecretName(name string) bool {
	parts := strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool { return r == '_' || r == '-' })
	for _, p := range parts {
		if secretParts[p] {
			return true
		}
	}
	return len(parts) > 1 && parts[len(parts)-1] == "KEY"
}

// EnvSecrets returns the secret values of an environment given as
// NAME=VALUE entries (os.Environ()): the values of variables whose names
// say they are secrets (SecretName), and the password of any value that is a URL
// with one (redis://:pw@host, nats://user:pw@host), whatever its
// variable's name. A runner masks them in everything it publishes, so a
// gate or agent printing the runner's environment (or its own, inherited
// copy) leaks none of it (OT-10).
func EnvSecrets(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || val == "" {
			continue
		}
		if SecretName(name) {
			out = append(out, val)
		}
		if strings.Contains(val, "://") {
			if u, err := url.Parse(val); err == nil && u.User != nil {
				if pw, set := u.User.Password(); set {
					out = append(out, pw)
				}
			}
		}
	}
	return out
}
