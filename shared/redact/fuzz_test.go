package redact

import (
	"strings"
	"testing"
)

// FuzzRedact checks the redactor on any text: it never panics, and a
// secret planted in each supported form (name=value, JSON, escaped JSON,
// space-separated unless it reads as a word of prose, a command-line
// option, and a known value) after any text is gone from the result
// (CTX-07, OT-06, OT-10).
func FuzzRedact(f *testing.F) {
	f.Add("ok 42 tests passed", "hunter2x")
	f.Add(`{"password": "hunter2"}`, "fake-secret-123")
	f.Add("AWS_SECRET_ACCESS_KEY fake-secret-123", "abcdefgh")
	f.Add("-----BEGIN PRIVATE KEY-----\nMIIE", "zzzzzzzz")
	f.Add("redis://u:p@h \"token\": '", "tok.en/+=~")
	f.Add(`{\"password\": \"x`, "s3cr3t-value")
	f.Fuzz(func(t *testing.T, text, secret string) {
		_ = String(text)
		_ = New(secret).String(text)
		if len(secret) < MinValueLen || strings.Trim(secret, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~+/=-") != "" {
			return
		}
		forms := []string{
			"password=" + secret,
			`{"password": "` + secret + `"}`,
			`{\"api_key\": \"` + secret + `\"}`,
			"AWS_SECRET_ACCESS_KEY " + secret,
			"--token " + secret,
		}
		for i, form := range forms {
			if i >= 3 && proseRE.MatchString(secret) {
				continue // space-separated, a word of prose is not taken for a secret
			}
			skeleton := strings.ReplaceAll(form, secret, Mask)
			if strings.Contains(skeleton, secret) || strings.Contains(text, secret) {
				continue // the secret is part of the name or the text itself
			}
			in := text + "\n" + form + "\n" + text
			if out := String(in); strings.Contains(out, secret) {
				t.Fatalf("String(%q) = %q keeps the secret", in, out)
			}
		}
		r := New(secret)
		if out := r.String(text + " " + secret + " " + text); strings.Contains(out, secret) && !strings.Contains(Mask, secret) {
			t.Fatalf("Redactor(%q).String kept it: %q", secret, out)
		}
	})
}
