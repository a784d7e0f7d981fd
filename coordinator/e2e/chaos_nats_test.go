package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// chaosNATSNodeDown (CHAOS-01) stops the NATS node leading the event log's
// stream (not nats-1, whose port this host's CLI uses: its leadership is
// moved away first) while a workflow runs, lets the workflow go on on the
// two nodes left, then starts the node again and waits until its replica
// has caught up. Every node's patch lands once.
func chaosNATSNodeDown(t *testing.T, c *composeFleet) {
	victim := c.streamLeaderBut(t, protocol.StreamEvents, "nats-1")
	r := submitChaos(t, c, "chaos-nats", 4, 3*time.Second, time.Second)
	waitFor(t, 2*time.Minute, "a node of "+r.wf+" to run", func() bool {
		s, ok := c.tryStatus(t, r.wf)
		if !ok {
			return false
		}
		return s.Counts["running"] > 0
	})
	id := c.one(t, victim)
	c.docker(t, "stop", "-t", "5", id)
	stopped := time.Now()
	info := c.streamInfo(t, protocol.StreamEvents)
	t.Logf("stopped %s, the leader of %s, mid-workflow; the stream's leader is now %s", victim, protocol.StreamEvents, info.Cluster.Leader)

	doneBefore := c.succeededNodes(t, r.wf)
	waitFor(t, 3*time.Minute, "a node of "+r.wf+" to finish while "+victim+" is down", func() bool {
		return c.succeededNodes(t, r.wf) > doneBefore
	})
	doneWhileDown := c.succeededNodes(t, r.wf) - doneBefore
	c.docker(t, "start", id)
	down := time.Since(stopped)

	r.watch(t, 4*time.Minute)
	tally := r.check(t)
	var caughtUp time.Duration
	waitFor(t, 2*time.Minute, victim+"'s replica of "+protocol.StreamEvents+" to catch up", func() bool {
		for _, p := range c.streamInfo(t, protocol.StreamEvents).Cluster.Replicas {
			if p.Name == victim && p.Current {
				caughtUp = time.Since(stopped) - down
				return true
			}
		}
		return false
	})
	t.Logf("MEASURED NATS node loss: %s down for %s, %d node(s) finished meanwhile; its replica current again %s after its restart (at most; polled); workflow %s succeeded; %s",
		victim, down.Round(time.Millisecond), doneWhileDown, caughtUp.Round(time.Millisecond), r.wf, tally.summary())
}

// succeededNodes counts a workflow's succeeded nodes.
func (c *composeFleet) succeededNodes(t *testing.T, wf string) int {
	t.Helper()
	s, _ := c.tryStatus(t, wf)
	return s.Counts["succeeded"]
}

// jetStream connects to the fleet's JetStream; the caller closes the connection.
func (c *composeFleet) jetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := c.connectNATS()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return nc, js
}

// streamInfo returns a stream's info, its cluster's leader and replicas.
func (c *composeFleet) streamInfo(t *testing.T, stream string) *jetstream.StreamInfo {
	t.Helper()
	nc, js := c.jetStream(t)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	if info.Cluster == nil {
		t.Fatalf("stream %s has no cluster information: not on the three-node cluster?", stream)
	}
	return info
}

// streamLeaderBut returns the NATS node (its server name, which is its
// Compose service's) leading stream, first asking the leader to step down
// while it is not: the tests need not.
func (c *composeFleet) streamLeaderBut(t *testing.T, stream, not string) string {
	t.Helper()
	var leader string
	waitFor(t, time.Minute, "a leader of "+stream+" other than "+not, func() bool {
		leader = c.streamInfo(t, stream).Cluster.Leader
		if leader != "" && leader != not {
			return true
		}
		nc, _ := c.jetStream(t)
		defer nc.Close()
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 10*time.Second)
		time.Sleep(2 * time.Second)
		return false
	})
	return leader
}
