package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// coordinator merge, status and watch through the CLI (GIT-03, CLI-05):
// submit records the branch --rev names, merge fast-forwards it and says
// so, status shows the merge, watch of a merged workflow and of an
// auto_merge one ends with the merge, and branch names are checked first.
func TestMergeCommand(t *testing.T) {
	run := cliFleet(t, fleet.Options{})
	repo, base := testkit.Repo(t, map[string]string{"README.md": "merge\n"})
	testkit.Git(t, repo, "branch", "release", base)
	dir := t.TempDir()
	write := func(name, extra, file string) string {
		p := filepath.Join(dir, name)
		testkit.WriteFile(t, p, "name: "+strings.TrimSuffix(name, ".yaml")+"\n"+extra+
			"defaults:\n  agent: {command: [touch, "+file+"]}\ntasks:\n  - {id: a, prompt: a, gates: []}\n")
		return p
	}

	r := run("submit", write("first.yaml", "", "first.txt"), "--repo", repo, "--rev", "release", "--wait")
	wantCode(t, r, 0)
	id := strings.Fields(r.stdout)[0]
	wantCode(t, run("merge", id, "--into", "bad..name"), ExitUsage, `--into: invalid branch name "bad..name": contains ".."`)
	r = run("merge", id, "--as", "ada")
	wantCode(t, r, 0, "merged supervisor/"+id+" into release: fast-forward to ")
	head := testkit.Git(t, repo, "rev-parse", "supervisor/"+id)
	if tip := testkit.Git(t, repo, "rev-parse", "release"); tip != head {
		t.Fatalf("release = %s, want %s", tip, head)
	}
	wantCode(t, run("status", id), 0, "merge     into release at "+head[:12]+" (fast-forward, by ada)")
	var s api.WorkflowSummary
	r = run("status", id, "-o", "json")
	decodeJSON(t, r, &s)
	if s.BaseBranch != "release" || s.Merge == nil || s.Merge.Status != "merged" || s.Merge.By != "ada" {
		t.Fatalf("status -o json: base branch %q, merge %+v", s.BaseBranch, s.Merge)
	}
	// watch of a workflow merged after it finished ends (exit 0).
	wantCode(t, run("watch", id), 0, "merge into release requested by ada", "merged into release at "+head[:12]+" (fast-forward)")

	r = run("submit", write("second.yaml", "auto_merge: true\nmerge_into: release\n", "second.txt"), "--repo", repo, "--wait")
	wantCode(t, r, 0, "merge into release requested (auto_merge)", "(merge commit)")
	second := strings.Fields(r.stdout)[0]
	wantCode(t, run("watch", second), 0, "merged into release at")
	if parents := strings.Fields(testkit.Git(t, repo, "rev-list", "--parents", "-n1", "release")); len(parents) != 3 || parents[1] != head {
		t.Fatalf("release = %v, want a merge commit on %s", parents, head)
	}
	wantCode(t, run("merge", second, "-o", "json"), 0, `"status": "merged"`, `"auto": true`)
}
