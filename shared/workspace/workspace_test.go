package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

func TestResolveCommitAndRepoID(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	r := newUserRepo(t)

	testkit.Git(t, r.dir, "tag", "-a", "-m", "release", "v1", r.base)
	got, err := ResolveCommit(ctx, r.dir, "v1")
	if err != nil || got != r.base {
		t.Fatalf("ResolveCommit(v1) = %q, %v; want %s", got, err, r.base)
	}
	if got, err := ResolveCommit(ctx, r.dir, "deps~1"); err != nil || got != r.c1 {
		t.Fatalf("ResolveCommit(deps~1) = %q, %v; want %s", got, err, r.c1)
	}
	if _, err := ResolveCommit(ctx, r.dir, "no-such-branch"); err == nil || !strings.Contains(err.Error(), "no-such-branch") {
		t.Fatalf("unknown rev: err = %v", err)
	}
	if _, err := ResolveCommit(ctx, r.dir, "--all"); err == nil {
		t.Fatal("option-like rev accepted")
	}
	if _, err := ResolveCommit(ctx, t.TempDir(), "HEAD"); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Fatalf("non-repo: err = %v", err)
	}

	id, err := RepoID(ctx, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "r-") || len(id) != 18 || !repoIDRE.MatchString(id) {
		t.Fatalf("RepoID = %q", id)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	testkit.Git(t, "", "clone", "--quiet", r.dir, clone)
	testkit.Git(t, clone, "commit", "--quiet", "--allow-empty", "-m", "more")
	if cid, err := RepoID(ctx, clone); err != nil || cid != id {
		t.Fatalf("RepoID(clone) = %q, %v; want %q", cid, err, id)
	}
	other := filepath.Join(t.TempDir(), "other")
	testkit.Git(t, "", "init", "--quiet", other)
	if _, err := RepoID(ctx, other); err == nil {
		t.Fatal("RepoID of a repository without commits succeeded")
	}
	testkit.Git(t, other, "commit", "--quiet", "--allow-empty", "-m", "other root")
	if oid, err := RepoID(ctx, other); err != nil || oid == id {
		t.Fatalf("RepoID(other) = %q, %v; want an id different from %q", oid, err, id)
	}
}

func TestCreateBundleLeavesRepoAlone(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	r := newUserRepo(t)
	refsBefore := testkit.Git(t, r.dir, "for-each-ref")
	file := filepath.Join(t.TempDir(), "c1.bundle")
	if err := CreateBundle(ctx, r.dir, r.c1, file); err != nil {
		t.Fatal(err)
	}
	if after := testkit.Git(t, r.dir, "for-each-ref"); after != refsBefore {
		t.Fatalf("refs changed:\n%s\nwant\n%s", after, refsBefore)
	}
	heads := testkit.Git(t, r.dir, "bundle", "list-heads", file)
	if heads != r.c1+" "+bundleRef {
		t.Fatalf("bundle heads = %q", heads)
	}
	// The bundle is self-contained: an empty repository can fetch it.
	clone := filepath.Join(t.TempDir(), "fromBundle")
	testkit.Git(t, "", "init", "--quiet", "--bare", clone)
	gitBare(t, clone, "fetch", "--quiet", file, "refs/*:refs/*")
	if n := gitBare(t, clone, "rev-list", "--count", r.c1); n != "2" {
		t.Fatalf("history in bundle: %s commits, want 2", n)
	}
	if err := CreateBundle(ctx, r.dir, "nope", file); err == nil {
		t.Fatal("bundle of unknown revision succeeded")
	}
}

