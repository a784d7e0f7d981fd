package statemachine_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// mergeWorld submits a one-task workflow (extra: workflow fields such as
// auto_merge) from branch base, with every event folded as the log gives
// it back.
func mergeWorld(t *testing.T, extra, base string) *world {
	t.Helper()
	spec, err := workflow.Parse("wf.yaml", []byte("name: m\n"+agent+extra+"tasks:\n  - {id: a, prompt: a}\n"))
	if err != nil {
		t.Fatalf("workflow: %v", err)
	}
	w := &world{t: t, st: statemachine.New(), id: testWF, now: t0, published: map[string]bool{}, roundTrip: true}
	repo := protocol.RepoRef{ID: "r-test", BaseCommit: strings.Repeat("b", 40), Bundle: "r-test/base.bundle"}
	w.carry(statemachine.Submit(testWF, statemachine.Submission{Spec: spec, Repo: repo, Source: "wf.yaml", BaseBranch: base}, w.now))
	w.settle()
	return w
}

// succeed runs the task to success and returns what the coordinator does
// once the workflow has finished, as merge lines.
func (w *world) succeed() []string {
	w.t.Helper()
	w.started("a", 1)
	got := w.agentDone("a", 1, protocol.AgentSucceeded, true)
	for i, l := range got {
		if strings.HasPrefix(l, "finish ") {
			return mergeLines(w, got[i+1:])
		}
	}
	w.t.Fatalf("the workflow did not finish: %v", got)
	return nil
}

// mergeLines describes merge effects and events better than describe.
func mergeLines(w *world, got []string) []string {
	out := []string{}
	for _, l := range got {
		switch l {
		case "statemachine.Merge":
			x := pendingMerge(w)
			l = "merge r" + strconv.Itoa(x.Request) + " " + x.Commit[:4] + " into " + x.Into
		case string(eventlog.TypeWorkflowMergeRequested):
			m := w.wf().Merge
			l += " r" + strconv.Itoa(m.Request) + " into " + m.Into + " by " + m.By
		case string(eventlog.TypeWorkflowMergeFailed):
			l += ": " + w.wf().Merge.Reason
		}
		out = append(out, l)
	}
	return out
}

// pendingMerge is the Merge effect Decide returns now.
func pendingMerge(w *world) statemachine.Merge {
	w.t.Helper()
	for _, eff := range statemachine.Decide(w.wf(), w.now, nil).Effects {
		if x, ok := eff.(statemachine.Merge); ok {
			return x
		}
	}
	w.t.Fatal("no merge decided")
	return statemachine.Merge{}
}

// mergeDone carries the pending merge out with its outcome: merged at
// result, or failed with reason and conflicts when reason is set.
func (w *world) mergeDone(result, reason string, conflicts ...string) []string {
	w.t.Helper()
	x := pendingMerge(w)
	ev := statemachine.MergedEvent(w.wf(), x, result, false, false, w.now)
	if reason != "" {
		ev = statemachine.MergeFailedEvent(w.wf(), x, reason, conflicts, w.now)
	}
	return mergeLines(w, append(w.carry(ev), w.settle()...))
}

// request asks for a merge into into by "ops" and settles.
func (w *world) request(into string) []string {
	w.t.Helper()
	return mergeLines(w, w.command(statemachine.RequestMerge(w.wf(), into, "ops", w.now)))
}

// TestAutoMerge: a succeeded workflow with auto_merge requests a merge
// into merge_into, or the branch it was submitted from, and the engine is
// asked to carry it out until its outcome is in the log; without a target
// it fails at once (GIT-03, S-1.13, S-2.10).
func TestAutoMerge(t *testing.T) {
	head := strings.Repeat("0", 39) + "1"
	tests := []struct {
		name, extra, base string
		want              []string
	}{
		{"into the branch submitted from", "auto_merge: true\n", "main", lines(
			"workflow.merge_requested r1 into main by auto_merge", "merge r1 "+head[:4]+" into main")},
		{"into merge_into", "auto_merge: true\nmerge_into: release\n", "main", lines(
			"workflow.merge_requested r1 into release by auto_merge", "merge r1 "+head[:4]+" into release")},
		{"no target: fails at once", "auto_merge: true\n", "", lines(
			"workflow.merge_failed: auto_merge: the submission recorded no branch it was submitted from and the workflow sets no merge_into")},
		{"no auto_merge: nothing", "merge_into: release\n", "main", lines()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := mergeWorld(t, tc.extra, tc.base)
			check(t, "succeed", w.succeed(), tc.want)
			if !w.wf().MergePending() {
				return
			}
			// Asked again before the outcome, the decision is the same.
			check(t, "decide again", mergeLines(w, w.settle()), lines("merge r1 "+head[:4]+" into "+w.wf().Merge.Into))
			check(t, "merged", w.mergeDone(strings.Repeat("c", 40), ""), lines("workflow.merged"))
			m := w.wf().Merge
			if m.Status != statemachine.MergeDone || m.Result != strings.Repeat("c", 40) || !m.Auto {
				t.Fatalf("merge state = %+v", m)
			}
			check(t, "nothing more", mergeLines(w, w.settle()), lines())
		})
	}
}

