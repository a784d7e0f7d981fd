package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The closed loop's human side and its safeguards for one node, end to end
// on one fleet of separate processes: a rejection from the inbox, approval
// steps (with and without a timeout) and a human task, the same patch
// twice, and a transient agent error. The circuit breakers and the
// fleet-wide pause, which need runners and a coordinator configured for
// them, are in loop_breakers_test.go.

// TestLoopHuman runs its scenarios on one fleet: nats-server, Redis,
// `coordinator serve`, a worker and a gate runner.
func TestLoopHuman(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "4")
	f.gaterunner("gate-1", "--concurrency", "3")

	t.Run("Reject", func(t *testing.T) { t.Parallel(); testReject(f.sub(t)) })
	t.Run("ApprovalSteps", func(t *testing.T) { t.Parallel(); testApprovalSteps(f.sub(t)) })
	t.Run("ApprovalTimeout", func(t *testing.T) { t.Parallel(); testApprovalTimeout(f.sub(t)) })
	t.Run("SamePatch", func(t *testing.T) { t.Parallel(); testSamePatch(f.sub(t), f.procNamed("gate-1")) })
	t.Run("Transient", func(t *testing.T) { t.Parallel(); testTransient(f.sub(t), f.procNamed("worker-1")) })
	t.Run("ApprovalPolicy", func(t *testing.T) { t.Parallel(); testApprovalPolicy(f.sub(t)) })
}

// rejectWorkflow: wrong writes 41, which its gate refuses, with one
// attempt; after-wrong depends on it; independent depends on nothing.
const rejectWorkflow = `name: reject
` + agentDefaults + `  max_attempts: 1
gates:
` + answerGate + `tasks:
  - id: wrong
    gates: [answer]
    prompt: "@write answer.txt\n41\n@end\n"
  - id: after-wrong
    depends_on: [wrong]
    gates: []
    prompt: "@write after.txt\nafter\n@end\n"
  - id: independent
    gates: []
    prompt: "@write independent.txt\nindependent\n@end\n"
`

// Reject from the inbox (HITL-01, HITL-07, RETRY-01): wrong escalates and
// submit --wait ends with exit 5 once nothing else can run; a human
// rejects it with a reason, which fails it; its dependent is skipped, the
// independent node's work stays delivered, and the workflow fails: watch
// and status exit 2.
func testReject(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "reject\n"})
	wfFile := writeFile(t, t.TempDir(), "reject.yaml", rejectWorkflow)
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait: want exit 5 (needs attention)\n%s", r)
	}
	wf := wfID(t, r)
	s, code := f.status(wf)
	if code != 5 || s.Status != "needs_attention" || s.node(t, "wrong").Status != "escalated" ||
		s.node(t, "after-wrong").Status != "pending" || s.node(t, "independent").Status != "succeeded" {
		t.Fatalf("status before the rejection: exit %d, %s, nodes %+v", code, s.Status, s.Nodes)
	}
	if _, ok := f.inbox(wf)["wrong"]; !ok {
		t.Fatalf("the inbox does not list wrong")
	}

	const why = "41 is not the answer"
	r = f.decide("reject", wf, "wrong", "e2e-reviewer", "--reason", why)
	if !strings.Contains(r.stdout, wf+" wrong: ") || !strings.Contains(r.stdout, "e2e-reviewer") {
		t.Errorf("reject printed:\n%s", r)
	}
	w := f.cli(2*time.Minute, "watch", wf)
	if w.code != 2 {
		t.Fatalf("watch after the rejection: want exit 2 (failed)\n%s", w)
	}
	for _, re := range []string{
		`node wrong\s+rejected by e2e-reviewer: ` + why + `\n`,
		`node after-wrong\s+skipped`,
		`workflow ` + wf + `\s+failed`,
	} {
		if !regexp.MustCompile(re).MatchString(w.stdout) {
			t.Errorf("watch printed nothing matching %s:\n%s", re, w.stdout)
		}
	}
	s, code = f.status(wf)
	n := s.node(t, "wrong")
	if code != 2 || s.Status != "failed" || n.Status != "failed" || !strings.Contains(n.Reason, why) || !strings.Contains(n.Reason, "e2e-reviewer") {
		t.Fatalf("status after the rejection: exit %d, %s (%s); wrong %s (%q); want exit 2, failed, wrong failed with the reason",
			code, s.Status, s.Reason, n.Status, n.Reason)
	}
	if a := s.node(t, "after-wrong"); a.Status != "skipped" || a.Attempt != 0 {
		t.Errorf("after-wrong = %+v, want skipped without a round", a)
	}
	if i := s.node(t, "independent"); i.Status != "succeeded" {
		t.Errorf("independent = %+v, want succeeded", i)
	}
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\tindependent.txt"}; !equalStrings(got, want) {
		t.Errorf("changes delivered = %q, want independent's alone", got)
	}
	if in := f.inbox(wf); len(in) != 0 {
		t.Errorf("the inbox still lists %+v", in)
	}
	if r := f.cli(30*time.Second, "approve", wf, "wrong", "--as", "e2e-reviewer"); r.code == 0 {
		t.Errorf("approving a rejected node: want it refused\n%s", r)
	}
}

