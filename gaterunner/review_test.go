package gaterunner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/supervisorhq/supervisor/shared/agentoutput"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
)

var (
	standInsOnce sync.Once
	standInsDir  string
	standInsErr  error
)

// standIns builds the Claude Code stand-in (worker/internal/testcli) once
// and returns the directory holding it, for the sandbox's PATH.
func standIns(t *testing.T) string {
	t.Helper()
	standInsOnce.Do(func() {
		standInsDir, standInsErr = os.MkdirTemp("", "review-standins-")
		if standInsErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(standInsDir, "claude"),
			"github.com/supervisorhq/supervisor/worker/internal/testcli/claude").CombinedOutput()
		if err != nil {
			standInsErr = err
			t.Logf("%s", out)
		}
	})
	if standInsErr != nil {
		t.Fatalf("build the claude stand-in: %v", standInsErr)
	}
	return standInsDir
}

// reply is a scripted reviewer's final message: a review block.
func reply(block string) string {
	return "@reply\nI read the change.\n```json\n" + block + "\n```\n@end\n"
}

const (
	approve = `{"status": "APPROVED", "issues": [], "suggestions": []}`
	changes = `{"status": "CHANGES_REQUESTED", "issues": [{"severity": "major", "file": "src/a.txt", "line": 2, ` +
		`"description": "a2 is wrong", "suggestion": "write a3"}], "suggestions": ["name it"]}`
)

// reviewJob is a review gate job for the harness's node, its reviewers
// the claude stand-in (the models only tell them apart in the result),
// prompted with script (directives per reviewer under @if-env).
func (h *harness) reviewJob(name string, reviewers, approvals int, script string) *protocol.GateJob {
	spec := &protocol.ReviewSpec{Approvals: approvals, Prompt: "Review this.\n" + script}
	for i := 0; i < reviewers; i++ {
		spec.Reviewers = append(spec.Reviewers, protocol.AgentSpec{Adapter: "claude-code", Model: "m" + string(rune('1'+i))})
	}
	f := false
	j := h.defJob(protocol.GateSpec{Name: name, Type: protocol.GateTypeReview, Review: spec, TimeoutSeconds: 60, Cache: &f}, 1)
	j.Patches = []protocol.PatchRef{h.patch}
	j.TaskPrompt = "Add newfile and a second line to src/a.txt.\n@write should-not-run\nx\n@end"
	return j
}

// per is a script giving reviewer i (from 1) the directives of scripts[i-1].
func per(scripts ...string) string {
	var b strings.Builder
	for i, s := range scripts {
		b.WriteString("@if-env SUPERVISOR_REVIEWER " + string(rune('1'+i)) + "\n" + s + "@endif\n")
	}
	return b.String()
}

