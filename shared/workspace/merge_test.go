package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// mergeRepo is a user's repository with main checked out at base, a
// workflow branch "wf" one commit ahead of base, and branches to merge into.
type mergeRepo struct {
	dir, base, wf string
}

// commitOn commits files on branch (created at from if missing) without
// leaving main, and returns the new tip.
func commitOn(t *testing.T, dir, branch, from string, files map[string]string) string {
	t.Helper()
	if from != "" {
		testkit.Git(t, dir, "branch", branch, from)
	}
	testkit.Git(t, dir, "checkout", "--quiet", branch)
	for p, c := range files {
		testkit.WriteFile(t, filepath.Join(dir, p), c)
	}
	testkit.Git(t, dir, "add", "--all")
	testkit.Git(t, dir, "commit", "--quiet", "-m", "change "+branch)
	tip := testkit.Git(t, dir, "rev-parse", "HEAD")
	testkit.Git(t, dir, "checkout", "--quiet", "main")
	return tip
}

func newMergeRepo(t *testing.T) mergeRepo {
	t.Helper()
	dir, base := testkit.Repo(t, map[string]string{"a.txt": "a1\na2\na3\n", "b.txt": "b1\n"})
	wf := commitOn(t, dir, "supervisor/wf", base, map[string]string{"a.txt": "a1\na2 by the workflow\na3\n", "new.txt": "new\n"})
	return mergeRepo{dir: dir, base: base, wf: wf}
}

// userState is what a merge must never change: the index, the working
// tree and HEAD.
func userState(t *testing.T, dir string) string {
	t.Helper()
	index, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Git(t, dir, "symbolic-ref", "HEAD") + "\n" + testkit.Git(t, dir, "status", "--porcelain") + "\n" + string(index)
}

