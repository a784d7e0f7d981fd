package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestBadInput submits invalid workflows and bad command lines through the
// CLI against a running fleet: each must be refused with the documented
// exit code and a message that points at the problem, and none may leave a
// workflow behind. Then a workflow whose gate fails, allowed one attempt,
// must wait for a human (exit 5) and, once the human rejects the node, end
// with exit 2, the failed node's dependents skipped and only the good work
// accepted.
func TestBadInput(t *testing.T) {
	t.Parallel()
	f := newFleet(t, crashAckWait)
	coordData := "coordinator"
	f.coordinator("coordinator", coordData)
	f.worker("worker-1", "--concurrency", "2")
	f.gaterunner("gate-1", "--concurrency", "2")
	repo, base := testkit.Repo(t, map[string]string{"README.md": "base\n"})
	dir := t.TempDir()
	notGit := filepath.Join(dir, "not-a-repo")
	if err := os.MkdirAll(notGit, 0o755); err != nil {
		t.Fatal(err)
	}

	const agent = "defaults:\n  agent: {command: " + agentCommand + "}\n"
	valid := writeFile(t, dir, "valid.yaml", "name: valid\n"+agent+"tasks:\n  - id: a\n    prompt: hello\n")
	huge := writeFile(t, dir, "huge.yaml", "name: huge\n"+agent+"tasks:\n  - id: a\n    prompt: |\n"+
		strings.Repeat("      "+strings.Repeat("x", 1000)+"\n", 1100))

	cases := []struct {
		name string
		file string // written under dir unless it is a path already
		body string
		args []string // after "submit FILE"; --repo is the sample unless given
		code int
		want []string // substrings of stderr; "FILE" stands for the file's path
	}{{
		name: "malformed YAML",
		file: "malformed.yaml",
		body: "name: bad\ntasks:\n  - id: a\n    prompt: \"unterminated\n    agent: {command: [x]}\n",
		code: 65,
		want: []string{"FILE:4: invalid YAML"},
	}, {
		name: "unknown field",
		file: "unknown.yaml",
		body: "name: bad\n" + agent + "tasks:\n  - id: a\n    prompt: hello\n    timout: 5m\n",
		code: 65,
		want: []string{`FILE:7:5: unknown field "timout" in task; did you mean "timeout"?`},
	}, {
		name: "duplicate ids",
		file: "dup.yaml",
		body: "name: bad\n" + agent + "tasks:\n  - id: a\n    prompt: one\n  - id: a\n    prompt: two\n",
		code: 65,
		want: []string{`FILE:7:9: duplicate task id "a" (first defined at line 5)`},
	}, {
		name: "unknown dependency",
		file: "unknown-dep.yaml",
		body: "name: bad\n" + agent + "tasks:\n  - id: a\n    prompt: one\n    depends_on: [nope]\n",
		code: 65,
		want: []string{`FILE:7:18: task "a" depends on unknown task "nope"`},
	}, {
		name: "cycle",
		file: "cycle.yaml",
		body: "name: bad\n" + agent + "tasks:\n  - id: a\n    prompt: one\n    depends_on: [b]\n" +
			"  - id: b\n    prompt: two\n    depends_on: [a]\n",
		code: 65,
		want: []string{"FILE:5:9: task dependency cycle: a -> b -> a"},
	}, {
		name: "string command",
		file: "string-command.yaml",
		body: "name: bad\n" + agent + "gates:\n  - name: vet\n    command: go vet ./...\ntasks:\n  - id: a\n    prompt: one\n",
		code: 65,
		want: []string{"FILE:6:14:", "must be an argv list", "[go, vet, ./...]", "not run by a shell"},
	}, {
		name: "shell command",
		file: "shell.yaml",
		body: "name: bad\n" + agent + "gates:\n  - name: vet\n    command: [sh, -c, go vet ./...]\ntasks:\n  - id: a\n    prompt: one\n",
		code: 65,
		want: []string{"FILE:6:14:", "runs a shell (sh -c)"},
	}, {
		name: "over 1 MiB",
		file: huge,
		code: 65,
		want: []string{"FILE: ", "over the 1048576-byte limit"},
	}, {
		name: "unreachable NATS",
		file: valid,
		args: []string{"--nats", "nats://127.0.0.1:1", "--timeout", "2s"},
		code: 69,
		want: []string{"nats://127.0.0.1:1", "unreachable"},
	}, {
		name: "not a git repository",
		file: valid,
		args: []string{"--repo", notGit},
		code: 64,
		want: []string{notGit, "is not a git repository"},
	}, {
		name: "unknown base revision",
		file: valid,
		args: []string{"--rev", "no-such-branch"},
		code: 64,
		want: []string{`resolve "no-such-branch"`},
	}, {
		name: "missing file",
		file: filepath.Join(dir, "missing.yaml"),
		code: 64,
		want: []string{"missing.yaml", "no such file"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if !filepath.IsAbs(file) {
				file = writeFile(t, dir, file, tc.body)
			}
			args := append([]string{"submit", file}, tc.args...)
			if !hasFlag(args, "--repo") {
				args = append(args, "--repo", repo)
			}
			start := time.Now()
			r := f.cli(time.Minute, args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\n%s", r.code, tc.code, r)
			}
			if r.stdout != "" {
				t.Errorf("printed on stdout (a workflow id?):\n%s", r)
			}
			for _, w := range tc.want {
				if w = strings.ReplaceAll(w, "FILE", file); !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %s to fail", d)
			}
		})
	}

	// A workflow id the coordinator does not know.
	if r := f.cli(30*time.Second, "status", "wf-doesnotexist"); r.code != 1 || !strings.Contains(r.stderr, `workflow "wf-doesnotexist" not found`) {
		t.Errorf("status of an unknown workflow: %s", r)
	}
	// Nothing was half-submitted.
	if l := f.list(); len(l) != 0 {
		t.Fatalf("refused submissions left workflows behind: %+v", l)
	}

	t.Run("gate fails", func(t *testing.T) { gateFails(t, f, coordData, repo, base) })
}

