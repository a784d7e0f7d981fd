package agentcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretsFileChecked: a secrets file others may read, or with a line
// that is not KEY=VALUE, is refused when the keys are loaded (a runner then stops at start), the line unshown.
func TestSecretsFileChecked(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		body string
		mode os.FileMode
		want string
	}{
		{"A_KEY=v\n", 0o644, "mode 0644 lets others read it"},
		{"A_KEY=v\nsk-ant-the-secret-itself\n", 0o600, "secrets.env:2: want KEY=VALUE"},
		{"A_KEY=v\nA_KEY=w\n", 0o600, "A_KEY is set twice"},
	} {
		path := filepath.Join(dir, "secrets.env")
		if err := os.WriteFile(path, []byte(c.body), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, c.mode); err != nil {
			t.Fatal(err)
		}
		_, err := NewKeys(nil, path)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "the-secret-itself") {
			t.Errorf("%q (mode %o): %v, want an error with %q", c.body, c.mode, err, c.want)
		}
	}
	path := filepath.Join(dir, "good.env")
	if err := os.WriteFile(path, []byte("# keys\nA_KEY = \"quoted value\"\nB_KEY='single'\nC_KEY=plain=with=equals\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readSecrets(path)
	if err != nil || got["A_KEY"] != "quoted value" || got["B_KEY"] != "single" || got["C_KEY"] != "plain=with=equals" || len(got) != 3 {
		t.Errorf("readSecrets = %q, %v", got, err)
	}
	if _, err := NewKeys(map[string][]string{"aider": {"X"}}, ""); err == nil {
		t.Error("an unknown adapter in the allow-list was accepted")
	}
}

// OT-10 (#12): Scrub masks the runner's own secret-named environment
// variables and its secrets file's values by value, even those no
// adapter's allow-list names, and leaves other variables' values alone;
// the nil Keys still applies redact's patterns.
func TestScrubMasksRunnerEnvironment(t *testing.T) {
	t.Setenv("SUP_TEST_DEPLOY_TOKEN", "deploy-token-31337")
	t.Setenv("SUP_TEST_PLAIN_SETTING", "plain-setting-value")
	path := filepath.Join(t.TempDir(), "secrets.env")
	if err := os.WriteFile(path, []byte("UNLISTED_THING=file-secret-2718\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := NewKeys(map[string][]string{"codex": {"OPENAI_API_KEY"}}, path)
	if err != nil {
		t.Fatal(err)
	}
	got := k.Scrub("a deploy-token-31337 b file-secret-2718 c plain-setting-value")
	if want := "a [REDACTED] b [REDACTED] c plain-setting-value"; got != want {
		t.Fatalf("Scrub = %q, want %q", got, want)
	}
	var none *Keys
	if got := none.Scrub("token=abc deploy-token-31337"); got != "token=[REDACTED] deploy-token-31337" {
		t.Fatalf("nil Keys: Scrub = %q", got)
	}
}
