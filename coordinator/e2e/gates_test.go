package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The gate engine end to end: the test gates for CI (always-pass,
// always-fail, always-pending, slow-gate, flaky-gate), pending gates that
// pass or time out, integrity violations, severity and on_fail, skips
// through gate and task dependencies, the fleet-wide gate cache (hits,
// misses, bypasses, single flight across two runner processes), gate
// reruns, and `coordinator gate results`. One fleet serves every subtest:
// nats-server, Redis, `coordinator serve`, a worker, two gate runners on
// the default pool and two on pool "twin".
//
// Gate commands are argv lists run by gatehelper (testdata/gatehelper), so
// no gate needs a shell.

// gateRow is one row of `gate results -o json`.
type gateRow struct {
	Node string `json:"node"`
	gateStatus
}

// sub is the fleet as seen from a subtest: its failures are the subtest's.
func (f *fleet) sub(t *testing.T) *fleet {
	return &fleet{t: t, dir: f.dir, natsURL: f.natsURL, redisURL: f.redisURL, ackWait: f.ackWait, env: f.env}
}

// gateResults runs `coordinator gate results WF [NODE] -o json`.
func (f *fleet) gateResults(args ...string) []gateRow {
	f.t.Helper()
	r := f.cli(30*time.Second, append([]string{"gate", "results"}, append(args, "-o", "json")...)...)
	if r.code != 0 {
		f.t.Fatalf("gate results: %s", r)
	}
	var rows []gateRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		f.t.Fatalf("gate results JSON: %v\n%s", err, r)
	}
	return rows
}

// tableRows parses the table `gate results` prints: for each "node/gate",
// its STATUS and CACHED columns.
func tableRows(t testing.TB, out string) map[string][2]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "NODE") {
		t.Fatalf("gate results printed no table:\n%s", out)
	}
	rows := map[string][2]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			break // the table ends at the first blank line
		}
		if len(f) < 7 { // HOST and LOG are empty for a skipped gate
			t.Fatalf("gate results row %q has %d columns", l, len(f))
		}
		rows[f[0]+"/"+f[1]] = [2]string{f[2], f[5]}
	}
	return rows
}

// markerLines returns the lines gatehelper's append steps wrote to path,
// each "<workflow> <node> <gate> <attempt>".
func markerLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// runsOf counts the marker lines of one workflow's node.
func runsOf(lines []string, wf, node string) int {
	n := 0
	for _, l := range lines {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == wf && f[1] == node {
			n++
		}
	}
	return n
}

func TestGates(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "4")
	f.gaterunner("gate-1", "--concurrency", "3")
	f.gaterunner("gate-2", "--concurrency", "3")
	f.gaterunner("twin-1", "--pools", "twin", "--concurrency", "1")
	f.gaterunner("twin-2", "--pools", "twin", "--concurrency", "1")
	// touch-git-config changes the runner's mirror, which every workspace
	// of the host shares: it runs on a runner of its own.
	f.gaterunner("iso-1", "--pools", "iso", "--concurrency", "1")

	t.Run("ShellWrappers", func(t *testing.T) { t.Parallel(); testShellWrappers(f.sub(t)) })
	t.Run("CIGates", func(t *testing.T) { t.Parallel(); testCIGates(f.sub(t)) })
	t.Run("FlakyRerun", func(t *testing.T) { t.Parallel(); testFlakyRerun(f.sub(t)) })
	t.Run("Cache", func(t *testing.T) { t.Parallel(); testCache(f.sub(t)) })
	t.Run("SingleFlight", func(t *testing.T) { t.Parallel(); testSingleFlight(f.sub(t)) })
	t.Run("DemoCache", func(t *testing.T) { t.Parallel(); testDemoCache(f.sub(t)) })
}

