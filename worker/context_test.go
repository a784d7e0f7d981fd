package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

func contextHarness(t *testing.T, files map[string]string) *harness {
	t.Helper()
	return &harness{Fleet: jobruntest.NewFleet(t, "worker-test", bus.Config{}, files), t: t}
}

func targetStrategy(keep ...string) protocol.ContextStrategy {
	return protocol.ContextStrategy{Name: "targeted", TokenBudget: 5000, Parts: []protocol.ContextPart{
		{Name: "target", Kind: contextpack.KindFiles, Include: []string{contextpack.PlaceholderTarget}},
		{Name: "diff", Kind: contextpack.KindDiff},
		{Name: "tree", Kind: contextpack.KindTree},
	}, PriorityOrder: []string{"target", "diff", "tree"}, Keep: keep}
}

// CTX-01, CTX-07: the worker packs the job's context from the prepared
// workspace before the agent runs; the agent gets the context first, then
// the task; what it got and the manifest are stored as the job's
// artifacts, secrets redacted, and the result names them.
func TestAgentGetsPackedContext(t *testing.T) {
	t.Parallel()
	h := contextHarness(t, map[string]string{
		"README.md":      "hello\n",
		"src/a.txt":      "alpha line\n",
		"src/config.txt": "password=hunter2\n",
		"other/b.txt":    "not a target\n",
	})
	h.startWorker(Config{})
	job := h.agentJob("impl", 1, "@print-prompt\n@write out.txt\ndone\n@end\n")
	job.Context = &protocol.ContextSpec{Strategy: "targeted", Definition: targetStrategy(), Budget: 5000, Targets: []string{"src/*.txt"}}
	res := h.run(job)
	if res.Status != protocol.AgentSucceeded {
		t.Fatalf("status %s error %q stderr %s", res.Status, res.Error, res.Stderr)
	}
	want := fmt.Sprintf("%s/impl/a1/context-%d.md", job.WorkflowID, res.LeaseToken)
	if res.Context != want {
		t.Fatalf("result context %q, want %q", res.Context, want)
	}
	prompt := string(h.logBytes(res.Context))
	for _, w := range []string{"# Context (strategy targeted)", "### src/a.txt\n\n```\nalpha line\n```", "password=[REDACTED]",
		"## tree (", "other/b.txt\n", "# Task\n\n@print-prompt\n"} {
		if !strings.Contains(prompt, w) {
			t.Errorf("stored prompt lacks %q:\n%s", w, prompt)
		}
	}
	if strings.Contains(prompt, "hunter2") || strings.Contains(prompt, "### other/b.txt") {
		t.Errorf("stored prompt holds what it must not:\n%s", prompt)
	}
	// The agent saw the same: it printed its prompt.
	if !strings.Contains(res.Stdout, "prompt| ### src/a.txt") || !strings.Contains(res.Stdout, "prompt| # Task") ||
		strings.Index(res.Stdout, "prompt| # Context") > strings.Index(res.Stdout, "prompt| # Task") {
		t.Errorf("the agent's stdout does not show the context before the task:\n%s", res.Stdout)
	}
	var m contextpack.Manifest
	if err := json.Unmarshal(h.logBytes(strings.TrimSuffix(res.Context, ".md")+".json"), &m); err != nil {
		t.Fatal(err)
	}
	if m.Strategy != "targeted" || m.Budget != 5000 || m.Encoding != contextpack.Encoding || m.Tokens == 0 || len(m.Parts) != 3 {
		t.Fatalf("manifest %+v", m)
	}
	if m.Parts[0].Name != "target" || strings.Join(m.Parts[0].Files, ",") != "src/a.txt,src/config.txt" || m.Parts[1].Reason != "empty" {
		t.Errorf("manifest parts %+v", m.Parts)
	}
	if log := string(h.logBytes(res.Log)); !strings.Contains(log, "context "+res.Context+": strategy targeted") {
		t.Errorf("agent log does not say what was packed:\n%s", log)
	}
}

// CTX-05: a context whose kept parts do not fit the budget ends the job
// with an error naming the budget, without running the agent (the node
// escalates: another round would not fit either).
func TestContextTooLarge(t *testing.T) {
	t.Parallel()
	h := contextHarness(t, map[string]string{"src/big.txt": strings.Repeat("many different words here\n", 400)})
	h.startWorker(Config{})
	job := h.agentJob("impl", 1, "@write out.txt\ndone\n@end\n")
	job.Context = &protocol.ContextSpec{Strategy: "targeted", Definition: targetStrategy("target"), Budget: contextpack.MinBudget,
		Targets: []string{"src/*"}}
	res := h.run(job)
	if res.Status != protocol.AgentError || res.Patch != nil || res.Context != "" {
		t.Fatalf("result %+v, want an error without a patch or context", res)
	}
	if !strings.Contains(res.Error, "pack context: ") || !strings.Contains(res.Error, "the budget is 1000") {
		t.Errorf("error %q does not name the budget", res.Error)
	}
	if log := string(h.logBytes(res.Log)); !strings.Contains(log, "cannot pack the context") {
		t.Errorf("log:\n%s", log)
	}
}

// CTX-06: a reviewer's context holds the work it reviews — the patches of
// the nodes it depends on, applied to its workspace — as the diff against
// the workflow's base commit and as the changed files in full, with the plan.
func TestReviewerContextHoldsDependencyWork(t *testing.T) {
	t.Parallel()
	h := contextHarness(t, map[string]string{"README.md": "hello\n", "src/a.txt": "old line\n"})
	h.startWorker(Config{})
	impl := h.run(h.agentJob("impl", 1, "@write src/a.txt\nnew line\n@end\n@write src/b.txt\nbrand new\n@end\n"))
	if impl.Status != protocol.AgentSucceeded || impl.Patch == nil {
		t.Fatalf("implementer result %+v", impl)
	}
	review := h.agentJob("review", 1, "@print reviewed\n")
	review.Patches = []protocol.PatchRef{*impl.Patch}
	review.Context = &protocol.ContextSpec{Strategy: "review", Budget: 5000, Plan: "### Task impl\n\nReplace the line.\n",
		Definition: protocol.ContextStrategy{Name: "review", TokenBudget: 5000, Parts: []protocol.ContextPart{
			{Name: "plan", Kind: contextpack.KindPlan}, {Name: "diff", Kind: contextpack.KindDiff}, {Name: "changed", Kind: contextpack.KindChanged},
		}, PriorityOrder: []string{"diff", "plan", "changed"}, Keep: []string{"diff"}}}
	res := h.run(review)
	if res.Status != protocol.AgentSucceeded || res.Context == "" {
		t.Fatalf("review result %+v", res)
	}
	prompt := string(h.logBytes(res.Context))
	for _, w := range []string{"Replace the line.", "-old line\n+new line", "### src/a.txt\n\n```\nnew line\n```", "### src/b.txt\n\n```\nbrand new\n```"} {
		if !strings.Contains(prompt, w) {
			t.Errorf("reviewer's prompt lacks %q:\n%s", w, prompt)
		}
	}
}
