package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestChaos brings up the chaos fleet (compose.yaml, compose.standby.yaml
// and testdata/compose.chaos.yaml: three NATS nodes, Redis, two
// coordinators, two workers, two gate runners and a gate runner on a small
// tmpfs) and runs each scenario on it in turn, the failover last since it
// leaves one coordinator. `make chaos` runs it with -v; one scenario alone:
// go test -count=1 -v -run 'TestChaos/Failover' ./coordinator/e2e/
func TestChaos(t *testing.T) {
	c := newComposeFleet(t, composeOptions{files: chaosFiles, name: "chaos"})
	if w, g := c.hostnames("worker"), c.hostnames("gaterunner"); len(w) != 2 || len(g) != 2 {
		t.Fatalf("the chaos fleet has workers %v and gate runners %v, want two of each", w, g)
	}
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *composeFleet)
	}{
		{"NATSNodeDown", chaosNATSNodeDown},
		{"Partition", chaosPartition},
		{"RedisDataLost", chaosRedisDataLost},
		{"DiskFull", chaosDiskFull},
		{"Failover", chaosFailover},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, c) })
	}
}

// chaosLeader returns the container id of the coordinator that leads and
// the one that stands by (each may have led or stood by before: their
// latest start decides).
func chaosLeader(t *testing.T, c *composeFleet) (leader, standby string) {
	t.Helper()
	ids := []string{c.one(t, "coordinator"), c.one(t, "coordinator-standby")}
	waitFor(t, 2*time.Minute, "one coordinator to lead and the other to stand by", func() bool {
		a, b := c.coordinatorRole(t, ids[0]), c.coordinatorRole(t, ids[1])
		switch {
		case a == "leading" && b == "standing by":
			leader, standby = ids[0], ids[1]
		case b == "leading" && a == "standing by":
			leader, standby = ids[1], ids[0]
		default:
			return false
		}
		return true
	})
	return leader, standby
}

// coordinatorRole is what a coordinator container's log says of its
// latest run: "leading", "standing by", or "" (starting, or stopped).
func (c *composeFleet) coordinatorRole(t *testing.T, id string) string {
	t.Helper()
	r := c.run(time.Minute, "docker", "logs", id)
	role := ""
	for _, l := range strings.Split(r.stdout+"\n"+r.stderr, "\n") {
		switch {
		case strings.Contains(l, `"msg":"coordinator starting"`), strings.HasPrefix(l, "coordinator: "):
			role = ""
		case strings.Contains(l, `"msg":"leading"`):
			role = "leading"
		case strings.Contains(l, `"msg":"another owner leads; standing by"`):
			role = "standing by"
		}
	}
	return role
}
