package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// TestCredentials: an agent gets the provider keys its adapter's
// allow-list names, from the worker's secrets file or its environment,
// and nothing else; a key a job carries is dropped; the keys' values are
// scrubbed from the log, the live lines and the result, whatever they
// look like.
func TestCredentials(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	secrets := filepath.Join(t.TempDir(), "secrets.env")
	if err := os.WriteFile(secrets, []byte("# provider keys\nMY_PROVIDER_CRED = \"plainvalue-4242\"\n\nOTHER_CRED=not-allowed-9191\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.startWorker(Config{SecretsFile: secrets, Credentials: map[string][]string{
		"claude-code": {"MY_PROVIDER_CRED", hostProviderKey}, "codex": {"OTHER_CRED"}}})

	job := h.agentJob("creds", 1, "@env MY_PROVIDER_CRED\n@env "+hostProviderKey+"\n@env OTHER_CRED\n@env JOB_KEY_API_KEY\n@env AWS_SECRET_ACCESS_KEY\n")
	job.Command, job.Agent = nil, &protocol.AgentSpec{Adapter: "claude-code"}
	job.Env = map[string]string{"JOB_KEY_API_KEY": "from-the-job-5151"}
	live := h.liveLines(job)
	res := h.run(job)
	if res.Status != protocol.AgentSucceeded {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	log := string(h.logBytes(res.Log))
	var lines []string
	for _, l := range live() {
		lines = append(lines, l.Text)
	}
	everything := strings.Join([]string{log, strings.Join(lines, "\n"), res.Stdout, res.Stderr, res.Run.Text}, "\n")
	for _, want := range []string{"MY_PROVIDER_CRED=[REDACTED]", hostProviderKey + "=[REDACTED]", "OTHER_CRED=\n", "JOB_KEY_API_KEY=\n",
		"dropped JOB_KEY_API_KEY from the job's environment", "credentials: MY_PROVIDER_CRED, " + hostProviderKey} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	for _, secret := range []string{"plainvalue-4242", hostProviderValue, "not-allowed-9191", "from-the-job-5151", hostSecret} {
		if strings.Contains(everything, secret) {
			t.Errorf("%q leaked:\n%s", secret, everything)
		}
	}
}

// TestSecretsFileChecked: a secrets file others may read, or with a line
// that is not KEY=VALUE, stops the worker at start, the line unshown.
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
		_, err := newCredentials(nil, path)
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
	if _, err := newCredentials(map[string][]string{"aider": {"X"}}, ""); err == nil {
		t.Error("an unknown adapter in the allow-list was accepted")
	}
}