// approvalWorkflow: design and review run at once; each waits for a
// human's approval once its gates pass, design from e2e-lead alone.
// sign-off is a human task after design; build, after sign-off and review,
// prints who approved the work it builds on.
const approvalWorkflow = `name: approvals
` + agentDefaults + `gates:
` + answerGate + `tasks:
  - id: design
    gates: []
    approval:
      approvers: [e2e-lead]
    prompt: "@write design.md\nthe design\n@end\n"
  - id: review
    gates: [answer]
    approval: required
    prompt: "@write answer.txt\n42\n@end\n"
  - id: sign-off
    type: human
    depends_on: [design]
    prompt: Read design.md and sign it off.
  - id: build
    depends_on: [sign-off, review]
    gates: []
    prompt: "@env SUPERVISOR_APPROVALS\n@write build.txt\nbuilt\n@end\n"
`

// Approval steps and a human task (HITL-01, HITL-02, HITL-03, HITL-06):
// design and review wait in awaiting_approval once their gates passed, in
// the inbox and in status (exit 5, as submit --wait's); an approver other
// than the step's own is refused; approved, each is integrated; the human
// task then waits for its approval, its prompt shown as instructions; the
// last node's agent gets every approver in SUPERVISOR_APPROVALS.
func testApprovalSteps(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "approvals\n"})
	wfFile := writeFile(t, t.TempDir(), "approvals.yaml", approvalWorkflow)
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait: want exit 5 (needs attention)\n%s", r)
	}
	wf := wfID(t, r)
	if !regexp.MustCompile(`node design\s+awaiting approval: an approval step`).MatchString(r.stdout) ||
		!regexp.MustCompile(`node review\s+gate answer passed`).MatchString(r.stdout) {
		t.Errorf("submit --wait did not show design awaiting approval and review's gate passing:\n%s", r.stdout)
	}
	s, code := f.status(wf)
	if code != 5 || s.Status != "needs_attention" {
		t.Fatalf("status: exit %d, %s; want 5, needs_attention", code, s.Status)
	}
	for id, want := range map[string]string{"design": "awaiting_approval", "review": "awaiting_approval", "sign-off": "pending", "build": "pending"} {
		if n := s.node(t, id); n.Status != want {
			t.Errorf("node %s is %s, want %s", id, n.Status, want)
		}
	}
	if g := s.node(t, "review").gate(t, "answer"); g.Status != "passed" {
		t.Errorf("review's gate is %s; an approval step waits once its gates passed", g.Status)
	}
	in := f.inbox(wf)
	for _, id := range []string{"design", "review"} {
		if it, ok := in[id]; !ok || it.Status != "awaiting_approval" || !strings.Contains(it.Reason, "approval step") || it.DiffStat == nil {
			t.Errorf("inbox item of %s = %+v (listed: %v), want it awaiting approval with its diff stat", id, it, ok)
		}
	}
	if _, ok := in["sign-off"]; ok {
		t.Errorf("the human task is in the inbox before its dependency succeeded")
	}

	// Only e2e-lead may decide design.
	if r := f.cli(30*time.Second, "approve", wf, "design", "--as", "e2e-intruder"); r.code == 0 ||
		!strings.Contains(r.stderr, "may be decided by e2e-lead only, not e2e-intruder") {
		t.Errorf("approval by someone else: want it refused\n%s", r)
	}
	f.decide("approve", wf, "design", "e2e-lead")
	f.decide("approve", wf, "review", "e2e-reviewer", "--note", "looks right")

	// The human task waits, with its prompt as the human's instructions.
	f.waitNode(wf, "sign-off", "awaiting_approval", time.Minute)
	if it, ok := f.inbox(wf)["sign-off"]; !ok || it.Status != "awaiting_approval" || !strings.Contains(it.Reason, "a human task") {
		t.Errorf("inbox item of sign-off = %+v (listed: %v)", it, ok)
	}
	if r := f.cli(30*time.Second, "show", wf, "sign-off"); r.code != 0 || !strings.Contains(r.stdout, "Read design.md and sign it off.") {
		t.Errorf("show of the human task lacks its instructions:\n%s", r)
	}
	if r := f.cli(30*time.Second, "retry", wf, "sign-off", "--as", "e2e-signer"); r.code == 0 || !strings.Contains(r.stderr, "no agent to retry") {
		t.Errorf("retrying a human task: want it refused\n%s", r)
	}
	if s, code := f.status(wf); code != 5 || s.node(t, "design").Status != "succeeded" || s.node(t, "review").Status != "succeeded" {
		t.Errorf("status while the human task waits: exit %d, nodes %+v", code, s.Nodes)
	}
	f.decide("approve", wf, "sign-off", "e2e-signer")

	w := f.cli(2*time.Minute, "watch", wf)
	if w.code != 0 {
		t.Fatalf("watch after the approvals: want exit 0\n%s", w)
	}
	for _, re := range []string{
		`node design\s+approved by e2e-lead\n`, `node review\s+approved by e2e-reviewer: looks right\n`,
		`node sign-off\s+awaiting approval: a human task`, `node sign-off\s+approved by e2e-signer\n`,
	} {
		if !regexp.MustCompile(re).MatchString(w.stdout) {
			t.Errorf("watch printed nothing matching %s:\n%s", re, w.stdout)
		}
	}
	s, code = f.status(wf)
	if code != 0 || s.Status != "succeeded" {
		t.Fatalf("status: exit %d, %s (%s)", code, s.Status, s.Reason)
	}
	for id, who := range map[string]string{"design": "e2e-lead", "review": "e2e-reviewer", "sign-off": "e2e-signer"} {
		if n := s.node(t, id); n.Status != "succeeded" || n.Reason != "approved by "+who {
			t.Errorf("node %s = %s (%q), want succeeded, approved by %s", id, n.Status, n.Reason, who)
		}
	}
	logs := f.cli(30*time.Second, "logs", wf, "build")
	if want := "\nSUPERVISOR_APPROVALS=design=e2e-lead,review=e2e-reviewer,sign-off=e2e-signer\n"; !strings.Contains(logs.stdout, want) {
		t.Errorf("build's agent did not get %q:\n%s", strings.TrimSpace(want), logs)
	}
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\tanswer.txt", "A\tbuild.txt", "A\tdesign.md"}; !equalStrings(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
}

