package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The closed loop end to end, on fleets of separate processes: a failed
// round retried after its retry policy's delay with the gate's output as
// feedback (RETRY-08, RETRY-09), and the agent fixing its work from it; a
// node whose attempts run out escalated to a human (HITL-04, S-7), who
// finds it in the inbox and grants more attempts with a note for the
// agent, or approves its patch (HITL-01, S-9); `coordinator show`; and
// escalations and retry delays surviving a coordinator stopped mid-way.
//
// The gates here are gatehelper's expect step, which fails while
// answer.txt does not hold 42 and says so on stdout; the scripted agent
// acts on that output through @if-feedback, and on an operator's note
// through @if-note.

// loopHostValue is the value of HOST_ONLY_VALUE, a variable in the
// environment of TestLoop's processes (coordinator, worker, gate runner):
// nothing the agent or a gate sees, and so nothing in the feedback, may
// carry it.
var loopHostValue = fmt.Sprintf("host-only-%d", os.Getpid())

// answerGate fails unless answer.txt holds 42 ("gatehelper: answer.txt
// holds 41, want 42"); it also prints HOST_ONLY_VALUE as the gate sees it.
const answerGate = `  - name: answer
    command: [gatehelper, env, HOST_ONLY_VALUE, expect, answer.txt, "42"]
`

// fixWorkflow: the agent writes 41 at its first attempt and fixes it at
// the next when the feedback holds the gate's complaint. It prints what it
// got: the feedback file's path and content, the prompt, and variables of
// the host that must not reach it.
const fixWorkflow = `name: fix-from-feedback
` + agentDefaults + `gates:
` + answerGate + `tasks:
  - id: answer
    gates: [answer]
    prompt: |
      Write the answer to answer.txt.
      @env SUPERVISOR_FEEDBACK_FILE
      @env HOST_ONLY_VALUE
      @env HOME
      @print-feedback
      @print-prompt
      @if-no-feedback
      @print guessing
      @write answer.txt
      41
      @end
      @write notes.txt
      the first attempt's notes
      @end
      @endif
      @if-feedback answer.txt holds 41, want 42
      @print fixing what the gate reported
      @write answer.txt
      42
      @end
      @endif
`

// gateComplaint is what the answer gate prints about the first attempt.
const gateComplaint = "gatehelper: answer.txt holds 41, want 42"

// TestLoop runs the loop's scenarios on one fleet: nats-server, Redis,
// `coordinator serve`, a worker and a gate runner, all with HOST_ONLY_VALUE
// in their environment.
func TestLoop(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.env = []string{"HOST_ONLY_VALUE=" + loopHostValue}
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "3")
	f.gaterunner("gate-1", "--concurrency", "3")

	t.Run("FixFromFeedback", func(t *testing.T) { t.Parallel(); testFixFromFeedback(f.sub(t), f.procNamed("worker-1")) })
	t.Run("RetryWithNote", func(t *testing.T) { t.Parallel(); testRetryWithNote(f.sub(t)) })
	t.Run("Approve", func(t *testing.T) { t.Parallel(); testApprove(f.sub(t)) })
}