// Commands are argv lists: a gate that runs a shell, also behind a
// wrapper (env, nice -n 10, timeout), or inline code (python3 -c, a git
// ! alias, awk calling system(); CM-10, CM-11), or written as a string, is
// rejected at submit with its position, before anything is uploaded; so is
// a denylisted variable set through env.
func testShellWrappers(f *fleet) {
	t := f.t
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "wrappers\n"})
	wfFile := writeFile(t, t.TempDir(), "wrappers.yaml", `name: wrappers
defaults:
  agent:
    command: `+agentCommand+`
gates:
  - name: plain
    command: [sh, -c, "exit 0"]
  - name: via-env
    command: [env, sh, -c, "exit 0"]
  - name: via-nice
    command: [nice, -n, "10", bash, -c, "exit 0"]
  - name: via-timeout
    command: [timeout, -s, KILL, "5", dash, -c, "exit 0"]
  - name: as-string
    command: "exit 0"
  - name: env-path
    command: [env, PATH=/tmp, "true"]
  - name: opted-in
    command: [env, sh, -c, "exit 0"]
    allow_shell: true
  - name: inline-python
    command: [nice, python3, -c, "print(1)"]
  - name: git-alias
    command: [git, -c, "alias.x=!true", x]
  - name: awk-system
    command: [awk, 'BEGIN{system("true")}']
tasks:
  - id: t
    prompt: nothing
`)
	r := f.cli(time.Minute, "submit", wfFile, "--repo", repo)
	if r.code != 65 {
		t.Fatalf("submit of shell gates: want exit 65 (invalid)\n%s", r)
	}
	for line, want := range map[int]string{7: "runs a shell", 9: "runs a shell", 11: "runs a shell", 13: "runs a shell",
		15: "must be an argv list", 17: "sets PATH through an env wrapper",
		22: "runs a shell (python3 -c)", 24: "runs a shell (git -c alias.x=!true)", 26: "runs a shell (awk whose program calls system())"} {
		if !strings.Contains(r.stderr, fmt.Sprintf("wrappers.yaml:%d:", line)) ||
			!regexp.MustCompile(fmt.Sprintf(`wrappers\.yaml:%d:\d+: [^\n]*%s`, line, regexp.QuoteMeta(want))).MatchString(r.stderr) {
			t.Errorf("submit did not report %q at line %d:\n%s", want, line, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "wrappers.yaml:19:") || strings.Contains(r.stderr, "wrappers.yaml:20:") {
		t.Errorf("the gate with allow_shell: true was rejected:\n%s", r.stderr)
	}
	if strings.Contains(r.stdout, "wf-") {
		t.Errorf("an invalid workflow was submitted:\n%s", r)
	}
}

// ciWorkflow has one task per behaviour; %[1]s is the file whose
// existence completes the external check of pending-then-pass. Each task
// has one attempt (max_attempts: 1), so that a failure goes straight to a
// human (HITL-04); t-onfail-block and t-int-new have three, which an
// on_fail block and an integrity violation do not wait for.
const ciWorkflow = `name: ci-gates
` + agentDefaults + `  max_attempts: 1
gates:
  - name: always-pass
    command: ["true"]
  - name: always-fail
    command: ["false"]
  - name: always-pending
    command: [gatehelper, exit, "75"]
    poll_interval: 1s
    max_pending: 3s
  - name: pending-then-pass
    command: [gatehelper, pending-until, %[1]q]
    poll_interval: 1s
  - name: slow-gate
    command: [gatehelper, sleep, 10s]
    timeout: 2s
  - name: no-shell
    command: [gatehelper, unexpanded, "$HOME", "$(id -u)", "${PATH}"]
  - name: shell-opt-in
    command: [env, sh, -c, "test -f README.md"]
    allow_shell: true
  - name: uncached
    command: ["true"]
    cache: false
  - name: lint-warn
    command: [gatehelper, print, "3 lint warnings", exit, "1"]
    severity: warning
  - name: after-warn
    command: ["true"]
    depends_on: [lint-warn]
  - name: after-fail
    command: ["true"]
    depends_on: [always-fail]
  - name: report-anyway
    command: ["true"]
    depends_on: [always-fail]
    skip_on_dependency_failure: false
  - name: edit-tracked
    command: [gatehelper, write, README.md, "rewritten by a gate"]
    severity: warning
  - name: create-file
    command: [gatehelper, write, stray.txt, "left behind"]
  - name: touch-git-config
    command: [gatehelper, touch-git, config]
    pool: iso
  - name: touch-git-head
    command: [gatehelper, touch-git, HEAD]
  - name: write-allowed
    command: [gatehelper, write, reports/summary.txt, "allowed"]
    allowed_writes: ["reports/**"]
tasks:
  - id: t-pass
    prompt: "@write t-pass.txt\npass\n@end\n"
    gates: [always-pass, no-shell, shell-opt-in, uncached]
  - id: t-fail
    prompt: "@write t-fail.txt\nfail\n@end\n"
    gates: [always-fail]
  - id: t-after-fail
    prompt: "@write t-after-fail.txt\nnever\n@end\n"
    depends_on: [t-fail]
    gates: []
  - id: t-slow
    prompt: "@write t-slow.txt\nslow\n@end\n"
    gates: [slow-gate]
  - id: t-pending
    prompt: "@write t-pending.txt\npending\n@end\n"
    gates: [always-pending]
  - id: t-pending-pass
    prompt: "@write t-pending-pass.txt\npending then pass\n@end\n"
    gates: [pending-then-pass]
  - id: t-warn
    prompt: "@write t-warn.txt\nwarn\n@end\n"
    gates: {required: [after-warn], optional: [lint-warn]}
  - id: t-onfail-warn
    prompt: "@write t-onfail-warn.txt\non_fail warn\n@end\n"
    gates: {optional: [always-fail], on_fail: {always-fail: warn}}
  - id: t-onfail-block
    prompt: "@write t-onfail-block.txt\non_fail block\n@end\n"
    gates: {required: [always-fail], on_fail: {always-fail: block}}
    max_attempts: 3
  - id: t-dep-skip
    prompt: "@write t-dep-skip.txt\ndependencies\n@end\n"
    gates: [after-fail, report-anyway]
  - id: t-int-modify
    prompt: "@write t-int-modify.txt\nmodify\n@end\n"
    gates: {optional: [edit-tracked]}
  - id: t-int-new
    prompt: "@write t-int-new.txt\nnew\n@end\n"
    gates: [create-file]
    max_attempts: 3
  - id: t-int-git
    prompt: "@write t-int-git.txt\ngit\n@end\n"
    gates: [touch-git-config]
  - id: t-int-head
    prompt: "@write t-int-head.txt\nhead\n@end\n"
    gates: [touch-git-head]
  - id: t-int-allowed
    prompt: "@write t-int-allowed.txt\nallowed\n@end\n"
    gates: [write-allowed]
`

// The CI test gates and everything that decides a node from its gates:
// exit codes, timeouts, pending → pass and pending → timeout, warnings,
// on_fail, gate and task dependency skips, and integrity violations (a
// gate that exits 0 but edits a tracked file, creates a file or touches
// .git/config fails, and blocks even as a warning; one that writes inside
// allowed_writes passes). `coordinator gate results` shows it all. A node
// whose gates did not pass escalates to a human (HITL-04): its one
// attempt is used, or its failure is not the agent's to retry (on_fail
// block, an integrity violation, which cannot be approved either), and
// submit --wait ends with exit 5 once nothing else runs. The human then
// rejects each escalated node through the CLI (HITL-01): they fail, their
// dependent is skipped and the workflow fails.
func testCIGates(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "ci gates\n"})
	done := filepath.Join(t.TempDir(), "external-check-done")
	wfFile := writeFile(t, t.TempDir(), "ci.yaml", fmt.Sprintf(ciWorkflow, done))

	started := time.Now()
	sub := f.background(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	// The external check completes once the gate has reported pending.
	var wf string
	waitFor(t, 90*time.Second, "pending-then-pass to report pending", func() bool {
		if wf == "" {
			l := f.list()
			for _, w := range l {
				if w.Name == "ci-gates" {
					wf = w.ID
				}
			}
			if wf == "" {
				return false
			}
		}
		for _, n := range f.detail(wf).Nodes {
			if n.ID == "t-pending-pass" {
				for _, g := range n.Gates {
					if g.Status == "pending" {
						return true
					}
				}
			}
		}
		return false
	})
	writeFile(t, filepath.Dir(done), filepath.Base(done), "done\n")
	r := testkit.Receive(t, sub, 3*time.Minute, "submit --wait did not return")
	if r.code != 5 || wfID(t, r) != wf {
		t.Fatalf("submit --wait: want exit 5 (needs attention) for %s\n%s", wf, r)
	}
	t.Logf("workflow %s waited for a human after %s", wf, time.Since(started).Round(time.Millisecond))

	s, code := f.status(wf)
	if code != 5 || s.Status != "needs_attention" {
		t.Fatalf("workflow %s is %s (status exit %d), want needs_attention (5)", wf, s.Status, code)
	}
	// attempts is the reason of a node that used its one attempt.
	attempts := func(failed string) string { return "1 of 1 attempts used (gates did not pass: " + failed + ")" }
	type want struct {
		node, status, reason string
		gates                map[string]string // gate → status
	}
	for _, w := range []want{
		{"t-pass", "succeeded", "", map[string]string{"always-pass": "passed", "no-shell": "passed", "shell-opt-in": "passed", "uncached": "passed"}},
		{"t-fail", "escalated", attempts("always-fail failed"), map[string]string{"always-fail": "failed"}},
		{"t-after-fail", "pending", "", nil},
		{"t-slow", "escalated", attempts("slow-gate timeout"), map[string]string{"slow-gate": "timeout"}},
		{"t-pending", "escalated", attempts("always-pending timeout"), map[string]string{"always-pending": "timeout"}},
		{"t-pending-pass", "succeeded", "", map[string]string{"pending-then-pass": "passed"}},
		{"t-warn", "succeeded", "", map[string]string{"lint-warn": "failed", "after-warn": "passed"}},
		{"t-onfail-warn", "succeeded", "", map[string]string{"always-fail": "failed"}},
		{"t-onfail-block", "escalated", "gate always-fail failed and its on_fail is block (gates did not pass: always-fail failed)",
			map[string]string{"always-fail": "failed"}},
		{"t-dep-skip", "escalated", attempts("always-fail failed"), map[string]string{"always-fail": "failed", "after-fail": "skipped", "report-anyway": "passed"}},
		{"t-int-modify", "escalated", "gate edit-tracked changed the workspace outside its allowed_writes (integrity violation: modified README.md) " +
			"(gates did not pass: edit-tracked failed)", map[string]string{"edit-tracked": "failed"}},
		{"t-int-new", "escalated", "gate create-file changed the workspace outside its allowed_writes (integrity violation: new stray.txt) " +
			"(gates did not pass: create-file failed)", map[string]string{"create-file": "failed"}},
		{"t-int-git", "escalated", "gate touch-git-config changed the workspace outside its allowed_writes (integrity violation: ",
			map[string]string{"touch-git-config": "failed"}},
		{"t-int-head", "escalated", "gate touch-git-head changed the workspace outside its allowed_writes (integrity violation: ",
			map[string]string{"touch-git-head": "failed"}},
		{"t-int-allowed", "succeeded", "", map[string]string{"write-allowed": "passed"}},
	} {
		n := s.node(t, w.node)
		if n.Status != w.status || (w.reason != "" && !strings.HasPrefix(n.Reason, w.reason)) || (w.reason == "" && n.Status == "escalated") {
			t.Errorf("node %s: %s (%q), want %s (%q)", w.node, n.Status, n.Reason, w.status, w.reason)
		}
		if len(n.Gates) != len(w.gates) {
			t.Errorf("node %s ran %d gates, want %d: %+v", w.node, len(n.Gates), len(w.gates), n.Gates)
		}
		for name, st := range w.gates {
			if g := n.gate(t, name); g.Status != st {
				t.Errorf("node %s gate %s: %s (exit %s, %q), want %s", w.node, name, g.Status, g.exit(), g.Error, st)
			}
		}
	}
	// Escalated at their first attempt although two more were left: an
	// on_fail block and an integrity violation are not retried.
	for _, id := range []string{"t-onfail-block", "t-int-new"} {
		if n := s.node(t, id); n.Attempt != 1 || n.MaxAttempts != 3 {
			t.Errorf("node %s: attempt %d of %d, want 1 of 3", id, n.Attempt, n.MaxAttempts)
		}
	}

	// Exit codes and the details behind each outcome.
	if g := s.node(t, "t-fail").gate(t, "always-fail"); g.exit() != "1" || g.Cached {
		t.Errorf("always-fail: exit %s cached %v", g.exit(), g.Cached)
	}
	if g := s.node(t, "t-slow").gate(t, "slow-gate"); g.ExitCode != nil || g.DurationMillis < 2000 || g.DurationMillis > 8000 {
		t.Errorf("slow-gate: exit %s after %d ms, want killed by its 2 s timeout", g.exit(), g.DurationMillis)
	}
	if g := s.node(t, "t-pending").gate(t, "always-pending"); !strings.Contains(g.Error, "longer than max_pending 3s") || g.ExitCode != nil {
		t.Errorf("always-pending: exit %s, error %q; want timed out past max_pending", g.exit(), g.Error)
	}
	if g := s.node(t, "t-pending-pass").gate(t, "pending-then-pass"); g.Round < 2 || g.exit() != "0" {
		t.Errorf("pending-then-pass: round %d exit %s, want passed on a later poll", g.Round, g.exit())
	}
	if g := s.node(t, "t-pass").gate(t, "no-shell"); !strings.Contains(g.Output, `arguments arrived as written: ["$HOME" "$(id -u)" "${PATH}"]`) {
		t.Errorf("no-shell output = %q", g.Output)
	}
	if g := s.node(t, "t-pass").gate(t, "uncached"); g.Cached || !strings.Contains(g.CacheDisabled, "cache: false") {
		t.Errorf("uncached: cached %v, cache_disabled %q", g.Cached, g.CacheDisabled)
	}
	if g := s.node(t, "t-warn").gate(t, "lint-warn"); g.exit() != "1" || !strings.Contains(g.Output, "3 lint warnings") {
		t.Errorf("lint-warn: exit %s output %q", g.exit(), g.Output)
	}
	if g := s.node(t, "t-dep-skip").gate(t, "after-fail"); !strings.Contains(g.Error, "gate always-fail failed") || g.Host != "" {
		t.Errorf("after-fail: %+v, want skipped by the coordinator naming always-fail", g)
	}
	for node, want := range map[string]string{"t-int-modify": "modified README.md", "t-int-new": "new stray.txt",
		"t-int-git": ".git/config", "t-int-head": ".git/HEAD"} {
		g := s.node(t, node).gate(t, map[string]string{"t-int-modify": "edit-tracked", "t-int-new": "create-file",
			"t-int-git": "touch-git-config", "t-int-head": "touch-git-head"}[node])
		found := false
		for _, v := range g.Violations {
			found = found || strings.Contains(v, want)
		}
		if !g.IntegrityViolation || !found || g.exit() != "0" || g.Cached {
			t.Errorf("%s's gate: integrity_violation %v, violations %q, exit %s; want a violation naming %q although the command exited 0",
				node, g.IntegrityViolation, g.Violations, g.exit(), want)
		}
		if !strings.Contains(g.Output, "integrity violation") {
			t.Errorf("%s's gate output lacks the violation: %q", node, g.Output)
		}
	}
	if n := s.node(t, "t-int-git"); !strings.Contains(n.Reason, "integrity violation: .git/config") {
		t.Errorf("t-int-git: reason %q", n.Reason)
	}
	if g := s.node(t, "t-int-allowed").gate(t, "write-allowed"); g.IntegrityViolation {
		t.Errorf("write-allowed: %+v", g)
	}

	// The inbox lists every escalated node (HITL-01). A patch whose gates
	// found an integrity violation cannot be approved.
	var escalated []string
	isEscalated := map[string]bool{}
	for _, n := range s.Nodes {
		if n.Status == "escalated" {
			escalated = append(escalated, n.ID)
			isEscalated[n.ID] = true
		}
	}
	inbox := f.inbox(wf)
	for _, id := range escalated {
		n := s.node(t, id)
		if it, ok := inbox[id]; !ok || it.Reason != n.Reason || it.Attempt != 1 || it.Budget != n.MaxAttempts {
			t.Errorf("inbox item of %s = %+v, want attempt 1 of %d, reason %q", id, it, n.MaxAttempts, n.Reason)
		}
	}
	if len(inbox) != len(escalated) {
		t.Errorf("inbox lists %d nodes of %s, want the %d escalated: %v", len(inbox), wf, len(escalated), escalated)
	}
	if r := f.cli(30*time.Second, "approve", wf, "t-int-new", "--as", "e2e-reviewer"); r.code == 0 ||
		!strings.Contains(r.stderr, "found an integrity violation in attempt 1; it cannot be approved") {
		t.Errorf("approve of a node with an integrity violation: want it refused\n%s", r)
	}

	// The human rejects them all (HITL-01): each fails, t-fail's dependent is
	// skipped and the workflow fails.
	for _, id := range escalated {
		f.decide("reject", wf, id, "e2e-reviewer", "--reason", "not good enough")
	}
	s = f.waitStatus(wf, "failed", time.Minute)
	for _, n := range s.Nodes {
		switch {
		case n.ID == "t-after-fail":
			if n.Status != "skipped" || !strings.Contains(n.Reason, "dependency t-fail failed") {
				t.Errorf("node t-after-fail: %s (%q), want skipped for dependency t-fail failed", n.Status, n.Reason)
			}
		case isEscalated[n.ID]:
			if n.Status != "failed" || n.Reason != "rejected by e2e-reviewer: not good enough" {
				t.Errorf("node %s after the rejection: %s (%q)", n.ID, n.Status, n.Reason)
			}
		case n.Status != "succeeded":
			t.Errorf("node %s: %s (%q), want succeeded", n.ID, n.Status, n.Reason)
		}
	}
	if _, code := f.status(wf); code != 2 {
		t.Errorf("status of the failed workflow: exit %d, want 2", code)
	}

	// gate results, as JSON: every gate of every node that ran gates.
	rows := f.gateResults(wf)
	byKey := map[string]gateRow{}
	for _, row := range rows {
		byKey[row.Node+"/"+row.Name] = row
	}
	if len(rows) != 20 || len(byKey) != 20 {
		t.Errorf("gate results -o json: %d rows (%d distinct), want 20", len(rows), len(byKey))
	}
	for _, n := range s.Nodes {
		for _, g := range n.Gates {
			if row := byKey[n.ID+"/"+g.Name]; row.Status != g.Status || row.Attempt != 1 {
				t.Errorf("gate results %s/%s: %s attempt %d, status says %s", n.ID, g.Name, row.Status, row.Attempt, g.Status)
			}
		}
	}
	// One node only.
	if only := f.gateResults(wf, "t-dep-skip"); len(only) != 3 {
		t.Errorf("gate results %s t-dep-skip: %d rows, want 3", wf, len(only))
	}
	if r := f.cli(30*time.Second, "gate", "results", wf, "no-such-node"); r.code != 1 || !strings.Contains(r.stderr, "no-such-node") {
		t.Errorf("gate results of an unknown node: %s", r)
	}

	// … and as a table, with a section for each gate that did not pass.
	r = f.cli(30*time.Second, "gate", "results", wf)
	if r.code != 0 {
		t.Fatalf("gate results: %s", r)
	}
	table := tableRows(t, r.stdout)
	for key, want := range map[string][2]string{
		"t-pass/always-pass": {"passed", "no"}, "t-pass/uncached": {"passed", "off"}, "t-fail/always-fail": {"failed", "no"},
		"t-slow/slow-gate": {"timeout", "no"}, "t-pending/always-pending": {"timeout", "no"},
		"t-dep-skip/after-fail": {"skipped", "no"}, "t-int-modify/edit-tracked": {"failed", "no"},
	} {
		if got := table[key]; got != want {
			t.Errorf("gate results table row %s: status, cached = %q, want %q\n%s", key, got, want, r.stdout)
		}
	}
	for _, want := range []string{
		"--- t-int-modify / edit-tracked: failed\nintegrity violation: modified README.md",
		"--- t-slow / slow-gate: timeout",
		"--- t-warn / lint-warn: failed",
		"3 lint warnings",
		"--- t-dep-skip / after-fail: skipped\nskipped: gate always-fail failed",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("gate results lacks %q:\n%s", want, r.stdout)
		}
	}

	// The gate's log says what it changed.
	r = f.cli(30*time.Second, "logs", wf, "t-int-new")
	if r.code != 0 || !strings.Contains(r.stdout, "==> gate create-file (") || !strings.Contains(r.stdout, "integrity violation: new stray.txt") {
		t.Errorf("logs of t-int-new:\n%s", r)
	}

	// watch replays the history: each gate finished exactly once, and
	// each escalated node was rejected once.
	r = f.cli(time.Minute, "watch", wf)
	if r.code != 2 {
		t.Errorf("watch of the failed workflow: want exit 2\n%s", r)
	}
	for _, id := range escalated {
		if c := len(regexp.MustCompile(`node `+regexp.QuoteMeta(id)+`\s+escalated to a human: `).FindAllString(r.stdout, -1)); c != 1 {
			t.Errorf("watch shows %s escalating %d times, want once", id, c)
		}
		if c := len(regexp.MustCompile(`node `+regexp.QuoteMeta(id)+`\s+rejected by e2e-reviewer: not good enough`).FindAllString(r.stdout, -1)); c != 1 {
			t.Errorf("watch shows %s rejected %d times, want once", id, c)
		}
	}
	for _, n := range s.Nodes {
		for _, g := range n.Gates {
			re := regexp.MustCompile(`node ` + regexp.QuoteMeta(n.ID) + `\s+gate ` + regexp.QuoteMeta(g.Name) + ` (passed|failed|timeout|skipped|error)\b`)
			if c := len(re.FindAllString(r.stdout, -1)); c != 1 {
				t.Errorf("watch shows %s/%s finishing %d times, want once", n.ID, g.Name, c)
			}
		}
	}

	// Nothing a gate did reached the branch: it holds only the agents'
	// files of the nodes that succeeded.
	branch := "supervisor/" + wf
	got := branchChanges(t, repo, base, branch)
	wantChanges := []string{"A\tt-int-allowed.txt", "A\tt-onfail-warn.txt", "A\tt-pass.txt", "A\tt-pending-pass.txt", "A\tt-warn.txt"}
	if !equalStrings(got, wantChanges) {
		t.Errorf("changes on %s = %q, want %q", branch, got, wantChanges)
	}
}

