package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// partitionHold is how long the partition scenario's agents and gates
// take: long enough to cut their runner off mid-job, and for the job to be
// redelivered (composeAckWait) and taken by another runner meanwhile.
const partitionHold = 15 * time.Second

// chaosPartition (CHAOS-03) disconnects, with docker network disconnect,
// the worker running a node's agent, and later the gate runner running one
// of its gates, from the fleet's network mid-job. Each job is redelivered
// after the ack wait to the other runner under a newer lease; the cut-off
// runners finish their copies and, reconnected once that is done, send
// results the coordinator ignores as stale. The log holds one accepted
// result per job attempt, from the runner that took over, and the branch
// each patch once.
func chaosPartition(t *testing.T, c *composeFleet) {
	network := c.project + "_default"
	workers, gaters := c.hostnames("worker"), c.hostnames("gaterunner")
	staleBefore := c.staleReports(t)
	r := submitChaos(t, c, "chaos-partition", 2, partitionHold, partitionHold)

	// The agent phase: cut off the worker of the first node to run.
	var node, worker string
	waitFor(t, 2*time.Minute, "a node of "+r.wf+" to run on a worker", func() bool {
		s, ok := c.tryStatus(t, r.wf)
		if !ok {
			return false
		}
		for _, n := range s.Nodes {
			if n.Status == "running" && workers[n.Host] != "" {
				node, worker = n.ID, n.Host
				return true
			}
		}
		return false
	})
	time.Sleep(2 * time.Second) // its agent running, not just its start reported
	c.cut(t, network, workers[worker])
	cutW := time.Now()
	t.Logf("cut worker %s off the network while node %s's agent runs", worker, node)
	takenW := c.waitTakenOver(t, r.wf, node, "", worker, cutW)

	// The gate phase: cut off the gate runner of the first hold gate to run.
	var gnode, gater string
	waitFor(t, 3*time.Minute, "a hold gate of "+r.wf+" to run", func() bool {
		s, ok := c.tryStatus(t, r.wf)
		if !ok {
			return false
		}
		for _, n := range s.Nodes {
			for _, g := range n.Gates {
				if g.Name == "hold" && g.Status == "" && gaters[g.Host] != "" {
					gnode, gater = n.ID, g.Host
					return true
				}
			}
		}
		return false
	})
	time.Sleep(2 * time.Second)
	c.cut(t, network, gaters[gater])
	cutG := time.Now()
	t.Logf("cut gate runner %s off the network while node %s's gate hold runs", gater, gnode)

	// Reconnect the worker once its agent's copy has surely ended, so its
	// stale result goes out after the reconnection.
	time.Sleep(time.Until(cutW.Add(partitionHold + 5*time.Second)))
	c.docker(t, "network", "connect", network, workers[worker])
	takenG := c.waitTakenOver(t, r.wf, gnode, "hold", gater, cutG)
	time.Sleep(time.Until(cutG.Add(partitionHold + 5*time.Second)))
	c.docker(t, "network", "connect", network, gaters[gater])
	t.Logf("reconnected %s after %s and %s after %s", worker, time.Since(cutW).Round(time.Second), gater, time.Since(cutG).Round(time.Second))

	r.watch(t, 4*time.Minute)
	tally := r.check(t)
	evs := c.events(t, r.wf)
	checkResultFrom(t, evs, node, "", worker)
	checkResultFrom(t, evs, gnode, "hold", gater)
	// What became of the cut-off runners' copies: each either found, once
	// reconnected, that its lease was gone and dropped the job (also when
	// its patch or log upload had failed), or sent a result the
	// coordinator ignored as stale. None was accepted (checkResultFrom).
	stale := c.staleReports(t) - staleBefore
	fates := map[string]string{}
	for host, job := range map[string]string{worker: r.wf + "." + node + ".a1", gater: r.wf + "." + gnode + ".a1.g.hold.r1"} {
		id := workers[host] + gaters[host]
		waitFor(t, time.Minute, host+" to be done with its copy of "+job, func() bool {
			fates[host] = c.jobFate(t, id, job)
			return fates[host] != "" || c.staleReports(t)-staleBefore > stale
		})
	}
	stale = c.staleReports(t) - staleBefore
	t.Logf("MEASURED partition: agent job redelivered %s after the cut (ack wait %s), gate job %s after; the cut-off worker's copy: %s; the gate runner's: %s; stale reports ignored: %d; %s",
		takenW.Round(time.Millisecond), composeAckWait, takenG.Round(time.Millisecond), orNone(fates[worker]), orNone(fates[gater]), stale, tally.summary())
}

