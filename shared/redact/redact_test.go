package redact

import (
	"strings"
	"testing"
)

// CTX-07: secrets are replaced before logs and output leave the runner.
func TestString(t *testing.T) {
	ghp := "ghp_" + strings.Repeat("a1B2", 9)
	sk := "sk-" + strings.Repeat("x9", 24)
	cases := []struct {
		name, in, want string
	}{
		{"api key assignment", "API_KEY=abc123def", "API_KEY=" + Mask},
		{"password with colon and quotes", `password: "hunter2"`, `password: "` + Mask + `"`},
		{"token in json-ish", `token = 'tok-123'`, `token = '` + Mask + `'`},
		{"github token", "push with " + ghp + " now", "push with " + Mask + " now"},
		{"openai key", "key " + sk, "key " + Mask},
		{"aws key id", "AKIAABCDEFGHIJKLMNOP", Mask},
		{"bearer", "Authorization: Bearer abc.def.ghi", "Authorization: Bearer " + Mask},
		{"url password", "redis://user:s3cret@host:6379/0", "redis://user:" + Mask + "@host:6379/0"},
		{"private key", "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nb", "a\n" + Mask + "\nb"},
		{"empty value does not reach into the next line", "SECRET_KEY=\nnext line\npassword=hunter2", "SECRET_KEY=\nnext line\npassword=" + Mask},
		{"plain text untouched", "ok 42 tests passed in 1.2s", "ok 42 tests passed in 1.2s"},
		{"go test output untouched", "--- FAIL: TestTokenize (0.00s)", "--- FAIL: TestTokenize (0.00s)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := String(c.in); got != c.want {
				t.Fatalf("String(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
