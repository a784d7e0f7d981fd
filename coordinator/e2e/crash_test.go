package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// crashAckWait is the runners' ack wait in the crash tests: a job whose
// runner died is redelivered (and its lease expires) this long after the
// last heartbeat.
const crashAckWait = 3 * time.Second

// startedRE matches watch's line for a node starting on a host.
var startedRE = regexp.MustCompile(`node (\S+)\s+running on (\S+) \(lease (\d+)\)`)

type startLine struct {
	node, host string
	lease      uint64
}

// starts returns the node-started lines of `watch` output, in order.
func starts(out string) []startLine {
	var s []startLine
	for _, m := range startedRE.FindAllStringSubmatch(out, -1) {
		l, _ := strconv.ParseUint(m[3], 10, 64)
		s = append(s, startLine{node: m[1], host: m[2], lease: l})
	}
	return s
}

const crashWorkflow = `name: crash
` + agentDefaults + `gates:
  - name: present
    command: [test, -f, slow.txt]
tasks:
  - id: slow
    prompt: |
      Take a while, then write one file.
      @sleep 8s
      @write slow.txt
      written once
      @end
`

// TestWorkerKilledMidJob kills -9 the worker running a job. Its agent dies
// with it (the process sandbox's parent-death signal, SBX-14) before it
// writes anything; the job must be redelivered to the other worker under a
// newer lease and its change must reach the branch exactly once.
func TestWorkerKilledMidJob(t *testing.T) {
	t.Parallel()
	run := startCrashRun(t, "crash.yaml", crashWorkflow)
	f, workers, repo, base, wf, victim, survivor := run.f, run.workers, run.repo, run.base, run.wf, run.victim, run.survivor

	// "running" is reported before the workspace is ready: wait until the
	// agent process itself runs, so that killing the worker kills it.
	var agents []int
	waitFor(t, 30*time.Second, "the agent to run on "+victim, func() bool {
		agents = agentsUnder(filepath.Join(f.dir, "data", victim))
		return len(agents) > 0
	})
	t.Logf("node slow runs on %s (agent pid %v); killing the worker with SIGKILL", victim, agents)
	workers[victim].signal(t, syscall.SIGKILL)
	_ = workers[victim].wait(t, 10*time.Second)
	waitFor(t, 10*time.Second, "the agent to die with its worker", func() bool {
		return len(agentsUnder(filepath.Join(f.dir, "data", victim))) == 0
	})

	r := f.cli(2*time.Minute, "watch", wf, "--repo", repo)
	if r.code != 0 {
		t.Fatalf("watch did not end in success:\n%s", r)
	}

	run.checkStarts(t, r.stdout)

	s, code := f.status(wf)
	n := s.node(t, "slow")
	if code != 0 || s.Status != "succeeded" || n.Status != "succeeded" {
		t.Fatalf("status: exit %d, workflow %s (%s), node %s (%s)", code, s.Status, s.Reason, n.Status, n.Reason)
	}
	if n.Host != survivor || n.Attempt != 1 {
		t.Errorf("node slow: host %s attempt %d, want %s at attempt 1 (a redelivery, not a new attempt)", n.Host, n.Attempt, survivor)
	}
	if !strings.Contains(f.procNamed(survivor).logText(), "job started") {
		t.Errorf("%s never logged starting the job", survivor)
	}

	// Exactly one change, once.
	branch := run.checkWrittenOnce(t)
	commits := branchCommits(t, repo, base, branch)
	if len(commits) != 1 || commits[0].node != "slow" || commits[0].sha != n.Commit {
		t.Errorf("commits on %s = %+v, want one for node slow (%s)", branch, commits, n.Commit)
	}

	// The killed agent never got to write its file in the dead worker's
	// workspace.
	var leftFiles []string
	_ = filepath.WalkDir(filepath.Join(f.dir, "data", victim, "workspaces"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "slow.txt" {
			leftFiles = append(leftFiles, p)
		}
		return nil
	})
	if len(leftFiles) != 0 {
		t.Errorf("the killed agent wrote slow.txt under %s: %v", victim, leftFiles)
	}
}

// crashRun is a crash test's fleet (a coordinator, two workers and a gate
// runner) running a crashWorkflow whose node slow runs on the victim, the
// worker the test harms; the other worker is the survivor.
type crashRun struct {
	f                *fleet
	coord            *proc
	workers          map[string]*proc
	repo, base, wf   string
	victim, survivor string
}

