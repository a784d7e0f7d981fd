package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// smallDataDir is gaterunner-small's data directory, a 16 MiB tmpfs
// (testdata/compose.chaos.yaml).
const smallDataDir = "/var/lib/supervisor/gaterunner"

// diskWorkflow: one task whose gate runs on gaterunner-small (pool small);
// with big, a second, optional gate there writes 64 MiB into the
// workspace, four times what the runner's disk holds.
func diskWorkflow(name, file string, big bool) string {
	w := fmt.Sprintf(`name: %s
`+agentDefaults+`gates:
  - name: on-small
    pool: small
    command: [grep, -qx, %[2]s, %[2]s.txt]
`, name, file)
	if big {
		w += `  - name: big
    pool: small
    severity: warning
    allowed_writes: [big.bin]
    command: [dd, if=/dev/zero, of=big.bin, bs=1M, count=64]
`
	}
	gates := "[on-small]"
	if big {
		gates = "{required: [on-small], optional: [big]}"
	}
	return w + fmt.Sprintf(`tasks:
  - id: write
    gates: %s
    prompt: |
      @write %[2]s.txt
      %[2]s
      @end
`, gates, file)
}

// chaosDiskFull (CHAOS-05) fills gaterunner-small's data directory before
// it has taken a job: the first gate job it takes cannot get the
// repository into its workspace, and the runner hands it back with an
// error saying its disk is full, counting it against no breaker. Once the
// ballast is gone the job runs there. Then a gate that writes four times
// the disk fails with the file system's error in its output, and the
// runner, which never restarted, runs a later job.
func chaosDiskFull(t *testing.T, c *composeFleet) {
	id := c.one(t, "gaterunner-small")
	host := c.docker(t, "inspect", "--format", "{{.Config.Hostname}}", id)
	// Restarts before this point (none expected: a runner waits for its
	// NATS and state store) are not the disk's doing.
	startedAt := c.docker(t, "inspect", "--format", "{{.State.StartedAt}} {{.RestartCount}}", id)
	waitFor(t, 2*time.Minute, "gaterunner-small to pull jobs", func() bool {
		r := c.run(time.Minute, "docker", "logs", id)
		return strings.Contains(r.stdout+r.stderr, "pulling jobs")
	})
	ballast := smallDataDir + "/ballast"
	fill := c.run(time.Minute, "docker", "exec", id, "dd", "if=/dev/zero", "of="+ballast, "bs=1M", "count=64")
	if !strings.Contains(fill.stderr, "No space left on device") {
		t.Fatalf("filling %s: exit %d, want dd to run out of space:\n%s", smallDataDir, fill.code, fill.stderr)
	}
	t.Logf("filled gaterunner-small's %s: %s", smallDataDir, c.docker(t, "exec", id, "df", "-h", smallDataDir))

	repo, base := testkit.Repo(t, map[string]string{"README.md": "base readme\n"})
	wf := submit(t, c, writeFile(t, t.TempDir(), "disk.yaml", diskWorkflow("chaos-disk", "small", false)), repo)
	var handedBack map[string]any
	waitFor(t, 3*time.Minute, "gaterunner-small to hand the job back for want of space", func() bool {
		l := c.logLines(t, id, "no space left in the runner's data directory; handing the job back")
		if len(l) > 0 {
			handedBack = l[0]
		}
		return handedBack != nil
	})
	t.Logf("gaterunner-small handed the job back: %v", handedBack["err"])
	if msg, _ := handedBack["err"].(string); !strings.Contains(msg, "disk is full") || !strings.Contains(strings.ToLower(msg), "no space left on device") {
		t.Errorf("the hand-back's error %q does not say the disk is full", msg)
	}
	c.docker(t, "exec", id, "rm", "-f", ballast)
	freed := time.Now()

	r := c.cli(3*time.Minute, "watch", wf, "--repo", repo, "--timeout", "2m")
	if r.code != 0 {
		t.Fatalf("watch %s did not succeed:\n%s", wf, r)
	}
	s, _ := c.status(wf)
	if g := s.node(t, "write").gate(t, "on-small"); g.Status != "passed" || g.Host != host {
		t.Errorf("gate on-small: %s on %q, want passed on gaterunner-small (%s)", g.Status, g.Host, host)
	}
	if got := branchChanges(t, repo, base, "supervisor/"+wf); !equalStrings(got, []string{"A\tsmall.txt"}) {
		t.Errorf("branch changes %v, want small.txt once", got)
	}
	if res := c.cli(time.Minute, "breakers", "-o", "json"); res.code != 0 || strings.Contains(res.stdout, `"open"`) {
		t.Errorf("breakers after the disk-full hand-back: exit %d\n%s", res.code, res.stdout)
	}
	t.Logf("the job ran on gaterunner-small %s after the space was freed", time.Since(freed).Round(time.Millisecond))

	// A gate writing more than fits fails on the file system's error; the
	// runner cleans its workspace and takes the next job.
	repo2, _ := testkit.Repo(t, map[string]string{"README.md": "base readme\n"})
	wf2 := submitWait(t, c, 3*time.Minute, writeFile(t, t.TempDir(), "big.yaml", diskWorkflow("chaos-disk-big", "big", true)), repo2)
	bigGate := c.statusNode(t, wf2, "write").gate(t, "big")
	if bigGate.Status != "failed" || bigGate.Host != host || !strings.Contains(bigGate.Output, "No space left on device") {
		t.Errorf("gate big: %s on %q, output %q; want failed on gaterunner-small, on the file system's error", bigGate.Status, bigGate.Host, bigGate.Output)
	}
	repo3, _ := testkit.Repo(t, map[string]string{"README.md": "base readme\n"})
	wf3 := submitWait(t, c, 3*time.Minute, writeFile(t, t.TempDir(), "after.yaml", diskWorkflow("chaos-disk-after", "after", false)), repo3)
	if g := c.statusNode(t, wf3, "write").gate(t, "on-small"); g.Status != "passed" || g.Host != host {
		t.Errorf("gate on-small after the big write: %s on %q, want passed on gaterunner-small", g.Status, g.Host)
	}
	if now := c.docker(t, "inspect", "--format", "{{.State.StartedAt}} {{.RestartCount}}", id); now != startedAt {
		t.Errorf("gaterunner-small restarted: started at %s (restarts), was %s", now, startedAt)
	}
	t.Logf("MEASURED disk full: handed back with %q; job done on the same runner after the space was freed; a gate writing 64 MiB on a 16 MiB disk failed with the file system's error; the runner ran the next job without restarting; %s",
		handedBack["err"], c.docker(t, "exec", id, "df", "-h", smallDataDir))
}

// statusNode returns a node of a workflow's status.
func (c *composeFleet) statusNode(t *testing.T, wf, node string) nodeStatus {
	t.Helper()
	s, _ := c.status(wf)
	return s.node(t, node)
}
