package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// startMerging runs a new engine like env.start, with lockWait as its
// merge lock's patience.
func (e *env) startMerging(lockWait time.Duration) {
	e.t.Helper()
	eng, err := New(e.b, e.store, Options{DataDir: e.dataDir, Tick: 100 * time.Millisecond, LeaderTTL: 10 * time.Second,
		Log: quiet, MergeLockWait: lockWait, RepoRoots: tempRoots(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.eng, e.stopEng = eng, runEngine(e.t, "engine", eng, service.New(eng, e.b, service.Options{Log: quiet, RepoRoots: tempRoots(e.t)}))
}

// runOne submits a one-task workflow (extra: workflow fields) from branch
// base, has its agent write files, and waits until it has succeeded.
func (e *env) runOne(extra, base string, files map[string]string) api.WorkflowSummary {
	e.t.Helper()
	res, err := e.client.Submit(testkit.Context(e.t, 20*time.Second), api.SubmitRequest{Filename: "wf.yaml",
		YAML: "name: m\n" + extra + "defaults:\n  " + agentCmd + "tasks:\n  - id: a\n    prompt: a\n", Repo: e.repo,
		RepoPath: e.repoDir, BaseBranch: base})
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(j, 1)
	e.agentDone(j, 1, protocol.AgentSucceeded, e.work(j, files))
	return e.waitWorkflow(res.WorkflowID, protocol.WorkflowSucceeded)
}

func (e *env) mergeAPI(wf, into string) api.WorkflowSummary {
	e.t.Helper()
	s, err := e.client.Merge(testkit.Context(e.t, 30*time.Second), api.MergeRequest{WorkflowID: wf, Into: into, By: "ops"})
	if err != nil {
		e.t.Fatalf("merge %s: %v", wf, err)
	}
	if s.Merge == nil {
		e.t.Fatalf("merge %s: no merge in the reply", wf)
	}
	return s
}

// waitMerge waits until wf's latest merge has status want.
func (e *env) waitMerge(wf, want string) *api.MergeSummary {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := e.status(wf)
		if s.Merge != nil && s.Merge.Status == want {
			return s.Merge
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("merge of %s is %+v, want %s", wf, s.Merge, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (e *env) tip(branch string) string {
	e.t.Helper()
	return testkit.Git(e.t, e.repoDir, "rev-parse", "refs/heads/"+branch)
}

// mergeEvents counts wf's merge outcomes in the log.
func (e *env) mergeEvents(wf string) (merged, failed int) {
	e.t.Helper()
	for _, ev := range e.events(wf) {
		switch ev.Body.(type) {
		case eventlog.WorkflowMerged:
			merged++
		case eventlog.WorkflowMergeFailed:
			failed++
		}
	}
	return merged, failed
}

// TestMergeThroughAPI: coordinator merge fast-forwards the branch a
// workflow was submitted from, is idempotent, fails a conflict naming its
// paths with both branches left alone, and auto_merge merges a workflow
// that succeeds with a merge commit when the target has moved (GIT-03,
// CLI-05, S-2.10).
func TestMergeThroughAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	testkit.Git(t, e.repoDir, "branch", "release", e.repo.BaseCommit)
	e.start()

	first := e.runOne("", "release", map[string]string{"a.txt": "first\n"})
	if first.BaseBranch != "release" {
		t.Fatalf("base branch = %q", first.BaseBranch)
	}
	s := e.mergeAPI(first.ID, "")
	if m := s.Merge; m.Status != "merged" || !m.FastForward || m.Into != "release" || m.Result != first.Head || m.By != "ops" {
		t.Fatalf("merge = %+v, want a fast-forward of release to %s", m, first.Head)
	}
	if tip := e.tip("release"); tip != first.Head {
		t.Fatalf("release = %s, want %s", tip, first.Head)
	}
	if again := e.mergeAPI(first.ID, ""); again.Merge.Request != 1 || again.Merge.Status != "merged" {
		t.Fatalf("merging again = %+v, want the first merge unchanged", again.Merge)
	}
	if merged, failed := e.mergeEvents(first.ID); merged != 1 || failed != 0 {
		t.Fatalf("merge outcomes in the log: %d merged, %d failed; want 1, 0", merged, failed)
	}

	// The same file, written differently on a workflow from the same base.
	second := e.runOne("", "release", map[string]string{"a.txt": "second\n"})
	s = e.mergeAPI(second.ID, "")
	if m := s.Merge; m.Status != "failed" || !slices.Equal(m.Conflicts, []string{"a.txt"}) || !strings.Contains(m.Reason, "conflict") {
		t.Fatalf("merge = %+v, want a conflict in a.txt", m)
	}
	if tip := e.tip("release"); tip != first.Head {
		t.Fatalf("release after a conflict = %s, want it unchanged at %s", tip, first.Head)
	}
	if tip := e.tip(second.Branch); tip != second.Head {
		t.Fatalf("%s after a conflict = %s, want it unchanged at %s", second.Branch, tip, second.Head)
	}
	if _, failed := e.mergeEvents(second.ID); failed != 1 {
		t.Fatalf("merge_failed events = %d, want 1", failed)
	}

	third := e.runOne("auto_merge: true\nmerge_into: release\n", "main", map[string]string{"c.txt": "third\n"})
	m := e.waitMerge(third.ID, "merged")
	if m.FastForward || m.UpToDate || !m.Auto {
		t.Fatalf("auto merge = %+v, want a merge commit", m)
	}
	if parents := testkit.Git(t, e.repoDir, "rev-list", "--parents", "-n1", "refs/heads/release"); parents != m.Result+" "+first.Head+" "+third.Head {
		t.Fatalf("release's tip and parents = %s, want %s %s %s", parents, m.Result, first.Head, third.Head)
	}
	if got := testkit.Git(t, e.repoDir, "show", "refs/heads/release:a.txt"); got != "first" {
		t.Fatalf("a.txt on release = %q", got)
	}
	if got := testkit.Git(t, e.repoDir, "status", "--porcelain"); got != "" {
		t.Fatalf("the user's working tree changed: %q", got)
	}

	_, err := e.client.Merge(testkit.Context(t, 10*time.Second), api.MergeRequest{WorkflowID: first.ID, Into: "a..b", By: "ops"})
	_ = wantAPIError(t, err, api.CodeBadRequest, "a bad branch name")
	_, err = e.client.Merge(testkit.Context(t, 10*time.Second), api.MergeRequest{WorkflowID: first.ID, By: " "})
	_ = wantAPIError(t, err, api.CodeBadRequest, "a merge without its author")
}

// TestMergeWaitsForTheLockAndSurvivesRestart: while another merge of the
// same repository and branch holds the fleet-wide lock, a merge waits; a
// coordinator that stops meanwhile leaves it to the next, which merges
// once (GIT-03).
func TestMergeWaitsForTheLockAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	testkit.Git(t, e.repoDir, "branch", "release", e.repo.BaseCommit)
	e.startMerging(300 * time.Millisecond)
	wf := e.runOne("", "release", map[string]string{"a.txt": "a\n"})

	ctx := testkit.Context(t, 10*time.Second)
	other, err := e.store.Acquire(ctx, MergeLockKey(e.repo.ID, "release"), "another-merge", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s := e.mergeAPI(wf.ID, ""); s.Merge.Status != "requested" {
		t.Fatalf("merge while the lock is held = %+v, want requested", s.Merge)
	}
	time.Sleep(500 * time.Millisecond) // ticks try again, and wait again
	if tip := e.tip("release"); tip != e.repo.BaseCommit {
		t.Fatalf("release moved while another merge held the lock")
	}
	e.stopEng()
	if err := e.store.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	e.startMerging(300 * time.Millisecond)
	m := e.waitMerge(wf.ID, "merged")
	if !m.FastForward || e.tip("release") != wf.Head {
		t.Fatalf("merge after the restart = %+v, release at %s", m, e.tip("release"))
	}
	if merged, failed := e.mergeEvents(wf.ID); merged != 1 || failed != 0 {
		t.Fatalf("merge outcomes: %d merged, %d failed; want exactly one merge", merged, failed)
	}
}

// TestMergeOnlyUnderRepoRoots (TRUST-REPO): the repo roots are checked
// again at every write. A workflow submitted while its repository was
// allowed, merged by a coordinator whose roots no longer allow it, is not
// merged: the merge fails saying why, and the repository is untouched.
func TestMergeOnlyUnderRepoRoots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.runOne("", "main", map[string]string{"a.txt": "a\n"})
	before := e.tip("main")
	e.stopEng()
	elsewhere, err := reporoots.New([]string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.start(startOptions{roots: &elsewhere})
	s := e.mergeAPI(wf.ID, "")
	if m := s.Merge; m.Status != "failed" || !strings.Contains(m.Reason, "not under any of the coordinator's repo roots") {
		t.Fatalf("merge = %+v, want a failure naming the repo roots", m)
	}
	if tip := e.tip("main"); tip != before {
		t.Fatalf("main moved to %s, want it left at %s", tip, before)
	}
}
