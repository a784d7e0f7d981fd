package engine

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Engine tests of the closed loop: a failed round is retried after the
// retry policy's delay, with feedback, from the previous attempt's work
// (RETRY-08, RETRY-09); a node whose attempts run out escalates to a
// human (HITL-04, S-7), who approves, rejects or grants a retry with a
// note through the real API (HITL-01); the retry schedule and the inbox
// survive a coordinator restart. statemachine/loop_test.go checks the same
// rules without servers; here they run on embedded NATS with real git, the
// test playing the runners as in engine_test.go.

// The work of the agent of task a in these tests: attempt 1 writes
// shout.go, wrong, and its test; attempt 2 fixes shout.go alone.
const (
	shoutV1   = "package shout\n\nfunc Shout(s string) string { return s }\n"
	shoutV2   = "package shout\n\nimport \"strings\"\n\nfunc Shout(s string) string { return strings.ToUpper(s) }\n"
	shoutTest = "package shout\n\nimport \"testing\"\n\nfunc TestShout(t *testing.T) {\n" +
		"\tif got := Shout(\"hi\"); got != \"HI\" {\n\t\tt.Errorf(\"Shout(hi) = %q, want HI\", got)\n\t}\n}\n"
	// shoutFails is what the test gate prints when attempt 1's work runs.
	shoutFails = "--- FAIL: TestShout (0.00s)\n    shout_test.go:6: Shout(hi) = \"hi\", want HI\nFAIL\n" +
		"FAIL\texample.com/shout\t0.002s\nFAIL\n"
)

// loopYAML is a workflow whose task a must pass the gate test and whose
// task b depends on a; defaults are extra lines under defaults.
func loopYAML(name, defaults string) string {
	return "name: " + name + "\ndefaults:\n  " + agentCmd + defaults + `gates:
  - name: test
    command: [go, test, ./...]
tasks:
  - id: a
    prompt: add Shout
    gates: [test]
  - id: b
    prompt: use Shout
    depends_on: [a]
    gates: []
`
}

// feedbackOf decodes a feedback document.
func feedbackOf(t *testing.T, doc json.RawMessage) feedback.Feedback {
	t.Helper()
	var f feedback.Feedback
	if err := json.Unmarshal(doc, &f); err != nil {
		t.Fatalf("feedback %s: %v", doc, err)
	}
	return f
}

// failRound runs one round of task a of workflow wf whose test gate
// fails: it takes the agent job, does the work in files, reports the
// agent's success, takes the gate job and reports the test failing. It
// returns the agent job and the patch.
func (e *env) failRound(wf string, token uint64, files map[string]string) (*taken, *protocol.PatchRef) {
	e.t.Helper()
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	if j.agent.WorkflowID != wf || j.agent.NodeID != "a" {
		e.t.Fatalf("agent job %s, want one of %s/a", j.id(), wf)
	}
	e.started(j, token)
	p := e.work(j, files)
	e.agentDone(j, token, protocol.AgentSucceeded, p)
	g := e.next(protocol.KindGate, "default", 5*time.Second)
	if g.gate.WorkflowID != wf || g.gate.Attempt != j.agent.Attempt || len(g.gate.Patches) != 1 || !samePatch(g.gate.Patches[0], *p) {
		e.t.Fatalf("gate job = %+v, want attempt %d's test on its patch", g.gate, j.agent.Attempt)
	}
	e.started(g, token+1)
	e.gateResult(g, token+1, gateReply{status: protocol.GateFailed, exit: 1, stdout: shoutFails})
	return j, p
}

// readyEvents counts node.ready events of node for attempt.
func readyEvents(evs []eventlog.Event, node string, attempt int) int {
	n := 0
	for _, ev := range evs {
		if b, ok := ev.Body.(eventlog.NodeReady); ok && ev.NodeID == node && b.Attempt == attempt {
			n++
		}
	}
	return n
}