// Review gates on a real bus and git, their reviewers the Claude Code
// stand-in: the quorum decides (2 of 3), each reviewer's verdict, issues
// and usage are recorded, a reviewer without a valid block counts as a
// rejection (OUT-07), a reviewer that writes is an integrity violation,
// and reviewers whose CLI cannot work make the gate an error, not a
// failure of the code (EXE-009, OUT-05).
func TestReviewGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bin := standIns(t)
	h.startRunnerOpts(Config{}, runnerOpts{settings: func(s *jobrun.Settings) {
		s.SandboxPath = bin + string(os.PathListSeparator) + sandbox.BasePath
	}})

	meet := t.TempDir()
	tests := []struct {
		name      string
		reviewers int
		approvals int
		script    string
		status    protocol.GateStatus
		approved  int
		verdicts  []string
		check     func(t *testing.T, g *protocol.GateResult)
	}{
		{"two of three approve", 3, 2, per(reply(approve), reply(changes), reply(approve)),
			protocol.GatePassed, 2, []string{"APPROVED", "CHANGES_REQUESTED", "APPROVED"}, nil},
		{"one of three approves, one gives no block", 3, 2, per(reply(approve), reply(changes), "@print no block here\n"),
			protocol.GateFailed, 1, []string{"APPROVED", "CHANGES_REQUESTED", ""},
			func(t *testing.T, g *protocol.GateResult) {
				v := g.Review.Reviewers[1]
				if len(v.Issues) != 1 || v.Issues[0] != (protocol.ReviewIssue{Severity: "major", File: "src/a.txt", Line: 2,
					Description: "a2 is wrong", Suggestion: "write a3"}) || v.Suggestions[0] != "name it" {
					t.Errorf("reviewer 2 = %+v", v)
				}
				if p := g.Review.Reviewers[2].Problem; !strings.Contains(p, "no review block") {
					t.Errorf("reviewer 3 problem = %q", p)
				}
				if !strings.Contains(g.Output, "1 of 3 reviewers approved (2 needed)") || !strings.Contains(g.Output, "src/a.txt:2 a2 is wrong") {
					t.Errorf("output = %q", g.Output)
				}
			}},
		{"an invalid block is a rejection", 1, 1, reply(`{"status": "LGTM"}`),
			protocol.GateFailed, 0, []string{""},
			func(t *testing.T, g *protocol.GateResult) {
				if p := g.Review.Reviewers[0].Problem; !strings.HasPrefix(p, "invalid review block") {
					t.Errorf("problem = %q", p)
				}
			}},
		{"REJECTED", 1, 1, reply(`{"status": "REJECTED", "issues": [{"severity": "critical", "description": "wrong approach"}], "suggestions": []}`),
			protocol.GateFailed, 0, []string{"REJECTED"}, nil},
		{"the reviewers run at once", 2, 2, per("@signal "+meet+"/one\n@await "+meet+"/two\n"+reply(approve),
			"@signal "+meet+"/two\n@await "+meet+"/one\n"+reply(approve)),
			protocol.GatePassed, 2, []string{"APPROVED", "APPROVED"}, nil},
		{"the reviewer reads the node's work", 1, 1,
			"@if-file newfile made by the agent\n" + reply(approve) + "@endif\n",
			protocol.GatePassed, 1, []string{"APPROVED"}, nil},
		{"a reviewer that writes is an integrity violation", 1, 1, "@write notes.txt\nmine\n@end\n" + reply(approve),
			protocol.GateFailed, 1, []string{"APPROVED"},
			func(t *testing.T, g *protocol.GateResult) {
				if !g.IntegrityViolation || len(g.Violations) == 0 || !strings.Contains(g.Violations[0], "notes.txt") {
					t.Errorf("integrity violation %v %v", g.IntegrityViolation, g.Violations)
				}
			}},
		{"no reviewer's CLI can work", 2, 1, "@api-error API Error: 401 authentication failed\n",
			protocol.GateError, 0, []string{"", ""},
			func(t *testing.T, g *protocol.GateResult) {
				if !strings.HasPrefix(g.Error, "no reviewer could run") {
					t.Errorf("error = %q", g.Error)
				}
			}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := h.reviewJob("review-"+string(rune('a'+i)), tc.reviewers, tc.approvals, tc.script)
			g := h.run(j)
			if g.Status != tc.status || g.Review == nil {
				t.Fatalf("status %s (error %q), review %+v; want %s\n%s", g.Status, g.Error, g.Review, tc.status, h.logText(g.Log))
			}
			r := g.Review
			if r.Approvals != tc.approved || r.Required != tc.approvals || len(r.Reviewers) != tc.reviewers {
				t.Errorf("review = %+v", r)
			}
			for k, v := range r.Reviewers {
				if v.Verdict != tc.verdicts[k] || v.Reviewer != k+1 || v.Adapter != "claude-code" || v.Model != "m"+string(rune('1'+k)) {
					t.Errorf("reviewer %d = %+v, want verdict %q", k+1, v, tc.verdicts[k])
				}
				if v.Run == nil || (tc.status != protocol.GateError && (v.Run.Usage.Input == 0 || v.Run.SessionID == "")) {
					t.Errorf("reviewer %d run = %+v", k+1, v.Run)
				}
			}
			if r.Usage.Input == 0 && tc.status != protocol.GateError {
				t.Errorf("usage not summed: %+v", r.Usage)
			}
			if g.Cached || g.CacheKey != "" {
				t.Errorf("a review gate was cached: %+v", g)
			}
			if tc.check != nil {
				tc.check(t, g)
			}
			if _, err := os.Stat(filepath.Join(h.RepoDir, "should-not-run")); err == nil {
				t.Errorf("a directive of the quoted task ran")
			}
		})
	}
}

