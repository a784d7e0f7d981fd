package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/coordinator/internal/notify"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// hookServer is a webhook receiver: the notifications it got, in order.
type hookServer struct {
	mu    sync.Mutex
	got   []notify.Notification
	fails int // answer 503 to this many requests first
}

func (h *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fails > 0 {
		h.fails--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	var n notify.Notification
	if err := json.NewDecoder(r.Body).Decode(&n); err != nil || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	h.got = append(h.got, n)
}

func (h *hookServer) types() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, n := range h.got {
		out = append(out, n.Type+" "+n.NodeID)
	}
	return out
}

// The inbox end to end through the CLI, on an in-process fleet with a
// worker and a gate runner: a gate failure with one attempt escalates
// (submit --wait ends with 5), the inbox lists the node, show prints its
// attempt; a retry with a note fails again and show prints, for its
// attempt, who retried it, the note and the feedback it received; reject
// fails it and skips its dependent; a webhook hears the escalations and
// the decisions, though it refused the first try (HITL-01, HITL-04,
// HITL-06, S-9).
func TestInboxRejectAndNotify(t *testing.T) {
	hook := &hookServer{fails: 1}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	disp := notify.New([]notify.Sink{notify.Webhook{URL: srv.URL + "/hook?token=secret"}},
		notify.Options{Backoff: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer disp.Close()

	run := cliFleet(t, fleet.Options{Notify: disp})

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "inbox\n"})
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	testkit.WriteFile(t, wf, `name: inbox
defaults:
  agent: {command: ["true"]}
  max_attempts: 1
  allow_empty: true
gates:
  - {name: never, command: ["false"]}
tasks:
  - {id: a, prompt: a, gates: [never]}
  - {id: b, prompt: b, depends_on: [a], gates: []}
`)
	r := run("submit", wf, "--repo", repo, "--wait")
	wantCode(t, r, ExitNeedsAttention, "escalated to a human: 1 of 1 attempts used (gates did not pass: never failed)",
		"needs attention: nothing runs until a human decides (coordinator inbox)")
	id := strings.Fields(r.stdout)[0]

	r = run("inbox", "-o", "json")
	wantCode(t, r, 0)
	var items []api.InboxItem
	decodeJSON(t, r, &items)
	if len(items) != 1 || items[0].WorkflowID != id || items[0].NodeID != "a" || items[0].Attempt != 1 || items[0].Budget != 1 ||
		!strings.Contains(items[0].Reason, "never failed") || items[0].Since.IsZero() {
		t.Fatalf("inbox: %+v", items)
	}
	wantCode(t, run("inbox"), 0, id+" (inbox)", "1/1", "no patch")
	wantCode(t, run("show", id, "a"), 0, "status    escalated (attempt 1 of 1)", "attempt 1: agent succeeded → escalated:", "gate never")
	wantCode(t, run("status", id), ExitNeedsAttention, "needs_attention")

	// A retry with a note; its round fails too. show still prints, for
	// attempt 2, who retried it, the note and the feedback it received.
	wantCode(t, run("retry", id, "a", "--as", "bob", "--note", "try the other way", "--attempts", "1"), 0, "workflow "+id+" is")
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "attempt 2 to escalate", func() bool {
		return strings.Contains(run("inbox").stdout, "2/2")
	})
	wantCode(t, run("show", id, "a"), 0, "status    escalated (attempt 2 of 2)",
		"attempt 2: agent succeeded → escalated:", "  retried by bob with a note: try the other way\n  feedback received:\n",
		`"text": "try the other way"`, "feedback given to attempt 3:")

	wantCode(t, run("reject", id, "a"), ExitUsage, "reject needs --reason")
	wantCode(t, run("approve", id, "b"), ExitFault, "node b is pending: only an escalated node, or one awaiting approval, waits for a human")
	wantCode(t, run("reject", id, "a", "--reason", "not worth it", "--as", "ada"), 0,
		"a: failed rejected by ada: not worth it", "workflow "+id+" is")
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the workflow to fail", func() bool {
		return run("status", id).code == ExitFailed
	})
	wantCode(t, run("status", id), ExitFailed, "skipped")
	wantCode(t, run("inbox"), 0, "nothing waits for a human")

	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the webhook to hear all four", func() bool { return len(hook.types()) == 4 })
	if got := strings.Join(hook.types(), ", "); got != "node.escalated a, node.retry_granted a, node.escalated a, node.rejected a" {
		t.Errorf("webhook got %s", got)
	}
	hook.mu.Lock()
	esc, rej := hook.got[0], hook.got[3]
	hook.mu.Unlock()
	if esc.WorkflowID != id || esc.WorkflowName != "inbox" || !strings.Contains(esc.Reason, "never failed") ||
		!strings.Contains(esc.Hint, "coordinator show "+id+" a") || rej.By != "ada" || rej.Reason != "not worth it" {
		t.Errorf("notifications %+v, %+v", esc, rej)
	}
}