// startCrashRun starts the fleet, submits workflow (written to file) on a
// new repository and waits until node slow runs.
func startCrashRun(t *testing.T, file, workflow string) *crashRun {
	t.Helper()
	f := newFleet(t, crashAckWait)
	c := &crashRun{f: f, coord: f.coordinator("coordinator", "coordinator"),
		workers: map[string]*proc{"worker-1": f.worker("worker-1"), "worker-2": f.worker("worker-2")}}
	f.gaterunner("gate-1")
	c.repo, c.base = testkit.Repo(t, map[string]string{"README.md": "base\n"})
	c.wf = submit(t, f, writeFile(t, t.TempDir(), file, workflow), c.repo)
	s := f.waitNode(c.wf, "slow", "running", time.Minute)
	c.victim = s.node(t, "slow").Host
	for name := range c.workers {
		if name != c.victim {
			c.survivor = name
		}
	}
	if c.workers[c.victim] == nil {
		t.Fatalf("node slow runs on %q, not one of the workers", c.victim)
	}
	return c
}

// checkStarts checks the history `watch` printed: the job started on the
// victim, then on the survivor under a newer lease, and nowhere else.
func (c *crashRun) checkStarts(t *testing.T, out string) {
	t.Helper()
	st := starts(out)
	if len(st) != 2 || st[0].host != c.victim || st[1].host != c.survivor || st[1].lease <= st[0].lease {
		t.Errorf("starts of node slow = %+v; want one on %s, then one on %s under a newer lease\n%s", st, c.victim, c.survivor, out)
	}
}

// checkWrittenOnce checks that the workflow's branch, which it returns,
// holds one change: slow.txt, written once.
func (c *crashRun) checkWrittenOnce(t *testing.T) string {
	t.Helper()
	branch := "supervisor/" + c.wf
	if got, want := branchChanges(t, c.repo, c.base, branch), []string{"A\tslow.txt"}; !equalStrings(got, want) {
		t.Errorf("changes on %s = %q, want %q", branch, got, want)
	}
	if got := fileAt(t, c.repo, branch, "slow.txt"); got != "written once\n" {
		t.Errorf("slow.txt = %q, want it written exactly once", got)
	}
	return branch
}

// agentsUnder returns the test agents running with a working directory
// under dir.
func agentsUnder(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Base(exe) != "supervisor-test-agent" {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && strings.HasPrefix(cwd, dir+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (f *fleet) procNamed(name string) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		if p.name == name {
			return p
		}
	}
	f.t.Fatalf("no process %s", name)
	return nil
}

const restartWorkflow = `name: restart
` + agentDefaults + `gates:
  - name: present
    command: [test, -f, first.txt]
tasks:
  - id: first
    prompt: |
      @sleep 3s
      @write first.txt
      first
      @end
  - id: second
    depends_on: [first]
    prompt: |
      @append first.txt
      amended by second
      @end
      @write second.txt
      second
      @end
`

// TestCoordinatorRestartMidWorkflow stops `coordinator serve` while the
// first of two sequential tasks runs and starts a new one on the same data
// dir, NATS and Redis. The workflow (followed throughout by a `submit
// --wait` started before the stop) must finish as if nothing happened.
// With SIGTERM the old coordinator releases its leader lease on the way
// out; with SIGKILL the new one waits for the lease to expire (15 s).
func TestCoordinatorRestartMidWorkflow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"sigterm", syscall.SIGTERM}, {"sigkill", syscall.SIGKILL}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, crashAckWait)
			coord := f.coordinator("coordinator-1", "coordinator")
			f.worker("worker-1")
			f.gaterunner("gate-1")
			repo, base := testkit.Repo(t, map[string]string{"README.md": "base\n"})
			wfFile := writeFile(t, t.TempDir(), "restart.yaml", restartWorkflow)

			wait := f.background(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
			var wf string
			waitFor(t, time.Minute, "the workflow to be submitted", func() bool {
				if l := f.list(); len(l) == 1 {
					wf = l[0].ID
				}
				return wf != ""
			})
			f.waitNode(wf, "first", "running", time.Minute)
			t.Logf("node first is running; stopping %s with %s", coord.name, tc.sig)
			coord.signal(t, tc.sig)
			err := coord.wait(t, 30*time.Second)
			if tc.sig == syscall.SIGTERM && err != nil {
				t.Errorf("coordinator-1 did not shut down cleanly on SIGTERM: %v", err)
			}

			restarted := time.Now()
			coord2 := f.startCoordinator("coordinator-2", "coordinator")
			f.waitCoordinator(coord2, time.Minute)
			t.Logf("coordinator-2 ready after %s", time.Since(restarted).Round(time.Millisecond))

			r := testkit.Receive(t, wait, 3*time.Minute, "submit --wait did not finish")
			if r.code != 0 || wfID(t, r) != wf {
				t.Fatalf("submit --wait across the restart did not succeed:\n%s", r)
			}
			if w := f.cli(time.Minute, "watch", wf); w.code != 0 {
				t.Errorf("watch after the restart: %s", w)
			} else if st := starts(w.stdout); len(st) != 2 || st[0].node != "first" || st[1].node != "second" {
				// Each job ran once: the restart neither lost nor repeated one.
				t.Errorf("node starts = %+v, want first then second, once each\n%s", st, w.stdout)
			}

			s, code := f.status(wf)
			if code != 0 || s.Status != "succeeded" {
				t.Fatalf("status: exit %d, %s (%s)", code, s.Status, s.Reason)
			}
			branch := "supervisor/" + wf
			if got, want := branchChanges(t, repo, base, branch), []string{"A\tfirst.txt", "A\tsecond.txt"}; !equalStrings(got, want) {
				t.Errorf("changes on %s = %q, want %q", branch, got, want)
			}
			if got := fileAt(t, repo, branch, "first.txt"); got != "first\namended by second\n" {
				t.Errorf("first.txt = %q", got)
			}
			if got := fileAt(t, repo, branch, "second.txt"); got != "second\n" {
				t.Errorf("second.txt = %q", got)
			}
			commits := branchCommits(t, repo, base, branch)
			if len(commits) != 2 || commits[0].node != "first" || commits[1].node != "second" ||
				commits[0].sha != s.node(t, "first").Commit || commits[1].sha != s.node(t, "second").Commit {
				t.Errorf("commits on %s = %+v, want first then second, matching the status", branch, commits)
			}
			// From the whole log, or (after a clean stop, which writes
			// one) from a snapshot and the events after it.
			if !strings.Contains(coord2.logText(), "state rebuilt from the event log") &&
				!strings.Contains(coord2.logText(), "state rebuilt from a snapshot and the events after it") {
				t.Errorf("coordinator-2 did not log rebuilding its state")
			}
		})
	}
}