func TestPrepareMirrorsOnceAndChecksOutBase(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	s, r, repo := uploadedRepo(t)
	bundles := &counting{Objects: s.bundles}
	m := newManager(t, t.TempDir(), bundles, s.patches)

	ws, err := m.Prepare(ctx, repo, nil, "wf1.a.a1")
	if err != nil {
		t.Fatal(err)
	}
	if ws.Base != r.base {
		t.Fatalf("Base = %s, want %s", ws.Base, r.base)
	}
	if !filepath.IsAbs(ws.Dir) || !strings.HasPrefix(ws.Dir, filepath.Join(m.Root(), "pool", repo.ID)+"/") {
		t.Fatalf("Dir = %s, want a slot of the pool of %s under %s", ws.Dir, repo.ID, m.Root())
	}
	checkTree(t, ws.Dir, r.baseFiles)
	if d, err := ws.Diff(ctx); err != nil || len(d) != 0 {
		t.Fatalf("Diff of untouched workspace = %q, %v", d, err)
	}

	// The mirror now has the commit: the bundle is not needed again.
	if err := s.bundles.Delete(ctx, repo.Bundle); err != nil {
		t.Fatal(err)
	}
	ws2, err := m.Prepare(ctx, repo, nil, "wf1.a.a1") // same job redelivered
	if err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	if ws2.Dir == ws.Dir {
		t.Fatal("redelivered job got the same directory")
	}
	checkTree(t, ws2.Dir, r.baseFiles)
	if n := bundles.n.Load(); n != 1 {
		t.Fatalf("bundle downloaded %d times, want 1", n)
	}
	mirror, err := m.Mirror(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(worktrees(t, mirror)); got != 2 {
		t.Fatalf("%d worktrees registered, want 2", got)
	}

	// The second job changed a file; the first changed nothing.
	testkit.WriteFile(t, filepath.Join(ws2.Dir, "README.md"), []byte("changed\n"))
	for i, w := range []*Workspace{ws, ws2} {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if i == 0 {
			checkKeptSlot(t, w, r.baseFiles) // PERF-55
		} else {
			checkEmptySlot(t, w.Dir)
		}
		if _, err := w.Diff(ctx); err == nil {
			t.Fatal("Diff after Close succeeded")
		}
	}
	// The two slots stay registered (locked) for the next jobs, and the
	// next job takes one of them.
	if wt := worktrees(t, mirror); len(wt) != 2 || !slices.Contains(wt, ws.Dir) || !slices.Contains(wt, ws2.Dir) {
		t.Fatalf("worktrees registered: %v, want the two slots", wt)
	}
	ws3, err := m.Prepare(ctx, repo, nil, "wf1.a.a2")
	if err != nil {
		t.Fatal(err)
	}
	if ws3.Dir != ws.Dir && ws3.Dir != ws2.Dir {
		t.Fatalf("third workspace in %s, not in a free slot", ws3.Dir)
	}
	checkTree(t, ws3.Dir, r.baseFiles)
	if err := ws3.Close(); err != nil {
		t.Fatal(err)
	}

	// A commit the mirror lacks, with its bundle gone, is a clear error.
	repo.BaseCommit = r.c2
	if _, err := m.Prepare(ctx, repo, nil, "wf1.b.a1"); err == nil || !strings.Contains(err.Error(), repo.Bundle) {
		t.Fatalf("Prepare with missing bundle: err = %v", err)
	}
}

func TestPatchesAppliedAndDiff(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	s, r, repo := uploadedRepo(t)
	m := newManager(t, t.TempDir(), s.bundles, s.patches)
	deps := []protocol.PatchRef{putPatch(t, s, "a", r.p1), putPatch(t, s, "b", r.p2)}

	ws, err := m.Prepare(ctx, repo, deps, "wf1.c.a1")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	checkTree(t, ws.Dir, r.afterFiles)
	if ws.Base == r.base {
		t.Fatal("Base is the base commit although patches were applied")
	}
	mirror, err := m.Mirror(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if parent := gitBare(t, mirror, "rev-parse", ws.Base+"^"); parent != r.base {
		t.Fatalf("dependency commit's parent = %s, want %s", parent, r.base)
	}
	if msg := gitBare(t, mirror, "log", "-1", "--format=%s%n%an <%ae>", ws.Base); msg != "supervisor: dependencies\nSupervisor <supervisor@localhost>" {
		t.Fatalf("dependency commit = %q", msg)
	}
	if d, err := ws.Diff(ctx); err != nil || len(d) != 0 {
		t.Fatalf("Diff right after Prepare = %q, %v", d, err)
	}

	// The job: a commit of its own, then uncommitted edits of every kind.
	testkit.WriteFile(t, filepath.Join(ws.Dir, "README.md"), []byte("hello\ncommitted by the agent\n"))
	testkit.Git(t, ws.Dir, "commit", "--quiet", "-am", "agent work")
	testkit.WriteFile(t, filepath.Join(ws.Dir, "src/a.txt"), []byte("a1\na2 from p1\na3\nedited\n"))
	if err := os.Remove(filepath.Join(ws.Dir, "src/p2.txt")); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(ws.Dir, "src/new.go"), []byte("package src\n"))
	testkit.WriteFile(t, filepath.Join(ws.Dir, "img/new.bin"), binaryData(9))
	testkit.WriteFile(t, filepath.Join(ws.Dir, "data.bin"), binaryData(3))
	testkit.WriteFile(t, filepath.Join(ws.Dir, "build/debug.log"), []byte("ignored\n"))
	// A rewritten .git does not redirect git, nor end up in the diff.
	if err := os.Remove(filepath.Join(ws.Dir, ".git")); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(ws.Dir, ".git", "config"), []byte("[core]\n\tfsmonitor = touch /tmp/pwned\n"))

	patch, err := ws.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	text := string(patch)
	for _, want := range []string{
		"diff --git a/README.md b/README.md", "+committed by the agent",
		"diff --git a/src/a.txt b/src/a.txt", "+edited",
		"diff --git a/src/p2.txt b/src/p2.txt\ndeleted file mode",
		"diff --git a/src/new.go b/src/new.go\nnew file mode",
		"diff --git a/img/new.bin b/img/new.bin\nnew file mode", "GIT binary patch",
		"diff --git a/data.bin b/data.bin",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("diff lacks %q", want)
		}
	}
	for _, bad := range []string{"debug.log", ".git/config", "+a2 from p1"} {
		if strings.Contains(text, bad) {
			t.Errorf("diff contains %q", bad)
		}
	}
	if t.Failed() {
		t.Fatalf("diff:\n%s", text)
	}

	// The patch reproduces the job's tree exactly on top of Base.
	tip, err := ApplyToBranch(ctx, mirror, "check", ws.Base, patch, "job")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{
		"README.md":   []byte("hello\ncommitted by the agent\n"),
		"src/a.txt":   []byte("a1\na2 from p1\na3\nedited\n"),
		"src/new.go":  []byte("package src\n"),
		"img/new.bin": binaryData(9),
		"data.bin":    binaryData(3),
		".gitignore":  r.baseFiles[".gitignore"],
	}
	checkCommitTree(t, mirror, tip, want)
	if again, err := ws.Diff(ctx); err != nil || !bytes.Equal(again, patch) {
		t.Fatalf("second Diff differs (err %v)", err)
	}
}