// TestMergeIntoBranch merges a workflow's branch into branches nobody has
// checked out, with git plumbing alone:
// a fast-forward, a true merge commit, nothing when already merged, and
// refusals that leave every ref as it was (GIT-03, CLI-05).
func TestMergeIntoBranch(t *testing.T) {
	t.Parallel()
	date := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// setup makes the target branch and returns its name.
		setup func(t *testing.T, r mergeRepo) string
		opts  MergeOptions
		// check runs on success; wantErr is the error expected otherwise.
		check   func(t *testing.T, r mergeRepo, target string, res MergeResult)
		wantErr error
		paths   []string
	}{
		{
			name: "fast-forward when the target has not moved",
			setup: func(t *testing.T, r mergeRepo) string {
				testkit.Git(t, r.dir, "branch", "release", r.base)
				return "release"
			},
			check: func(t *testing.T, r mergeRepo, target string, res MergeResult) {
				if !res.FastForward || res.Commit != r.wf || res.Old != r.base {
					t.Fatalf("result = %+v, want a fast-forward from %s to %s", res, r.base, r.wf)
				}
			},
		},
		{
			name: "a merge commit when the target moved",
			setup: func(t *testing.T, r mergeRepo) string {
				commitOn(t, r.dir, "release", r.base, map[string]string{"b.txt": "b1 on release\n"})
				return "release"
			},
			opts: MergeOptions{Message: "Merge the workflow\n", Date: date},
			check: func(t *testing.T, r mergeRepo, target string, res MergeResult) {
				if res.FastForward || res.UpToDate {
					t.Fatalf("result = %+v, want a merge commit", res)
				}
				parents := strings.Fields(testkit.Git(t, r.dir, "rev-list", "--parents", "-n1", res.Commit))
				if want := []string{res.Commit, res.Old, r.wf}; !slices.Equal(parents, want) {
					t.Fatalf("merge commit and parents = %v, want %v", parents, want)
				}
				for path, want := range map[string]string{"a.txt": "a1\na2 by the workflow\na3", "b.txt": "b1 on release", "new.txt": "new"} {
					if got := testkit.Git(t, r.dir, "show", res.Commit+":"+path); got != want {
						t.Errorf("%s in the merge = %q, want %q", path, got, want)
					}
				}
				if got := testkit.Git(t, r.dir, "log", "-1", "--format=%s %at", res.Commit); got != "Merge the workflow "+
					strconv.FormatInt(date.Unix(), 10) {
					t.Errorf("merge commit subject and date = %q", got)
				}
			},
		},
		{
			name: "nothing when the target already has the commit",
			setup: func(t *testing.T, r mergeRepo) string {
				testkit.Git(t, r.dir, "branch", "release", r.wf)
				return "release"
			},
			check: func(t *testing.T, r mergeRepo, target string, res MergeResult) {
				if !res.UpToDate || res.Commit != r.wf {
					t.Fatalf("result = %+v, want up to date at %s", res, r.wf)
				}
			},
		},
		{
			name: "a conflict names the paths and moves nothing",
			setup: func(t *testing.T, r mergeRepo) string {
				commitOn(t, r.dir, "release", r.base, map[string]string{"a.txt": "a1\na2 on release\na3\n", "new.txt": "other\n"})
				return "release"
			},
			wantErr: ErrMergeConflict,
			paths:   []string{"a.txt", "new.txt"},
		},
		{
			name:    "a missing target is refused",
			setup:   func(t *testing.T, r mergeRepo) string { return "nope" },
			wantErr: ErrNoBranch,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testkit.Context(t, 30*time.Second)
			r := newMergeRepo(t)
			target := tc.setup(t, r)
			refs := testkit.Git(t, r.dir, "for-each-ref")
			before := userState(t, r.dir)
			res, err := MergeIntoBranch(ctx, r.dir, target, r.wf, tc.opts)
			if after := userState(t, r.dir); after != before {
				t.Errorf("HEAD, index or working tree changed:\nbefore %q\nafter  %q", before, after)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if got := testkit.Git(t, r.dir, "for-each-ref"); got != refs {
					t.Fatalf("refs changed on failure:\n%s\nwant\n%s", got, refs)
				}
				var ce *MergeConflictError
				if tc.paths != nil && (!errors.As(err, &ce) || !slices.Equal(ce.Paths, tc.paths)) {
					t.Fatalf("conflict = %v, want paths %v", err, tc.paths)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tip := testkit.Git(t, r.dir, "rev-parse", "refs/heads/"+target); tip != res.Commit {
				t.Fatalf("%s is at %s, result says %s", target, tip, res.Commit)
			}
			tc.check(t, r, target, res)
			again, err := MergeIntoBranch(ctx, r.dir, target, r.wf, tc.opts)
			if err != nil || !again.UpToDate || again.Commit != res.Commit {
				t.Fatalf("merging again = %+v, %v; want up to date at %s", again, err, res.Commit)
			}
		})
	}
}

// TestMergeIntoBranchIsCompareAndSwap: a target that moves while the merge
// is built is not overwritten; the merge fails with ErrBranchMoved and the
// other writer's commit stays (GIT-03).
func TestMergeIntoBranchIsCompareAndSwap(t *testing.T) {
	t.Parallel()
	for _, moved := range []bool{false, true} {
		name := "fast-forward"
		if moved {
			name = "merge commit"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testkit.Context(t, 30*time.Second)
			r := newMergeRepo(t)
			from := r.base
			if moved {
				from = commitOn(t, r.dir, "release-base", r.base, map[string]string{"b.txt": "b1 moved\n"})
			}
			testkit.Git(t, r.dir, "branch", "release", from)
			other := commitOn(t, r.dir, "other", from, map[string]string{"c.txt": "someone else\n"})
			opts := MergeOptions{beforeUpdate: func() {
				testkit.Git(t, r.dir, "update-ref", "refs/heads/release", other)
			}}
			_, err := MergeIntoBranch(ctx, r.dir, "release", r.wf, opts)
			if !errors.Is(err, ErrBranchMoved) {
				t.Fatalf("err = %v, want ErrBranchMoved", err)
			}
			if tip := testkit.Git(t, r.dir, "rev-parse", "refs/heads/release"); tip != other {
				t.Fatalf("release = %s, want the other writer's %s", tip, other)
			}
		})
	}
}