// An approval step and a human task through the CLI (HITL-02, HITL-03):
// the inbox lists both, only an approver may decide, show prints a human
// task's instructions, who approved reaches the dependent's agent, and a
// webhook hears each wait and each approval.
func TestApprovalStepAndHumanTask(t *testing.T) {
	hook := &hookServer{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	disp := notify.New([]notify.Sink{notify.Webhook{URL: srv.URL}}, notify.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer disp.Close()
	run := cliFleet(t, fleet.Options{Notify: disp})
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "approvals\n"})
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	testkit.WriteFile(t, wf, `name: approvals
defaults:
  agent: {command: ["true"]}
  allow_empty: true
tasks:
  - {id: design, prompt: d, gates: [], approval: {approvers: [ada]}}
  - {id: sign-off, type: human, prompt: Read the design doc and sign it off., depends_on: [design]}
  - id: build
    depends_on: [sign-off]
    gates: []
    agent: {command: [env]}
    prompt: b
`)
	r := run("submit", wf, "--repo", repo, "--wait")
	wantCode(t, r, ExitNeedsAttention, "node design                  awaiting approval: an approval step", "needs attention")
	id := strings.Fields(r.stdout)[0]
	wantCode(t, run("inbox"), 0, "design", "an approval step: its gates passed")
	wantCode(t, run("approve", id, "design", "--as", "eve"), ExitFault, "node design may be decided by ada only, not eve")
	wantCode(t, run("approve", id, "design", "--as", "ada"), 0, "design: succeeded approved by ada")

	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the human task to wait", func() bool {
		return strings.Contains(run("inbox").stdout, "a human task")
	})
	wantCode(t, run("show", id, "sign-off"), 0, "a human task; what to do:\nRead the design doc and sign it off.")
	wantCode(t, run("retry", id, "sign-off"), ExitFault, "a human task: there is no agent to retry")
	wantCode(t, run("approve", id, "sign-off", "--as", "bob"), 0, "sign-off: succeeded approved by bob")
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the webhook to hear of both approvals", func() bool {
		return strings.Join(hook.types(), ", ") == "node.awaiting_approval design, node.approved design, "+
			"node.awaiting_approval sign-off, node.approved sign-off"
	})
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the workflow to succeed", func() bool {
		return run("status", id).code == 0
	})
	wantCode(t, run("logs", id, "build"), 0, "SUPERVISOR_APPROVALS=design=ada,sign-off=bob")
}