// Fail, then fix from the feedback (RETRY-08, RETRY-09): the first
// attempt's answer fails its gate; after the default policy's delay (2 s
// ±10 %) attempt 2 starts from attempt 1's work with the gate's output in
// the feedback file (SUPERVISOR_FEEDBACK_FILE, beside the workspace, gone
// afterwards) and appended to the prompt, acts on it, and passes. Nothing
// of the host's environment reaches the agent, the gate or the feedback.
// `coordinator show` then prints both attempts and the feedback.
func testFixFromFeedback(f *fleet, worker *proc) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "loop\n"})
	wfFile := writeFile(t, t.TempDir(), "fix.yaml", fixWorkflow)
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 0 {
		t.Fatalf("submit --wait: want exit 0 (succeeded)\n%s", r)
	}
	wf := wfID(t, r)

	// The progress: the gate failed, the retry was announced with its
	// feedback, attempt 2 ran and passed.
	for _, re := range []string{
		`node answer\s+gate answer failed \(exit 1\)\n\d\d:\d\d:\d\d  node answer\s+retrying: attempt 2 at \d\d:\d\d:\d\d with feedback \(gates did not pass: answer failed\)\n\s+feedback: \S`,
		`node answer\s+ready \(attempt 2\)`,
		`node answer\s+gate answer passed \(exit 0\)`,
		`workflow ` + wf + `\s+succeeded`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("submit --wait printed nothing matching %s:\n%s", re, r.stdout)
		}
	}
	s, code := f.status(wf)
	n := s.node(t, "answer")
	if code != 0 || s.Status != "succeeded" || n.Status != "succeeded" || n.Attempt != 2 || n.MaxAttempts != 3 {
		t.Fatalf("status: exit %d, workflow %s, node answer %s at attempt %d of %d; want succeeded at attempt 2 of 3",
			code, s.Status, n.Status, n.Attempt, n.MaxAttempts)
	}
	if g := n.gate(t, "answer"); g.Status != "passed" || g.Attempt != 2 || !strings.Contains(g.Output, "gatehelper: answer.txt holds 42") {
		t.Errorf("gate answer: %s at attempt %d, output %q", g.Status, g.Attempt, g.Output)
	}

	// Attempt 2 started from attempt 1's work: notes.txt, which only
	// attempt 1 wrote, is in the node's one commit.
	branch := "supervisor/" + wf
	if got, want := branchChanges(t, repo, base, branch), []string{"A\tanswer.txt", "A\tnotes.txt"}; !equalStrings(got, want) {
		t.Errorf("changes on %s = %q, want %q", branch, got, want)
	}
	if got := fileAt(t, repo, branch, "answer.txt"); got != "42\n" {
		t.Errorf("answer.txt = %q, want the fixed answer", got)
	}
	if commits := branchCommits(t, repo, base, branch); len(commits) != 1 || commits[0].sha != n.Commit {
		t.Errorf("commits on %s = %+v, want node answer's alone", branch, commits)
	}

	// What attempt 2's agent got, as it printed it in its log.
	logs := f.cli(30*time.Second, "logs", wf, "answer")
	if logs.code != 0 {
		t.Fatalf("logs: %s", logs)
	}
	agentLog, _, _ := strings.Cut(logs.stdout, "==> gate answer (")
	for _, want := range []string{
		"[supervisor] agent job " + wf + ".answer.a2", "starting from the previous attempt's patch",
		"fixing what the gate reported", "\nHOST_ONLY_VALUE=\n",
	} {
		if !strings.Contains(agentLog, want) {
			t.Errorf("attempt 2's agent log lacks %q:\n%s", want, agentLog)
		}
	}
	if strings.Contains(agentLog, "\nguessing\n") {
		t.Errorf("attempt 2 acted as a first attempt:\n%s", agentLog)
	}
	if strings.Contains(logs.stdout, loopHostValue) {
		t.Errorf("the host's HOST_ONLY_VALUE reached the agent or the gate:\n%s", logs.stdout)
	}
	if home := logValue(agentLog, "HOME"); home == "" || home == os.Getenv("HOME") {
		t.Errorf("the agent's HOME is %q, want a sandbox's own", home)
	}

	// The feedback file: beside the workspace in the worker's data
	// directory, never inside it (so never in the patch), and removed once
	// the job ended.
	path := logValue(agentLog, "SUPERVISOR_FEEDBACK_FILE")
	workerData := filepath.Join(f.dir, "data", "worker-1") + string(filepath.Separator)
	if !filepath.IsAbs(path) || !strings.HasPrefix(path, workerData) || !strings.HasSuffix(path, ".feedback.json") {
		t.Errorf("SUPERVISOR_FEEDBACK_FILE = %q, want a .feedback.json file under %s", path, workerData)
	} else if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the feedback file %s is still there after the job: %v", path, err)
	}

	// Its content: the first attempt's failure with the gate's output.
	var fb struct {
		WorkflowID  string `json:"workflow_id"`
		NodeID      string `json:"node_id"`
		Attempt     int    `json:"attempt"`
		NextAttempt int    `json:"next_attempt"`
		MaxAttempts int    `json:"max_attempts"`
		WorkReset   bool   `json:"work_reset"`
		Untrusted   string `json:"untrusted"`
		Note        any    `json:"note"`
		Gates       []struct {
			Name       string `json:"name"`
			Status     string `json:"status"`
			ExitCode   *int   `json:"exit_code"`
			StdoutTail string `json:"stdout_tail"`
		} `json:"gates"`
	}
	raw := prefixed(agentLog, "feedback| ")
	if err := json.Unmarshal([]byte(raw), &fb); err != nil {
		t.Fatalf("the feedback file the agent printed is not JSON: %v\n%s", err, agentLog)
	}
	if fb.WorkflowID != wf || fb.NodeID != "answer" || fb.Attempt != 1 || fb.NextAttempt != 2 || fb.MaxAttempts != 3 ||
		fb.WorkReset || fb.Untrusted == "" || fb.Note != nil || len(fb.Gates) != 1 {
		t.Errorf("feedback = %+v; want attempt 1's, for attempt 2 of 3, work kept, no note, one gate", fb)
	} else if g := fb.Gates[0]; g.Name != "answer" || g.Status != "failed" || g.ExitCode == nil || *g.ExitCode != 1 ||
		!strings.Contains(g.StdoutTail, gateComplaint) || !strings.Contains(g.StdoutTail, "HOST_ONLY_VALUE=\n") {
		t.Errorf("feedback gate = %+v; want answer failed with exit 1, its output with %q and an empty HOST_ONLY_VALUE", g, gateComplaint)
	}

	// The prompt: the task's, then the rendered feedback, the gate's
	// output fenced after the untrusted banner.
	prompt := prefixed(agentLog, "prompt| ")
	task, feedback, ok := strings.Cut(prompt, "## Feedback: attempt 1 did not pass its gates")
	if !ok || !strings.HasPrefix(task, "Write the answer to answer.txt.\n") {
		t.Fatalf("the prompt is not the task's followed by the feedback:\n%s", prompt)
	}
	banner := strings.Index(feedback, "Untrusted gate output begins")
	complaint := strings.Index(feedback, "\n"+gateComplaint+"\n")
	if banner < 0 || complaint < banner {
		t.Errorf("the prompt's feedback lacks the gate's output after the untrusted banner:\n%s", feedback)
	}

	// The retry waited for the default policy's delay: 2 s ±10 % after
	// attempt 1 ended (RETRY-08).
	d := f.show(wf, "answer")
	starts := jobStarts(t, worker, wf+".answer.a2")
	if len(d.Attempts) != 2 || d.Attempts[0].At == nil || len(starts) != 1 {
		t.Fatalf("show lists %d attempts; attempt 2 started %d times", len(d.Attempts), len(starts))
	}
	if wait := starts[0].Sub(*d.Attempts[0].At); wait < 1800*time.Millisecond || wait > 30*time.Second {
		t.Errorf("attempt 2 started %s after attempt 1 failed, want the default policy's 2 s (±10 %%)", wait)
	}

	// show, as JSON: both attempts, the first with its failed gate, its
	// outcome and the feedback it gave the second.
	a1, a2 := d.Attempts[0], d.Attempts[1]
	if d.WorkflowID != wf || d.Node.Status != "succeeded" || d.Budget != 3 {
		t.Errorf("show: workflow %s, node %s, budget %d", d.WorkflowID, d.Node.Status, d.Budget)
	}
	if a1.Attempt != 1 || a1.AgentStatus != "succeeded" || a1.Outcome != "retry_scheduled" || a1.Reason != "gates did not pass: answer failed" ||
		len(a1.Gates) != 1 || a1.Gates[0].Status != "failed" || !strings.Contains(string(a1.Feedback), "answer.txt holds 41, want 42") {
		t.Errorf("show: attempt 1 = %+v", a1)
	}
	if a2.Attempt != 2 || a2.AgentStatus != "succeeded" || a2.Outcome != "" || len(a2.Gates) != 1 || a2.Gates[0].Status != "passed" {
		t.Errorf("show: attempt 2 = %+v", a2)
	}
	if !strings.Contains(d.Diff, "+42") || d.DiffStat == nil || len(d.DiffStat.Files) != 2 {
		t.Errorf("show: the candidate diff %+v:\n%s", d.DiffStat, d.Diff)
	}
	// … and as text.
	r = f.cli(30*time.Second, "show", wf, "answer")
	if r.code != 0 {
		t.Fatalf("show: %s", r)
	}
	for _, re := range []string{
		`node\s+answer of ` + wf,
		`status\s+succeeded \(attempt 2 of 3\)`,
		`attempt 1: agent succeeded, patch \d+ bytes → retry_scheduled: gates did not pass: answer failed\n\s+gate answer\s+failed\n\s+feedback given to attempt 2:\n`,
		`"stdout_tail": "HOST_ONLY_VALUE=\\n` + gateComplaint + `"`,
		`attempt 2: agent succeeded, patch \d+ bytes\n\s+gate answer\s+passed\n`,
		`candidate diff \(2 files \+2 -0\):`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("show printed nothing matching %s:\n%s", re, r.stdout)
		}
	}
	if strings.Contains(r.stdout, loopHostValue) {
		t.Errorf("show carries the host's HOST_ONLY_VALUE:\n%s", r.stdout)
	}
}

