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
