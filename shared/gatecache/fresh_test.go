package gatecache

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestFreshWorktreeNeedsNoGit checks PERF-54: a key computed for a worktree
// its maker vouches for (KeyInput.Fresh) is the key git's own discovery
// and listing give, and is computed with no git on PATH at all; a change
// to the tree changes it alike.
func TestFreshWorktreeNeedsNoGit(t *testing.T) {
	repo, commit := testkit.Repo(t, map[string]string{
		".gitignore": "build/\n",
		"main.go":    "package main\n\nfunc main() {}\n",
		"pkg/a.go":   "package pkg\n\nconst A = 1\n",
	})
	linked := filepath.Join(t.TempDir(), "wt")
	testkit.Git(t, repo, "worktree", "add", "-q", "--detach", linked, commit)
	gitDir := strings.TrimSpace(testkit.GitOutput(t, linked, "rev-parse", "--absolute-git-dir"))
	commitTree := strings.TrimSpace(testkit.GitOutput(t, repo, "rev-parse", commit+"^{tree}"))

	cases := []struct {
		name, dir string
		layout    Layout
	}{
		{"main worktree", repo, Layout{GitDir: filepath.Join(repo, ".git"), CommonDir: filepath.Join(repo, ".git"), Format: FormatOf(commit)}},
		{"linked worktree", linked, Layout{GitDir: gitDir, CommonDir: filepath.Join(repo, ".git"), Format: FormatOf(commit)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asked := mustKey(t, baseInput(tc.dir))
			in := baseInput(tc.dir)
			in.Fresh = &tc.layout
			t.Setenv("PATH", "") // no git to run
			fresh := mustKey(t, in)
			if fresh.ID != asked.ID || fresh.Tree != asked.Tree || fresh.GitPath != "" {
				t.Fatalf("fresh key = %+v; want %s (tree %s) without git", fresh, asked.ID, asked.Tree)
			}
			if fresh.Tree != commitTree {
				t.Fatalf("fresh tree = %s; want the commit's %s", fresh.Tree, commitTree)
			}
		})
	}
	// A tracked file changed after the checkout is still seen.
	writeFile(t, linked, "pkg/a.go", "package pkg\n\nconst A = 2\n")
	in := baseInput(linked)
	in.Fresh = &cases[1].layout
	if k := mustKey(t, in); k.Tree == commitTree {
		t.Fatalf("a changed file left the tree at the commit's: %+v", k)
	}
}