// TestRequestMerge: coordinator merge on a workflow, step by step: only a
// succeeded workflow, the target by default the branch submitted from,
// repeated requests idempotent, a second target refused while one is in
// progress, a new request allowed after a failure (GIT-03, CLI-05).
func TestRequestMerge(t *testing.T) {
	w := mergeWorld(t, "", "main")
	check(t, "running", w.request(""), lines(
		"refused conflict: workflow wf-test is running: only a succeeded workflow can be merged"))
	check(t, "succeed", w.succeed(), lines())
	check(t, "request", w.request(""), lines(
		"workflow.merge_requested r1 into main by ops", "merge r1 0000 into main"))
	check(t, "same again while in progress", w.request("main"), lines("merge r1 0000 into main"))
	check(t, "another target while in progress", w.request("release"), lines(
		"refused conflict: workflow wf-test is being merged into main; ask again once that is done"))
	check(t, "conflict", w.mergeDone("", "merge conflict in a.txt", "a.txt"), lines(
		"workflow.merge_failed: merge conflict in a.txt"))
	if m := w.wf().Merge; m.Status != statemachine.MergeFailed || strings.Join(m.Conflicts, ",") != "a.txt" {
		t.Fatalf("merge state = %+v", m)
	}
	check(t, "after a failure, again", w.request(""), lines(
		"workflow.merge_requested r2 into main by ops", "merge r2 0000 into main"))
	check(t, "merged", w.mergeDone(strings.Repeat("d", 40), ""), lines("workflow.merged"))
	check(t, "merged already", w.request("main"), lines())
	check(t, "into another branch", w.request("release"), lines(
		"workflow.merge_requested r3 into release by ops", "merge r3 0000 into release"))
	check(t, "bad name", w.request("a..b"), lines(`refused conflict: invalid branch name "a..b": contains ".."`))

	t.Run("no target", func(t *testing.T) {
		w := mergeWorld(t, "", "")
		w.succeed()
		check(t, "request", w.request(""), lines(
			"refused conflict: workflow wf-test records no branch it was submitted from and sets no merge_into: name the target branch (--into)"))
	})
	t.Run("failed workflow", func(t *testing.T) {
		w := mergeWorld(t, "", "main")
		w.started("a", 1)
		w.command(statemachine.Cancel(w.wf(), w.now))
		check(t, "request", w.request(""), lines(
			"refused conflict: workflow wf-test is cancelled: only a succeeded workflow can be merged"))
	})
}

// TestMergeSurvivesReplay: a merge decided but not done when the
// coordinator stopped is decided again, once, by the coordinator that
// replays the log; one whose outcome is in the log is not (GIT-03).
func TestMergeSurvivesReplay(t *testing.T) {
	w := mergeWorld(t, "auto_merge: true\n", "main")
	w.succeed()
	replay := func(n int) *statemachine.Workflow {
		st := statemachine.New()
		for _, ev := range w.events[:n] {
			if err := st.Apply(ev); err != nil {
				t.Fatal(err)
			}
		}
		wf, _ := st.Workflow(testWF)
		return wf
	}
	restarted := replay(len(w.events))
	d := statemachine.Decide(restarted, w.now.Add(time.Hour), nil)
	if len(d.Effects) != 1 {
		t.Fatalf("after a restart: %d effects, want the one merge", len(d.Effects))
	}
	x, ok := d.Effects[0].(statemachine.Merge)
	if want := pendingMerge(w); !ok || x.Request != want.Request || x.Into != want.Into || x.Commit != want.Commit ||
		!x.Date.Equal(want.Date) || x.Message != want.Message {
		t.Fatalf("after a restart: %+v, want the same merge as before, %+v", d.Effects[0], want)
	}
	if !strings.Contains(x.Message, "Supervisor-Workflow: "+testWF) {
		t.Errorf("merge message: %q", x.Message)
	}
	w.mergeDone(strings.Repeat("c", 40), "")
	if d := statemachine.Decide(replay(len(w.events)), w.now.Add(time.Hour), nil); len(d.Effects) != 0 {
		t.Fatalf("after the outcome and a restart: %d effects, want none", len(d.Effects))
	}
}
