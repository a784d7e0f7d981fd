package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TRUST-CONFIG through the CLI, on an in-process fleet (embedded NATS, the
// coordinator, a real worker and gate runner, git): an agent's patch that
// rewrites .supervisor/gates.yaml is not integrated though its gates
// pass; the node escalates naming the file, approve without
// --accept-config is refused saying why, and approve --accept-config lands
// the change on the workflow's branch.
func TestTrustedConfigApproval(t *testing.T) {
	run := cliFleet(t, fleet.Options{})
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "gates: []\n# the agent's\n", ".supervisor/gates.yaml": "gates: []\n"})
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	testkit.WriteFile(t, wf, `name: trusted
defaults:
  agent: {command: [cp, README.md, .supervisor/gates.yaml]}
gates:
  - {name: ok, command: ["true"]}
tasks:
  - {id: a, prompt: a, gates: [ok]}
`)
	r := run("submit", wf, "--repo", repo, "--wait")
	wantCode(t, r, ExitNeedsAttention,
		"integrity violation: the patch changes Supervisor's trusted configuration (.supervisor/gates.yaml)")
	id := strings.Fields(r.stdout)[0]

	wantCode(t, run("approve", id, "a", "--as", "ada"), ExitFault, "needs --accept-config", ".supervisor/gates.yaml")
	wantCode(t, run("approve", id, "a", "--as", "ada", "--accept-config"), 0, "succeeded")
	wantCode(t, run("watch", id, "--repo", repo), 0)
	if got := testkit.Git(t, repo, "show", "supervisor/"+id+":.supervisor/gates.yaml"); !strings.Contains(got, "the agent's") {
		t.Fatalf("the accepted change is not on the branch: %q", got)
	}
}
