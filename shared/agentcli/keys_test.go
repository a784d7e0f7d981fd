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
