package e2e

import (
	"testing"
	"time"
)

// failoverBound is CHAOS-04's bound on a takeover: from the leader's
// death to the standby holding the leader lease.
const failoverBound = 15 * time.Second

// chaosFailover (CHAOS-04) kills the leading coordinator with docker kill
// once the workflow has integrated a node (so its branch exists only in
// the dead leader's mirror) and measures how long the standby, which has
// a data volume of its own, takes to hold the leader lease and to be
// ready (the event log replayed). The standby rebuilds the branch from
// the patches the log records and finishes the workflow; the killed
// coordinator, started again, stands by.
func chaosFailover(t *testing.T, c *composeFleet) {
	leader, standby := chaosLeader(t, c)
	r := submitChaos(t, c, "chaos-failover", 4, 3*time.Second, time.Second)

	waitFor(t, 3*time.Minute, "a node of "+r.wf+" to be integrated", func() bool {
		s, _ := c.status(r.wf)
		if s.Status != "running" {
			t.Fatalf("workflow %s is %s (%s) before the kill", r.wf, s.Status, s.Reason)
		}
		for _, n := range s.Nodes {
			if n.Commit != "" {
				return true
			}
		}
		return false
	})
	s, _ := c.status(r.wf)
	killed := time.Now()
	c.docker(t, "kill", leader)
	t.Logf("killed the leading coordinator %.12s with %d of %d nodes done; %.12s stands by", leader, s.Counts["succeeded"], len(s.Nodes), standby)

	var leading, ready time.Time
	waitFor(t, 2*time.Minute, "the standby to lead and be ready", func() bool {
		leading, ready = c.firstLogAfter(t, standby, "leading", killed), c.firstLogAfter(t, standby, "coordinator ready", killed)
		return !leading.IsZero() && !ready.IsZero()
	})
	takeover := leading.Sub(killed)
	t.Logf("MEASURED failover: the standby held the leader lease %s after docker kill, and was ready (event log replayed, reports consumed, API served) %s after it",
		takeover.Round(time.Millisecond), ready.Sub(killed).Round(time.Millisecond))
	if takeover > failoverBound {
		t.Errorf("the standby took over %s after the leader's death, want within %s (CHAOS-04)", takeover.Round(time.Millisecond), failoverBound)
	}

	r.watch(t, 4*time.Minute)
	t.Logf("workflow %s succeeded %s after the kill", r.wf, time.Since(killed).Round(time.Millisecond))
	tally := r.check(t)
	t.Logf("%s", tally.summary())
	// The workflow was submitted to the old leader: the standby's mirror
	// never had its branch's commits.
	if n := len(c.logLines(t, standby, "rebuilding the workflow's branch from the patches in its event log")); n == 0 {
		t.Errorf("the standby never rebuilt %s's branch from the event log; it cannot have had the old leader's commits", r.wf)
	} else {
		t.Logf("the standby rebuilt the branch from the log's patches %d time(s)", n)
	}

	// The killed coordinator, started again, finds the lease held.
	c.docker(t, "start", leader)
	waitFor(t, 2*time.Minute, "the old leader to stand by", func() bool {
		return c.coordinatorRole(t, leader) == "standing by"
	})
}