// countedGate defines counted, a gate that passes and appends a line
// ("<workflow> <node> <gate> <attempt>") to the file %[1]s names, so a
// test counts its runs (markerLines, runsOf) and tells a run from a cache
// hit.
const countedGate = `  - name: counted
    command: [gatehelper, append, "env:MARKER"]
    env: {MARKER: %[1]q}
`

// flakyWorkflow: %[1]s counts runs of counted; %[2]s is flaky-gate's
// state. One attempt per task: a failure goes to a human, not to a retry
// of the agent, so that only gate reruns run flaky-gate again.
const flakyWorkflow = `name: flaky
defaults:
  agent:
    command: ` + agentCommand + `
  max_attempts: 1
gates:
` + countedGate + `  - name: flaky-gate
    command: [gatehelper, flaky, %[2]q, "2"]
tasks:
  - id: flaky
    prompt: "@write flaky.txt\nflaky\n@end\n"
    gates: [counted, flaky-gate]
  - id: after
    depends_on: [flaky]
    prompt: "@write after.txt\nafter\n@end\n"
    gates: [counted]
`

// The flaky gate and `coordinator gate rerun`: flaky-gate fails
// twice, then passes. The first run escalates the node to a human (its
// one attempt is used), who rejects it: it fails and its dependent is
// skipped. A rerun reopens the node, serves counted from the cache and
// fails again: the node escalates again and is rejected again. A rerun
// with --no-cache runs counted again, flaky-gate passes, the dependent
// runs and the workflow, failed twice, succeeds.
func testFlakyRerun(f *fleet) {
	t := f.t
	repo, base := testkit.Repo(t, map[string]string{"README.md": "flaky\n"})
	dir := t.TempDir()
	marker, state := filepath.Join(dir, "counted-runs"), filepath.Join(dir, "flaky-state")
	wfFile := writeFile(t, t.TempDir(), "flaky.yaml", fmt.Sprintf(flakyWorkflow, marker, state))

	r := f.cli(2*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("first run: want exit 5 (needs attention)\n%s", r)
	}
	wf := wfID(t, r)
	const escalation = "1 of 1 attempts used (gates did not pass: flaky-gate failed)"
	s := f.detail(wf)
	if n := s.node(t, "flaky"); n.Status != "escalated" || n.Reason != escalation {
		t.Fatalf("flaky after the first run: %s (%q)", n.Status, n.Reason)
	}
	if n := s.node(t, "after"); n.Status != "pending" {
		t.Fatalf("after after the first run: %s", n.Status)
	}
	f.decide("reject", wf, "flaky", "e2e-reviewer", "--reason", "flaky-gate failed")
	s = f.waitStatus(wf, "failed", time.Minute)
	if n := s.node(t, "flaky"); n.Status != "failed" || n.Reason != "rejected by e2e-reviewer: flaky-gate failed" {
		t.Fatalf("flaky after the rejection: %s (%q)", n.Status, n.Reason)
	}
	if n := s.node(t, "after"); n.Status != "skipped" {
		t.Fatalf("after after the rejection: %s", n.Status)
	}
	if got := runsOf(markerLines(t, marker), wf, "flaky"); got != 1 {
		t.Fatalf("counted ran %d times for flaky, want 1", got)
	}

	// Rerun: counted is served from the cache; flaky-gate fails again, and
	// the node waits for a human again.
	r = f.cli(time.Minute, "gate", "rerun", wf, "flaky")
	if r.code != 0 || !strings.Contains(r.stdout, "workflow "+wf+" running; gates re-running:") ||
		!regexp.MustCompile(`flaky\s+flaky-gate\s+waiting`).MatchString(r.stdout) {
		t.Fatalf("gate rerun: %s", r)
	}
	s = f.waitStatus(wf, "needs_attention", 90*time.Second)
	n := s.node(t, "flaky")
	if n.Status != "escalated" || n.Reason != escalation || s.node(t, "after").Status != "pending" {
		t.Fatalf("after the first rerun: flaky %s (%q), after %s", n.Status, n.Reason, s.node(t, "after").Status)
	}
	if g := n.gate(t, "counted"); g.Status != "passed" || !g.Cached || g.Round != 2 {
		t.Errorf("counted after the rerun: %s cached %v round %d, want a cache hit at round 2", g.Status, g.Cached, g.Round)
	}
	if g := n.gate(t, "flaky-gate"); g.Status != "failed" || g.Round != 2 || !strings.Contains(g.Output, "flaky failure on run 2") {
		t.Errorf("flaky-gate after the rerun: %s round %d %q", g.Status, g.Round, g.Output)
	}
	if got := runsOf(markerLines(t, marker), wf, "flaky"); got != 1 {
		t.Errorf("counted ran %d times for flaky after a cached rerun, want 1", got)
	}
	if r := f.cli(time.Minute, "watch", wf); r.code != 5 {
		t.Errorf("watch after the failed rerun: want exit 5 (needs attention)\n%s", r)
	}
	f.decide("reject", wf, "flaky", "e2e-reviewer", "--reason", "flaky-gate failed again")
	s = f.waitStatus(wf, "failed", time.Minute)
	if n := s.node(t, "after"); n.Status != "skipped" {
		t.Fatalf("after after the second rejection: %s", n.Status)
	}
	if r := f.cli(time.Minute, "watch", wf); r.code != 2 {
		t.Errorf("watch after the second rejection: want exit 2\n%s", r)
	}

	// Rerun without the cache: counted runs again, flaky-gate passes, the
	// dependent runs, and watch follows the workflow to its success.
	r = f.cli(time.Minute, "gate", "rerun", wf, "flaky", "--no-cache")
	if r.code != 0 {
		t.Fatalf("gate rerun --no-cache: %s", r)
	}
	r = f.cli(2*time.Minute, "watch", wf, "--repo", repo)
	if r.code != 0 {
		t.Fatalf("watch after the rerun: want exit 0 (succeeded)\n%s", r)
	}
	if c := strings.Count(r.stdout, "workflow "+wf+" "); c < 3 || !regexp.MustCompile(`workflow `+wf+`\s+succeeded\n`).MatchString(r.stdout) {
		t.Errorf("watch does not show the workflow failing twice, then succeeding:\n%s", r.stdout)
	}
	s = f.detail(wf)
	if s.Status != "succeeded" {
		t.Fatalf("workflow %s: %s (%s)", wf, s.Status, s.Reason)
	}
	n = s.node(t, "flaky")
	if g := n.gate(t, "counted"); g.Status != "passed" || g.Cached || g.Round != 3 {
		t.Errorf("counted after --no-cache: %s cached %v round %d", g.Status, g.Cached, g.Round)
	}
	if g := n.gate(t, "flaky-gate"); g.Status != "passed" || g.Round != 3 || !strings.Contains(g.Output, "flaky pass on run 3") {
		t.Errorf("flaky-gate: %s round %d %q", g.Status, g.Round, g.Output)
	}
	lines := markerLines(t, marker)
	if runsOf(lines, wf, "flaky") != 2 || runsOf(lines, wf, "after") != 1 {
		t.Errorf("counted runs: %q; want two for flaky, one for after", lines)
	}
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\tafter.txt", "A\tflaky.txt"}; !equalStrings(got, want) {
		t.Errorf("changes on the branch = %q, want %q", got, want)
	}
	// A succeeded node's gates do not rerun.
	if r := f.cli(time.Minute, "gate", "rerun", wf, "flaky"); r.code != 1 || !strings.Contains(r.stderr, "is succeeded") {
		t.Errorf("rerun of a succeeded node: %s", r)
	}
}

