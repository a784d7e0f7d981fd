package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Gate engine tests: how gate outcomes fold into a node under severity and
// on_fail, how skips propagate through gate dependencies, how pending
// gates are polled on the schedule kept in the event log, and how a gate
// rerun reopens a failed node. As in engine_test.go, the test plays the
// runners over the real wire protocol.

// gateReply is what the test runner answers for one gate job.
type gateReply struct {
	status    protocol.GateStatus
	exit      int
	violation []string // an integrity violation naming these paths
	stdout    string   // the gate's output
}

// gateResult reports a gate's result for job j under token, echoing the
// job's round, and acks the job.
func (e *env) gateResult(j *taken, token uint64, r gateReply) {
	e.t.Helper()
	g := j.gate
	exit := r.exit
	res := &protocol.GateResult{
		JobID: g.JobID, WorkflowID: g.WorkflowID, NodeID: g.NodeID, Gate: g.Gate, Attempt: g.Attempt,
		LeaseToken: token, Host: "test-runner", Status: r.status, ExitCode: &exit, Round: g.Round,
		StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(), Stdout: r.stdout,
	}
	if len(r.violation) > 0 {
		res.IntegrityViolation, res.Violations = true, r.violation
		res.Error = "integrity violation: " + strings.Join(r.violation, "; ")
	}
	e.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: res},
		fmt.Sprintf("%s.result.%d.1.%s", g.JobID, token, r.status))
	if err := j.msg.Ack(); err != nil {
		e.t.Fatal(err)
	}
}

// playRunners answers the workflow's jobs until it ends or nothing in it
// can move without a human (waitsForHuman): every agent succeeds without
// changes; each gate job gets reply(node, gate). It returns the gate jobs
// it saw, as "node/gate" in the order taken.
func (e *env) playRunners(wf string, reply func(node, gate string) gateReply) []string {
	e.t.Helper()
	var seen []string
	token := uint64(100)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s := e.status(wf); s.Status.Terminal() || waitsForHuman(s) {
			return seen
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("workflow %s did not end; gate jobs taken: %v; status %+v", wf, seen, e.status(wf))
		}
		if j := e.tryNext(protocol.KindAgent, "default", 50*time.Millisecond); j != nil {
			token++
			e.started(j, token)
			e.agentDone(j, token, protocol.AgentSucceeded, nil)
		}
		if j := e.tryNext(protocol.KindGate, "default", 50*time.Millisecond); j != nil {
			token++
			seen = append(seen, j.gate.NodeID+"/"+j.gate.Gate)
			e.started(j, token)
			e.gateResult(j, token, reply(j.gate.NodeID, j.gate.Gate))
		}
	}
}

// waitsForHuman reports whether a workflow that needs attention has nothing
// left to run: no node is ready, running, gating or retrying, so only a
// human's decision on an escalated node moves it on.
func waitsForHuman(s api.WorkflowSummary) bool {
	if s.Status != protocol.WorkflowNeedsAttention {
		return false
	}
	for _, n := range s.Nodes {
		switch n.Status {
		case protocol.NodeReady, protocol.NodeRunning, protocol.NodeGating, protocol.NodeRetrying:
			return false
		}
		if n.Approved {
			return false
		}
	}
	return true
}