// retryWorkflow: stubborn writes 41, then, told it is wrong, 40 (a
// different patch: the same one twice would escalate as a loop), until an
// operator's note says to use the fix; after depends on it.
const retryWorkflow = `name: retry-with-note
` + agentDefaults + `  max_attempts: 2
gates:
` + answerGate + `tasks:
  - id: stubborn
    gates: [answer]
    prompt: |
      Write the answer to answer.txt.
      @if-no-feedback
      @write answer.txt
      41
      @end
      @endif
      @if-feedback holds 41
      @write answer.txt
      40
      @end
      @endif
      @if-note use the fix
      @print acting on the operator's note
      @write answer.txt
      42
      @end
      @endif
  - id: after
    depends_on: [stubborn]
    gates: []
    prompt: "@write after.txt\nafter\n@end\n"
`

// Attempts exhausted, then a human's retry with a note (HITL-04, S-7,
// HITL-01): stubborn fails both its attempts and escalates; submit --wait
// ends with exit 5 and its dependent waits. The inbox lists it with its
// attempts, budget, reason and diff stat. `coordinator retry --note`
// grants it the task's attempts again; the agent acts on the note and the
// workflow succeeds.
func testRetryWithNote(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "loop\n"})
	wfFile := writeFile(t, t.TempDir(), "retry.yaml", retryWorkflow)
	submitted := time.Now()
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait: want exit 5 (needs attention)\n%s", r)
	}
	wf := wfID(t, r)
	const reason = "2 of 2 attempts used (gates did not pass: answer failed)"
	for _, want := range []string{
		"retrying: attempt 2 at ", "escalated to a human: " + reason,
		"workflow " + wf + " needs attention: nothing runs until a human decides (coordinator inbox)",
	} {
		if strings.Count(r.stdout, want) != 1 {
			t.Errorf("submit --wait did not print %q once:\n%s", want, r.stdout)
		}
	}
	s, code := f.status(wf)
	if n := s.node(t, "stubborn"); code != 5 || s.Status != "needs_attention" || n.Status != "escalated" ||
		n.Reason != reason || n.Attempt != 2 || n.MaxAttempts != 2 {
		t.Fatalf("status: exit %d, %s; stubborn %s (%q) at attempt %d of %d", code, s.Status, n.Status, n.Reason, n.Attempt, n.MaxAttempts)
	}
	if n := s.node(t, "after"); n.Status != "pending" || n.Attempt != 0 {
		t.Errorf("after = %+v, want pending while stubborn waits", n)
	}

	// The inbox, as JSON and as a table.
	it, ok := f.inbox(wf)["stubborn"]
	if !ok {
		t.Fatalf("the inbox does not list stubborn of %s", wf)
	}
	if it.WorkflowName != "retry-with-note" || it.Status != "escalated" || it.Attempt != 2 || it.Budget != 2 || it.Reason != reason ||
		it.Since.Before(submitted.Add(-time.Second)) || it.Since.After(time.Now()) {
		t.Errorf("inbox item = %+v", it)
	}
	if st := it.DiffStat; st == nil || len(st.Files) != 1 || st.Files[0].Path != "answer.txt" || st.Files[0].Insertions != 1 ||
		st.Insertions != 1 || st.Deletions != 0 {
		t.Errorf("inbox diff stat = %+v, want answer.txt +1", st)
	}
	r = f.cli(30*time.Second, "inbox")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "WORKFLOW") ||
		!regexp.MustCompile(regexp.QuoteMeta(wf)+` \(retry-with-note\)\s+stubborn\s+2/2\s+\S+\s+1 files \+1 -0\s+`+regexp.QuoteMeta(reason)).MatchString(r.stdout) {
		t.Errorf("inbox table lacks stubborn's row:\n%s", r)
	}

	// The human grants the task's attempts again, with a note.
	r = f.decide("retry", wf, "stubborn", "e2e-operator", "--note", "use the fix")
	if !strings.Contains(r.stdout, wf+" stubborn: ") || !strings.Contains(r.stdout, "retry granted by e2e-operator (2 more attempts)") {
		t.Errorf("retry printed:\n%s", r)
	}
	w := f.cli(2*time.Minute, "watch", wf)
	if w.code != 0 {
		t.Fatalf("watch after the retry: want exit 0\n%s", w)
	}
	for _, re := range []string{
		`node stubborn\s+2 more attempts granted by e2e-operator: use the fix\n`,
		`node stubborn\s+ready \(attempt 3\)`, `node after\s+succeeded`, `workflow ` + wf + `\s+succeeded`,
	} {
		if !regexp.MustCompile(re).MatchString(w.stdout) {
			t.Errorf("watch printed nothing matching %s:\n%s", re, w.stdout)
		}
	}
	s, code = f.status(wf)
	if n := s.node(t, "stubborn"); code != 0 || s.Status != "succeeded" || n.Status != "succeeded" || n.Attempt != 3 || n.MaxAttempts != 4 {
		t.Fatalf("status: exit %d, %s; stubborn %s at attempt %d of %d, want succeeded at 3 of 4", code, s.Status, n.Status, n.Attempt, n.MaxAttempts)
	}
	if logs := f.cli(30*time.Second, "logs", wf, "stubborn"); !strings.Contains(logs.stdout, "acting on the operator's note") {
		t.Errorf("attempt 3's agent did not act on the note:\n%s", logs)
	}
	// The note reached the agent in its feedback, marked as the operator's.
	var fb struct {
		NextAttempt int `json:"next_attempt"`
		MaxAttempts int `json:"max_attempts"`
		Note        *struct {
			From string `json:"from"`
			Text string `json:"text"`
		} `json:"note"`
	}
	d := f.show(wf, "stubborn")
	if json.Unmarshal(d.Feedback, &fb) != nil || fb.Note == nil ||
		fb.Note.From != "e2e-operator" || fb.Note.Text != "use the fix" || fb.NextAttempt != 3 || fb.MaxAttempts != 4 {
		t.Errorf("the feedback of attempt 3 = %s", d.Feedback)
	}
	// show keeps, per attempt, what it was given: attempt 3 the operator's
	// retry, note and feedback; attempt 2 attempt 1's feedback, from the
	// retry policy (HITL-06, S-2.12).
	if len(d.Attempts) != 3 {
		t.Fatalf("show lists %d attempts, want 3", len(d.Attempts))
	}
	if a := d.Attempts[2]; a.RetriedBy != "e2e-operator" || a.RetryNote != "use the fix" || !sameJSON(a.Received, d.Feedback) {
		t.Errorf("show: attempt 3 retried by %q with %q, received %s", a.RetriedBy, a.RetryNote, a.Received)
	}
	if a := d.Attempts[1]; a.RetriedBy != "" || len(a.Received) == 0 || !sameJSON(a.Received, d.Attempts[0].Feedback) {
		t.Errorf("show: attempt 2 retried by %q, received %s; want attempt 1's feedback %s", a.RetriedBy, a.Received, d.Attempts[0].Feedback)
	}
	if a := d.Attempts[0]; len(a.Received) != 0 {
		t.Errorf("show: attempt 1 received %s", a.Received)
	}
	if r := f.cli(30*time.Second, "show", wf, "stubborn"); !strings.Contains(r.stdout, "attempt 3: agent succeeded") ||
		!strings.Contains(r.stdout, "  retried by e2e-operator with a note: use the fix\n  feedback received:\n") {
		t.Errorf("show printed no retry of attempt 3:\n%s", r)
	}
	if got := fileAt(t, repo, "supervisor/"+wf, "answer.txt"); got != "42\n" {
		t.Errorf("answer.txt = %q", got)
	}
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\tafter.txt", "A\tanswer.txt"}; !equalStrings(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
	if in := f.inbox(wf); len(in) != 0 {
		t.Errorf("the inbox still lists %+v", in)
	}
}