// cacheWorkflow: %[1]s is the file every run of a counting gate appends to.
const cacheWorkflow = `name: cache
defaults:
  agent:
    command: ` + agentCommand + `
gates:
` + countedGate + `  - name: also-pass
    command: [gatehelper, print, ok]
  - name: uncached
    command: [gatehelper, append, "env:MARKER"]
    env: {MARKER: %[1]q}
    cache: false
tasks:
  - id: c
    prompt: "@write data.txt\none\n@end\n"
    gates: [counted, also-pass]
  - id: c-off
    prompt: "@write off.txt\noff\n@end\n"
    gates: [uncached]
`

// cacheVariant is a one-task workflow running counted on data.txt; %[1]s
// is the run marker, %[2]s data.txt's content, %[3]s extra front matter
// lines of the counted gate's definition (none: the workflow's).
const cacheVariant = `name: cache-variant
defaults:
  agent:
    command: ` + agentCommand + `
gates:
` + countedGate + `tasks:
  - id: v
    prompt: |
%[3]s      @write data.txt
      %[2]s
      @end
`

// The gate cache: passing results are cached fleet-wide, keyed by the code's
// tree and the gate's definition. Submitting the same workflow again on
// the same base commit serves every cacheable gate from the cache
// (counted does not run again), a cache: false gate runs every time, and
// one changed byte, env or command is a miss.
func testCache(f *fleet) {
	t := f.t
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "cache\n"})
	marker := filepath.Join(t.TempDir(), "runs")
	dir := t.TempDir()
	wfFile := writeFile(t, dir, "cache.yaml", fmt.Sprintf(cacheWorkflow, marker))
	frontMatter := func(command, env string) string {
		return fmt.Sprintf("      ---\n      gates:\n        - name: counted\n          command: %s\n          env: %s\n      ---\n", command, env)
	}
	variants := map[string]string{ // workflow files that each miss the cache
		"one-byte": fmt.Sprintf(cacheVariant, marker, "One", ""),
		"other-env": fmt.Sprintf(cacheVariant, marker, "one",
			frontMatter(`[gatehelper, append, "env:MARKER"]`, fmt.Sprintf("{MARKER: %q, VARIANT: \"1\"}", marker))),
		"other-command": fmt.Sprintf(cacheVariant, marker, "one",
			frontMatter(`[gatehelper, append, "env:MARKER", print, variant]`, fmt.Sprintf("{MARKER: %q}", marker))),
	}

	r := f.cli(2*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 0 {
		t.Fatalf("first run: %s", r)
	}
	wf1 := wfID(t, r)
	for _, row := range f.gateResults(wf1) {
		if row.Cached || row.Status != "passed" {
			t.Errorf("first run, %s/%s: %s cached %v, want passed and run", row.Node, row.Name, row.Status, row.Cached)
		}
	}

	// The same workflow again, and the variants, at once.
	again := f.background(2*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	pending := map[string]<-chan result{}
	for name, y := range variants {
		pending[name] = f.background(2*time.Minute, "submit", writeFile(t, dir, name+".yaml", y), "--repo", repo, "--wait")
	}
	r2 := <-again
	if r2.code != 0 {
		t.Fatalf("second run did not succeed:\n%s", r2)
	}
	wf2 := wfID(t, r2)
	variantWF := map[string]string{}
	for name, ch := range pending {
		r := <-ch
		if r.code != 0 {
			t.Fatalf("variant %s did not succeed:\n%s", name, r)
		}
		variantWF[name] = wfID(t, r)
	}

	s := f.detail(wf2)
	c := s.node(t, "c")
	for _, g := range c.Gates {
		if g.Status != "passed" || !g.Cached {
			t.Errorf("second run, c/%s: %s cached %v, want a cache hit", g.Name, g.Status, g.Cached)
		}
	}
	if g := c.gate(t, "also-pass"); g.Output != "ok" {
		t.Errorf("a cache hit reports the stored output: %q", g.Output)
	}
	if g := s.node(t, "c-off").gate(t, "uncached"); g.Cached || !strings.Contains(g.CacheDisabled, "cache: false") {
		t.Errorf("second run, uncached: cached %v, cache_disabled %q", g.Cached, g.CacheDisabled)
	}
	r = f.cli(30*time.Second, "gate", "results", wf2)
	table := tableRows(t, r.stdout)
	for key, want := range map[string][2]string{"c/counted": {"passed", "yes"}, "c/also-pass": {"passed", "yes"}, "c-off/uncached": {"passed", "off"}} {
		if table[key] != want {
			t.Errorf("gate results %s row %s = %q, want %q\n%s", wf2, key, table[key], want, r.stdout)
		}
	}

	for name, wf := range variantWF {
		if g := f.detail(wf).node(t, "v").gate(t, "counted"); g.Status != "passed" || g.Cached {
			t.Errorf("variant %s: %s cached %v, want a miss", name, g.Status, g.Cached)
		}
	}

	lines := markerLines(t, marker)
	for _, c := range []struct {
		wf, node string
		runs     int
	}{{wf1, "c", 1}, {wf1, "c-off", 1}, {wf2, "c", 0}, {wf2, "c-off", 1},
		{variantWF["one-byte"], "v", 1}, {variantWF["other-env"], "v", 1}, {variantWF["other-command"], "v", 1}} {
		if got := runsOf(lines, c.wf, c.node); got != c.runs {
			t.Errorf("gate of %s in %s ran %d times, want %d; runs:\n%s", c.node, c.wf, got, c.runs, strings.Join(lines, "\n"))
		}
	}
}

// twinWorkflow is one of two workflows, %[1]s, that write the same file
// with the same content and run the same gate; %[2]s is the run marker,
// %[3]s the file that lets the first run finish.
const twinWorkflow = `name: %[1]s
defaults:
  agent:
    command: ` + agentCommand + `
gates:
  - name: once
    command: [gatehelper, append, "env:MARKER", wait-file, "env:GO", 90s]
    env: {MARKER: %[2]q, GO: %[3]q}
    timeout: 2m
    pool: twin
tasks:
  - id: twin
    prompt: "@write twin.txt\nthe same bytes\n@end\n"
`

// The gate cache's single flight: two workflows on one base commit produce
// byte-identical code and run the same gate, so both gate jobs have one
// cache key. Each runs on its own runner process (twin-1 and twin-2, one
// slot each); the command runs once, held until the second job is on the
// other runner, and the other job reports the cached result.
func testSingleFlight(f *fleet) {
	t := f.t
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "twins\n"})
	dir := t.TempDir()
	marker, goFile := filepath.Join(dir, "runs"), filepath.Join(dir, "go")
	var wfs []string
	for _, name := range []string{"twin-a", "twin-b"} {
		file := writeFile(t, dir, name+".yaml", fmt.Sprintf(twinWorkflow, name, marker, goFile))
		r := f.cli(time.Minute, "submit", file, "--repo", repo)
		if r.code != 0 {
			t.Fatalf("submit %s: %s", name, r)
		}
		wfs = append(wfs, wfID(t, r))
	}
	waitFor(t, 90*time.Second, "one run of the gate, and the other job on the second runner", func() bool {
		if len(markerLines(t, marker)) != 1 {
			return false
		}
		for _, wf := range wfs {
			if g := f.detail(wf).node(t, "twin"); len(g.Gates) != 1 || g.Gates[0].Host == "" {
				return false
			}
		}
		return true
	})
	time.Sleep(1500 * time.Millisecond) // the second job computes its key and waits on the lock
	if lines := markerLines(t, marker); len(lines) != 1 {
		t.Fatalf("the gate ran %d times while the first run was held: %q", len(lines), lines)
	}
	writeFile(t, dir, "go", "go\n")
	hosts, cached := map[string]string{}, []string{}
	for _, wf := range wfs {
		if r := f.cli(2*time.Minute, "watch", wf); r.code != 0 {
			t.Fatalf("watch: %s", r)
		}
		g := f.detail(wf).node(t, "twin").gate(t, "once")
		if g.Status != "passed" {
			t.Errorf("%s/once: %s", wf, g.Status)
		}
		hosts[g.Host] = wf
		if g.Cached {
			cached = append(cached, wf)
		}
	}
	lines := markerLines(t, marker)
	if len(lines) != 1 {
		t.Errorf("the gate ran %d times, want once: %q", len(lines), lines)
	}
	if len(cached) != 1 || hosts["twin-1"] == "" || hosts["twin-2"] == "" {
		t.Fatalf("cached results in %v, hosts %v; want one of two runners to run the gate and the other to report it cached", cached, hosts)
	}
	if ran := strings.Fields(lines[0])[0]; ran == cached[0] {
		t.Errorf("workflow %s both ran the gate and reported a cache hit", ran)
	}
}