// gateFailWorkflow allows each task one attempt (max_attempts: 1): a
// failure goes straight to a human (HITL-04).
const gateFailWorkflow = `name: gatefail
` + agentDefaults + `  max_attempts: 1
gates:
  - name: has-a
    command: [test, -f, a.txt]
  - name: has-missing
    command: [test, -f, missing.txt]
  - name: after-missing
    command: ["true"]
    depends_on: [has-missing]
tasks:
  - id: a
    gates: [has-a]
    prompt: |
      @write a.txt
      from a
      @end
  - id: b
    gates: [after-missing]
    prompt: |
      @write b.txt
      from b
      @end
  - id: c
    depends_on: [b]
    gates: []
    prompt: |
      @write c.txt
      from c
      @end
  - id: d
    depends_on: [a]
    gates: [has-a]
    prompt: |
      @write d.txt
      from d
      @end
`

// gateFails: b's gate fails and, with its one attempt used, b escalates to
// a human (HITL-04, S-7): submit --wait ends with exit 5 while c (which
// needs b) waits, and a and d (which needs only a) succeed. The human
// rejects b through the CLI (HITL-01): b fails, c is skipped, the workflow
// fails with exit 2 and only the good work is delivered.
func gateFails(t *testing.T, f *fleet, coordData, repo, base string) {
	wfFile := writeFile(t, t.TempDir(), "gatefail.yaml", gateFailWorkflow)
	r := f.cli(3*time.Minute, "submit", wfFile, "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait: exit %d, want 5 (needs attention)\n%s", r.code, r)
	}
	wf := wfID(t, r)
	if want := "workflow " + wf + " needs attention: nothing runs until a human decides (coordinator inbox)"; !strings.Contains(r.stdout, want) {
		t.Errorf("submit --wait does not end with %q:\n%s", want, r.stdout)
	}
	s, code := f.status(wf)
	if code != 5 || s.Status != "needs_attention" {
		t.Fatalf("status: exit %d, status %s, want 5 and needs_attention", code, s.Status)
	}
	for id, st := range map[string]string{"a": "succeeded", "b": "escalated", "c": "pending", "d": "succeeded"} {
		if n := s.node(t, id); n.Status != st {
			t.Errorf("node %s: %s (%s), want %s", id, n.Status, n.Reason, st)
		}
	}
	b := s.node(t, "b")
	if want := "1 of 1 attempts used (gates did not pass: has-missing failed)"; b.Reason != want || b.Attempt != 1 {
		t.Errorf("node b: attempt %d, reason %q; want attempt 1, %q", b.Attempt, b.Reason, want)
	}
	gates := map[string]gateStatus{}
	for _, g := range b.Gates {
		gates[g.Name] = g
	}
	if g := gates["has-missing"]; g.Status != "failed" || g.ExitCode == nil || *g.ExitCode != 1 || g.Host != "gate-1" {
		t.Errorf("gate has-missing of b = %+v, want failed with exit 1 on gate-1", g)
	}
	if g := gates["after-missing"]; g.Status != "skipped" {
		t.Errorf("gate after-missing of b = %+v, want skipped (its dependency failed)", g)
	}
	if c := s.node(t, "c"); c.Host != "" || c.Attempt != 0 {
		t.Errorf("node c = %+v, want pending without running while b waits", c)
	}
	if w := f.cli(30*time.Second, "logs", wf, "b"); w.code != 0 || !strings.Contains(w.stdout, "==> gate has-missing (") {
		t.Errorf("logs of b lack the failed gate's log:\n%s", w)
	}
	if in := f.inbox(wf); len(in) != 1 || in["b"].Reason != b.Reason || in["b"].Attempt != 1 || in["b"].Budget != 1 {
		t.Errorf("inbox items of %s = %+v, want b alone, at attempt 1 of 1, with its reason", wf, in)
	}

	// The human rejects b (HITL-01): it fails and c is skipped.
	r = f.decide("reject", wf, "b", "e2e-reviewer", "--reason", "has-missing cannot pass")
	if want := wf + " b: failed rejected by e2e-reviewer: has-missing cannot pass"; !strings.Contains(r.stdout, want) {
		t.Errorf("reject printed no %q:\n%s", want, r)
	}
	f.waitStatus(wf, "failed", time.Minute)
	s, code = f.status(wf)
	if code != 2 || s.Status != "failed" {
		t.Fatalf("status after the rejection: exit %d, status %s, want 2 and failed", code, s.Status)
	}
	if !strings.Contains(s.Reason, "b failed") || !strings.Contains(s.Reason, "c skipped") {
		t.Errorf("workflow reason %q does not name b failed and c skipped", s.Reason)
	}
	want := map[string]string{"a": "succeeded", "b": "failed", "c": "skipped", "d": "succeeded"}
	for id, st := range want {
		if n := s.node(t, id); n.Status != st {
			t.Errorf("node %s: %s (%s), want %s", id, n.Status, n.Reason, st)
		}
	}
	if b := s.node(t, "b"); b.Reason != "rejected by e2e-reviewer: has-missing cannot pass" {
		t.Errorf("node b reason %q does not say who rejected it and why", b.Reason)
	}
	if c := s.node(t, "c"); !strings.Contains(c.Reason, "dependency b failed") || c.Host != "" {
		t.Errorf("node c = %+v, want skipped for dependency b without running", c)
	}
	if in := f.inbox(wf); len(in) != 0 {
		t.Errorf("inbox still lists %+v after the rejection", in)
	}
	if w := f.cli(time.Minute, "watch", wf); w.code != 2 || !strings.Contains(w.stdout, "node b                       rejected by e2e-reviewer: has-missing cannot pass") {
		t.Errorf("watch of the rejected workflow: want exit 2 and the rejection\n%s", w)
	}

	// A failed workflow's accepted work is delivered into the repository
	// too: the branch holds a's and d's commits, not b's.
	branch := "supervisor/" + wf
	m := repo
	if tip := testkit.Git(t, m, "rev-parse", "refs/heads/"+branch); tip != s.Head {
		t.Errorf("branch at %s, status head %s", tip, s.Head)
	}
	if got, want := branchChanges(t, m, base, branch), []string{"A\ta.txt", "A\td.txt"}; !equalStrings(got, want) {
		t.Errorf("accepted changes = %q, want %q", got, want)
	}
	commits := branchCommits(t, m, base, branch)
	if len(commits) != 2 || commits[0].node != "a" || commits[1].node != "d" {
		t.Errorf("commits = %+v, want a then d", commits)
	}
	if got := fileAt(t, m, branch, "d.txt"); got != "from d\n" {
		t.Errorf("d.txt = %q", got)
	}
}