// The fleet-wide pause through the CLI (S-7.4): past the failed rounds an
// hour allows, no retry starts and status says why; resume lets them run.
func TestFleetPauseAndResume(t *testing.T) {
	run := cliFleet(t, fleet.Options{MaxFailuresPerHour: 1})
	wantCode(t, run("resume"), ExitFault, "the fleet is not paused")
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "pause\n"})
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	testkit.WriteFile(t, wf, `name: pause
defaults:
  agent: {command: ["true"]}
  allow_empty: true
  retry_policy: aggressive
gates:
  - {name: never, command: ["false"]}
tasks:
  - {id: a, prompt: a, gates: [never]}
  - {id: b, prompt: b, gates: [never]}
`)
	r := run("submit", wf, "--repo", repo)
	wantCode(t, r, 0)
	id := strings.Fields(r.stdout)[0]
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the fleet to pause", func() bool {
		return strings.Contains(run("status").stdout, "the fleet is paused")
	})
	wantCode(t, run("status"), 0, "2 agent rounds failed within an hour, more than the 1 allowed", "coordinator resume")
	wantCode(t, run("status", id), ExitRunning, "fleet     paused: 2 agent rounds failed within an hour")
	// A workflow submitted while paused waits; its watch shows why.
	later := filepath.Join(t.TempDir(), "later.yaml")
	testkit.WriteFile(t, later, "name: later\ndefaults:\n  agent: {command: [\"true\"]}\n  allow_empty: true\ntasks:\n  - {id: l, prompt: l, gates: []}\n")
	r = run("submit", later, "--repo", repo)
	wantCode(t, r, 0)
	laterID := strings.Fields(r.stdout)[0]
	// No new round starts while paused: past the retry delay, every node
	// is still at the attempt it had when the pause began (its second, if
	// its first failed more than the 1 s delay before the other's did) and
	// waits to retry.
	var paused api.WorkflowSummary
	decodeJSON(t, run("status", id, "-o", "json"), &paused)
	time.Sleep(2500 * time.Millisecond)
	var s api.WorkflowSummary
	decodeJSON(t, run("status", id, "-o", "json"), &s)
	attempts := map[string]int{}
	for i, n := range s.Nodes {
		attempts[n.ID] = paused.Nodes[i].Attempt
		if n.Status != "retrying" || n.Attempt != paused.Nodes[i].Attempt {
			t.Errorf("while paused: node %s is %s at attempt %d; it was at attempt %d when the pause began",
				n.ID, n.Status, n.Attempt, paused.Nodes[i].Attempt)
		}
	}
	// It reports the failed rounds the pause was about (2, or more if one
	// was under way when it began), not those left after it forgave them.
	r = run("resume", "--as", "ada")
	wantCode(t, r, 0, "the fleet runs again (resumed by ada; ")
	if !regexp.MustCompile(`; [2-9] failed rounds in the last hour before\)`).MatchString(r.stdout) {
		t.Errorf("resume did not report the failed rounds before it:\n%s", r.stdout)
	}
	// watch prints the pause in force when the workflow began, before its
	// first event, and the resume when it comes (S-4.6).
	w := run("watch", laterID)
	wantCode(t, w, 0)
	lines := strings.Split(w.stdout, "\n")
	at := func(want string) int {
		for i, l := range lines {
			if strings.Contains(l, want) {
				return i
			}
		}
		t.Errorf("watch %s printed no line with %q:\n%s", laterID, want, w.stdout)
		return -1
	}
	pause := at("fleet                        paused: 2 agent rounds failed within an hour, more than the 1 allowed; no new agent round starts anywhere until `coordinator resume`")
	submitted, resumed, ready := at("submitted: later"), at("fleet                        resumed by ada"), at("node l                       ready")
	if pause >= submitted || submitted >= resumed || resumed >= ready {
		t.Errorf("watch %s: want the pause, the submission, the resume and the node's start in that order:\n%s", laterID, w.stdout)
	}
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the retries to run", func() bool {
		var s api.WorkflowSummary
		if err := json.Unmarshal([]byte(run("status", id, "-o", "json").stdout), &s); err != nil {
			return false
		}
		for _, n := range s.Nodes {
			if n.Attempt <= attempts[n.ID] {
				return false
			}
		}
		return true
	})
}

// cliFleet starts an in-process fleet (embedded NATS, coordinator, a
// worker and a gate runner) with opts, and returns a function running the
// CLI against it, as the binary does.
func cliFleet(t *testing.T, opts fleet.Options) func(args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts.DataDir, opts.Listen = t.TempDir(), "127.0.0.1:0"
	if opts.Tick == 0 {
		opts.Tick = 200 * time.Millisecond
	}
	opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if len(opts.RepoRoots.Dirs()) == 0 {
		// The tests' repositories are temporary directories: the
		// coordinator may deliver branches and merge into them.
		roots, err := reporoots.New([]string{os.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		opts.RepoRoots = roots
	}
	st, err := fleet.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	empty := t.TempDir()
	return func(args ...string) cliResult {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--nats=" + st.URL(), "--builtin-gates=" + empty, "--user-gates=", "--timeout=90s"}, args...),
			&out, &errOut)
		return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
	}
}