// The acceptance of the gate cache on the demo: `coordinator demo`'s
// workflow (go vet and go test on a sample Go repository) run twice on the
// fleet; `gate results` shows every gate passed, and on the second run,
// every gate served from the cache. In both runs add-shout passes at its
// second attempt, after go test failed its first: a failure is never
// cached, so the second run's first attempt fails afresh, and its second
// attempt's code is the first run's.
func testDemoCache(f *fleet) {
	t := f.t
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	demo := filepath.Join(root, "coordinator", "internal", "cli", "demo")
	files := map[string]string{}
	err = filepath.WalkDir(filepath.Join(demo, "repo"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(filepath.Join(demo, "repo"), p)
		files[strings.TrimSuffix(rel, ".txt")] = string(b)
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("demo repository: %v", err)
	}
	repo, _ := testkit.Repo(t, files)
	// The runners' Go build caches are cold; the gates use the warm one of
	// the go command that runs this test instead.
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	goCache := strings.TrimSpace(string(out))
	y, err := os.ReadFile(filepath.Join(demo, "workflow.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const goEnv = `GOPROXY: "off"}`
	if strings.Count(string(y), goEnv) != 2 || goCache == "" {
		t.Fatalf("the demo workflow no longer sets %s on its two gates (or go env GOCACHE is empty); update this test", goEnv)
	}
	wfFile := writeFile(t, t.TempDir(), "demo-workflow.yaml",
		strings.ReplaceAll(string(y), goEnv, fmt.Sprintf(`GOPROXY: "off", GOCACHE: %q}`, goCache)))

	var wfs []string
	for run := 1; run <= 2; run++ {
		r := f.cli(4*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
		if r.code != 0 {
			t.Fatalf("demo run %d: %s", run, r)
		}
		wf := wfID(t, r)
		wfs = append(wfs, wf)
		for _, n := range f.detail(wf).Nodes {
			if want := map[bool]int{true: 2, false: 1}[n.ID == "add-shout"]; n.Attempt != want || n.Status != "succeeded" {
				t.Errorf("run %d: node %s %s at attempt %d, want succeeded at attempt %d", run, n.ID, n.Status, n.Attempt, want)
			}
		}
		r = f.cli(30*time.Second, "gate", "results", wf)
		table := tableRows(t, r.stdout)
		var keys []string
		for k := range table {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		want := []string{"add-goodbye/test", "add-goodbye/vet", "add-shout/test", "add-shout/vet", "document/test", "document/vet"}
		if !equalStrings(keys, want) {
			t.Errorf("run %d: gate results rows %v, want %v\n%s", run, keys, want, r.stdout)
		}
		cached := map[int]string{1: "no", 2: "yes"}[run]
		for _, k := range keys {
			if table[k] != [2]string{"passed", cached} {
				t.Errorf("run %d: gate results %s = %q, want passed, cached %s\n%s", run, k, table[k], cached, r.stdout)
			}
		}
	}
	// The cached run delivered the same code.
	a := testkit.Git(t, repo, "rev-parse", "supervisor/"+wfs[0]+"^{tree}")
	b := testkit.Git(t, repo, "rev-parse", "supervisor/"+wfs[1]+"^{tree}")
	if a != b {
		t.Errorf("the two runs' branches have different trees: %s, %s", a, b)
	}
}