// approveWorkflow: close-enough writes 41, which its gate refuses, with
// one attempt; after depends on it.
const approveWorkflow = `name: approve
` + agentDefaults + `  max_attempts: 1
gates:
` + answerGate + `tasks:
  - id: close-enough
    gates: [answer]
    prompt: "@write answer.txt\n41\n@end\n"
  - id: after
    depends_on: [close-enough]
    gates: []
    prompt: "@write after.txt\nafter\n@end\n"
`

// Approve from the inbox (HITL-01, S-9): close-enough escalates at its
// first failure; a human approves it despite its failed gate, its patch is
// integrated, its dependent runs and the workflow succeeds. A rejection
// needs a reason, and a node that no longer waits cannot be decided on.
func testApprove(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "loop\n"})
	wfFile := writeFile(t, t.TempDir(), "approve.yaml", approveWorkflow)
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait: want exit 5 (needs attention)\n%s", r)
	}
	wf := wfID(t, r)
	const reason = "1 of 1 attempts used (gates did not pass: answer failed)"
	it, ok := f.inbox(wf)["close-enough"]
	if !ok || it.Reason != reason || it.Attempt != 1 || it.Budget != 1 || it.DiffStat == nil || it.DiffStat.Insertions != 1 {
		t.Fatalf("inbox item of close-enough = %+v (listed: %v)", it, ok)
	}

	if r := f.cli(30*time.Second, "reject", wf, "close-enough", "--as", "e2e-approver"); r.code != 64 || !strings.Contains(r.stderr, "reject needs --reason") {
		t.Errorf("reject without a reason: want exit 64\n%s", r)
	}
	if n := f.detail(wf).node(t, "close-enough"); n.Status != "escalated" {
		t.Fatalf("close-enough is %s after a refused rejection", n.Status)
	}

	r = f.decide("approve", wf, "close-enough", "e2e-approver", "--note", "41 is close enough")
	if !strings.Contains(r.stdout, wf+" close-enough: ") || !strings.Contains(r.stdout, "approved by e2e-approver") {
		t.Errorf("approve printed:\n%s", r)
	}
	w := f.cli(2*time.Minute, "watch", wf)
	if w.code != 0 || !regexp.MustCompile(`node close-enough\s+approved by e2e-approver: 41 is close enough\n`).MatchString(w.stdout) {
		t.Fatalf("watch after the approval: want exit 0 and the approval\n%s", w)
	}
	s, code := f.status(wf)
	n := s.node(t, "close-enough")
	if code != 0 || s.Status != "succeeded" || n.Status != "succeeded" || n.Reason != "approved by e2e-approver" || n.Attempt != 1 {
		t.Fatalf("status: exit %d, %s; close-enough %s (%q) at attempt %d", code, s.Status, n.Status, n.Reason, n.Attempt)
	}
	if g := n.gate(t, "answer"); g.Status != "failed" {
		t.Errorf("close-enough's gate is %s; an approval does not rewrite it", g.Status)
	}
	if a := s.node(t, "after"); a.Status != "succeeded" {
		t.Errorf("after is %s (%s)", a.Status, a.Reason)
	}
	branch := "supervisor/" + wf
	commits := branchCommits(t, repo, base, branch)
	if len(commits) != 2 || commits[0].node != "close-enough" || commits[0].sha != n.Commit || commits[1].node != "after" {
		t.Errorf("commits on %s = %+v, want close-enough's (%s), then after's", branch, commits, n.Commit)
	}
	if got := fileAt(t, repo, branch, "answer.txt"); got != "41\n" {
		t.Errorf("answer.txt = %q, want the approved 41", got)
	}
	if r := f.cli(30*time.Second, "approve", wf, "close-enough", "--as", "e2e-approver"); r.code == 0 ||
		!strings.Contains(r.stderr, "only an escalated node, or one awaiting approval, waits for a human") {
		t.Errorf("a second approval: want it refused\n%s", r)
	}
	if in := f.inbox(wf); len(in) != 0 {
		t.Errorf("the inbox still lists %+v", in)
	}
}