// RETRY-08, RETRY-09, Q-3: a gate fails attempt 1. The node retries after
// the default retry policy's delay (2 s ±10 %, on the engine's clock), not
// a millisecond before; attempt 2's agent job carries the failed round's
// feedback — naming the failed gate and its failing test, also appended to
// the prompt — and starts from attempt 1's patch. Attempt 2's gate judges
// its own patch and passes: it is integrated with both attempts' work, and
// the dependent runs on it.
func TestFailedRoundRetriedWithFeedbackThenFixed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	clk := testkit.NewClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	e.start(startOptions{now: clk.Now, tick: 50 * time.Millisecond})
	ctx := testkit.Context(t, 60*time.Second)
	wf := e.submit(loopYAML("fix", ""))

	j1, p1 := e.failRound(wf, 1, map[string]string{"shout.go": shoutV1, "shout_test.go": shoutTest})
	if a := j1.agent; a.Attempt != 1 || a.StartFrom != nil || len(a.Feedback) != 0 || a.Prompt != "add Shout" {
		t.Fatalf("attempt 1's job = %+v, want no feedback and no start_from", a)
	}

	// Attempt 1 is over: the node is retrying until the delay is over.
	failedAt := clk.Now()
	delay := protocol.TaskSpec{}.RetryPolicy().Delay(2, wf+"/a")
	if delay < 1800*time.Millisecond || delay > 2200*time.Millisecond {
		t.Fatalf("the default policy's delay before attempt 2 = %s, want 2 s ±10 %%", delay)
	}
	n := e.waitNode(wf, "a", protocol.NodeRetrying)
	if n.Attempt != 1 || n.MaxAttempts != protocol.DefaultMaxAttempts || n.RetryAt == nil || !n.RetryAt.Equal(failedAt.Add(delay)) ||
		n.Reason != "gates did not pass: test failed" {
		t.Fatalf("a after attempt 1 = %+v, want retrying until %s", n, failedAt.Add(delay))
	}
	if s := e.status(wf); s.Status != protocol.WorkflowRunning || nodeOf(s, "b").Status != protocol.NodePending {
		t.Errorf("while a retries: workflow %s, b %s; want running (no human needed), b pending", s.Status, nodeOf(s, "b").Status)
	}
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "attempt 2 before the retry delay")
	clk.Advance(delay - time.Millisecond)
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "attempt 2 a millisecond before the delay is over")
	if st := e.node(wf, "a").Status; st != protocol.NodeRetrying {
		t.Fatalf("a a millisecond before the delay is over: %s", st)
	}
	clk.Advance(time.Millisecond)

	j2 := e.next(protocol.KindAgent, "default", 5*time.Second)
	a2 := j2.agent
	if a2.NodeID != "a" || a2.Attempt != 2 || a2.JobID != protocol.AgentJobID(wf, "a", 2) || len(a2.Patches) != 0 ||
		!a2.PublishedAt.Equal(failedAt.Add(delay)) {
		t.Fatalf("attempt 2's job = %s attempt %d published %s", a2.JobID, a2.Attempt, a2.PublishedAt)
	}
	if a2.StartFrom == nil || !samePatch(*a2.StartFrom, *p1) {
		t.Errorf("attempt 2 starts from %+v, want attempt 1's patch %+v", a2.StartFrom, p1)
	}
	f := feedbackOf(t, a2.Feedback)
	if f.WorkflowID != wf || f.NodeID != "a" || f.Attempt != 1 || f.NextAttempt != 2 || f.MaxAttempts != 3 || f.WorkReset ||
		f.Note != nil || len(f.Gates) != 1 {
		t.Fatalf("attempt 2's feedback = %s", a2.Feedback)
	}
	if g := f.Gates[0]; g.Name != "test" || g.Status != protocol.GateFailed || g.Attempt != 1 || g.RoundsFailed != 1 || g.Escalated ||
		len(g.Tests) != 1 || g.Tests[0].Name != "TestShout" || g.Tests[0].File != "shout_test.go" || g.Tests[0].Line != 6 {
		t.Errorf("feedback on the failed gate = %+v", g)
	}
	if !strings.HasPrefix(a2.Prompt, "add Shout\n\n") || !strings.Contains(a2.Prompt, feedback.UntrustedNotice) ||
		!strings.Contains(a2.Prompt, "TestShout") {
		t.Errorf("attempt 2's prompt lacks the rendered feedback:\n%s", a2.Prompt)
	}

	// Attempt 2 fixes shout.go on top of attempt 1's work.
	e.started(j2, 1)
	p2 := e.work(j2, map[string]string{"shout.go": shoutV2})
	if p2.Object == p1.Object {
		t.Fatalf("attempt 2's patch overwrote attempt 1's: %s", p2.Object)
	}
	e.agentDone(j2, 1, protocol.AgentSucceeded, p2)
	g2 := e.next(protocol.KindGate, "default", 5*time.Second)
	if g2.gate.Attempt != 2 || g2.gate.Round != 1 || g2.gate.JobID != protocol.GateJobID(wf, "a", 2, "test", 1) ||
		len(g2.gate.Patches) != 1 || !samePatch(g2.gate.Patches[0], *p2) {
		t.Fatalf("attempt 2's gate job = %+v, want round 1 of attempt 2 on its patch", g2.gate)
	}
	e.started(g2, 1)
	e.gateResult(g2, 1, gateReply{status: protocol.GatePassed})
	n = e.waitNode(wf, "a", protocol.NodeSucceeded)
	if n.Attempt != 2 || n.Commit == "" || n.Commit == e.repo.BaseCommit || gateOf(n, "test").Status != protocol.GatePassed {
		t.Errorf("a = %+v, want succeeded at attempt 2, integrated", n)
	}

	jb := e.next(protocol.KindAgent, "default", 5*time.Second)
	if b := jb.agent; b.NodeID != "b" || b.Attempt != 1 || len(b.Patches) != 1 || !samePatch(b.Patches[0], *p2) || b.StartFrom != nil || len(b.Feedback) != 0 {
		t.Fatalf("b's job = %+v, want attempt 1 on a's accepted patch", b)
	}
	e.started(jb, 1)
	e.agentDone(jb, 1, protocol.AgentSucceeded, e.makePatch(jb, "main.go", "package main\n"))
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	for file, want := range map[string]string{"shout.go": shoutV2, "shout_test.go": shoutTest, "main.go": "package main\n"} {
		if got := testkit.Git(t, e.repoDir, "show", s.Head+":"+file); got != strings.TrimSpace(want) {
			t.Errorf("%s on the branch = %q, want %q", file, got, want)
		}
	}

	evs := e.events(wf)
	if r1, r2 := readyEvents(evs, "a", 1), readyEvents(evs, "a", 2); r1 != 1 || r2 != 1 {
		t.Errorf("node.ready events of a: attempt 1 ×%d, attempt 2 ×%d; want one each", r1, r2)
	}
	if c := countEvents(evs, eventlog.TypeNodeEscalated, "a"); c != 0 {
		t.Errorf("%d node.escalated events", c)
	}
	var scheduled []eventlog.NodeRetryScheduled
	for _, ev := range evs {
		if b, ok := ev.Body.(eventlog.NodeRetryScheduled); ok {
			scheduled = append(scheduled, b)
		}
	}
	if len(scheduled) != 1 || scheduled[0].Attempt != 1 || scheduled[0].Next != 2 || !scheduled[0].NotBefore.Equal(failedAt.Add(delay)) ||
		strings.Join(scheduled[0].FailedGates, ",") != "test" {
		t.Errorf("node.retry_scheduled events = %+v", scheduled)
	}

	// show: attempt 1 ended in a retry, with its gates and feedback;
	// attempt 2, the current one, passed.
	d, err := e.client.Show(ctx, wf, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != 2 || d.Attempts[0].Outcome != "retry_scheduled" || d.Attempts[0].Patch == nil || !samePatch(*d.Attempts[0].Patch, *p1) ||
		len(d.Attempts[0].Gates) != 1 || d.Attempts[0].Gates[0].Status != protocol.GateFailed ||
		d.Attempts[1].Attempt != 2 || d.Attempts[1].Outcome != "" || len(d.Attempts[1].Gates) != 1 ||
		d.Attempts[1].Gates[0].Status != protocol.GatePassed {
		t.Errorf("show a = %+v", d.Attempts)
	}
}

