package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// mergeWorkflow is a one-task workflow whose agent writes file with
// content; extra adds workflow fields (auto_merge …).
func mergeWorkflow(name, extra, file, content string) string {
	return fmt.Sprintf(`name: %s
%s`+agentDefaults+`tasks:
  - id: write
    prompt: |
      @write %s
      %s
      @end
`, name, extra, file, content)
}

// mergeStatus is the merge part of `coordinator status -o json`.
type mergeStatus struct {
	BaseBranch string `json:"base_branch"`
	AutoMerge  bool   `json:"auto_merge"`
	Merge      *struct {
		Request     int      `json:"request"`
		Status      string   `json:"status"`
		Into        string   `json:"into"`
		Result      string   `json:"result"`
		FastForward bool     `json:"fast_forward"`
		Auto        bool     `json:"auto"`
		By          string   `json:"by"`
		Reason      string   `json:"reason"`
		Conflicts   []string `json:"conflicts"`
	} `json:"merge"`
}

func (f *fleet) mergeStatus(wf string) mergeStatus {
	f.t.Helper()
	r := f.cli(30*time.Second, "status", wf, "-o", "json")
	var s mergeStatus
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		f.t.Fatalf("status JSON: %v\n%s", err, r)
	}
	return s
}

// TestMerge merges workflows' branches on a fleet of separate processes
// (GIT-03, CLI-05, S-1.13, S-2.10): `coordinator merge` into the branch a
// workflow was submitted from, checked out: refused while an untracked
// file is in the way, then a fast-forward that brings the checkout along; a second workflow that changes the same file fails
// to merge with the conflicting path, both branches untouched; and a
// workflow with auto_merge is merged when it succeeds, followed by
// submit --wait to the merge's outcome.
func TestMerge(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", "--concurrency", "2")

	repo, base := testkit.Repo(t, map[string]string{"README.md": "merge\n"})
	testkit.Git(t, repo, "branch", "release", base)
	dir := t.TempDir()
	// Two workflows from main, writing the same file differently.
	first := submitWait(t, f, 3*time.Minute, writeFile(t, dir, "a.yaml", mergeWorkflow("first", "", "shared.txt", "from the first")), repo)
	second := submitWait(t, f, 3*time.Minute, writeFile(t, dir, "b.yaml", mergeWorkflow("second", "", "shared.txt", "from the second")), repo)
	if s := f.mergeStatus(first); s.BaseBranch != "main" || s.Merge != nil {
		t.Fatalf("first workflow: base branch %q, merge %+v; want main and no merge yet", s.BaseBranch, s.Merge)
	}

	// main is checked out, and an untracked shared.txt is in the way of
	// the merge: git refuses, nothing moves, the file is kept.
	testkit.WriteFile(t, filepath.Join(repo, "shared.txt"), "mine, untracked\n")
	r := f.cli(time.Minute, "merge", first, "--as", "alice")
	if r.code != 6 || !strings.Contains(r.stderr+r.stdout, "local changes the merge would overwrite") ||
		!strings.Contains(r.stderr+r.stdout, "shared.txt") {
		t.Fatalf("merge into main with an untracked shared.txt in the way: want exit 6 naming it\n%s", r)
	}
	if tip := testkit.Git(t, repo, "rev-parse", "main"); tip != base {
		t.Fatalf("main moved to %s on a refused merge", tip)
	}
	if got := string(testkit.ReadFile(t, filepath.Join(repo, "shared.txt"))); got != "mine, untracked\n" {
		t.Fatalf("the untracked file was overwritten: %q", got)
	}
	if err := os.Remove(filepath.Join(repo, "shared.txt")); err != nil {
		t.Fatal(err)
	}

	// Out of the way, the checked-out main fast-forwards with its files.
	r = f.cli(time.Minute, "merge", first, "--as", "alice")
	head := f.detail(first).Head
	if r.code != 0 || !strings.Contains(r.stdout, "merged supervisor/"+first+" into main: fast-forward to "+head[:12]) {
		t.Fatalf("merge: want exit 0 and a fast-forward to %s\n%s", head[:12], r)
	}
	if tip := testkit.Git(t, repo, "rev-parse", "main"); tip != head {
		t.Fatalf("main = %s, want the workflow's %s", tip, head)
	}
	if got, st := string(testkit.ReadFile(t, filepath.Join(repo, "shared.txt"))), testkit.Git(t, repo, "status", "--porcelain"); got != "from the first\n" || st != "" {
		t.Fatalf("main's checkout after the merge: shared.txt %q, status %q; want the first's file, clean", got, st)
	}
	if m := f.mergeStatus(first).Merge; m == nil || m.Status != "merged" || m.Request != 2 || m.By != "alice" || !m.FastForward {
		t.Fatalf("status after the merge: %+v", m)
	}
	if r := f.cli(time.Minute, "merge", first); r.code != 0 {
		t.Fatalf("merging again: want exit 0 (nothing to do)\n%s", r)
	}
	if m := f.mergeStatus(first).Merge; m.Request != 2 {
		t.Fatalf("merging again made request %d, want none", m.Request)
	}

	secondHead := f.detail(second).Head
	r = f.cli(time.Minute, "merge", second, "-o", "json")
	if r.code != 6 || !strings.Contains(r.stderr, "conflicting paths: shared.txt") || !strings.Contains(r.stdout, `"conflicts": [`) {
		t.Fatalf("merging the second workflow: want exit 6 with the conflicting path\n%s", r)
	}
	if tip := testkit.Git(t, repo, "rev-parse", "main"); tip != head {
		t.Fatalf("main moved on a conflict: %s", tip)
	}
	if tip := testkit.Git(t, repo, "rev-parse", "supervisor/"+second); tip != secondHead {
		t.Fatalf("the second workflow's branch moved on a conflict: %s", tip)
	}
	m := f.mergeStatus(second).Merge
	if m == nil || m.Status != "failed" || !equalStrings(m.Conflicts, []string{"shared.txt"}) {
		t.Fatalf("status after the conflict: %+v", m)
	}
	if st := f.cli(30*time.Second, "status", second); !strings.Contains(st.stdout, "merge     into main failed: merge conflict") {
		t.Errorf("status does not show the failed merge:\n%s", st)
	}

	// auto_merge into release, followed by submit --wait to its outcome.
	r = f.cli(3*time.Minute, "submit", writeFile(t, dir, "c.yaml",
		mergeWorkflow("third", "auto_merge: true\nmerge_into: release\n", "third.txt", "from the third")), "--repo", repo, "--wait")
	if r.code != 0 || !strings.Contains(r.stdout, "merge into release requested (auto_merge)") ||
		!strings.Contains(r.stdout, "merged into release at") {
		t.Fatalf("submit --wait of an auto_merge workflow: want exit 0 after the merge\n%s", r)
	}
	third := wfID(t, r)
	thirdHead := f.detail(third).Head
	if tip := testkit.Git(t, repo, "rev-parse", "release"); tip != thirdHead {
		t.Fatalf("release = %s, want the third workflow's %s", tip, thirdHead)
	}
	if m := f.mergeStatus(third).Merge; m == nil || m.Status != "merged" || !m.Auto || m.Into != "release" {
		t.Fatalf("status of the auto merge: %+v", m)
	}
	if got := testkit.Git(t, repo, "status", "--porcelain"); got != "" {
		t.Fatalf("the user's working tree changed: %q", got)
	}
	if tip := testkit.Git(t, repo, "rev-parse", "main"); tip != head {
		t.Fatalf("merging into release moved main to %s", tip)
	}
}