// loopRestartWorkflow: stuck escalates at its first failure; later fails its
// first attempt and is retried under the conservative policy (5 s before
// attempt 2), which fixes it from the feedback.
const loopRestartWorkflow = `name: loop-restart
` + agentDefaults + `gates:
` + answerGate + `  - name: stuck-answer
    command: [gatehelper, expect, stuck.txt, "42"]
tasks:
  - id: stuck
    max_attempts: 1
    gates: [stuck-answer]
    prompt: "@write stuck.txt\n41\n@end\n"
  - id: later
    retry_policy: conservative
    gates: [answer]
    prompt: |
      @if-no-feedback
      @write answer.txt
      41
      @end
      @endif
      @if-feedback answer.txt holds 41, want 42
      @write answer.txt
      42
      @end
      @endif
`

// TestLoopCoordinatorRestart stops `coordinator serve` while one node is
// escalated and another waits out its retry delay, and starts a new one on
// the same data dir, NATS and Redis. The escalation survives: the inbox
// still lists the node and approving it works (HITL-01, HITL-04). The
// retry survives too (RETRY-08): attempt 2 runs once, not before its time.
// With SIGKILL the new coordinator waits for the old one's leader lease to
// expire (15 s), past the retry's time; with SIGTERM it leads at once, so
// that it is the one that waits for the delay to end.
func TestLoopCoordinatorRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"sigterm", syscall.SIGTERM}, {"sigkill", syscall.SIGKILL}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, crashAckWait)
			coord := f.coordinator("coordinator-1", "coordinator")
			worker := f.worker("worker-1", "--concurrency", "2")
			f.gaterunner("gate-1", "--concurrency", "2")
			repo, base := testkit.Repo(t, map[string]string{"README.md": "base\n"})
			wf := submit(t, f, writeFile(t, t.TempDir(), "restart.yaml", loopRestartWorkflow), repo)

			var s wfStatus
			waitFor(t, time.Minute, "stuck to escalate while later waits for its retry", func() bool {
				s = f.detail(wf)
				if l := s.node(t, "later"); l.Attempt > 1 || l.Status == "succeeded" {
					t.Fatalf("later's attempt 2 began before stuck escalated: %+v", l)
				}
				return s.node(t, "stuck").Status == "escalated" && s.node(t, "later").Status == "retrying"
			})
			retryAt := s.node(t, "later").RetryAt
			if retryAt == nil {
				t.Fatalf("retrying node later has no retry_at: %+v", s.node(t, "later"))
			}
			t.Logf("stuck escalated, later retries at %s; stopping %s with %s", retryAt.Format(time.StampMilli), coord.name, tc.sig)
			coord.signal(t, tc.sig)
			if err := coord.wait(t, 30*time.Second); tc.sig == syscall.SIGTERM && err != nil {
				t.Errorf("coordinator-1 did not shut down cleanly on SIGTERM: %v", err)
			}
			if stopped := time.Now(); !stopped.Before(*retryAt) {
				t.Fatalf("coordinator-1 stopped %s after the retry was due; the test means to stop it during the delay", stopped.Sub(*retryAt))
			}
			if n := len(jobStarts(t, worker, wf+".later.a2")); n != 0 {
				t.Fatalf("later's attempt 2 started before its time")
			}

			coord2 := f.startCoordinator("coordinator-2", "coordinator")
			f.waitCoordinator(coord2, time.Minute)
			if early := time.Until(*retryAt).Round(time.Millisecond); early > 0 {
				t.Logf("coordinator-2 ready %s before the retry is due", early)
			} else {
				t.Logf("coordinator-2 ready %s after the retry was due", -early)
			}

			// The escalation survived: the inbox still lists stuck.
			it, ok := f.inbox(wf)["stuck"]
			if want := "1 of 1 attempts used (gates did not pass: stuck-answer failed)"; !ok || it.Reason != want || it.Attempt != 1 || it.Budget != 1 {
				t.Errorf("after the restart, the inbox item of stuck = %+v (listed: %v), want %q", it, ok, want)
			}

			// The retry survived: attempt 2 ran once, not before its time.
			s = f.waitNode(wf, "later", "succeeded", time.Minute)
			if l := s.node(t, "later"); l.Attempt != 2 {
				t.Errorf("later succeeded at attempt %d, want 2", l.Attempt)
			}
			started := jobStarts(t, worker, wf+".later.a2")
			if len(started) != 1 {
				t.Errorf("later's attempt 2 started %d times, want once", len(started))
			} else if started[0].Before(*retryAt) {
				t.Errorf("later's attempt 2 started at %s, %s before its time", started[0].Format(time.StampMilli), retryAt.Sub(started[0]))
			} else {
				t.Logf("later's attempt 2 started %s after its time", started[0].Sub(*retryAt).Round(time.Millisecond))
			}
			if n := len(jobStarts(t, worker, wf+".later.a3")); n != 0 {
				t.Errorf("later ran an attempt 3")
			}
			if s, code := f.status(wf); code != 5 || s.Status != "needs_attention" || s.node(t, "stuck").Status != "escalated" {
				t.Fatalf("status: exit %d, %s, stuck %s; want 5, needs_attention, escalated", code, s.Status, s.node(t, "stuck").Status)
			}

			// Approving stuck works on the new coordinator.
			f.decide("approve", wf, "stuck", "e2e-approver", "--note", "41 will do")
			w := f.cli(2*time.Minute, "watch", wf)
			if w.code != 0 {
				t.Fatalf("watch after the approval: want exit 0\n%s", w)
			}
			for re, want := range map[string]int{
				`node later\s+retrying: attempt 2 at `: 1, `node later\s+ready \(attempt 2\)`: 1,
				`node stuck\s+escalated to a human: `: 1, `node stuck\s+approved by e2e-approver: 41 will do`: 1,
				`node \S+\s+ready \(attempt 1\)`: 2, `node \S+\s+ready \(attempt`: 3,
			} {
				if got := len(regexp.MustCompile(re).FindAllString(w.stdout, -1)); got != want {
					t.Errorf("watch shows %d lines matching %s, want %d:\n%s", got, re, want, w.stdout)
				}
			}
			s, code := f.status(wf)
			if code != 0 || s.Status != "succeeded" || s.node(t, "stuck").Reason != "approved by e2e-approver" {
				t.Fatalf("status: exit %d, %s (%s), stuck %+v", code, s.Status, s.Reason, s.node(t, "stuck"))
			}
			branch := "supervisor/" + wf
			if got, want := branchChanges(t, repo, base, branch), []string{"A\tanswer.txt", "A\tstuck.txt"}; !equalStrings(got, want) {
				t.Errorf("changes on %s = %q, want %q", branch, got, want)
			}
			if a, b := fileAt(t, repo, branch, "answer.txt"), fileAt(t, repo, branch, "stuck.txt"); a != "42\n" || b != "41\n" {
				t.Errorf("answer.txt = %q (want later's fix), stuck.txt = %q (want the approved 41)", a, b)
			}
			// From the whole log, or (after a clean stop, which writes
			// one) from a snapshot and the events after it.
			if !strings.Contains(coord2.logText(), "state rebuilt from the event log") &&
				!strings.Contains(coord2.logText(), "state rebuilt from a snapshot and the events after it") {
				t.Errorf("coordinator-2 did not log rebuilding its state")
			}
		})
	}
}

