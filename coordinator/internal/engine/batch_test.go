package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// PERF-57: a decision's events go to the log as one message. Four
// independent nodes become ready in one decision: their four node.ready
// events share one message (one sequence), each job is published once
// that message is in the log, and a new engine replaying the log folds
// the batch into the same nodes, then finishes the workflow.
func TestDecisionEventsShareOneMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf, jobs := e.independentNodes("a", "b", "c", "d")
	readySeq := map[string]uint64{}
	for _, ev := range e.events(wf) {
		if ev.Type() == eventlog.TypeNodeReady {
			readySeq[ev.NodeID] = ev.Seq
		}
	}
	if len(readySeq) != 4 {
		t.Fatalf("node.ready events: %v, want one for each of a, b, c, d", readySeq)
	}
	for id, seq := range readySeq {
		if seq != readySeq["a"] {
			t.Fatalf("node.ready of %s at %d, of a at %d: not one message", id, seq, readySeq["a"])
		}
	}
	evs := e.events(wf)
	if msgs := e.count(protocol.StreamEvents, protocol.EventSubject(wf)); msgs != 2 || len(evs) != 5 {
		t.Fatalf("%d log messages holding %d events, want 2 holding 5 (the submission, then the batch)", msgs, len(evs))
	}
	before := map[string]time.Time{}
	for _, id := range []string{"a", "b", "c", "d"} {
		before[id] = e.node(wf, id).ReadyAt
	}

	e.stopEng()
	e.start()
	for _, id := range []string{"a", "b", "c", "d"} {
		n := e.node(wf, id)
		if n.Status != protocol.NodeReady || n.Attempt != 1 || !n.ReadyAt.Equal(before[id]) {
			t.Fatalf("%s after replay: %s attempt %d ready %v, want ready, attempt 1, %v", id, n.Status, n.Attempt, n.ReadyAt, before[id])
		}
	}
	for _, j := range jobs {
		e.started(j, 1)
		e.agentDone(j, 1, protocol.AgentSucceeded, nil)
	}
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	final := e.events(wf)
	if msgs := e.count(protocol.StreamEvents, protocol.EventSubject(wf)); msgs >= uint64(len(final)) {
		t.Fatalf("%d log messages for %d events: nothing was batched", msgs, len(final))
	}
}

// PERF-58: reports of different nodes that wait in a workflow's inbox
// together are answered one after the other and their events appended as
// one message; a report of a node already in the group starts a new one.
// Four started reports, then four agent results, held in the inbox while
// the workflow's queue is busy: the four node.started events share one
// message, the four node.agent_done events another, and the workflow
// finishes as if each had been folded alone. PERF-59: the four nodes have
// no patch, so their integrations (decided together) land nothing and
// their node.integrated events share one message too.
func TestReportsOfDifferentNodesShareOneMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf, jobs := e.independentNodes("a", "b", "c", "d")
	release := e.holdQueue(wf)
	for _, j := range jobs {
		e.started(j, 1)
	}
	for _, j := range jobs {
		e.agentDone(j, 1, protocol.AgentSucceeded, nil)
	}
	release(8)
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	seqs := map[eventlog.Type]map[uint64]int{eventlog.TypeNodeStarted: {}, eventlog.TypeNodeAgentDone: {},
		eventlog.TypeNodeIntegrated: {}}
	for _, ev := range e.events(wf) {
		if m, ok := seqs[ev.Type()]; ok {
			m[ev.Seq]++
		}
	}
	for typ, m := range seqs {
		if len(m) != 1 {
			t.Errorf("%s events in %d messages (%v), want the four in one", typ, len(m), m)
		}
		for _, n := range m {
			if n != 4 {
				t.Errorf("%s: %d events in the message, want 4", typ, n)
			}
		}
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if n := e.node(wf, id); n.Status != protocol.NodeSucceeded || n.LeaseToken != 1 || n.Host != "test-runner" {
			t.Errorf("%s: %s, lease %d, host %q; want succeeded under lease 1 on test-runner", id, n.Status, n.LeaseToken, n.Host)
		}
	}
}