func tookJob(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// OF-01…OF-03, DP-07, DP-08 and integrity in the fold: a failing
// gate whose on_fail is warn (a warning-severity optional gate, or an
// explicit on_fail: warn) is reported but does not block, and counts as
// passed for the gates that depend on it; a required gate never warns; an
// integrity violation blocks whatever the severity or on_fail, and
// escalates at once with attempts left, as no retry can make its patch
// trustworthy (HITL-04); a blocking failure skips its dependents
// transitively unless a dependent sets skip_on_dependency_failure: false,
// and skipped gates are never dispatched. The tasks whose gates block for
// the agent to fix have max_attempts: 1, so they escalate on that failure
// (S-7) without retrying; a human rejects every escalated node (HITL-01)
// and the workflow fails.
func TestGateFoldSeverityOnFailAndSkips(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(`name: severity
defaults:
  ` + agentCmd + `gates:
  - name: lint
    command: [lint]
    severity: warning
  - name: typecheck
    command: [typecheck]
    depends_on: [lint]
  - name: vet
    command: [vet]
  - name: build
    command: [build]
  - name: itest
    command: [itest]
    depends_on: [build]
  - name: e2e
    command: [e2e]
    depends_on: [itest]
  - name: report
    command: [report]
    depends_on: [build]
    skip_on_dependency_failure: false
  - name: audit
    command: [audit]
    severity: warning
tasks:
  - id: warn
    prompt: a warning lint failure does not block, and typecheck still runs
    gates: {required: [typecheck], optional: [lint]}
  - id: required-warn
    prompt: a required gate never warns, whatever its severity
    gates: [lint]
    max_attempts: 1
  - id: onfail-warn
    prompt: on_fail warn makes an error gate's failure a warning
    gates: {optional: [vet], on_fail: {vet: warn}}
  - id: integrity-warning
    prompt: an integrity violation blocks a warning gate
    gates: {optional: [audit]}
  - id: integrity-onfail
    prompt: an integrity violation blocks despite on_fail warn
    gates: {optional: [vet], on_fail: {vet: warn}}
  - id: skips
    prompt: build fails, itest and e2e are skipped, report runs anyway
    gates: [e2e, report]
    max_attempts: 1
`)
	seen := e.playRunners(wf, func(node, gate string) gateReply {
		switch {
		case gate == "lint", gate == "build", gate == "vet" && node == "onfail-warn":
			return gateReply{status: protocol.GateFailed, exit: 1}
		case gate == "audit" || node == "integrity-onfail":
			// Exit 0, but the gate rewrote a tracked file.
			return gateReply{status: protocol.GateFailed, violation: []string{"modified README.md"}}
		}
		return gateReply{status: protocol.GatePassed}
	})

	// Every blocking failure escalated: the workflow waits for a human.
	esc := e.status(wf)
	if esc.Status != protocol.WorkflowNeedsAttention {
		t.Fatalf("workflow = %s, want needs_attention", esc.Status)
	}
	escalated := map[string]string{
		// A required warning gate blocks (OF-02); no attempt is left.
		"required-warn": "1 of 1 attempts used (gates did not pass: lint failed)",
		// Integrity violations always block, naming the file, and escalate
		// with attempts left. Skipped gates are not named as the cause.
		"integrity-warning": "gate audit changed the workspace outside its allowed_writes (integrity violation: modified README.md) (gates did not pass: audit failed)",
		"integrity-onfail":  "gate vet changed the workspace outside its allowed_writes (integrity violation: modified README.md) (gates did not pass: vet failed)",
		"skips":             "1 of 1 attempts used (gates did not pass: build failed)",
	}
	for id, want := range escalated {
		n := nodeOf(esc, id)
		if n.Status != protocol.NodeEscalated || n.Reason != want || n.Attempt != 1 {
			t.Errorf("%s = %s at attempt %d (%q), want escalated at attempt 1 with %q", id, n.Status, n.Attempt, n.Reason, want)
		}
	}
	if n := nodeOf(esc, "integrity-warning"); n.MaxAttempts != protocol.DefaultMaxAttempts {
		t.Errorf("integrity-warning's budget = %d, want the default %d (escalated with attempts left)", n.MaxAttempts, protocol.DefaultMaxAttempts)
	}
	// A patch that failed an integrity check cannot be approved.
	_, err := e.client.Approve(testkit.Context(t, 10*time.Second), api.DecisionRequest{WorkflowID: wf, NodeID: "integrity-warning", By: "ops"})
	if ae := wantAPIError(t, err, api.CodeConflict, "approve an integrity violation"); !strings.Contains(ae.Description, "integrity violation") {
		t.Errorf("approve an integrity violation: %s", ae.Description)
	}
	for id := range escalated {
		e.reject(wf, id, "rejected "+id)
	}
	s := e.waitWorkflow(wf, protocol.WorkflowFailed)

	// Warnings: reported as failed, the node succeeds, and the dependent of
	// the warning gate ran.
	n := nodeOf(s, "warn")
	if n.Status != protocol.NodeSucceeded {
		t.Errorf("warn = %s (%s), want succeeded", n.Status, n.Reason)
	}
	if g := gateOf(n, "lint"); g.Status != protocol.GateFailed {
		t.Errorf("warn's lint = %+v, want failed (reported, not blocking)", g)
	}
	if g := gateOf(n, "typecheck"); g.Status != protocol.GatePassed || !tookJob(seen, "warn/typecheck") {
		t.Errorf("warn's typecheck = %+v (dispatched: %v), want run and passed: a warning counts as passed for dependents", g, tookJob(seen, "warn/typecheck"))
	}
	if n := nodeOf(s, "onfail-warn"); n.Status != protocol.NodeSucceeded || gateOf(n, "vet").Status != protocol.GateFailed {
		t.Errorf("onfail-warn = %+v, want succeeded with vet failed", n)
	}

	// A required warning gate blocks (OF-02).
	if n := nodeOf(s, "required-warn"); n.Status != protocol.NodeFailed || gateOf(n, "lint").Status != protocol.GateFailed {
		t.Errorf("required-warn = %+v, want failed with lint failed", n)
	}

	// Integrity violations always block, naming the file.
	for _, id := range []string{"integrity-warning", "integrity-onfail"} {
		n := nodeOf(s, id)
		gate := "audit"
		if id == "integrity-onfail" {
			gate = "vet"
		}
		if n.Status != protocol.NodeFailed || n.Reason != "rejected by ops: rejected "+id {
			t.Errorf("%s = %s (%q), want failed (rejected)", id, n.Status, n.Reason)
		}
		if g := gateOf(n, gate); !g.IntegrityViolation || len(g.Violations) != 1 || g.Violations[0] != "modified README.md" {
			t.Errorf("%s's %s = %+v, want the integrity violation", id, gate, g)
		}
	}

	// Skips propagate: build failed, itest skipped, e2e skipped in turn;
	// report (skip_on_dependency_failure: false) ran. Skipped gates were
	// never dispatched, and they are not named as the cause.
	n = nodeOf(s, "skips")
	if n.Status != protocol.NodeFailed {
		t.Errorf("skips = %s (%q), want failed", n.Status, n.Reason)
	}
	for gate, want := range map[string]protocol.GateStatus{"build": protocol.GateFailed, "itest": protocol.GateSkipped,
		"e2e": protocol.GateSkipped, "report": protocol.GatePassed} {
		if g := gateOf(n, gate); g.Status != want {
			t.Errorf("skips' %s = %+v, want %s", gate, g, want)
		}
	}
	if g := gateOf(n, "itest"); !strings.Contains(g.Error, "gate build failed") {
		t.Errorf("itest's skip reason = %q, want it to name build", g.Error)
	}
	if g := gateOf(n, "e2e"); !strings.Contains(g.Error, "gate itest skipped") {
		t.Errorf("e2e's skip reason = %q, want it to name itest", g.Error)
	}
	for _, g := range []string{"skips/itest", "skips/e2e"} {
		if tookJob(seen, g) {
			t.Errorf("skipped gate %s was dispatched: %v", g, seen)
		}
	}
	if !tookJob(seen, "skips/report") {
		t.Errorf("report never ran: %v", seen)
	}
	// One finished event per gate and node: no duplicates, and no retry.
	evs := e.events(wf)
	finished := map[string]int{}
	for _, ev := range evs {
		if b, ok := ev.Body.(eventlog.GateFinished); ok {
			finished[ev.NodeID+"/"+b.Gate]++
		}
	}
	for k, c := range finished {
		if c != 1 {
			t.Errorf("%d gate.finished events for %s, want 1", c, k)
		}
	}
}

// Pending gates: a gate that exits 75 is polled as a new job, round + 1,
// once poll_interval has passed since its last pending result, and only
// then: not while that round is still out; a result of an older round is
// stale; the pending clock starts at the first pending result, and past
// max_pending the gate times out, even with a poll in flight. Lease
// tokens are per job, so a new round's job starts a new fencing sequence.
func TestPendingGateSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	// The engine's clock, moved by hand so poll intervals and max_pending
	// pass without waiting.
	clk := testkit.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	e.start(startOptions{now: clk.Now, tick: 50 * time.Millisecond})
	wf := e.submit(`name: pending
defaults:
  ` + agentCmd + `gates:
  - name: ci
    command: [wait-for-ci]
    poll_interval: 10s
    max_pending: 1m
tasks:
  - id: n
    prompt: n
    gates: [ci]
`)
	a := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(a, 1)
	e.agentDone(a, 1, protocol.AgentSucceeded, nil)

	r1 := e.next(protocol.KindGate, "default", 5*time.Second)
	if r1.gate.Round != 1 || r1.gate.JobID != protocol.GateJobID(wf, "n", 1, "ci", 1) {
		t.Fatalf("first gate job = %s round %d", r1.id(), r1.gate.Round)
	}
	// Round 1 was redelivered once: its lease token on its job is 2.
	e.started(r1, 2)
	e.gateResult(r1, 2, gateReply{status: protocol.GatePending, exit: 75})
	e.settle()
	first := clk.Now()
	if g := e.gate(wf, "n", "ci"); g.Status != protocol.GatePending || !g.PendingSince().Equal(first) ||
		!g.NextPollAt().Equal(first.Add(10*time.Second)) {
		t.Fatalf("after the first pending result: %+v", g)
	}
	if st := e.node(wf, "n").Status; st != protocol.NodeGating {
		t.Fatalf("node with a pending gate is %s, want gating", st)
	}
	e.noJob(protocol.KindGate, "default", 300*time.Millisecond, "a poll before poll_interval passed")

	clk.Advance(10*time.Second + time.Millisecond)
	r2 := e.next(protocol.KindGate, "default", 5*time.Second)
	if r2.gate.Round != 2 || r2.gate.JobID != protocol.GateJobID(wf, "n", 1, "ci", 2) || r2.gate.Attempt != 1 {
		t.Fatalf("poll job = %s round %d attempt %d, want round 2 of attempt 1", r2.id(), r2.gate.Round, r2.gate.Attempt)
	}
	if g := e.gate(wf, "n", "ci"); g.Round != 2 || g.Status != protocol.GatePending {
		t.Errorf("while polling: %+v", g)
	}
	// The poll is out: ticks do not publish another round meanwhile.
	e.noJob(protocol.KindGate, "default", 400*time.Millisecond, "a third round while the second is out")

	// A result of round 1 arriving now is stale.
	e.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: r1.id(), WorkflowID: wf, NodeID: "n", Gate: "ci", Attempt: 1, LeaseToken: 9,
		Status: protocol.GatePassed, Round: 1}}, "late-round-1")
	e.settle()
	if g := e.gate(wf, "n", "ci"); g.Status != protocol.GatePending || g.Round != 2 {
		t.Fatalf("a round-1 result was folded: %+v", g)
	}

	// Round 2 runs under the first lease of its own job (token 1): its
	// reports are current, though round 1's token was 2.
	e.started(r2, 1)
	e.gateResult(r2, 1, gateReply{status: protocol.GatePending, exit: 75})
	e.settle()
	if g := e.gate(wf, "n", "ci"); g.Status != protocol.GatePending || !g.PendingSince().Equal(first) ||
		!g.NextPollAt().Equal(clk.Now().Add(10*time.Second)) || g.Host != "test-runner" {
		t.Fatalf("after round 2's pending result: %+v (the pending clock must still start at %s)", g, first)
	}
	clk.Advance(10*time.Second + time.Millisecond)
	r3 := e.next(protocol.KindGate, "default", 5*time.Second)
	if r3.gate.Round != 3 {
		t.Fatalf("third job round %d", r3.gate.Round)
	}
	e.started(r3, 1)
	e.gateResult(r3, 1, gateReply{status: protocol.GatePassed})
	n := e.waitNode(wf, "n", protocol.NodeSucceeded)
	if g := gateOf(n, "ci"); g.Status != protocol.GatePassed || g.Round != 3 {
		t.Errorf("ci = %+v, want passed at round 3", g)
	}
	dispatched := 0
	for _, ev := range e.events(wf) {
		if b, ok := ev.Body.(eventlog.GateDispatched); ok {
			dispatched++
			if b.Round != dispatched || b.Poll != (dispatched > 1) {
				t.Errorf("dispatch %d: round %d poll %v", dispatched, b.Round, b.Poll)
			}
		}
	}
	if dispatched != 3 {
		t.Errorf("%d gate.dispatched events, want 3", dispatched)
	}

	// max_pending: the second workflow's gate times out one minute after
	// its first pending result, with its second poll still out. With no
	// attempt left (max_attempts: 1) the node escalates, naming the timed-out
	// gate (HITL-04); a human rejects it (HITL-01) and its dependent is
	// skipped.
	wf2 := e.submit(`name: pending-timeout
defaults:
  ` + agentCmd + `  max_attempts: 1
gates:
  - name: ci
    command: [wait-for-ci]
    poll_interval: 40s
    max_pending: 1m
tasks:
  - id: n
    prompt: n
    gates: [ci]
  - id: after
    prompt: after
    depends_on: [n]
    gates: []
`)
	a = e.next(protocol.KindAgent, "default", 5*time.Second)
	e.agentDone(a, 1, protocol.AgentSucceeded, nil)
	p1 := e.next(protocol.KindGate, "default", 5*time.Second)
	e.gateResult(p1, 1, gateReply{status: protocol.GatePending, exit: 75})
	e.settle()
	clk.Advance(40*time.Second + time.Millisecond)
	p2 := e.next(protocol.KindGate, "default", 5*time.Second)
	if p2.gate.Round != 2 {
		t.Fatalf("poll round %d", p2.gate.Round)
	}
	e.settle()
	if st := e.node(wf2, "n").Status; st != protocol.NodeGating {
		t.Fatalf("before max_pending: %s", st)
	}
	clk.Advance(20 * time.Second) // 60.001 s since the first pending result
	n = e.waitEscalated(wf2, "n")
	g := gateOf(n, "ci")
	if g.Status != protocol.GateTimeout || !strings.Contains(g.Error, "longer than max_pending 1m0s") {
		t.Errorf("ci = %+v, want timeout past max_pending", g)
	}
	if n.Reason != "1 of 1 attempts used (gates did not pass: ci timeout)" {
		t.Errorf("reason = %q", n.Reason)
	}
	if a := nodeOf(e.status(wf2), "after"); a.Status != protocol.NodePending {
		t.Errorf("after while n is escalated = %+v, want pending", a)
	}
	// The poll that was out reports late: nothing changes.
	e.gateResult(p2, 1, gateReply{status: protocol.GatePassed})
	e.settle()
	if g := e.gate(wf2, "n", "ci"); g.Status != protocol.GateTimeout || e.node(wf2, "n").Status != protocol.NodeEscalated {
		t.Errorf("a late poll result changed the timed-out gate: %+v", g)
	}
	e.reject(wf2, "n", "ci never reported")
	e.waitNode(wf2, "after", protocol.NodeSkipped)
	e.waitWorkflow(wf2, protocol.WorkflowFailed)
	if g := e.gate(wf2, "n", "ci"); g.Status != protocol.GateTimeout {
		t.Errorf("the timed-out gate after the rejection: %+v", g)
	}
}