// nodeDetail is a node as `coordinator show WF NODE -o json` prints it.
type nodeDetail struct {
	WorkflowID string     `json:"workflow_id"`
	Node       nodeStatus `json:"node"`
	Budget     int        `json:"budget"`
	Attempts   []struct {
		Attempt     int             `json:"attempt"`
		AgentStatus string          `json:"agent_status"`
		Gates       []gateStatus    `json:"gates"`
		Outcome     string          `json:"outcome"`
		Reason      string          `json:"reason"`
		At          *time.Time      `json:"at"`
		Feedback    json.RawMessage `json:"feedback"`
		Received    json.RawMessage `json:"received_feedback"`
		RetriedBy   string          `json:"retried_by"`
		RetryNote   string          `json:"retry_note"`
	} `json:"attempts"`
	Feedback json.RawMessage `json:"feedback"`
	Diff     string          `json:"diff"`
	DiffStat *struct {
		Files []struct {
			Path string `json:"path"`
		} `json:"files"`
	} `json:"diff_stat"`
}

// sameJSON says whether a and b are the same JSON value, however
// indented.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// show runs `coordinator show WF NODE -o json`.
func (f *fleet) show(wf, node string) nodeDetail {
	f.t.Helper()
	r := f.cli(30*time.Second, "show", wf, node, "-o", "json")
	if r.code != 0 {
		f.t.Fatalf("show: %s", r)
	}
	var d nodeDetail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		f.t.Fatalf("show JSON: %v\n%s", err, r)
	}
	return d
}

// jobStarted matches a runner's log line for a job it started.
var jobStarted = regexp.MustCompile(`(?m)^time=(\S+) .*msg="job started" .*\bjob=(\S+)`)

// jobStarts returns when runner p logged starting job jobID, each time.
func jobStarts(t testing.TB, p *proc, jobID string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, m := range jobStarted.FindAllStringSubmatch(p.logText(), -1) {
		if m[2] != jobID {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("%s's log: job start time %q: %v", p.name, m[1], err)
		}
		out = append(out, at)
	}
	return out
}

// logValue is the value of NAME in the last "NAME=value" line of an agent
// log (the test agent's @env).
func logValue(log, name string) string {
	v := ""
	for _, l := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(l, name+"="); ok {
			v = rest
		}
	}
	return v
}

// prefixed returns the lines of log that start with prefix, without it:
// what the test agent's @print-feedback and @print-prompt printed.
func prefixed(log, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			b.WriteString(rest + "\n")
		}
	}
	return b.String()
}