// HITL-04, S-7, HITL-01: a node whose gate fails with no attempt left
// escalates: it waits in the inbox with its candidate patch, its dependent
// waits, the workflow needs attention. A decision must name who makes it
// and an escalated node; a rejection needs a reason. A human approves it:
// its latest patch is integrated despite the failed gate, the node
// succeeds ("approved by …"), leaves the inbox, and the dependent runs on
// the approved patch; the workflow succeeds.
func TestApproveEscalatedNodeIntegratesAndDependentsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	ctx := testkit.Context(t, 60*time.Second)
	wf := e.submit(loopYAML("approve", "  max_attempts: 1\n"))

	_, p1 := e.failRound(wf, 1, map[string]string{"shout.go": shoutV1, "shout_test.go": shoutTest})
	n := e.waitEscalated(wf, "a")
	if n.Reason != "1 of 1 attempts used (gates did not pass: test failed)" || n.Attempt != 1 || n.MaxAttempts != 1 {
		t.Errorf("escalated a = %+v", n)
	}
	items, err := e.client.Inbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].WorkflowID != wf || items[0].NodeID != "a" || items[0].Patch == nil || !samePatch(*items[0].Patch, *p1) ||
		items[0].DiffStat == nil || len(items[0].DiffStat.Files) != 2 || items[0].DiffStat.Insertions == 0 {
		t.Fatalf("inbox = %+v", items)
	}
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "b before a human decided on a")

	_, err = e.client.Approve(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a"})
	_ = wantAPIError(t, err, api.CodeBadRequest, "a decision without its author")
	_, err = e.client.Approve(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "b", By: "ada"})
	if ae := wantAPIError(t, err, api.CodeConflict, "approve a pending node"); !strings.Contains(ae.Description, "only an escalated node, or one awaiting approval, waits for a human") {
		t.Errorf("approve a pending node: %s", ae.Description)
	}
	_, err = e.client.Reject(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a", By: "ada"})
	if ae := wantAPIError(t, err, api.CodeConflict, "reject without a reason"); !strings.Contains(ae.Description, "needs a reason") {
		t.Errorf("reject without a reason: %s", ae.Description)
	}
	if _, err := e.client.Approve(ctx, api.DecisionRequest{WorkflowID: "wf-nope", NodeID: "a", By: "ada"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("approve in an unknown workflow: %v", err)
	}

	s, err := e.client.Approve(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a", By: "ada", Note: "the test is wrong"})
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	if s.Status != protocol.WorkflowRunning {
		t.Errorf("workflow after the approval = %s, want running", s.Status)
	}
	// Until its work is integrated, the approved node says it was approved,
	// so nobody (coordinator watch) takes it for one still waiting.
	if n := nodeOf(s, "a"); n.Status != protocol.NodeSucceeded && (n.Status != protocol.NodeEscalated || !n.Approved) {
		t.Errorf("a right after the approval = %s (approved %v), want escalated and approved, or succeeded", n.Status, n.Approved)
	}
	n = e.waitNode(wf, "a", protocol.NodeSucceeded)
	if n.Reason != "approved by ada" || n.Commit == "" || n.Commit == e.repo.BaseCommit || gateOf(n, "test").Status != protocol.GateFailed {
		t.Errorf("approved a = %+v, want succeeded, integrated, its failed gate still reported", n)
	}
	if items, err := e.client.Inbox(ctx); err != nil || len(items) != 0 {
		t.Errorf("inbox after the approval = %+v, %v", items, err)
	}
	_, err = e.client.Approve(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a", By: "ada"})
	_ = wantAPIError(t, err, api.CodeConflict, "approve twice")

	jb := e.next(protocol.KindAgent, "default", 5*time.Second)
	if b := jb.agent; b.NodeID != "b" || len(b.Patches) != 1 || !samePatch(b.Patches[0], *p1) {
		t.Fatalf("b's job = %+v, want it on a's approved patch", b)
	}
	e.started(jb, 3)
	e.agentDone(jb, 3, protocol.AgentSucceeded, e.makePatch(jb, "main.go", "package main\n"))
	s = e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	for file, want := range map[string]string{"shout.go": shoutV1, "main.go": "package main\n"} {
		if got := testkit.Git(t, e.repoDir, "show", s.Head+":"+file); got != strings.TrimSpace(want) {
			t.Errorf("%s on the branch = %q, want %q", file, got, want)
		}
	}
	var approved []eventlog.NodeApproved
	for _, ev := range e.events(wf) {
		if b, ok := ev.Body.(eventlog.NodeApproved); ok {
			approved = append(approved, b)
		}
	}
	if len(approved) != 1 || approved[0].By != "ada" || approved[0].Note != "the test is wrong" || approved[0].Attempt != 1 {
		t.Errorf("node.approved events = %+v", approved)
	}
}

// HITL-01, RETRY-09: a human grants an escalated node another attempt
// with a note. The next agent job starts at once (no retry delay: the
// engine's clock does not move), from the failed attempt's patch; its
// feedback has the failed gate and the note {from, text}, trusted, also in
// the prompt; the node's budget grows by the attempt granted. The attempt
// passes and is integrated.
func TestRetryEscalatedNodeWithNote(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	clk := testkit.NewClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	e.start(startOptions{now: clk.Now, tick: 50 * time.Millisecond})
	ctx := testkit.Context(t, 60*time.Second)
	wf := e.submit(loopYAML("retry", "  max_attempts: 1\n"))

	_, p1 := e.failRound(wf, 1, map[string]string{"shout.go": shoutV1, "shout_test.go": shoutTest})
	e.waitEscalated(wf, "a")
	_, err := e.client.Retry(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a", By: "ada", Attempts: -1})
	_ = wantAPIError(t, err, api.CodeBadRequest, "a negative number of attempts")

	const note = "Shout must upper-case its argument: use strings.ToUpper"
	s, err := e.client.Retry(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a", By: "ada", Note: note, Attempts: 1})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if a := nodeOf(s, "a"); s.Status != protocol.WorkflowRunning || a.MaxAttempts != 2 {
		t.Errorf("after the retry: workflow %s, a %+v; want running, a with a budget of 2", s.Status, a)
	}
	j2 := e.next(protocol.KindAgent, "default", 5*time.Second)
	a2 := j2.agent
	if a2.NodeID != "a" || a2.Attempt != 2 || a2.StartFrom == nil || !samePatch(*a2.StartFrom, *p1) {
		t.Fatalf("the granted attempt's job = %+v, want attempt 2 from attempt 1's patch", a2)
	}
	f := feedbackOf(t, a2.Feedback)
	if f.Note == nil || f.Note.From != "ada" || f.Note.Text != note || f.Attempt != 1 || f.NextAttempt != 2 || f.MaxAttempts != 2 ||
		len(f.Gates) != 1 || f.Gates[0].Name != "test" || !f.Gates[0].Escalated {
		t.Errorf("the granted attempt's feedback = %s", a2.Feedback)
	}
	if !strings.Contains(a2.Prompt, note) || !strings.Contains(a2.Prompt, "TestShout") {
		t.Errorf("the prompt lacks the note or the failed test:\n%s", a2.Prompt)
	}

	e.started(j2, 1)
	p2 := e.work(j2, map[string]string{"shout.go": shoutV2})
	e.agentDone(j2, 1, protocol.AgentSucceeded, p2)
	g := e.next(protocol.KindGate, "default", 5*time.Second)
	if g.gate.Attempt != 2 || len(g.gate.Patches) != 1 || !samePatch(g.gate.Patches[0], *p2) {
		t.Fatalf("gate job = %+v", g.gate)
	}
	e.started(g, 1)
	e.gateResult(g, 1, gateReply{status: protocol.GatePassed})
	if n := e.waitNode(wf, "a", protocol.NodeSucceeded); n.Attempt != 2 || n.MaxAttempts != 2 {
		t.Errorf("a = %+v", n)
	}
	jb := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(jb, 1)
	e.agentDone(jb, 1, protocol.AgentSucceeded, nil)
	s = e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if got := testkit.Git(t, e.repoDir, "show", s.Head+":shout.go"); got != strings.TrimSpace(shoutV2) {
		t.Errorf("shout.go on the branch = %q", got)
	}
	var granted []eventlog.NodeRetryGranted
	for _, ev := range e.events(wf) {
		if b, ok := ev.Body.(eventlog.NodeRetryGranted); ok {
			granted = append(granted, b)
		}
	}
	if len(granted) != 1 || granted[0].By != "ada" || granted[0].Note != note || granted[0].Attempts != 1 {
		t.Errorf("node.retry_granted events = %+v", granted)
	}
}

// RETRY-08, S-7, HITL-01: the loop's schedule and the inbox are in the
// event log. A coordinator restarted while a node is retrying keeps the
// retry delay: the new engine publishes attempt 2 only once the delay is
// over, and once. Restarted while the node is escalated (its attempts
// spent), the new engine keeps it escalated, the workflow needing
// attention, with its inbox entry (attempt, budget, reason, patch);
// publishes nothing for it; and takes a human's approval.
func TestRestartKeepsRetryDelayAndEscalation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	clk := testkit.NewClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	opts := startOptions{now: clk.Now, tick: 50 * time.Millisecond}
	e.start(opts)
	ctx := testkit.Context(t, 60*time.Second)
	wf := e.submit(loopYAML("restart-loop", "  max_attempts: 2\n"))

	_, p1 := e.failRound(wf, 1, map[string]string{"shout.go": shoutV1, "shout_test.go": shoutTest})
	retryAt := *e.waitNode(wf, "a", protocol.NodeRetrying).RetryAt
	delay := protocol.TaskSpec{}.RetryPolicy().Delay(2, wf+"/a")
	if !retryAt.Equal(clk.Now().Add(delay)) {
		t.Fatalf("retry at %s, want %s", retryAt, clk.Now().Add(delay))
	}

	// Restarted half-way through the delay: the rest of it is waited out.
	e.stopEng()
	clk.Advance(delay / 2)
	e.start(opts)
	if n := e.node(wf, "a"); n.Status != protocol.NodeRetrying || !n.RetryAt().Equal(retryAt) || n.NextAttempt() != 2 || n.Attempt != 1 {
		t.Fatalf("a after the restart: %s, attempt %d, next %d at %s; want retrying, next 2 at %s",
			n.Status, n.Attempt, n.NextAttempt(), n.RetryAt(), retryAt)
	}
	e.noJob(protocol.KindAgent, "default", 500*time.Millisecond, "attempt 2 after the restart, half-way through the delay")
	clk.Advance(retryAt.Sub(clk.Now()) - time.Millisecond)
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "attempt 2 a millisecond before the delay is over")
	clk.Advance(time.Millisecond)
	j2 := e.next(protocol.KindAgent, "default", 5*time.Second)
	if a2 := j2.agent; a2.NodeID != "a" || a2.Attempt != 2 || a2.StartFrom == nil || !samePatch(*a2.StartFrom, *p1) ||
		len(a2.Feedback) == 0 || feedbackOf(t, a2.Feedback).Gates[0].Name != "test" {
		t.Fatalf("attempt 2's job after the restart = %+v", a2)
	}
	// Once: ticks go on, nothing more is published, and attempt 2 became
	// ready once.
	e.noJob(protocol.KindAgent, "default", 500*time.Millisecond, "attempt 2 published twice")
	if c := e.count(protocol.StreamJobs, protocol.AgentJobSubject("default")); c != 1 {
		t.Errorf("%d agent jobs in the stream, want attempt 2's alone", c)
	}
	if r := readyEvents(e.events(wf), "a", 2); r != 1 {
		t.Errorf("%d node.ready events for attempt 2, want 1", r)
	}

	// Attempt 2 fails too: its attempts spent, a escalates.
	e.started(j2, 1)
	p2 := e.work(j2, map[string]string{"shout.go": shoutV2})
	e.agentDone(j2, 1, protocol.AgentSucceeded, p2)
	g := e.next(protocol.KindGate, "default", 5*time.Second)
	e.started(g, 1)
	e.gateResult(g, 1, gateReply{status: protocol.GateFailed, exit: 1, stdout: shoutFails})
	const reason = "2 of 2 attempts used (gates did not pass: test failed)"
	if n := e.waitEscalated(wf, "a"); n.Reason != reason {
		t.Errorf("escalated a: %q", n.Reason)
	}
	escalatedAt := clk.Now()

	e.stopEng()
	clk.Advance(time.Hour)
	e.start(opts)
	n := e.waitEscalated(wf, "a")
	if n.Attempt != 2 || n.MaxAttempts != 2 || n.Reason != reason {
		t.Errorf("a after the restart = %+v", n)
	}
	items, err := e.client.Inbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 {
		t.Fatalf("inbox after the restart = %+v, want a", items)
	}
	if it := items[0]; it.WorkflowID != wf || it.WorkflowName != "restart-loop" || it.NodeID != "a" || it.Status != protocol.NodeEscalated ||
		it.Attempt != 2 || it.Budget != 2 || it.Reason != reason || !it.Since.Equal(escalatedAt) || it.Patch == nil || !samePatch(*it.Patch, *p2) {
		t.Errorf("inbox item after the restart = %+v", it)
	}
	e.noJob(protocol.KindAgent, "default", 300*time.Millisecond, "an agent job of an escalated node after the restart")
	e.noJob(protocol.KindGate, "default", 200*time.Millisecond, "a gate job of an escalated node after the restart")
	if c := countEvents(e.events(wf), eventlog.TypeNodeEscalated, "a"); c != 1 {
		t.Errorf("%d node.escalated events, want 1", c)
	}

	// The new coordinator takes the human's decision.
	if _, err := e.client.Approve(ctx, api.DecisionRequest{WorkflowID: wf, NodeID: "a", By: "ada"}); err != nil {
		t.Fatalf("approve after the restart: %v", err)
	}
	e.waitNode(wf, "a", protocol.NodeSucceeded)
	jb := e.next(protocol.KindAgent, "default", 5*time.Second)
	if len(jb.agent.Patches) != 1 || !samePatch(jb.agent.Patches[0], *p2) {
		t.Fatalf("b's job = %+v, want it on attempt 2's patch", jb.agent)
	}
	e.started(jb, 1)
	e.agentDone(jb, 1, protocol.AgentSucceeded, nil)
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if got := testkit.Git(t, e.repoDir, "show", s.Head+":shout.go"); got != strings.TrimSpace(shoutV2) {
		t.Errorf("shout.go on the branch = %q", got)
	}
}

// HITL-01, RETRY-09, Q-3: inbox and show through the API. show reports a
// node's attempts, each with its agent's outcome, its patch, its final
// gates, how it ended and the feedback it gave the next attempt, plus the
// feedback the node's next attempt gets and the candidate diff. The inbox
// lists only the nodes waiting for a human, oldest first, with attempt,
// budget, reason and candidate patch: a retrying node is not in it, and a
// rejected one leaves it, its attempts still shown.
func TestInboxAndShowThroughAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	clk := testkit.NewClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	e.start(startOptions{now: clk.Now, tick: 50 * time.Millisecond})
	ctx := testkit.Context(t, 60*time.Second)

	// An older escalation, in another workflow.
	older := e.submit(loopYAML("older", "  max_attempts: 1\n"))
	e.failRound(older, 1, map[string]string{"shout.go": shoutV1})
	e.waitEscalated(older, "a")
	clk.Advance(time.Minute)

	wf := e.submit(loopYAML("inbox", "  max_attempts: 2\n"))
	_, p1 := e.failRound(wf, 1, map[string]string{"shout.go": shoutV1, "shout_test.go": shoutTest})
	e.waitNode(wf, "a", protocol.NodeRetrying)
	const retried = "gates did not pass: test failed"

	d, err := e.client.Show(ctx, wf, "a")
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	if d.WorkflowID != wf || d.Node.ID != "a" || d.Node.Status != protocol.NodeRetrying || d.Node.RetryAt == nil || d.Budget != 2 ||
		len(d.Attempts) != 1 {
		t.Fatalf("show a while retrying = %+v", d)
	}
	at := d.Attempts[0]
	if at.Attempt != 1 || at.AgentStatus != protocol.AgentSucceeded || at.Patch == nil || !samePatch(*at.Patch, *p1) ||
		at.Outcome != "retry_scheduled" || at.Reason != retried || at.At == nil || !at.At.Equal(clk.Now()) ||
		len(at.Gates) != 1 || at.Gates[0].Name != "test" || at.Gates[0].Status != protocol.GateFailed ||
		at.Gates[0].ExitCode == nil || *at.Gates[0].ExitCode != 1 || at.Gates[0].Attempt != 1 {
		t.Errorf("attempt 1 = %+v", at)
	}
	if f := feedbackOf(t, at.Feedback); f.Attempt != 1 || f.NextAttempt != 2 || len(f.Gates) != 1 || f.Gates[0].Name != "test" ||
		len(f.Gates[0].Tests) != 1 || f.Gates[0].Tests[0].Name != "TestShout" || f.Gates[0].Escalated {
		t.Errorf("attempt 1's feedback = %s", at.Feedback)
	}
	if f := feedbackOf(t, d.Feedback); f.Attempt != 1 || f.NextAttempt != 2 || len(f.Gates) != 1 || f.Gates[0].Name != "test" {
		t.Errorf("the feedback attempt 2 gets = %s", d.Feedback)
	}
	if !strings.Contains(d.Diff, "+++ b/shout.go") || !strings.Contains(d.Diff, "+func Shout(s string) string { return s }") ||
		d.DiffTruncated || d.DiffStat == nil || len(d.DiffStat.Files) != 2 {
		t.Errorf("show's diff = %q (stat %+v)", d.Diff, d.DiffStat)
	}
	items, err := e.client.Inbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].WorkflowID != older {
		t.Errorf("inbox with a retrying = %+v, want the older escalation alone", items)
	}

	// Attempt 2 fails too: a escalates.
	clk.Advance(time.Minute)
	_, p2 := e.failRound(wf, 3, map[string]string{"shout.go": shoutV1 + "\n// still wrong\n"})
	e.waitEscalated(wf, "a")
	const escalated = "2 of 2 attempts used (gates did not pass: test failed)"
	items, err = e.client.Inbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].WorkflowID != older || items[1].WorkflowID != wf {
		t.Fatalf("inbox = %+v, want older's a, then inbox's a", items)
	}
	if it := items[1]; it.WorkflowName != "inbox" || it.NodeID != "a" || it.Status != protocol.NodeEscalated || it.Reason != escalated ||
		it.Attempt != 2 || it.Budget != 2 || !it.Since.Equal(clk.Now()) || it.Patch == nil || !samePatch(*it.Patch, *p2) ||
		it.DiffStat == nil || len(it.DiffStat.Files) != 2 || it.DiffStat.Insertions == 0 {
		t.Errorf("inbox item = %+v", it)
	}

	d, err = e.client.Show(ctx, wf, "a")
	if err != nil {
		t.Fatal(err)
	}
	if d.Node.Status != protocol.NodeEscalated || d.Node.Reason != escalated || len(d.Attempts) != 2 ||
		d.Attempts[0].Outcome != "retry_scheduled" || d.Attempts[0].Patch == nil || !samePatch(*d.Attempts[0].Patch, *p1) {
		t.Fatalf("show a escalated = %+v", d)
	}
	at = d.Attempts[1]
	if at.Attempt != 2 || at.Patch == nil || !samePatch(*at.Patch, *p2) || at.Outcome != "escalated" || at.Reason != escalated ||
		len(at.Gates) != 1 || at.Gates[0].Status != protocol.GateFailed || at.Gates[0].Attempt != 2 {
		t.Errorf("attempt 2 = %+v", at)
	}
	if f := feedbackOf(t, at.Feedback); f.Attempt != 2 || len(f.Gates) != 1 || f.Gates[0].Name != "test" || !f.Gates[0].Escalated ||
		f.Gates[0].RoundsFailed != 2 {
		t.Errorf("attempt 2's feedback = %s", at.Feedback)
	}
	if f := feedbackOf(t, d.Feedback); f.Attempt != 2 || !f.Gates[0].Escalated {
		t.Errorf("the node's feedback = %s", d.Feedback)
	}
	if !strings.Contains(d.Diff, "+// still wrong") {
		t.Errorf("show's diff is not attempt 2's: %q", d.Diff)
	}
	if _, err := e.client.Show(ctx, wf, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("show of an unknown node: %v", err)
	}
	if _, err := e.client.Show(ctx, "wf-nope", "a"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("show in an unknown workflow: %v", err)
	}

	// Rejected, a leaves the inbox; show still has its attempts.
	e.reject(wf, "a", "not worth it")
	e.waitWorkflow(wf, protocol.WorkflowFailed)
	items, err = e.client.Inbox(ctx)
	if err != nil || len(items) != 1 || items[0].WorkflowID != older {
		t.Errorf("inbox after the rejection = %+v, %v", items, err)
	}
	d, err = e.client.Show(ctx, wf, "a")
	if err != nil || d.Node.Status != protocol.NodeFailed || d.Node.Reason != "rejected by ops: not worth it" || len(d.Attempts) != 2 {
		t.Errorf("show a rejected = %+v, %v", d, err)
	}
	e.reject(older, "a", "superseded")
	if items, err := e.client.Inbox(ctx); err != nil || len(items) != 0 {
		t.Errorf("inbox at the end = %+v, %v", items, err)
	}
}