// A gate rerun of a node that failed on its gates reopens it: the node goes
// back to gating, the dependents it caused to be skipped back to pending,
// the workflow back to running, and the workflow-finished marker runners
// check is removed so the new gate job is not dropped. The gate runs again
// as a new round (no-cache when asked); when it passes, the dependents run
// and the workflow succeeds. The node fails on its gates as a human
// decides it: with no attempt left (max_attempts: 1) it escalates
// (HITL-04), and is rejected (HITL-01).
func TestGateRerunReopensFailedNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	ctx := testkit.Context(t, 30*time.Second)
	wf := e.submit(`name: rerun
defaults:
  ` + agentCmd + `  max_attempts: 1
gates:
  - name: flaky
    command: [flaky]
  - name: vet
    command: [vet]
tasks:
  - id: a
    prompt: a
    gates: [flaky, vet]
  - id: b
    prompt: b
    depends_on: [a]
    gates: []
  - id: c
    prompt: c
    depends_on: [b]
    gates: []
  - id: other
    prompt: other
    gates: []
`)
	for i := 0; i < 2; i++ {
		j := e.next(protocol.KindAgent, "default", 5*time.Second)
		e.started(j, 1)
		e.agentDone(j, 1, protocol.AgentSucceeded, nil)
	}
	for i := 0; i < 2; i++ {
		j := e.next(protocol.KindGate, "default", 5*time.Second)
		e.started(j, 3) // a redelivered job: token 3
		st := protocol.GatePassed
		if j.gate.Gate == "flaky" {
			st = protocol.GateFailed
		}
		exit := 0
		if st == protocol.GateFailed {
			exit = 1
		}
		e.gateResult(j, 3, gateReply{status: st, exit: exit})
	}
	if a := e.waitEscalated(wf, "a"); a.Reason != "1 of 1 attempts used (gates did not pass: flaky failed)" {
		t.Errorf("escalated a: %q", a.Reason)
	}
	if _, err := e.store.CacheGet(ctx, protocol.WorkflowFinishedKey(wf)); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("workflow-finished marker while a is escalated: %v, want none", err)
	}
	e.reject(wf, "a", "flaky failed")
	s := e.waitWorkflow(wf, protocol.WorkflowFailed)
	if a, b, c := nodeOf(s, "a"), nodeOf(s, "b"), nodeOf(s, "c"); a.Status != protocol.NodeFailed ||
		b.Status != protocol.NodeSkipped || c.Status != protocol.NodeSkipped {
		t.Fatalf("before the rerun: a %s, b %s, c %s", a.Status, b.Status, c.Status)
	}
	marker, err := e.store.CacheGet(ctx, protocol.WorkflowFinishedKey(wf))
	if err != nil || string(marker) != string(protocol.WorkflowFailed) {
		t.Fatalf("workflow-finished marker = %q, %v", marker, err)
	}

	// Reruns that cannot be: an unknown gate, a node that did not fail on
	// its gates, an unknown workflow.
	var ae *api.Error
	if _, err := e.client.GateRerun(ctx, api.GateRerunRequest{WorkflowID: wf, NodeID: "a", Gate: "nope"}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Errorf("rerun of an unknown gate: %v", err)
	}
	if _, err := e.client.GateRerun(ctx, api.GateRerunRequest{WorkflowID: wf, NodeID: "b"}); !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		t.Errorf("rerun of a skipped node: %v", err)
	}
	if _, err := e.client.GateRerun(ctx, api.GateRerunRequest{WorkflowID: "wf-nope"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("rerun in an unknown workflow: %v", err)
	}

	got, err := e.client.GateRerun(ctx, api.GateRerunRequest{WorkflowID: wf, NodeID: "a", NoCache: true})
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if got.Status != protocol.WorkflowRunning || got.FinishedAt != nil || got.Reason != "" {
		t.Errorf("workflow after the rerun: %s (%q)", got.Status, got.Reason)
	}
	if a := nodeOf(got, "a"); a.Status != protocol.NodeGating || a.Reason != "" {
		t.Errorf("a after the rerun: %s (%q), want gating", a.Status, a.Reason)
	}
	for _, id := range []string{"b", "c"} {
		if n := nodeOf(got, id); n.Status != protocol.NodePending || n.Reason != "" {
			t.Errorf("%s after the rerun: %s (%q), want pending", id, n.Status, n.Reason)
		}
	}
	if n := nodeOf(got, "other"); n.Status != protocol.NodeSucceeded {
		t.Errorf("other after the rerun: %s, want still succeeded", n.Status)
	}
	if _, err := e.store.CacheGet(ctx, protocol.WorkflowFinishedKey(wf)); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("workflow-finished marker after the rerun: %v, want removed", err)
	}
	if c := countEvents(e.events(wf), eventlog.TypeNodeReopened, "a"); c != 1 {
		t.Errorf("%d node.reopened events, want 1", c)
	}

	// Both gates run again, as round 2, without the cache; the jobs run
	// under their own leases (token 1), below the first rounds' token 3.
	for i := 0; i < 2; i++ {
		j := e.next(protocol.KindGate, "default", 5*time.Second)
		if j.gate.NodeID != "a" || j.gate.Round != 2 || !j.gate.NoCache ||
			j.gate.JobID != protocol.GateJobID(wf, "a", 1, j.gate.Gate, 2) {
			t.Fatalf("rerun job = %s round %d no_cache %v", j.id(), j.gate.Round, j.gate.NoCache)
		}
		e.started(j, 1)
		e.gateResult(j, 1, gateReply{status: protocol.GatePassed})
	}
	e.waitNode(wf, "a", protocol.NodeSucceeded)
	for _, id := range []string{"b", "c"} {
		j := e.next(protocol.KindAgent, "default", 5*time.Second)
		if j.agent.NodeID != id {
			t.Fatalf("agent job %s, want %s", j.id(), id)
		}
		e.started(j, 1)
		e.agentDone(j, 1, protocol.AgentSucceeded, nil)
		e.waitNode(wf, id, protocol.NodeSucceeded)
	}
	s = e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if s.Reason != "" || s.ResultBundle == "" {
		t.Errorf("workflow = %+v", s)
	}
	marker, err = e.store.CacheGet(ctx, protocol.WorkflowFinishedKey(wf))
	if err != nil || string(marker) != string(protocol.WorkflowSucceeded) {
		t.Errorf("workflow-finished marker at the end = %q, %v", marker, err)
	}
	// A succeeded node's gates cannot be rerun.
	if _, err := e.client.GateRerun(ctx, api.GateRerunRequest{WorkflowID: wf, NodeID: "a"}); !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		t.Errorf("rerun of a succeeded node: %v", err)
	}
	finished := 0
	for _, ev := range e.events(wf) {
		if ev.Type() == eventlog.TypeWorkflowFinished {
			finished++
		}
	}
	if finished != 2 {
		t.Errorf("%d workflow.finished events, want 2 (failed, then succeeded)", finished)
	}
}

