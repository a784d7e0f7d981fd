package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// agentCommand is the scripted stand-in for Claude Code, as a workflow
// YAML flow list.
const agentCommand = "[supervisor-test-agent, -p, --output-format, json]"

// agentDefaults is the defaults section of most of the tests' workflows:
// the scripted test agent, with two minutes a task.
const agentDefaults = `defaults:
  agent:
    command: ` + agentCommand + `
  timeout: 2m
`

// fleetWorkflow: four tasks in parallel (each sleeps so that two workers
// with one slot each must share them), and one that depends on all four.
// Gates have dependencies of their own, and the last task's gate checks
// that its workspace holds every dependency's work.
const fleetWorkflow = `name: fleet
` + agentDefaults + `gates:
  - name: exists
    command: [test, -f, README.md]
    timeout: 1m
  - name: readme
    command: [grep, -q, "^base readme", README.md]
    depends_on: [exists]
  - name: settle
    command: [sleep, "0.5"]
  - name: parts
    command: [cat, part-1.txt, part-2.txt, part-3.txt, part-4.txt]
    depends_on: [exists]
tasks:
%s  - id: combine
    depends_on: [part-1, part-2, part-3, part-4]
    gates: [parts]
    prompt: |
      Combine the four parts and say so in the README.
      @print combine-was-here
      @append README.md
      all four parts are in
      @end
      @write combined.txt
      one two three four
      @end
`

const fleetPart = `  - id: part-%d
    gates: [readme, settle]
    prompt: |
      Write part %d.
      @sleep 1500ms
      @write part-%d.txt
      part %d
      @end
`