// timeoutWorkflow: three approval steps with the shortest timeout the
// workflow format allows (1m), one for each on_timeout; after-yes and
// after-no depend on the first two.
const timeoutWorkflow = `name: approval-timeout
` + agentDefaults + `tasks:
  - id: auto-yes
    gates: []
    approval: {timeout: 1m, on_timeout: approve}
    prompt: "@write yes.txt\nyes\n@end\n"
  - id: after-yes
    depends_on: [auto-yes]
    gates: []
    prompt: "@env SUPERVISOR_APPROVALS\n@write after-yes.txt\nafter\n@end\n"
  - id: auto-no
    gates: []
    approval: {timeout: 1m, on_timeout: reject}
    prompt: "@write no.txt\nno\n@end\n"
  - id: after-no
    depends_on: [auto-no]
    gates: []
    prompt: "@write after-no.txt\nafter\n@end\n"
  - id: auto-escalate
    gates: []
    approval: {timeout: 1m}
    prompt: "@write escalate.txt\nescalate\n@end\n"
`

// An approval step's timeout decides as configured (HITL-02): nobody
// approves within the minute, so auto-yes is approved by "timeout" (its
// dependent's agent is told so in SUPERVISOR_APPROVALS), auto-no is
// rejected (its dependent skipped), and auto-escalate escalates to the
// inbox; a human rejects that one, and the workflow fails (exit 2).
func testApprovalTimeout(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "timeout\n"})
	wf := submit(t, f, writeFile(t, t.TempDir(), "timeout.yaml", timeoutWorkflow), repo)

	var in map[string]inboxItem
	waitFor(t, time.Minute, "the three approval steps to wait", func() bool {
		in = f.inbox(wf)
		return len(in) == 3
	})
	for id, it := range in {
		if it.Status != "awaiting_approval" || it.Deadline == nil || it.Deadline.Sub(it.Since).Round(time.Second) != time.Minute {
			t.Errorf("inbox item %s = %+v, want awaiting approval with a deadline a minute after it began", id, it)
		}
	}
	if s, code := f.status(wf); code != 5 || s.Status != "needs_attention" {
		t.Errorf("status while they wait: exit %d, %s", code, s.Status)
	}

	// watch goes on while a timeout can still decide, and stops (exit 5)
	// only once nothing but a human can move the workflow.
	w := f.cli(3*time.Minute, "watch", wf)
	if w.code != 5 || !regexp.MustCompile(`node auto-yes\s+approved by timeout`).MatchString(w.stdout) ||
		!regexp.MustCompile(`node auto-escalate\s+escalated to a human: nobody approved it in time`).MatchString(w.stdout) ||
		!strings.Contains(w.stdout, "nothing runs until a human decides") {
		t.Errorf("watch while the approval steps wait for their timeouts: want it to follow them, then exit 5\n%s", w)
	}

	// Past the deadline (a minute), each step's on_timeout decides.
	f.waitNode(wf, "after-yes", "succeeded", 2*time.Minute)
	var s wfStatus
	waitFor(t, time.Minute, "auto-no's dependent to be skipped", func() bool {
		s = f.detail(wf)
		return s.node(t, "after-no").Status == "skipped" && s.node(t, "auto-escalate").Status == "escalated"
	})
	if n := s.node(t, "auto-yes"); n.Status != "succeeded" || n.Reason != "approved by timeout" {
		t.Errorf("auto-yes = %s (%q), want approved by timeout", n.Status, n.Reason)
	}
	if n := s.node(t, "auto-no"); n.Status != "failed" || !strings.Contains(n.Reason, "nobody approved it in time") {
		t.Errorf("auto-no = %s (%q), want rejected: nobody approved it in time", n.Status, n.Reason)
	}
	if now := time.Now(); in["auto-yes"].Deadline.After(now) {
		t.Errorf("auto-yes was decided before its deadline %s (now %s)", in["auto-yes"].Deadline, now)
	}
	logs := f.cli(30*time.Second, "logs", wf, "after-yes")
	if !strings.Contains(logs.stdout, "\nSUPERVISOR_APPROVALS=auto-yes=timeout\n") {
		t.Errorf("after-yes's agent was not told the timeout approved auto-yes:\n%s", logs)
	}
	it, ok := f.inbox(wf)["auto-escalate"]
	if !ok || it.Status != "escalated" || it.Reason != "nobody approved it in time" {
		t.Fatalf("inbox item of auto-escalate = %+v (listed: %v), want escalated: nobody approved it in time", it, ok)
	}

	f.decide("reject", wf, "auto-escalate", "e2e-reviewer", "--reason", "too late")
	if w := f.cli(2*time.Minute, "watch", wf); w.code != 2 {
		t.Fatalf("watch after the rejection: want exit 2 (failed)\n%s", w)
	}
	if s, code := f.status(wf); code != 2 || s.Status != "failed" {
		t.Errorf("status: exit %d, %s; want 2, failed", code, s.Status)
	}
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\tafter-yes.txt", "A\tyes.txt"}; !equalStrings(got, want) {
		t.Errorf("changes delivered = %q, want %q", got, want)
	}
}