// TestCurrentBranch finds the branch a submission starts from.
func TestCurrentBranch(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	r := newMergeRepo(t)
	for rev, want := range map[string]string{
		"HEAD": "main", "main": "main", "supervisor/wf": "supervisor/wf", "refs/heads/supervisor/wf": "supervisor/wf",
		r.base: "", "nope": "",
	} {
		if got, err := CurrentBranch(ctx, r.dir, rev); err != nil || got != want {
			t.Errorf("CurrentBranch(%q) = %q, %v; want %q", rev, got, err, want)
		}
	}
	testkit.Git(t, r.dir, "checkout", "--quiet", "--detach")
	if got, err := CurrentBranch(ctx, r.dir, "HEAD"); err != nil || got != "" {
		t.Errorf("detached HEAD: CurrentBranch = %q, %v; want \"\"", got, err)
	}
}

// TestMergeIntoCheckedOutBranch merges into the branch a worktree has
// checked out as `git merge` would there (GIT-03): HEAD, index and files
// follow, local changes the merge does not touch survive, and one it would
// overwrite (or an untracked file in its way) makes git refuse, moving
// nothing and losing nothing.
func TestMergeIntoCheckedOutBranch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup prepares main's checkout; it returns main's tip if it
		// committed there.
		setup   func(t *testing.T, r mergeRepo)
		wantErr error
		// files are what the checkout holds afterwards.
		files map[string]string
		ff    bool
	}{
		{name: "a clean checkout fast-forwards with its files", setup: func(t *testing.T, r mergeRepo) {},
			files: map[string]string{"a.txt": "a1\na2 by the workflow\na3\n", "new.txt": "new\n", "b.txt": "b1\n"}, ff: true},
		{name: "a moved checkout gets the merge commit", setup: func(t *testing.T, r mergeRepo) {
			testkit.WriteFile(t, filepath.Join(r.dir, "b.txt"), "b1 on main\n")
			testkit.Git(t, r.dir, "commit", "--quiet", "-am", "main moves")
		}, files: map[string]string{"a.txt": "a1\na2 by the workflow\na3\n", "new.txt": "new\n", "b.txt": "b1 on main\n"}},
		{name: "a local change the merge does not touch survives", setup: func(t *testing.T, r mergeRepo) {
			testkit.WriteFile(t, filepath.Join(r.dir, "b.txt"), "b1 edited, not committed\n")
		}, files: map[string]string{"a.txt": "a1\na2 by the workflow\na3\n", "b.txt": "b1 edited, not committed\n"}, ff: true},
		{name: "a local change the merge would overwrite stops it", setup: func(t *testing.T, r mergeRepo) {
			testkit.WriteFile(t, filepath.Join(r.dir, "a.txt"), "mine\n")
		}, wantErr: ErrLocalChanges, files: map[string]string{"a.txt": "mine\n"}},
		{name: "an untracked file in the way stops it", setup: func(t *testing.T, r mergeRepo) {
			testkit.WriteFile(t, filepath.Join(r.dir, "new.txt"), "untracked\n")
		}, wantErr: ErrLocalChanges, files: map[string]string{"new.txt": "untracked\n", "a.txt": "a1\na2\na3\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testkit.Context(t, 30*time.Second)
			r := newMergeRepo(t)
			tc.setup(t, r)
			old := testkit.Git(t, r.dir, "rev-parse", "main")
			res, err := MergeIntoBranch(ctx, r.dir, "main", r.wf, MergeOptions{})
			for p, want := range tc.files {
				if got := string(testkit.ReadFile(t, filepath.Join(r.dir, p))); got != want {
					t.Errorf("%s holds %q, want %q", p, got, want)
				}
			}
			if head := testkit.Git(t, r.dir, "symbolic-ref", "HEAD"); head != "refs/heads/main" {
				t.Errorf("HEAD is %s", head)
			}
			tip := testkit.Git(t, r.dir, "rev-parse", "main")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if tip != old {
					t.Errorf("main moved to %s on a refused merge", tip)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Commit != tip || res.Old != old || res.FastForward != tc.ff {
				t.Errorf("result %+v; main %s (was %s); want fast-forward %v", res, tip, old, tc.ff)
			}
			// The index matches the new tip: only the local edits differ.
			if staged := testkit.Git(t, r.dir, "diff", "--cached", "--name-only"); staged != "" {
				t.Errorf("staged after the merge: %q", staged)
			}
		})
	}
}