// independentNodes submits a workflow of independent tasks with the ids
// given, without gates, and takes their agent jobs, in the order they
// come.
func (e *env) independentNodes(ids ...string) (wf string, jobs []*taken) {
	e.t.Helper()
	spec := "name: independent\ndefaults:\n  " + agentCmd + "gates: []\ntasks:\n"
	for _, id := range ids {
		spec += fmt.Sprintf("  - {id: %s, prompt: %s}\n", id, id)
	}
	wf = e.submit(spec)
	for range ids {
		jobs = append(jobs, e.next(protocol.KindAgent, "default", 5*time.Second))
	}
	return wf, jobs
}

// holdQueue keeps workflow wf's queue busy until the returned release is
// called with the number of reports that must be waiting in its inbox by
// then: the reports sent meanwhile are folded in one go.
func (e *env) holdQueue(wf string) (release func(reports int)) {
	e.t.Helper()
	gate := make(chan struct{})
	if !e.eng.queues.Go(wf, func() { <-gate }) {
		e.t.Fatal("the workflow's queue is closed")
	}
	return func(reports int) {
		e.t.Helper()
		defer close(gate)
		deadline := time.Now().Add(10 * time.Second)
		for {
			e.eng.inbox.mu.Lock()
			n := len(e.eng.inbox.waiting[wf])
			e.eng.inbox.mu.Unlock()
			if n == reports {
				return
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("%d reports in the inbox, want %d", n, reports)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// PERF-58: a report of a node whose earlier report waits in the same
// group is answered only once that one is folded. A started report under
// lease 2, then a late one under lease 1 of the same node, folded
// together with another node's: the late one is refused as an older
// lease, and the node keeps lease 2.
func TestGroupedReportsKeepLeaseFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf, jobs := e.independentNodes("a", "b")
	a, b := jobs[0], jobs[1]
	release := e.holdQueue(wf)
	e.started(a, 2)
	e.started(a, 1)
	e.started(b, 1)
	release(3)
	e.waitNode(wf, b.agent.NodeID, protocol.NodeRunning)
	if n := e.node(wf, a.agent.NodeID); n.LeaseToken != 2 {
		t.Fatalf("node %s holds lease %d after started under 2 then 1, want 2", n.ID, n.LeaseToken)
	}
	if c := countEvents(e.events(wf), eventlog.TypeNodeStarted, a.agent.NodeID); c != 1 {
		t.Fatalf("%d node.started events for %s, want 1", c, a.agent.NodeID)
	}
}

// PERF-58: the same agent result delivered twice (a redelivery after the
// queue was busy past the reports' ack wait) and folded in one group
// with another node's is recorded once: its run is counted once.
func TestGroupedReportsRecordADuplicateResultOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf, jobs := e.independentNodes("a", "b")
	a, b := jobs[0], jobs[1]
	e.started(a, 1)
	e.started(b, 1)
	e.waitNode(wf, a.agent.NodeID, protocol.NodeRunning)
	e.waitNode(wf, b.agent.NodeID, protocol.NodeRunning)
	release := e.holdQueue(wf)
	j := a.agent
	for delivery := 1; delivery <= 2; delivery++ {
		e.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
			JobID: j.JobID, WorkflowID: j.WorkflowID, NodeID: j.NodeID, Attempt: j.Attempt, LeaseToken: 1,
			Host: "test-runner", Status: protocol.AgentSucceeded,
			Run:       &protocol.AgentRun{Adapter: "fake", CostUSD: 1.5, CostKnown: true, Success: true},
			StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(),
		}}, fmt.Sprintf("%s.result.1.%d", j.JobID, delivery))
	}
	e.agentDone(b, 1, protocol.AgentSucceeded, nil)
	release(3)
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if c := countEvents(e.events(wf), eventlog.TypeNodeAgentDone, j.NodeID); c != 1 {
		t.Fatalf("%d node.agent_done events for %s, want 1", c, j.NodeID)
	}
	n := e.node(wf, j.NodeID)
	if s := n.Spend(); s.Runs != 1 || s.CostUSD != 1.5 {
		t.Fatalf("node %s spent %d runs, $%.2f; want 1 run, $1.50", j.NodeID, s.Runs, s.CostUSD)
	}
}