// TestFleetEndToEnd runs a workflow on a fleet of separate processes:
// nats-server, redis-server, coordinator serve, two workers and two gate
// runners, and checks the branch it produces commit by commit, the status
// the CLI reports, the spread of jobs over the runners and the logs.
func TestFleetEndToEnd(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	workers := []string{"worker-1", "worker-2"}
	gaters := []string{"gate-1", "gate-2"}
	for _, w := range workers {
		f.worker(w, "--concurrency", "1")
	}
	for _, g := range gaters {
		f.gaterunner(g, "--concurrency", "1")
	}
	repo, base := testkit.Repo(t, map[string]string{"README.md": "base readme\n", "keep.txt": "untouched\n"})

	var parts strings.Builder
	for i := 1; i <= 4; i++ {
		fmt.Fprintf(&parts, fleetPart, i, i, i, i)
	}
	wfFile := writeFile(t, t.TempDir(), "fleet.yaml", fmt.Sprintf(fleetWorkflow, parts.String()))

	started := time.Now()
	wf := submitWait(t, f, 3*time.Minute, wfFile, repo)
	t.Logf("workflow %s succeeded in %s", wf, time.Since(started).Round(time.Millisecond))
	branch := "supervisor/" + wf

	// The branch holds exactly the tasks' changes.
	wantChanges := []string{"A\tcombined.txt", "A\tpart-1.txt", "A\tpart-2.txt", "A\tpart-3.txt", "A\tpart-4.txt", "M\tREADME.md"}
	sort.Strings(wantChanges)
	if got := branchChanges(t, repo, base, branch); !equalStrings(got, wantChanges) {
		t.Errorf("git diff --name-status %s..%s =\n%s\nwant\n%s", base[:12], branch, strings.Join(got, "\n"), strings.Join(wantChanges, "\n"))
	}
	wantFiles := map[string]string{
		"README.md":    "base readme\nall four parts are in\n",
		"combined.txt": "one two three four\n",
		"keep.txt":     "untouched\n",
	}
	for i := 1; i <= 4; i++ {
		wantFiles[fmt.Sprintf("part-%d.txt", i)] = fmt.Sprintf("part %d\n", i)
	}
	for path, want := range wantFiles {
		if got := fileAt(t, repo, branch, path); got != want {
			t.Errorf("%s on %s = %q, want %q", path, branch, got, want)
		}
	}

	// One commit per task, in DAG order: the four parts (in whatever order
	// they were accepted), then combine; each changes only its task's files.
	commits := branchCommits(t, repo, base, branch)
	if len(commits) != 5 {
		t.Fatalf("%d commits on %s, want 5: %+v", len(commits), branch, commits)
	}
	wantCommitFiles := map[string][]string{"combine": {"README.md", "combined.txt"}}
	for i := 1; i <= 4; i++ {
		wantCommitFiles[fmt.Sprintf("part-%d", i)] = []string{fmt.Sprintf("part-%d.txt", i)}
	}
	seen := map[string]string{}
	for i, c := range commits {
		if c.subject != "fleet: "+c.node {
			t.Errorf("commit %s: subject %q, trailer Supervisor-Node %q", c.sha[:12], c.subject, c.node)
		}
		if _, dup := seen[c.node]; dup {
			t.Errorf("node %s has two commits", c.node)
		}
		seen[c.node] = c.sha
		if (i == 4) != (c.node == "combine") {
			t.Errorf("commit %d is node %s; combine must come last, after its four dependencies", i+1, c.node)
		}
		if want, ok := wantCommitFiles[c.node]; !ok || !equalStrings(c.files, want) {
			t.Errorf("commit of %s changes %v, want %v", c.node, c.files, want)
		}
	}

	// status -o json: succeeded, every node and gate on a fleet process, the
	// node's commit the one on the branch, and both workers and both gate
	// runners used (four 1.5 s tasks, one slot per worker).
	s, code := f.status(wf)
	if code != 0 || s.Status != "succeeded" {
		t.Fatalf("status %s: exit %d, status %q (%s)", wf, code, s.Status, s.Reason)
	}
	if s.Head != commits[4].sha {
		t.Errorf("status head %s, branch tip %s", s.Head, commits[4].sha)
	}
	if len(s.Nodes) != 5 {
		t.Errorf("status lists %d nodes, want 5", len(s.Nodes))
	}
	nodeHosts, gateHosts := map[string]int{}, map[string]int{}
	for _, n := range s.Nodes {
		if n.Status != "succeeded" || n.Attempt != 1 {
			t.Errorf("node %s: status %s attempt %d (%s), want succeeded at attempt 1", n.ID, n.Status, n.Attempt, n.Reason)
		}
		if n.Commit != seen[n.ID] {
			t.Errorf("node %s: status commit %s, branch commit %s", n.ID, n.Commit, seen[n.ID])
		}
		nodeHosts[n.Host]++
		wantGates := []string{"exists", "readme", "settle"}
		if n.ID == "combine" {
			wantGates = []string{"exists", "parts"}
		}
		var gotGates []string
		for _, g := range n.Gates {
			gotGates = append(gotGates, g.Name)
			if g.Status != "passed" || g.ExitCode == nil || *g.ExitCode != 0 {
				t.Errorf("node %s gate %s: status %q exit %v, want passed with exit 0", n.ID, g.Name, g.Status, g.ExitCode)
			}
			gateHosts[g.Host]++
		}
		sort.Strings(gotGates)
		if !equalStrings(gotGates, wantGates) {
			t.Errorf("node %s ran gates %v, want %v", n.ID, gotGates, wantGates)
		}
	}
	t.Logf("agent jobs per host: %v; gate jobs per host: %v", nodeHosts, gateHosts)
	checkSpread(t, "agent jobs", nodeHosts, workers)
	checkSpread(t, "gate jobs", gateHosts, gaters)

	// logs prints the agent's log (its output included) and the gates'.
	r := f.cli(30*time.Second, "logs", wf, "combine")
	if r.code != 0 {
		t.Fatalf("logs: %s", r)
	}
	for _, want := range []string{"==> agent (", "combine-was-here", `"type":"result"`, "[supervisor] agent job " + wf + ".combine.a1",
		"==> gate exists (", "==> gate parts (", "part 1\npart 2\npart 3\npart 4\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("logs %s combine lacks %q:\n%s", wf, want, r.stdout)
		}
	}

	// The list shows the one workflow, succeeded.
	if l := f.list(); len(l) != 1 || l[0].ID != wf || l[0].Status != "succeeded" || l[0].Counts["succeeded"] != 5 {
		t.Errorf("status list = %+v, want just %s succeeded with 5 nodes", l, wf)
	}
}

// checkSpread asserts that every job ran on one of hosts and that each of
// hosts ran at least one.
func checkSpread(t *testing.T, what string, got map[string]int, hosts []string) {
	t.Helper()
	for h := range got {
		known := false
		for _, w := range hosts {
			known = known || h == w
		}
		if !known {
			t.Errorf("%s ran on %q, not one of %v", what, h, hosts)
		}
	}
	for _, h := range hosts {
		if got[h] == 0 {
			t.Errorf("%s never ran on %s: %v", what, h, got)
		}
	}
}