// TestWorkerStalledMidJob freezes (SIGSTOP) the worker running a job until
// the job has been redelivered to the other worker under a newer lease and
// the frozen worker's agent has finished, then thaws it (SIGCONT). The
// thawed worker holds a result made under a lease it no longer has: it
// must notice the lost lease and abandon the job, or, should its report
// get out first, the coordinator must drop it as stale. Either way the
// change lands once, from the current lease holder.
func TestWorkerStalledMidJob(t *testing.T) {
	t.Parallel()
	// The agent signals once it has read its whole prompt: a worker frozen
	// before it finished writing the prompt would hold the agent on its
	// standard input, and the agent would never finish on its own.
	started := filepath.Join(t.TempDir(), "started")
	run := startCrashRun(t, "stall.yaml", strings.Replace(crashWorkflow, "@sleep 8s", "@signal "+started+"\n      @sleep 5s", 1))
	f, coord, workers, repo, base, wf, victim, survivor := run.f, run.coord, run.workers, run.repo, run.base, run.wf, run.victim, run.survivor
	victimDir := filepath.Join(f.dir, "data", victim)
	waitFor(t, 30*time.Second, "the agent to run on "+victim, func() bool { return len(agentsUnder(victimDir)) > 0 })
	waitFor(t, 30*time.Second, "the agent on "+victim+" to have read its prompt", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	t.Logf("node slow runs on %s; freezing it with SIGSTOP", victim)
	workers[victim].signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { _ = workers[victim].cmd.Process.Signal(syscall.SIGCONT) })

	// The job moves to the survivor; the frozen worker's agent finishes.
	waitFor(t, time.Minute, "the job to move to "+survivor, func() bool {
		s, _ := f.status(wf)
		n := s.node(t, "slow")
		if n.Status != "running" && n.Host != survivor {
			t.Fatalf("node slow is %s on %s before the job moved", n.Status, n.Host)
		}
		return n.Host == survivor
	})
	waitFor(t, 30*time.Second, "the frozen worker's agent to finish", func() bool { return len(agentsUnder(victimDir)) == 0 })
	t.Logf("the job runs on %s; thawing %s", survivor, victim)
	workers[victim].signal(t, syscall.SIGCONT)

	r := f.cli(2*time.Minute, "watch", wf, "--repo", repo)
	if r.code != 0 {
		t.Fatalf("watch did not end in success:\n%s", r)
	}
	run.checkStarts(t, r.stdout)
	s, code := f.status(wf)
	n := s.node(t, "slow")
	if code != 0 || s.Status != "succeeded" || n.Status != "succeeded" || n.Host != survivor || n.Attempt != 1 {
		t.Fatalf("status: exit %d, workflow %s (%s), node %+v; want succeeded on %s at attempt 1", code, s.Status, s.Reason, n, survivor)
	}
	branch := run.checkWrittenOnce(t)
	if commits := branchCommits(t, repo, base, branch); len(commits) != 1 || commits[0].sha != n.Commit {
		t.Errorf("commits on %s = %+v, want one for node slow (%s)", branch, commits, n.Commit)
	}

	// The thawed worker lived on and was fenced off.
	var abandoned, stale bool
	waitFor(t, 15*time.Second, "the thawed worker to be fenced off", func() bool {
		abandoned = strings.Contains(workers[victim].logText(), "lease lost during the job")
		stale = strings.Contains(coord.logText(), "stale report ignored")
		return abandoned || stale
	})
	t.Logf("thawed %s abandoned the job: %v; coordinator dropped a stale report: %v", victim, abandoned, stale)
	if workers[victim].exited() {
		t.Errorf("%s exited after it was thawed: %v", victim, workers[victim].err)
	}
	if s2, _ := f.status(wf); s2.Head != s.Head || s2.node(t, "slow").Host != survivor {
		t.Errorf("after the thaw the status moved: head %s → %s", s.Head, s2.Head)
	}
}