// samePatchWorkflow: circles writes 41 at every attempt, which its gate
// refuses; a retry starts from the previous attempt's work, so attempt 2's
// patch is attempt 1's.
const samePatchWorkflow = `name: same-patch
` + agentDefaults + `gates:
` + answerGate + `tasks:
  - id: circles
    gates: [answer]
    prompt: "@write answer.txt\n41\n@end\n"
`

// The same patch twice escalates at once (RETRY-12, S-7.3, S-7.13):
// attempt 2 of 3 makes attempt 1's patch again; it escalates before its
// gate runs a second time, with the reason in the inbox.
func testSamePatch(f *fleet, gateRunner *proc) {
	t := f.t
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "circles\n"})
	wfFile := writeFile(t, t.TempDir(), "circles.yaml", samePatchWorkflow)
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait: want exit 5 (needs attention)\n%s", r)
	}
	wf := wfID(t, r)
	const reason = "the agent is going round in circles (attempt 2 made the same patch as attempt 1)"
	s, code := f.status(wf)
	n := s.node(t, "circles")
	if code != 5 || n.Status != "escalated" || n.Reason != reason || n.Attempt != 2 || n.MaxAttempts != 3 {
		t.Fatalf("status: exit %d; circles %s (%q) at attempt %d of %d; want escalated (%q) at attempt 2 of 3",
			code, n.Status, n.Reason, n.Attempt, n.MaxAttempts, reason)
	}
	if it, ok := f.inbox(wf)["circles"]; !ok || it.Reason != reason || it.Attempt != 2 || it.Budget != 3 {
		t.Errorf("inbox item of circles = %+v (listed: %v), want %q", it, ok, reason)
	}
	if starts := jobStarts(t, gateRunner, wf+".circles.a1.g.answer.r1"); len(starts) != 1 {
		t.Errorf("attempt 1's gate started %d times, want once", len(starts))
	}
	if strings.Contains(gateRunner.logText(), wf+".circles.a2.") {
		t.Errorf("a gate ran on attempt 2's patch, which was attempt 1's")
	}
	if strings.Contains(r.stdout, "ready (attempt 3)") {
		t.Errorf("circles ran an attempt 3:\n%s", r.stdout)
	}
}

