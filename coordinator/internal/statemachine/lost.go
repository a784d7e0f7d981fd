package statemachine

import (
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// RunningJob is a job a runner reported started under a lease and has not
// reported on since: a node's agent job, or a gate's job in its round.
type RunningJob struct {
	JobID      string
	Node       string
	Gate       string // "" for the node's agent job
	Attempt    int
	Round      int // the gate's round (0 for an agent job)
	LeaseToken uint64
}

// RunningJobs lists w's jobs that a runner should be holding the lease of
// now (lease/<job-id>): running agents and started gates, not those held
// back by a circuit breaker. A cancelled or finished workflow has none.
func RunningJobs(w *Workflow) []RunningJob {
	if w.Status.Terminal() || w.CancelRequested {
		return nil
	}
	var jobs []RunningJob
	for _, id := range w.Order {
		n := w.Nodes[id]
		switch {
		case n.Status == protocol.NodeRunning && n.LeaseToken > 0 && n.Agent == nil && n.Waiting() == nil:
			jobs = append(jobs, RunningJob{JobID: protocol.AgentJobID(w.ID, n.ID, n.Attempt), Node: n.ID,
				Attempt: n.Attempt, LeaseToken: n.LeaseToken})
		case n.Status == protocol.NodeGating:
			for _, name := range n.GateOrder() {
				g := n.Gates[name]
				if g == nil || !g.Dispatched || !g.Awaiting || g.LeaseToken == 0 || g.Waiting() != nil {
					continue
				}
				jobs = append(jobs, RunningJob{JobID: protocol.GateJobID(w.ID, n.ID, n.Attempt, g.Name, g.Round),
					Node: n.ID, Gate: g.Name, Attempt: n.Attempt, Round: g.Round, LeaseToken: g.LeaseToken})
			}
		}
	}
	return jobs
}

// JobLost runs job j again because no runner holds its lease (the
// coordinator's watchdog found it so for long enough; why says what it
// saw): a gate gets another round, a node another agent round that uses
// no attempt, as for a transient error (after maxTransient of those in a
// row it escalates instead). If j is no longer running as it was (a report
// came in meanwhile, or a newer lease took it), there is nothing to do.
func JobLost(w *Workflow, j RunningJob, why string, now time.Time) []Effect {
	still := false
	for _, r := range RunningJobs(w) {
		still = still || r == j
	}
	if !still {
		return nil
	}
	n := w.Nodes[j.Node]
	reason := fmt.Sprintf("job lost: %s", why)
	ev := eventlog.Event{WorkflowID: w.ID, NodeID: n.ID, Time: now}
	var msgID string
	switch {
	case j.Gate != "":
		g := n.Gates[j.Gate]
		round := g.Round + 1
		ev.Body = eventlog.GateDispatched{Gate: g.Name, Attempt: n.Attempt, Round: round, NoCache: g.NoCache, Rerun: reason}
		msgID = fmt.Sprintf("%s.%s.a%d.g.%s.r%d.dispatched", w.ID, n.ID, n.Attempt, g.Name, round)
	case n.Transients() >= maxTransient:
		ev.Body = eventlog.NodeEscalated{Attempt: n.Attempt,
			Reason: fmt.Sprintf("transient errors %d rounds in a row (%s)", n.Transients()+1, reason)}
		msgID = fmt.Sprintf("%s.%s.a%d.escalated", w.ID, n.ID, n.Attempt)
	default:
		ev.Body = eventlog.NodeRetryScheduled{Attempt: n.Attempt, Next: n.Attempt + 1, NotBefore: now,
			Reason: "transient: " + reason, Class: string(Transient)}
		msgID = fmt.Sprintf("%s.%s.a%d.retry", w.ID, n.ID, n.Attempt)
	}
	return []Effect{Append{Event: ev, MsgID: w.msgID(msgID)}}
}