// checkCommitTree fails unless commit's tree holds exactly files.
func checkCommitTree(t *testing.T, gitDir, commit string, files map[string][]byte) {
	t.Helper()
	names := strings.Fields(gitBare(t, gitDir, "ls-tree", "-r", "--name-only", commit))
	if len(names) != len(files) {
		t.Errorf("tree of %s has %v, want %d files", commit, names, len(files))
	}
	for name, data := range files {
		got, err := gitexec.Runner{GitDir: gitDir}.Output(context.Background(), "cat-file", "blob", commit+":"+name)
		if err != nil {
			t.Errorf("%s:%s: %v", commit, name, err)
			continue
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s:%s = %q, want %q", commit, name, trunc(got), trunc(data))
		}
	}
}

func TestPrepareRejectsBadPatches(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	s, r, repo := uploadedRepo(t)
	m := newManager(t, t.TempDir(), s.bundles, s.patches)
	good := putPatch(t, s, "a", r.p1)

	badSum := good
	badSum.SHA256 = strings.Repeat("0", 64)
	badSize := good
	badSize.Size++
	missing := good
	missing.Object = "wf1/missing.patch"
	for name, refs := range map[string][]protocol.PatchRef{
		"sha":     {badSum},
		"size":    {good, badSize},
		"missing": {missing},
	} {
		_, err := m.Prepare(ctx, repo, refs, "wf1.bad."+name)
		if err == nil {
			t.Fatalf("%s: Prepare succeeded", name)
		}
		if name != "missing" && !errors.Is(err, ErrIntegrity) {
			t.Fatalf("%s: err = %v, want ErrIntegrity", name, err)
		}
		if !strings.Contains(err.Error(), good.Object) && !strings.Contains(err.Error(), missing.Object) {
			t.Fatalf("%s: error does not name the object: %v", name, err)
		}
	}

	// The same patch twice: the second does not apply.
	_, err := m.Prepare(ctx, repo, []protocol.PatchRef{good, good}, "wf1.conflict")
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting patches: err = %v, want ErrConflict", err)
	}
	mirror, err := m.Mirror(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, wt := range worktrees(t, mirror) {
		checkEmptySlot(t, wt)
	}
	if entries, _ := os.ReadDir(filepath.Join(m.Root(), "tmp")); len(entries) != 0 {
		t.Fatalf("failed Prepare left %v in tmp/", entries)
	}
}