// transientWorkflow: rate-limited's agent fails as the CLI does when its
// API rate-limits it, asking to retry after 4 s, then succeeds; its
// budget is one attempt.
const transientWorkflow = `name: transient
` + agentDefaults + `  max_attempts: 1
tasks:
  - id: rate-limited
    gates: []
    prompt: |
      @if-no-feedback
      @api-error API Error: 429 rate limit exceeded; retry-after: 4
      @endif
      @write answer.txt
      42
      @end
`

// A transient agent error is retried with back-off without consuming an
// attempt (RETRY-03, RETRY-04, RETRY-07): the rate limit is classified
// transient; the re-run waits the retry-after the agent reported (4 s,
// longer than the policy's 2 s), and the node, whose budget was one
// attempt, succeeds at attempt 2 instead of escalating.
func testTransient(f *fleet, worker *proc) {
	t := f.t
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "transient\n"})
	wfFile := writeFile(t, t.TempDir(), "transient.yaml", transientWorkflow)
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 0 {
		t.Fatalf("submit --wait: want exit 0 (succeeded)\n%s", r)
	}
	wf := wfID(t, r)
	const reason = "transient: rate limit (agent failed (exit 1))"
	if !regexp.MustCompile(`node rate-limited\s+retrying: attempt 2 at \d\d:\d\d:\d\d (with feedback )?\(` + regexp.QuoteMeta(reason) + `\)`).MatchString(r.stdout) {
		t.Errorf("submit --wait did not announce the transient retry:\n%s", r.stdout)
	}
	s, code := f.status(wf)
	n := s.node(t, "rate-limited")
	if code != 0 || n.Status != "succeeded" || n.Attempt != 2 || n.MaxAttempts != 2 {
		t.Fatalf("status: exit %d; rate-limited %s at attempt %d of %d; want succeeded at 2 of 2 (the transient round used no attempt)",
			code, n.Status, n.Attempt, n.MaxAttempts)
	}
	d := f.show(wf, "rate-limited")
	if len(d.Attempts) != 2 || d.Attempts[0].At == nil {
		t.Fatalf("show lists %d attempts", len(d.Attempts))
	}
	if a1 := d.Attempts[0]; a1.AgentStatus != "failed" || a1.Outcome != "retry_scheduled" || a1.Reason != reason {
		t.Errorf("show: attempt 1 = %+v, want its agent failed and a transient retry", a1)
	}
	starts := jobStarts(t, worker, wf+".rate-limited.a2")
	if len(starts) != 1 {
		t.Fatalf("attempt 2 started %d times, want once", len(starts))
	}
	if wait := starts[0].Sub(*d.Attempts[0].At); wait < 4*time.Second || wait > 30*time.Second {
		t.Errorf("attempt 2 started %s after attempt 1 failed, want the agent's retry-after, 4 s", wait)
	}
}