// A reviewer's prompt: the gate's instructions, the task quoted, the
// node's diff in a fence no line of it can close, bounded, then the review
// schema's instructions.
func TestReviewPrompt(t *testing.T) {
	spec := &protocol.ReviewSpec{Prompt: "Check the errors.", MaxDiffBytes: 40}
	diff := "diff --git a/x b/x\n+```\n+line two\n+line three is long enough to be cut\n"
	p := ReviewPrompt(spec, "Do it.\n@write x\n", []byte(diff))
	for _, want := range []string{"Check the errors.\n\n## The task", "> Do it.\n> @write x\n", "````diff\ndiff --git a/x b/x\n+```\n+line two\n````",
		"The diff is 71 bytes; its first 33 are shown.", agentoutput.Instructions(agentoutput.Review)} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q:\n%s", want, p)
		}
	}
	if !strings.HasSuffix(p, agentoutput.Instructions(agentoutput.Review)) {
		t.Errorf("the schema's instructions do not end the prompt")
	}
	if p := ReviewPrompt(&protocol.ReviewSpec{}, "", nil); !strings.HasPrefix(p, defaultReviewPrompt) ||
		!strings.Contains(p, "> (not given)") || !strings.Contains(p, "(the change is empty)") {
		t.Errorf("defaults:\n%s", p)
	}
}

// With a context strategy (reviewer_diff, as configs/context defines it)
// the reviewer's prompt is the packed context — the task as the plan, the
// node's own diff and changed files — then the gate's instructions and the
// review schema's (CTX-06).
func TestReviewGateContext(t *testing.T) {
	t.Parallel()
	cat, err := contextpack.Load(filepath.Join("..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cat.Spec("reviewer_diff", 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	bin := standIns(t)
	h.startRunnerOpts(Config{}, runnerOpts{settings: func(s *jobrun.Settings) {
		s.SandboxPath = bin + string(os.PathListSeparator) + sandbox.BasePath
	}})
	j := h.reviewJob("review-ctx", 1, 1, "@print-prompt\n"+reply(approve))
	j.Definition.Review.Context = cs
	j.TaskPrompt = "Add newfile and a second line to src/a.txt."
	g := h.run(j)
	if g.Status != protocol.GatePassed {
		t.Fatalf("status %s: %s", g.Status, g.Error)
	}
	log := h.logText(g.Log)
	for _, want := range []string{"context reviewer_diff:", "prompt| # Context (strategy reviewer_diff)",
		"prompt| Add newfile and a second line to src/a.txt.", "+made by the agent", "prompt| # Task", "prompt| Review this."} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// A reviewer gets its adapter's provider keys from the gate runner's
// secrets file, never from the gate's env; their values are scrubbed from
// the log and the result, wherever the reviewer repeats them.
func TestReviewGateCredentials(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bin := standIns(t)
	secrets := filepath.Join(t.TempDir(), "secrets.env")
	if err := os.WriteFile(secrets, []byte("MY_REVIEW_CRED=plain-review-7373\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.startRunnerOpts(Config{SecretsFile: secrets, Credentials: map[string][]string{"claude-code": {"MY_REVIEW_CRED"}}},
		runnerOpts{settings: func(s *jobrun.Settings) {
			s.SandboxPath = bin + string(os.PathListSeparator) + sandbox.BasePath
		}})
	j := h.reviewJob("review-creds", 1, 1, "@env MY_REVIEW_CRED\n@env OPENAI_API_KEY\n"+
		reply(`{"status": "CHANGES_REQUESTED", "issues": [{"severity": "minor", "description": "saw plain-review-7373"}], "suggestions": []}`))
	j.Definition.Env = map[string]string{"OPENAI_API_KEY": "from-the-gate-5151"}
	g := h.run(j)
	if g.Status != protocol.GateFailed || g.Review == nil || len(g.Review.Reviewers) != 1 {
		t.Fatalf("status %s: %+v", g.Status, g.Review)
	}
	log := h.logText(g.Log)
	for _, want := range []string{"MY_REVIEW_CRED=[REDACTED]", "reviewer 1: credentials: MY_REVIEW_CRED",
		"dropped OPENAI_API_KEY from the gate's environment"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if d := g.Review.Reviewers[0].Issues[0].Description; d != "saw [REDACTED]" {
		t.Errorf("issue = %q", d)
	}
	for _, s := range []string{log, g.Output, g.Error} {
		if strings.Contains(s, "plain-review-7373") || strings.Contains(s, "from-the-gate-5151") {
			t.Errorf("a key leaked:\n%s", s)
		}
	}
}
