package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Circuit breakers through the CLI, on an in-process fleet whose policy
// opens a breaker on one failure (CB-03, HITL-09): an agent that fails its
// first attempt opens its breaker, so its retry waits, unrun, and status
// says so; breakers lists the open breaker, reset closes it (a second
// reset finds nothing), and the held retry then runs and succeeds.
func TestBreakersListAndReset(t *testing.T) {
	policy := state.BreakerPolicy{Failures: 1, Window: time.Minute, CoolDown: 8 * time.Second}
	run := cliFleet(t, fleet.Options{Breakers: policy})

	wantCode(t, run("breakers"), 0, "no circuit breaker has anything on record", "1 failures within 1m0s", "8s later one job probes")

	// The agent fails without feedback (its first attempt: printenv exits
	// 1 for a variable that is not set) and succeeds with it (a retry).
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "breakers\n"})
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	testkit.WriteFile(t, wf, `name: breakers
defaults:
  agent: {command: [printenv, SUPERVISOR_FEEDBACK_FILE]}
  allow_empty: true
tasks:
  - {id: a, prompt: a, gates: []}
`)
	r := run("submit", wf, "--repo", repo)
	wantCode(t, r, 0)
	id := strings.Fields(r.stdout)[0]

	var node api.NodeSummary
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the retry to wait on the agent's breaker", func() bool {
		var s api.WorkflowSummary
		r := run("status", id, "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || len(s.Nodes) != 1 {
			return false
		}
		node = s.Nodes[0]
		return node.Waiting != nil
	})
	if node.Waiting.Scope != "agent:printenv" || node.Attempt != 2 || node.Waiting.Host != "dev" {
		t.Fatalf("node %+v waiting %+v, want attempt 2 held on agent:printenv", node, node.Waiting)
	}
	wantCode(t, run("status", id), ExitRunning, "waiting on breaker agent:printenv until "+node.Waiting.Until.Local().Format(time.TimeOnly))

	r = run("breakers", "-o", "json")
	wantCode(t, r, 0)
	var resp api.BreakersResponse
	decodeJSON(t, r, &resp)
	if resp.Policy != (api.BreakerPolicy{Failures: 1, WindowSeconds: 60, CoolDownSeconds: 8}) || len(resp.Breakers) != 1 {
		t.Fatalf("breakers: %+v", resp)
	}
	b := resp.Breakers[0]
	if b.Scope != "agent:printenv" || b.State != "open" || b.OpenedAt == nil || b.Until == nil ||
		!b.Until.Equal(b.OpenedAt.Add(policy.CoolDown)) || !b.Until.Equal(node.Waiting.Until) {
		t.Fatalf("breaker %+v, want agent:printenv open until the cool-down's end", b)
	}
	wantCode(t, run("breakers"), 0, "SCOPE", "STATE", "FAILURES", "agent:printenv", "open", b.OpenedAt.Local().Format(time.TimeOnly))

	wantCode(t, run("breakers", "reset", "agent:printenv", "--as", "ada"), 0, "agent:printenv: closed (was open since "+b.OpenedAt.Local().Format(time.TimeOnly)+")")
	wantCode(t, run("breakers"), 0, "no circuit breaker has anything on record")
	wantCode(t, run("breakers", "reset", "agent:printenv"), ExitFault, `no circuit breaker "agent:printenv" has anything on record`)
	wantCode(t, run("breakers", "reset"), ExitUsage)

	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the held retry to run and succeed", func() bool {
		return run("status", id).code == ExitOK
	})
	wantCode(t, run("breakers"), 0, "no circuit breaker has anything on record")
}