// TestCancelMidJob cancels a workflow while its agent runs: the agent must
// be stopped, the workflow must end cancelled (watch exits 3) with its
// nodes cancelled, and the stopped job must not run again anywhere.
func TestCancelMidJob(t *testing.T) {
	t.Parallel()
	f := newFleet(t, crashAckWait)
	f.coordinator("coordinator", "coordinator")
	workers := []*proc{f.worker("worker-1"), f.worker("worker-2")}
	f.gaterunner("gate-1")
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "base\n"})
	wfFile := writeFile(t, t.TempDir(), "cancel.yaml", crashWorkflow+`  - id: after
    depends_on: [slow]
    prompt: |
      @write after.txt
      after
      @end
`)
	wf := submit(t, f, wfFile, repo)
	f.waitNode(wf, "slow", "running", time.Minute)
	data := filepath.Join(f.dir, "data")
	waitFor(t, 30*time.Second, "the agent to run", func() bool { return len(agentsUnder(data)) > 0 })

	if c := f.cli(30*time.Second, "cancel", wf); c.code != 0 || !strings.Contains(c.stdout, wf+" cancelled") {
		t.Fatalf("cancel: %s", c)
	}
	if w := f.cli(time.Minute, "watch", wf); w.code != 3 {
		t.Errorf("watch of a cancelled workflow: exit %d, want 3\n%s", w.code, w)
	}
	s, code := f.status(wf)
	if code != 3 || s.Status != "cancelled" {
		t.Errorf("status: exit %d, %s; want 3, cancelled", code, s.Status)
	}
	for _, n := range s.Nodes {
		if n.Status != "cancelled" {
			t.Errorf("node %s is %s, want cancelled", n.ID, n.Status)
		}
	}
	waitFor(t, 15*time.Second, "the running agent to be stopped", func() bool { return len(agentsUnder(data)) == 0 })

	// The stopped job is not handed to another runner to run again: watch
	// for a while (past the redelivery back-off and the ack wait).
	deadline := time.Now().Add(2*crashAckWait + time.Second)
	for time.Now().Before(deadline) {
		if pids := agentsUnder(data); len(pids) > 0 {
			t.Fatalf("an agent runs again after the workflow was cancelled (pids %v)", pids)
		}
		time.Sleep(100 * time.Millisecond)
	}
	startsLogged := 0
	for _, w := range workers {
		startsLogged += strings.Count(w.logText(), `msg="job started"`)
	}
	if startsLogged != 1 {
		t.Errorf("workers started the job %d times, want once", startsLogged)
	}
	if out, err := (gitexec.Runner{Dir: repo}).Text(context.Background(), "rev-parse", "--verify", "--quiet", "refs/heads/supervisor/"+wf); err == nil {
		t.Errorf("cancelled workflow's branch was written into the repository at %s", out)
	}
}