// A gate rerun also reopens an escalated node, without a human's decision
// (HITL-01): the node goes back to gating in the same attempt, leaves the
// inbox, and the workflow no longer needs attention; as it never finished,
// no finished marker is involved. When the gate passes in its new round
// the node's patch is integrated without a new agent attempt, the
// dependent runs on it, and the workflow finishes once.
func TestGateRerunReopensEscalatedNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	ctx := testkit.Context(t, 30*time.Second)
	wf := e.submit(loopYAML("rerun-escalated", "  max_attempts: 1\n"))
	_, p1 := e.failRound(wf, 1, map[string]string{"shout.go": shoutV1})
	e.waitEscalated(wf, "a")

	got, err := e.client.GateRerun(ctx, api.GateRerunRequest{WorkflowID: wf, NodeID: "a"})
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if a := nodeOf(got, "a"); got.Status != protocol.WorkflowRunning || a.Status != protocol.NodeGating || a.Reason != "" || a.Attempt != 1 {
		t.Errorf("after the rerun: workflow %s, a %s at attempt %d (%q); want running, a gating at attempt 1", got.Status, a.Status, a.Attempt, a.Reason)
	}
	if b := nodeOf(got, "b"); b.Status != protocol.NodePending {
		t.Errorf("b after the rerun: %s", b.Status)
	}
	if items, err := e.client.Inbox(ctx); err != nil || len(items) != 0 {
		t.Errorf("inbox after the rerun = %+v, %v", items, err)
	}
	if _, err := e.store.CacheGet(ctx, protocol.WorkflowFinishedKey(wf)); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("workflow-finished marker: %v, want none", err)
	}
	if c := countEvents(e.events(wf), eventlog.TypeNodeReopened, "a"); c != 1 {
		t.Errorf("%d node.reopened events, want 1", c)
	}

	j := e.next(protocol.KindGate, "default", 5*time.Second)
	if j.gate.Attempt != 1 || j.gate.Round != 2 || j.gate.JobID != protocol.GateJobID(wf, "a", 1, "test", 2) ||
		len(j.gate.Patches) != 1 || !samePatch(j.gate.Patches[0], *p1) {
		t.Fatalf("rerun job = %+v, want round 2 of attempt 1 on its patch", j.gate)
	}
	e.started(j, 1)
	e.gateResult(j, 1, gateReply{status: protocol.GatePassed})
	if a := e.waitNode(wf, "a", protocol.NodeSucceeded); a.Attempt != 1 || a.Commit == "" || a.Commit == e.repo.BaseCommit {
		t.Errorf("a = %+v, want succeeded at attempt 1, integrated", a)
	}
	jb := e.next(protocol.KindAgent, "default", 5*time.Second)
	if jb.agent.NodeID != "b" || len(jb.agent.Patches) != 1 || !samePatch(jb.agent.Patches[0], *p1) {
		t.Fatalf("agent job after the rerun = %+v, want b on a's patch", jb.agent)
	}
	e.started(jb, 1)
	e.agentDone(jb, 1, protocol.AgentSucceeded, nil)
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	evs := e.events(wf)
	finished := 0
	for _, ev := range evs {
		if ev.Type() == eventlog.TypeWorkflowFinished {
			finished++
		}
	}
	if finished != 1 || readyEvents(evs, "a", 2) != 0 {
		t.Errorf("%d workflow.finished events (want 1), %d attempt-2 node.ready events (want 0)", finished, readyEvents(evs, "a", 2))
	}
}
