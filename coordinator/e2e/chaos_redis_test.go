package e2e

import (
	"strings"
	"testing"
	"time"
)

// chaosRedisDataLost (CHAOS-02) removes the Redis container and its data
// volume while a workflow's agents run, and starts a new, empty Redis in
// its place. Every lease goes with the data: the leading coordinator steps
// down (its container restarts it, and one of the two coordinators leads
// again), the runners' renewals find their job leases gone and abandon
// them, and the jobs are redelivered under fencing tokens above every
// earlier one (FEN-01), so no late result of a lost lease is accepted.
// The gate cache starts empty and the breakers closed: the workflow
// succeeds, each patch once, and `coordinator breakers` answers.
func chaosRedisDataLost(t *testing.T, c *composeFleet) {
	r := submitChaos(t, c, "chaos-redis", 4, 6*time.Second, time.Second)
	waitFor(t, 2*time.Minute, "a node of "+r.wf+" to run", func() bool {
		s, ok := c.tryStatus(t, r.wf)
		if !ok {
			return false
		}
		return s.Counts["running"] > 0
	})
	time.Sleep(2 * time.Second)
	lost := time.Now()
	if res := c.compose(2*time.Minute, "rm", "--stop", "--force", "redis"); res.code != 0 {
		t.Fatalf("compose rm redis: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	c.docker(t, "volume", "rm", c.project+"_redis")
	if res := c.compose(2*time.Minute, "up", "-d", "--no-deps", "redis"); res.code != 0 {
		t.Fatalf("compose up redis: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	back := time.Since(lost)
	t.Logf("Redis and its volume removed mid-workflow, a new empty Redis up %s later", back.Round(time.Millisecond))

	r.watch(t, 5*time.Minute)
	t.Logf("workflow %s succeeded %s after the loss", r.wf, time.Since(lost).Round(time.Millisecond))
	tally := r.check(t)
	for node, st := range tally.started {
		for i := 1; i < len(st); i++ {
			if st[i].LeaseToken <= st[i-1].LeaseToken {
				t.Errorf("node %s: start %d under lease %d, not above the one before (%d): fencing tokens went back after the loss",
					node, i+1, st[i].LeaseToken, st[i-1].LeaseToken)
			}
		}
	}
	if res := c.cli(time.Minute, "breakers"); res.code != 0 {
		t.Errorf("coordinator breakers after the loss: %s", res)
	}
	steppedDown := 0
	for _, svc := range []string{"coordinator", "coordinator-standby"} {
		for _, id := range c.containers(svc) {
			r := c.run(time.Minute, "docker", "logs", id)
			steppedDown += strings.Count(r.stdout+r.stderr, "leadership lost")
		}
	}
	t.Logf("MEASURED Redis data loss: Redis back empty %s after the loss; coordinator log lines about lost leadership: %d; %s",
		back.Round(time.Millisecond), steppedDown, tally.summary())
}