// policyWorkflow: two approval steps under the default approval policy;
// small writes one short file, keys writes a key file (a sensitive path).
// after depends on small.
const policyWorkflow = `name: approval-policy
` + agentDefaults + `tasks:
  - id: small
    gates: []
    approval: {auto_approve: true}
    prompt: "@write notes/small.txt\nsmall\n@end\n"
  - id: keys
    gates: []
    approval: {auto_approve: true}
    prompt: "@write config/server.pem\nnot really a key\n@end\n"
  - id: after
    depends_on: [small]
    gates: []
    prompt: "@env SUPERVISOR_APPROVALS\n@write after.txt\nafter\n@end\n"
`

// The approval policy (HITL-05) on a fleet of separate processes: the
// worker summarizes each patch it makes, and the coordinator's policy
// approves small's one-line file without a human, recorded as the
// policy's with its reason, so after runs; keys touched a sensitive path
// and waits in the inbox, told why, until a human rejects it.
func testApprovalPolicy(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "policy\n"})
	r := f.cli(3*time.Minute, "submit", writeFile(t, t.TempDir(), "policy.yaml", policyWorkflow), "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait: want exit 5 (keys waits for a human)\n%s", r)
	}
	wf := wfID(t, r)
	for _, re := range []string{
		`node small\s+approved by policy: auto-approved by the approval policy: 1 file, 1 line changed \(max_files 2, max_lines 100\), no sensitive path\n`,
		`node keys\s+awaiting approval: an approval step: its gates passed; the approval policy declined: config/server.pem is a sensitive path \(\*\*/\*\.pem\)`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("submit --wait printed nothing matching %s:\n%s", re, r.stdout)
		}
	}
	s := f.waitNode(wf, "after", "succeeded", time.Minute)
	if n := s.node(t, "small"); n.Status != "succeeded" || n.Reason != "approved by policy" {
		t.Errorf("small = %s (%q), want succeeded, approved by policy", n.Status, n.Reason)
	}
	in := f.inbox(wf)
	if it, ok := in["keys"]; !ok || it.Status != "awaiting_approval" || !strings.Contains(it.Reason, "config/server.pem is a sensitive path") {
		t.Errorf("inbox item of keys = %+v (listed: %v)", it, ok)
	}
	if _, ok := in["small"]; ok {
		t.Errorf("the auto-approved node is in the inbox")
	}
	if r := f.cli(30*time.Second, "approve", wf, "keys", "--as", "policy"); r.code == 0 || !strings.Contains(r.stderr, "decide as yourself") {
		t.Errorf("a human approving as the policy: want it refused\n%s", r)
	}
	logs := f.cli(30*time.Second, "logs", wf, "after")
	if want := "\nSUPERVISOR_APPROVALS=small=policy\n"; !strings.Contains(logs.stdout, want) {
		t.Errorf("after's agent did not get %q:\n%s", strings.TrimSpace(want), logs)
	}
	f.decide("reject", wf, "keys", "e2e-security", "--reason", "no key files in the repository")
	if s, code := f.status(wf); code != 2 || s.Status != "failed" {
		t.Errorf("status after the rejection: exit %d, %s; want 2, failed", code, s.Status)
	}
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\tafter.txt", "A\tnotes/small.txt"}; !equalStrings(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
}