func TestConcurrentPrepare(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	s, r, repo := uploadedRepo(t)
	deps := []protocol.PatchRef{putPatch(t, s, "a", r.p1), putPatch(t, s, "b", r.p2)}
	bundles := &counting{Objects: s.bundles}
	root := t.TempDir()
	// Two Managers on one root stand for two processes on one host: they
	// share nothing in memory and meet only on the flock.
	managers := []*Manager{newManager(t, root, bundles, s.patches), newManager(t, root, bundles, s.patches)}

	const n = 8
	var wg sync.WaitGroup
	wss := make([]*Workspace, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wss[i], errs[i] = managers[i%2].Prepare(ctx, repo, deps, "wf1.same.a1")
		}()
	}
	wg.Wait()
	dirs := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Prepare %d: %v", i, err)
		}
		dirs[wss[i].Dir] = true
		checkTree(t, wss[i].Dir, r.afterFiles)
	}
	if len(dirs) != n {
		t.Fatalf("%d distinct directories for %d workspaces", len(dirs), n)
	}
	if got := bundles.n.Load(); got != 1 {
		t.Fatalf("bundle downloaded %d times, want 1", got)
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = wss[i].Close()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Close %d: %v", i, err)
		}
	}
	mirror, err := managers[0].Mirror(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if wt := worktrees(t, mirror); len(wt) != n {
		t.Fatalf("worktrees registered: %v, want the %d slots", wt, n)
	}
	for _, w := range wss {
		checkKeptSlot(t, w, r.afterFiles) // nothing changed: kept as prepared (PERF-55)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	s, r, repo := uploadedRepo(t)
	m := newManager(t, t.TempDir(), s.bundles, s.patches)

	live, err := m.Prepare(ctx, repo, nil, "live")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	crashed, err := m.Prepare(ctx, repo, nil, "crashed")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := m.Prepare(ctx, repo, nil, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	// The processes died: their locks are gone, their files not.
	testkit.WriteFile(t, filepath.Join(crashed.Dir, "secret.txt"), []byte("left by the crashed job\n"))
	crash(t, crashed.slot)
	crash(t, fresh.slot)
	stale := filepath.Join(m.Root(), "tmp", "bundle-123")
	testkit.WriteFile(t, stale, []byte("partial download"))

	old := time.Now().Add(-2 * time.Hour)
	for _, p := range []string{live.Dir, crashed.Dir, stale} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Sweep(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(crashed.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("abandoned workspace not removed: %v", err)
	}
	if _, err := os.Stat(crashed.slot.admin); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("abandoned workspace's registration not removed: %v", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale download not removed: %v", err)
	}
	for _, w := range []*Workspace{live, fresh} {
		if _, err := os.Stat(w.Dir); err != nil {
			t.Fatalf("Sweep removed %s: %v", w.Dir, err)
		}
	}
	mirror, err := m.Mirror(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if wt := worktrees(t, mirror); len(wt) != 2 {
		t.Fatalf("worktrees after sweep: %v, want live and fresh", wt)
	}
	if d, err := live.Diff(ctx); err != nil || len(d) != 0 {
		t.Fatalf("live workspace after sweep: %q, %v", d, err)
	}

	// The swept slot and the abandoned fresh one are taken again, emptied
	// and checked out afresh.
	m2 := newManager(t, m.Root(), s.bundles, s.patches)
	for range 2 {
		ws, err := m2.Prepare(ctx, repo, nil, "after")
		if err != nil {
			t.Fatal(err)
		}
		if ws.Dir != crashed.Dir && ws.Dir != fresh.Dir {
			t.Errorf("Prepare after Sweep used %s, not a free slot", ws.Dir)
		}
		checkTree(t, ws.Dir, r.baseFiles)
		defer ws.Close()
	}
}

func TestApplyToBranch(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	r := newUserRepo(t)
	bare := r.integration(t)

	c1, err := ApplyToBranch(ctx, bare, "sup/wf1", r.base, r.p1, "node a")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := ApplyToBranch(ctx, bare, "sup/wf1", r.base, r.p2, "node b")
	if err != nil {
		t.Fatal(err)
	}
	if tip := gitBare(t, bare, "rev-parse", "refs/heads/sup/wf1"); tip != c2 {
		t.Fatalf("branch tip = %s, want %s", tip, c2)
	}
	if p := gitBare(t, bare, "rev-parse", c2+"^"); p != c1 {
		t.Fatalf("parent of second commit = %s, want %s", p, c1)
	}
	if p := gitBare(t, bare, "rev-parse", c1+"^"); p != r.base {
		t.Fatalf("parent of first commit = %s, want %s", p, r.base)
	}
	if msg := gitBare(t, bare, "log", "--format=%s", r.base+".."+c2); msg != "node b\nnode a" {
		t.Fatalf("messages = %q", msg)
	}
	checkCommitTree(t, bare, c2, r.afterFiles)

	_, err = ApplyToBranch(ctx, bare, "sup/wf1", r.base, r.p1, "node a again")
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("re-applying a patch: err = %v, want ErrConflict", err)
	}
	if _, err := ApplyToBranch(ctx, bare, "sup/wf1", r.base, []byte("not a patch\n"), "x"); err == nil || errors.Is(err, ErrConflict) {
		t.Fatalf("garbage patch: err = %v, want a non-conflict error", err)
	}
	if tip, err := ApplyToBranch(ctx, bare, "sup/wf1", r.base, nil, "empty"); err != nil || tip != c2 {
		t.Fatalf("empty patch = %s, %v; want %s", tip, err, c2)
	}
	if tip, err := ApplyToBranch(ctx, bare, "sup/new", r.base, nil, "empty"); err != nil || tip != r.base {
		t.Fatalf("empty patch on new branch = %s, %v; want %s", tip, err, r.base)
	}
	if tip := gitBare(t, bare, "rev-parse", "refs/heads/sup/new"); tip != r.base {
		t.Fatalf("new branch at %s, want %s", tip, r.base)
	}
	if _, err := ApplyToBranch(ctx, bare, "bad..name", r.base, r.p1, "x"); err == nil {
		t.Fatal("invalid branch name accepted")
	}

	// The compare-and-swap refuses a branch that moved under it.
	err = createOrUpdateRef(ctx, gitexec.Runner{GitDir: bare}, "refs/heads/sup/wf1", r.base, c1, true)
	if !errors.Is(err, ErrBranchMoved) {
		t.Fatalf("stale update: err = %v, want ErrBranchMoved", err)
	}
	err = createOrUpdateRef(ctx, gitexec.Runner{GitDir: bare}, "refs/heads/sup/wf1", r.base, "", false)
	if !errors.Is(err, ErrBranchMoved) {
		t.Fatalf("create over existing: err = %v, want ErrBranchMoved", err)
	}
}

// With a fixed date, applying the same patches with the same messages on
// the same base makes the same commits in any repository: a coordinator
// whose mirror lacks a branch's commits can make them again.
func TestApplyToBranchWithDateIsReproducible(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	r := newUserRepo(t)
	date := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	var tips [2][2]string
	for i := range tips {
		bare := r.integration(t)
		for j, p := range [][]byte{r.p1, r.p2} {
			c, err := ApplyToBranch(ctx, bare, "sup/wf1", r.base, p, fmt.Sprintf("node %d", j), CommitDate(date.Add(time.Duration(j)*time.Minute)))
			if err != nil {
				t.Fatal(err)
			}
			tips[i][j] = c
		}
		if got := gitBare(t, bare, "log", "-1", "--format=%at %ct", tips[i][1]); got != fmt.Sprintf("%d %d", date.Unix()+60, date.Unix()+60) {
			t.Errorf("dates of the second commit: %s", got)
		}
		if has, err := HasCommit(ctx, bare, tips[i][0]); err != nil || !has {
			t.Errorf("HasCommit(first commit) = %v, %v", has, err)
		}
		if has, err := HasCommit(ctx, bare, strings.Repeat("e", 40)); err != nil || has {
			t.Errorf("HasCommit(missing) = %v, %v", has, err)
		}
	}
	if tips[0] != tips[1] {
		t.Fatalf("commits differ between repositories: %v and %v", tips[0], tips[1])
	}
}

func TestExportImportBranch(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	r := newUserRepo(t)
	bare := r.integration(t)
	if _, err := ApplyToBranch(ctx, bare, "sup/wf1", r.base, r.p1, "node a"); err != nil {
		t.Fatal(err)
	}
	tip, err := ApplyToBranch(ctx, bare, "sup/wf1", r.base, r.p2, "node b")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "result.bundle")
	if err := ExportBranch(ctx, bare, "sup/wf1", file); err != nil {
		t.Fatal(err)
	}
	if err := ExportBranch(ctx, bare, "no-such", file+"2"); err == nil || !strings.Contains(err.Error(), "no such branch") {
		t.Fatalf("export of a missing branch: %v, want no such branch", err)
	}
	// Not a repository, or none at all: said so before anything is fetched.
	if err := ImportBranch(ctx, t.TempDir(), file, "sup/wf1"); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Fatalf("import into a plain directory: %v, want not a git repository", err)
	}
	if err := ImportBranch(ctx, filepath.Join(t.TempDir(), "gone"), file, "sup/wf1"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("import into a missing directory: %v", err)
	}

	clone := filepath.Join(t.TempDir(), "clone")
	testkit.Git(t, "", "clone", "--quiet", "--branch", "main", r.dir, clone)
	testkit.WriteFile(t, filepath.Join(clone, "README.md"), []byte("local edit\n"))
	head := testkit.Git(t, clone, "rev-parse", "HEAD")
	status := testkit.Git(t, clone, "status", "--porcelain")

	if err := ImportBranch(ctx, clone, file, "sup/wf1"); err != nil {
		t.Fatal(err)
	}
	if got := testkit.Git(t, clone, "rev-parse", "refs/heads/sup/wf1"); got != tip {
		t.Fatalf("imported branch at %s, want %s", got, tip)
	}
	checkCommitTree(t, filepath.Join(clone, ".git"), "sup/wf1", r.afterFiles)
	if got := testkit.Git(t, clone, "rev-parse", "HEAD"); got != head {
		t.Fatalf("HEAD moved to %s", got)
	}
	if got := testkit.Git(t, clone, "status", "--porcelain"); got != status {
		t.Fatalf("working tree changed: %q, want %q", got, status)
	}
	if got := testkit.ReadFile(t, filepath.Join(clone, "README.md")); string(got) != "local edit\n" {
		t.Fatalf("working tree file changed: %q", got)
	}
	// Importing again is fine; the checked-out branch is refused.
	if err := ImportBranch(ctx, clone, file, "sup/wf1"); err != nil {
		t.Fatalf("re-import: %v", err)
	}
	err = ImportBranch(ctx, clone, file, "main")
	if err == nil || !strings.Contains(err.Error(), "checked out") {
		t.Fatalf("import over the checked-out branch: err = %v", err)
	}
	if err = ImportBranch(ctx, clone, file, "main", KnownTip(tip)); err == nil || !strings.Contains(err.Error(), "checked out") {
		t.Fatalf("import over the checked-out branch at a known tip: err = %v", err)
	}

	// A tip the repository has is taken without the bundle (PERF-67): here
	// the bundle is gone, so only update-ref can have moved the branch.
	testkit.Git(t, clone, "branch", "-D", "sup/wf1")
	if err := ImportBranch(ctx, clone, file+".gone", "sup/wf1", KnownTip(tip)); err != nil {
		t.Fatalf("import at a tip the repository has: %v", err)
	}
	if got := testkit.Git(t, clone, "rev-parse", "refs/heads/sup/wf1"); got != tip {
		t.Fatalf("branch at %s, want %s", got, tip)
	}
	// A symbolic ref to the checked-out branch is replaced, not followed.
	testkit.Git(t, clone, "symbolic-ref", "refs/heads/sup/sym", "refs/heads/main")
	if err := ImportBranch(ctx, clone, file+".gone", "sup/sym", KnownTip(tip)); err != nil {
		t.Fatalf("import over a symbolic ref: %v", err)
	}
	if got := testkit.Git(t, clone, "rev-parse", "refs/heads/main"); got != head {
		t.Fatalf("the checked-out branch moved to %s through a symbolic ref", got)
	}
	if got := testkit.Git(t, clone, "rev-parse", "refs/heads/sup/sym"); got != tip {
		t.Fatalf("sup/sym at %s, want %s", got, tip)
	}
	// A tip a repository lacks is fetched from the bundle.
	clone2 := filepath.Join(t.TempDir(), "clone2")
	testkit.Git(t, "", "clone", "--quiet", "--branch", "main", r.dir, clone2)
	if err := ImportBranch(ctx, clone2, file, "sup/wf1", KnownTip(tip)); err != nil {
		t.Fatalf("import at a tip the repository lacks: %v", err)
	}
	if got := testkit.Git(t, clone2, "rev-parse", "refs/heads/sup/wf1"); got != tip {
		t.Fatalf("fetched branch at %s, want %s", got, tip)
	}
	checkCommitTree(t, filepath.Join(clone2, ".git"), "sup/wf1", r.afterFiles)
	// So is one in front of a fetch.
	gitBare(t, bare, "update-ref", "refs/heads/sup/sym", tip)
	symFile := filepath.Join(t.TempDir(), "sym.bundle")
	if err := ExportBranch(ctx, bare, "sup/sym", symFile); err != nil {
		t.Fatal(err)
	}
	head2 := testkit.Git(t, clone2, "rev-parse", "HEAD")
	testkit.Git(t, clone2, "symbolic-ref", "refs/heads/sup/sym", "refs/heads/main")
	if err := ImportBranch(ctx, clone2, symFile, "sup/sym"); err != nil {
		t.Fatalf("fetch over a symbolic ref: %v", err)
	}
	if got := testkit.Git(t, clone2, "rev-parse", "refs/heads/main"); got != head2 {
		t.Fatalf("the checked-out branch moved to %s through a symbolic ref", got)
	}
	if got := testkit.Git(t, clone2, "rev-parse", "refs/heads/sup/sym"); got != tip {
		t.Fatalf("fetched sup/sym at %s, want %s", got, tip)
	}
	for _, unknown := range []string{strings.Repeat("0", 40), strings.Repeat("1", 40)} {
		if err := ImportBranch(ctx, clone2, file+".gone", "sup/wf1", KnownTip(unknown)); err == nil {
			t.Fatalf("import at tip %s without its bundle succeeded", unknown)
		}
		if got := testkit.Git(t, clone2, "rev-parse", "refs/heads/sup/wf1"); got != tip {
			t.Fatalf("after a failed import at %s, the branch is at %s, want %s", unknown, got, tip)
		}
	}
	if got := testkit.Git(t, clone, "rev-parse", "HEAD"); got != head {
		t.Fatalf("HEAD moved to %s", got)
	}
}

// TestHardenedEnvironment runs the whole flow with a hostile environment:
// GIT_* variables pointing elsewhere, a global config and ignore file, and a
// hook in the user's repository. None of them may have any effect.
// It cannot run in parallel: it changes the process environment.
func TestHardenedEnvironment(t *testing.T) {
	ctx := testkit.Context(t, 30*time.Second)
	s, r, repo := uploadedRepo(t)

	marker := filepath.Join(t.TempDir(), "pwned")
	hook := fmt.Sprintf("#!/bin/sh\ntouch %s\n", marker)
	testkit.WriteFile(t, filepath.Join(r.dir, ".git", "hooks", "reference-transaction"), []byte(hook))
	if err := os.Chmod(filepath.Join(r.dir, ".git", "hooks", "reference-transaction"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	testkit.WriteFile(t, filepath.Join(home, ".gitconfig"), []byte("[user]\n\tname = Evil\n[core]\n\texcludesFile = "+filepath.Join(home, "ignore")+"\n"))
	testkit.WriteFile(t, filepath.Join(home, "ignore"), []byte("*.go\n"))
	testkit.WriteFile(t, filepath.Join(home, ".config", "git", "ignore"), []byte("*.go\n"))
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("GIT_DIR", filepath.Join(t.TempDir(), "nowhere"))
	t.Setenv("GIT_WORK_TREE", t.TempDir())
	t.Setenv("GIT_INDEX_FILE", filepath.Join(t.TempDir(), "index"))
	t.Setenv("GIT_OBJECT_DIRECTORY", t.TempDir())
	t.Setenv("GIT_CONFIG_PARAMETERS", "'core.hooksPath'='"+filepath.Join(r.dir, ".git", "hooks")+"'")

	if got, err := ResolveCommit(ctx, r.dir, "main"); err != nil || got != r.base {
		t.Fatalf("ResolveCommit = %q, %v", got, err)
	}
	m := newManager(t, t.TempDir(), s.bundles, s.patches)
	ws, err := m.Prepare(ctx, repo, []protocol.PatchRef{putPatch(t, s, "a", r.p1)}, "env")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	testkit.WriteFile(t, filepath.Join(ws.Dir, "main.go"), []byte("package main\n"))
	patch, err := ws.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(patch), "b/main.go") {
		t.Fatalf("a global ignore file hid main.go:\n%s", patch)
	}
	mirror, err := m.Mirror(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	tip, err := ApplyToBranch(ctx, mirror, "sup/env", ws.Base, patch, "env")
	if err != nil {
		t.Fatal(err)
	}
	if who := gitBare(t, mirror, "log", "-1", "--format=%an", tip); who != "Supervisor" {
		t.Fatalf("author = %q", who)
	}
	file := filepath.Join(t.TempDir(), "out.bundle")
	if err := ExportBranch(ctx, mirror, "sup/env", file); err != nil {
		t.Fatal(err)
	}
	if err := ImportBranch(ctx, r.dir, file, "sup/env"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a hook of the user's repository ran")
	}
}