// jobFate is the last thing a runner's log says it did with a job whose
// lease it lost: dropped it, handed it back or reported it ("" if none of
// these yet).
func (c *composeFleet) jobFate(t *testing.T, id, job string) string {
	t.Helper()
	fate := ""
	for _, msg := range []string{"lease lost during the job; abandoning it to the runner that holds it now",
		"job failed and its lease is gone; abandoning it to the runner that holds it now",
		"job failed for infrastructure reasons; handing it back", "lease lost while waiting for file locks; abandoning the job to the runner that holds it now"} {
		for _, l := range c.logLines(t, id, msg) {
			if l["job"] == job {
				fate = msg
				if e, ok := l["err"].(string); ok {
					fate += " (" + e + ")"
				}
			}
		}
	}
	return fate
}

func orNone(s string) string {
	if s == "" {
		return "sent a result (see stale reports)"
	}
	return s
}

// waitTakenOver waits until node's agent job (gate "") or its gate's job is
// started by a runner other than cut, and returns how long after at that
// start was recorded.
func (c *composeFleet) waitTakenOver(t *testing.T, wf, node, gate, cut string, at time.Time) time.Duration {
	t.Helper()
	var took time.Duration
	what := fmt.Sprintf("node %s's %s job to be taken over from %s", node, orAgent(gate), cut)
	waitFor(t, 2*time.Minute, what, func() bool {
		for _, ev := range c.events(t, wf) {
			if ev.NodeID != node {
				continue
			}
			var host string
			switch b := ev.Body.(type) {
			case eventlog.NodeStarted:
				if gate == "" {
					host = b.Host
				}
			case eventlog.GateStarted:
				if b.Gate == gate {
					host = b.Host
				}
			}
			if host != "" && host != cut && ev.Time.After(at) {
				took = ev.Time.Sub(at)
				return true
			}
		}
		return false
	})
	return took
}

// checkResultFrom asserts that the accepted result of node's agent job
// (gate "") or gate job came from a runner other than cut, under the
// lease of the last start.
func checkResultFrom(t *testing.T, evs []eventlog.Event, node, gate, cut string) {
	t.Helper()
	var last, result uint64
	var from string
	for _, ev := range evs {
		if ev.NodeID != node {
			continue
		}
		switch b := ev.Body.(type) {
		case eventlog.NodeStarted:
			if gate == "" {
				last = b.LeaseToken
			}
		case eventlog.NodeAgentDone:
			if gate == "" {
				result, from = b.LeaseToken, b.Host
			}
		case eventlog.GateStarted:
			if b.Gate == gate {
				last = b.LeaseToken
			}
		case eventlog.GateFinished:
			if b.Gate == gate {
				result, from = b.LeaseToken, b.Host
			}
		}
	}
	if from == cut || result != last || result == 0 {
		t.Errorf("node %s's %s result was accepted from %s under lease %d; want the runner that took over from %s, under the last lease %d",
			node, orAgent(gate), from, result, cut, last)
	}
}

func orAgent(gate string) string {
	if gate == "" {
		return "agent"
	}
	return "gate " + gate
}

// staleReports counts the "stale report ignored" lines of every
// coordinator of the fleet.
func (c *composeFleet) staleReports(t *testing.T) int {
	t.Helper()
	n := 0
	for _, svc := range []string{"coordinator", "coordinator-standby"} {
		for _, id := range c.containers(svc) {
			n += len(c.logLines(t, id, "stale report ignored"))
		}
	}
	return n
}

// cut disconnects a container from network; if the test ends before it
// reconnects it, the clean-up does, so later scenarios have the runner.
func (c *composeFleet) cut(t *testing.T, network, id string) {
	t.Helper()
	c.docker(t, "network", "disconnect", network, id)
	t.Cleanup(func() {
		if t.Failed() {
			c.run(time.Minute, "docker", "network", "connect", network, id)
		}
	})
}
