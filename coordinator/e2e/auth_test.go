package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// authWorkflow: one task whose gate checks its work, and one that waits
// for an operator's approval.
const authWorkflow = `name: auth
` + agentDefaults + `gates:
  - name: written
    command: [test, -f, notes.txt]
tasks:
  - id: write
    gates: [written]
    prompt: "@write notes.txt\nnotes\n@end\n"
  - id: sign
    depends_on: [write]
    gates: []
    approval: required
    prompt: "@write signed.txt\nsigned\n@end\n"
`

// TestAuthFleetEndToEnd runs a workflow on a fleet of separate processes
// with NATS authorization on, each process with its own role's key from
// `coordinator creds init`: the workflow completes, the cli role submits,
// watches and reads logs but may not approve, the operator approves, and
// nats-server denied nothing the fleet needed. Anonymous clients and
// runners with the wrong keys are refused at start, saying why (AUTH-02,
// AUTH-03, AUTH-04, AUTH-09).
func TestAuthFleetEndToEnd(t *testing.T) {
	t.Parallel()
	f := newAuthFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1")
	f.gaterunner("gate-1")

	repo, base := testkit.Repo(t, map[string]string{"README.md": "auth\n"})
	wfFile := writeFile(t, t.TempDir(), "auth.yaml", authWorkflow)
	wf := submit(t, f, wfFile, repo)
	f.waitNode(wf, "sign", "awaiting_approval", 2*time.Minute)
	if r := f.cli(30*time.Second, "logs", wf, "write"); r.code != 0 || !strings.Contains(r.stdout, "agent") {
		t.Fatalf("cli logs: %s", r)
	}
	if r := f.cli(30*time.Second, "inbox"); r.code != 0 || !strings.Contains(r.stdout, "sign") {
		t.Fatalf("cli inbox: %s", r)
	}
	// The nats-server log says which subject any role was denied; until
	// the deliberate denial below, there must be none.
	natsLog := filepath.Join(f.dir, "logs", "nats-server.log")
	if text := string(testkit.ReadFile(t, natsLog)); strings.Contains(text, "Violation") {
		t.Fatalf("nats-server denied the fleet something it needs:\n%s", text)
	}
	cliKey := filepath.Join(f.creds, "cli.nk")
	r := f.cli(30*time.Second, "approve", wf, "sign", "--as", "e2e", "--nats-nkey", cliKey)
	if r.code != 77 || !strings.Contains(r.stderr, `"sup.api.approve"`) || !strings.Contains(r.stderr, "the cli role lacks it") {
		t.Fatalf("the cli role approving: want exit 77 naming the subject and role\n%s", r)
	}
	f.decide("approve", wf, "sign", "e2e-operator")
	f.waitStatus(wf, "succeeded", 2*time.Minute)
	changes := branchChanges(t, repo, base, "supervisor/"+wf)
	if !equalStrings(changes, []string{"A\tnotes.txt", "A\tsigned.txt"}) {
		t.Fatalf("branch changes %v, want notes.txt and signed.txt", changes)
	}

	// Anonymous: the CLI is refused, with exit 77 and how to fix it.
	anon := runCLI(t, f.dir, f.natsURL, 30*time.Second, "status")
	if anon.code != 77 || !strings.Contains(anon.stderr, "requires credentials") || !strings.Contains(anon.stderr, "--nats-nkey") {
		t.Fatalf("anonymous status: want exit 77 saying credentials are required\n%s", anon)
	}
	// A runner with another set's key, or another role's, fails at start
	// (it does not retry) and says what it lacked.
	other := filepath.Join(t.TempDir(), "other")
	if r := runCLI(t, f.dir, "", time.Minute, "creds", "init", other); r.code != 0 {
		t.Fatalf("creds init: %s", r)
	}
	for _, c := range []struct{ name, key, says string }{
		{"worker-stranger", filepath.Join(other, "worker.nk"), "NATS refused the worker role"},
		{"worker-as-cli", filepath.Join(f.creds, "cli.nk"), "holds the cli role's key"},
	} {
		p := f.start(c.name, "worker", "--nats", f.natsURL, "--nats-nkey", c.key, "--data-dir", filepath.Join(f.dir, "data", c.name),
			"--sandbox", "process")
		if err := p.wait(t, time.Minute); err == nil {
			t.Fatalf("%s started", c.name)
		}
		if !strings.Contains(p.logText(), c.says) {
			t.Fatalf("%s's log does not say %q:\n%s", c.name, c.says, p.logText())
		}
	}
}
