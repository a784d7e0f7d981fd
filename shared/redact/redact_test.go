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
		// The literal pre-checks skip no match: a key in upper case, a
		// case-insensitive match through a letter that is not ASCII
		// (U+017F folds to s), a bearer header in any case.
		{"upper-case key word", "MY_TOKEN: t0k3n-value", "MY_TOKEN: " + Mask},
		{"non-ASCII fold", "\u017fecret=abc123def", "\u017fecret=" + Mask},
		{"bearer in upper case", "AUTHORIZATION: BEARER abc.def", "AUTHORIZATION: BEARER " + Mask},
		{"private key", "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nb", "a\n" + Mask + "\nb"},
		{"empty value does not reach into the next line", "SECRET_KEY=\nnext line\npassword=hunter2", "SECRET_KEY=\nnext line\npassword=" + Mask},
		// #12: JSON and space-separated forms.
		{"json", `{"password": "hunter2"}`, `{"password": "` + Mask + `"}`},
		{"json with a blank in the value", `{"user": "a", "client_secret":"two words", "n": 1}`, `{"user": "a", "client_secret":"` + Mask + `", "n": 1}`},
		{"json escaped quote inside", `{"token": "a\"b c"}`, `{"token": "` + Mask + `"}`},
		{"json inside a json string", `{"msg": "{\"password\": \"hunter2\"}"}`, `{"msg": "{\"password\": \"` + Mask + `\"}"}`},
		{"json unclosed quote masks to the end of the line", "\"api_key\": \"abc def\nnext", "\"api_key\": \"" + Mask + "\nnext"},
		{"space separated", "AWS_SECRET_ACCESS_KEY fake-secret-123", "AWS_SECRET_ACCESS_KEY " + Mask},
		{"tab separated in env output", "GITHUB_TOKEN\tabc123\nHOME\t/root", "GITHUB_TOKEN\t" + Mask + "\nHOME\t/root"},
		{"space separated quoted", `DB_PASSWORD "x y z" ok`, `DB_PASSWORD "` + Mask + `" ok`},
		{"command-line option", "login --password hunter2 --user bob", "login --password " + Mask + " --user bob"},
		{"assignment not masked twice", "SECRET_KEY = abc", "SECRET_KEY = " + Mask},
		{"plural counts are not secrets", "MAX_TOKENS 4096", "MAX_TOKENS 4096"},
		{"a variable named in prose", "dropped OPENAI_API_KEY from the job's environment", "dropped OPENAI_API_KEY from the job's environment"},
		{"variables listed", "keys: ANTHROPIC_API_KEY OPENAI_API_KEY GEMINI_API_KEY.", "keys: ANTHROPIC_API_KEY OPENAI_API_KEY GEMINI_API_KEY."},
		{"json numbers stay json", `{"token_budget": 25000, "max_tokens":null, "password": "x"}`, `{"token_budget": 25000, "max_tokens":null, "password": "` + Mask + `"}`},
		{"unquoted yaml key still masked", "api_key: abc123", "api_key: " + Mask},
		{"prose untouched", "the token is invalid", "the token is invalid"},
		{"already redacted stays", "password=" + Mask, "password=" + Mask},
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

// OT-10 (#12): a Redactor masks known values wherever they appear,
// longest first, and still applies the patterns; values shorter than
// MinValueLen are not masked, and the nil Redactor applies the patterns
// only.
func TestRedactorValues(t *testing.T) {
	r := New("fake-secret-123", "fake-secret-123-longer", "short", "  ")
	if r.Len() != 2 {
		t.Fatalf("Len = %d, want 2 (short and blank values dropped)", r.Len())
	}
	in := "got fake-secret-123-longer and fake-secret-123; short stays; password=x1"
	want := "got " + Mask + " and " + Mask + "; short stays; password=" + Mask
	if got := r.String(in); got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	if got := string(r.Bytes([]byte("x fake-secret-123"))); got != "x "+Mask {
		t.Fatalf("Bytes = %q", got)
	}
	var none *Redactor
	if got := none.String("fake-secret-123 token=abc"); got != "fake-secret-123 token="+Mask {
		t.Fatalf("nil Redactor = %q", got)
	}
}

// OT-10 (#12): the runner's environment gives the values of variables
// whose names say they are secrets, and passwords inside URLs; ordinary
// variables (paths, author names, token counts) are left alone.
func TestEnvSecrets(t *testing.T) {
	env := []string{
		"AWS_SECRET_ACCESS_KEY=fake-secret-123",
		"ANTHROPIC_API_KEY=sk-ant-zzzzzzzz",
		"github_token=ghtok-12345678",
		"SUP_REDIS_URL=redis://:redis-pw-9876@localhost:6379/0",
		"DB_PASSWORD=",
		"HOME=/home/runner",
		"GIT_AUTHOR_NAME=Supervisor Bot",
		"MAX_TOKENS=4096000000",
		"PATH=/usr/local/bin:/usr/bin",
		"malformed",
	}
	got := EnvSecrets(env)
	want := []string{"fake-secret-123", "sk-ant-zzzzzzzz", "ghtok-12345678", "redis-pw-9876"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("EnvSecrets = %q, want %q", got, want)
	}
	r := New(got...)
	out := r.String("env dump: fake-secret-123 redis-pw-9876 /home/runner Supervisor Bot")
	if strings.Contains(out, "fake-secret-123") || strings.Contains(out, "redis-pw-9876") ||
		!strings.Contains(out, "/home/runner") || !strings.Contains(out, "Supervisor Bot") {
		t.Fatalf("masked %q", out)
	}
}
