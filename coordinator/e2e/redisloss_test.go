package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisDataLostMidJob makes Redis lose all its data (FLUSHDB of the
// fleet's database, as a restart without persistence does) while node
// slow's job runs under its second lease: its first worker was killed, so
// the job was redelivered to the other one under token 2 or more. Every
// lease goes with the data: the worker's renewal finds its lease lost and
// stops the job; the coordinator's leader lease too, so the coordinator
// stops leading and exits (a service manager would restart it; the test
// does). The job is redelivered once more and taken under a lease whose
// fencing token is greater than all before — tokens continue in a new
// epoch. Were they to start again at 1, the coordinator would ignore the
// new runner's start and result as an older lease's, and the node would
// hang until the watchdog ran it again as a new attempt. The workflow
// succeeds at attempt 1, slow.txt written once.
func TestRedisDataLostMidJob(t *testing.T) {
	t.Parallel()
	run := startCrashRun(t, "redisloss.yaml", strings.Replace(crashWorkflow, "@sleep 8s", "@sleep 20s", 1))
	f := run.f
	run.workers[run.victim].signal(t, syscall.SIGKILL)
	_ = run.workers[run.victim].wait(t, 10*time.Second)
	survivor := f.procNamed(run.survivor)
	waitFor(t, time.Minute, "node slow to run on "+run.survivor, func() bool {
		return strings.Contains(survivor.logText(), `msg="job started"`)
	})

	opts, err := redis.ParseURL(f.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHDB: %v", err)
	}
	t.Logf("node slow runs on %s after %s was killed; Redis lost its data", run.survivor, run.victim)

	// The leader renews its lease every 5 s: it finds it gone and stops.
	_ = run.coord.wait(t, 30*time.Second)
	if !strings.Contains(run.coord.logText(), "leadership lost") {
		t.Errorf("the coordinator exited without saying it lost its leadership:\n%s", run.coord.logText())
	}
	coord2 := f.startCoordinator("coordinator-2", "coordinator")
	f.waitCoordinator(coord2, time.Minute)

	r := f.cli(2*time.Minute, "watch", run.wf, "--repo", run.repo)
	if r.code != 0 {
		t.Fatalf("watch did not end in success:\n%s", r)
	}
	st := starts(r.stdout)
	if len(st) < 3 {
		t.Fatalf("node slow started %d times, want 3 or more: on %s, on %s, and again after the loss\n%s", len(st), run.victim, run.survivor, r.stdout)
	}
	for i := 1; i < len(st); i++ {
		if st[i].lease <= st[i-1].lease {
			t.Errorf("start %d under lease %d, not above the one before (%d): tokens went back after the loss", i+1, st[i].lease, st[i-1].lease)
		}
	}
	t.Logf("leases of node slow's starts: first %d, last %d", st[0].lease, st[len(st)-1].lease)
	s, code := f.status(run.wf)
	n := s.node(t, "slow")
	if code != 0 || s.Status != "succeeded" || n.Status != "succeeded" {
		t.Fatalf("status: exit %d, workflow %s (%s), node %s (%s)", code, s.Status, s.Reason, n.Status, n.Reason)
	}
	if n.Attempt != 1 {
		t.Errorf("node slow succeeded at attempt %d, want 1: the runs after the loss were redeliveries the coordinator accepted", n.Attempt)
	}
	run.checkWrittenOnce(t)
}
