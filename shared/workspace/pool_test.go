package workspace

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitindex"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// A job in a reused pool slot sees exactly the base tree, whatever the job
// before it left there, whether that job's process closed its workspace or
// died holding it (the next process takes the slot over).
func TestPoolReuseLeaksNothing(t *testing.T) {
	t.Parallel()
	s, r, repo := uploadedRepo(t)
	outside := t.TempDir()
	outsideFile := filepath.Join(outside, "keep.txt")
	testkit.WriteFile(t, outsideFile, []byte("outside the workspace\n"))

	// What a job may leave behind, one kind per row. The rows from "a
	// same-size change" on keep every file's size and modification time,
	// so only the record of a slot kept as prepared (change times,
	// inodes, the content of racy files: PERF-55) tells them from a job
	// that changed nothing.
	jobs := []struct {
		name string
		do   func(t *testing.T, ws *Workspace)
		// after, if set, runs once the next job has its workspace.
		after func(t *testing.T, next *Workspace)
	}{
		{"nothing", func(t *testing.T, ws *Workspace) {}, nil},
		{"tracked changes", func(t *testing.T, ws *Workspace) {
			testkit.WriteFile(t, filepath.Join(ws.Dir, "README.md"), []byte("changed by the job\n"))
			if err := os.Remove(filepath.Join(ws.Dir, "src/a.txt")); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(ws.Dir, "data.bin"), 0o400); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"untracked and ignored files", func(t *testing.T, ws *Workspace) {
			testkit.WriteFile(t, filepath.Join(ws.Dir, "new.txt"), []byte("untracked\n"))
			testkit.WriteFile(t, filepath.Join(ws.Dir, "src/deep/er/still.go"), []byte("package er\n"))
			testkit.WriteFile(t, filepath.Join(ws.Dir, "build.log"), []byte("ignored\n"))
			testkit.WriteFile(t, filepath.Join(ws.Dir, "logs/run.log"), []byte("ignored too\n"))
		}, nil},
		{"read-only nested directories", func(t *testing.T, ws *Workspace) {
			testkit.WriteFile(t, filepath.Join(ws.Dir, "ro/inner/file.txt"), []byte("locked in\n"))
			for _, d := range []string{"ro/inner", "ro", "src", "."} {
				if err := os.Chmod(filepath.Join(ws.Dir, d), 0o555); err != nil {
					t.Fatal(err)
				}
			}
		}, nil},
		{"a commit and worktree refs", func(t *testing.T, ws *Workspace) {
			testkit.WriteFile(t, filepath.Join(ws.Dir, "committed.txt"), []byte("committed by the job\n"))
			testkit.Git(t, ws.Dir, "add", "--all")
			testkit.Git(t, ws.Dir, "commit", "--quiet", "-m", "job's commit")
			testkit.Git(t, ws.Dir, "update-ref", "refs/bisect/bad", "HEAD")
		}, nil},
		{"a rewritten .git file", func(t *testing.T, ws *Workspace) {
			if err := os.Remove(filepath.Join(ws.Dir, ".git")); err != nil {
				t.Fatal(err)
			}
			testkit.WriteFile(t, filepath.Join(ws.Dir, ".git", "config"), []byte("[core]\n\tfsmonitor = touch /tmp/pwned\n"))
		}, nil},
		{"a .git file pointing elsewhere", func(t *testing.T, ws *Workspace) {
			testkit.WriteFile(t, filepath.Join(ws.Dir, ".git"), []byte("gitdir: "+outside+"\n"))
		}, nil},
		{"links out of the workspace", func(t *testing.T, ws *Workspace) {
			if err := os.Symlink(outside, filepath.Join(ws.Dir, "escape")); err != nil {
				t.Fatal(err)
			}
			// The registration's HEAD, replaced by a link to a file of the
			// host: emptying the slot must not write through it.
			head := filepath.Join(ws.slot.admin, "HEAD")
			if err := os.Remove(head); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outsideFile, head); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"a same-size change, its times put back", func(t *testing.T, ws *Workspace) {
			path := filepath.Join(ws.Dir, "README.md")
			mtime := stat(t, path).ModTime()
			testkit.WriteFile(t, path, bytes.Repeat([]byte("x"), len(testkit.ReadFile(t, path))))
			setTimes(t, path, mtime)
		}, nil},
		{"a mode changed and changed back", func(t *testing.T, ws *Workspace) {
			path := filepath.Join(ws.Dir, "README.md")
			perm := stat(t, path).Mode().Perm()
			for _, mode := range []os.FileMode{0o777, perm} {
				if err := os.Chmod(path, mode); err != nil {
					t.Fatal(err)
				}
			}
		}, nil},
		{"a file replaced by a copy, its times put back", func(t *testing.T, ws *Workspace) {
			path := filepath.Join(ws.Dir, "src/a.txt")
			mtime := stat(t, path).ModTime()
			data := testkit.ReadFile(t, path)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			testkit.WriteFile(t, path, data)
			setTimes(t, path, mtime)
		}, nil},
		{"the index rewritten with the same entries", func(t *testing.T, ws *Workspace) {
			testkit.Git(t, ws.Dir, "update-index", "--chmod=+x", "README.md")
			testkit.Git(t, ws.Dir, "update-index", "--chmod=-x", "README.md")
		}, nil},
		{"a hard link from outside", func(t *testing.T, ws *Workspace) {
			if err := os.Link(filepath.Join(ws.Dir, "README.md"), filepath.Join(outside, "link-"+strings.ReplaceAll(t.Name(), "/", "-"))); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, next *Workspace) {
			// Written after the next job's checkout: that job must not see it.
			testkit.WriteFile(t, filepath.Join(outside, "link-"+strings.ReplaceAll(t.Name(), "/", "-")), []byte("through the link\n"))
		}},
	}

	for _, ending := range []string{"closed", "crashed"} {
		for _, job := range jobs {
			t.Run(ending+"/"+job.name, func(t *testing.T) {
				t.Parallel()
				ctx := testkit.Context(t, 60*time.Second)
				root := t.TempDir()
				m := newManager(t, root, s.bundles, s.patches)
				first, err := m.Prepare(ctx, repo, nil, "wf1.first.a1")
				if err != nil {
					t.Fatal(err)
				}
				job.do(t, first)
				next := m
				if ending == "closed" {
					if err := first.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
				} else {
					// The process died: its flock is gone, its files not.
					// Another process on the host takes the slot over.
					crash(t, first.slot)
					next = newManager(t, root, s.bundles, s.patches)
				}

				ws, err := next.Prepare(ctx, repo, nil, "wf1.next.a1")
				if err != nil {
					t.Fatal(err)
				}
				defer ws.Close()
				if ws.Dir != first.Dir {
					t.Fatalf("next job in %s, want the freed slot %s", ws.Dir, first.Dir)
				}
				if job.after != nil {
					job.after(t, ws)
				}
				checkBase(t, ws, r)
				// Only a slot this process closed untouched is handed on
				// as it was (PERF-55); every other one was emptied.
				if kept, want := ws.rec != nil && first.rec == ws.rec, ending == "closed" && job.name == "nothing"; kept != want {
					t.Errorf("slot handed on as it was: %v, want %v", kept, want)
				}
				if got := string(testkit.ReadFile(t, outsideFile)); got != "outside the workspace\n" {
					t.Fatalf("a file outside the workspace changed: %q", got)
				}
			})
		}
	}
}

// checkBase fails unless ws is a clean checkout of the base commit, both to
// the runner's git and to an agent's (which finds the repository through
// the .git file).
func checkBase(t *testing.T, ws *Workspace, r *userRepo) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	checkTree(t, ws.Dir, r.baseFiles)
	if ws.Base != r.base {
		t.Errorf("Base = %s, want %s", ws.Base, r.base)
	}
	if d, err := ws.Diff(ctx); err != nil || len(d) != 0 {
		t.Errorf("Diff = %q, %v; want empty", d, err)
	}
	g := ws.Git()
	if head, err := g.Text(ctx, "rev-parse", "HEAD"); err != nil || head != r.base {
		t.Errorf("HEAD = %q, %v; want %s", head, err, r.base)
	}
	if st, err := g.Text(ctx, "status", "--porcelain", "--ignored", "--untracked-files=all"); err != nil || st != "" {
		t.Errorf("status = %q, %v; want clean", st, err)
	}
	if ref, err := g.Text(ctx, "for-each-ref", "refs/bisect/"); err != nil || ref != "" {
		t.Errorf("worktree refs left: %q, %v", ref, err)
	}
	if head := testkit.Git(t, ws.Dir, "rev-parse", "HEAD"); head != r.base {
		t.Errorf("the agent's git sees HEAD %s, want %s", head, r.base)
	}
	if top := testkit.Git(t, ws.Dir, "rev-parse", "--show-toplevel"); top != ws.Dir {
		t.Errorf("the agent's git sees the worktree at %s, want %s", top, ws.Dir)
	}
}

// Jobs running at once, from two processes on one host, never share a
// slot, and each sees only the base tree and its own files.
func TestPoolConcurrentJobsNeverShareSlot(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 120*time.Second)
	s, r, repo := uploadedRepo(t)
	root := t.TempDir()
	managers := []*Manager{newManager(t, root, s.bundles, s.patches), newManager(t, root, s.bundles, s.patches)}

	const workers, rounds = 6, 4
	var mu sync.Mutex
	inUse := map[string]string{} // slot dir → job
	slots := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := managers[w%2]
			for i := range rounds {
				job := fmt.Sprintf("w%d-r%d", w, i)
				ws, err := m.Prepare(ctx, repo, nil, job)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if other, ok := inUse[ws.Dir]; ok {
					errs <- fmt.Errorf("job %s got slot %s, which job %s holds", job, ws.Dir, other)
				}
				inUse[ws.Dir] = job
				slots[ws.Dir] = true
				mu.Unlock()

				own := "own/" + job + ".txt"
				err = os.MkdirAll(filepath.Join(ws.Dir, "own"), 0o755)
				if err == nil {
					err = os.WriteFile(filepath.Join(ws.Dir, own), []byte(job+"\n"), 0o644)
				}
				if err != nil {
					errs <- err
				}
				want := maps.Clone(r.baseFiles)
				want[own] = []byte(job + "\n")
				checkTree(t, ws.Dir, want)
				patch, err := ws.Diff(ctx)
				if err != nil {
					errs <- err
				} else if n := strings.Count(string(patch), "diff --git"); n != 1 || !strings.Contains(string(patch), "b/"+own) {
					errs <- fmt.Errorf("job %s: patch touches %d files, want only %s:\n%s", job, n, own, patch)
				}

				mu.Lock()
				delete(inUse, ws.Dir)
				mu.Unlock()
				if err := ws.Close(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(slots) > workers {
		t.Errorf("%d slots for %d jobs at a time", len(slots), workers)
	}
	for dir := range slots {
		checkEmptySlot(t, dir)
	}
}

// A Manager remembers which commits its mirror holds; if the mirror goes
// away behind its back, Prepare checks again and fills it from the bundle.
func TestPoolMirrorRemovedBehindTheManager(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	s, r, repo := uploadedRepo(t)
	bundles := &counting{Objects: s.bundles}
	m := newManager(t, t.TempDir(), bundles, s.patches)
	ws, err := m.Prepare(ctx, repo, nil, "first")
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(m.mirrorPath(repo.ID)); err != nil {
		t.Fatal(err)
	}
	ws, err = m.Prepare(ctx, repo, nil, "second")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	checkBase(t, ws, r)
	if n := bundles.n.Load(); n != 2 {
		t.Fatalf("bundle downloaded %d times, want 2 (once more for the new mirror)", n)
	}
}

// A slot kept as prepared (PERF-55) is handed on only to a job of the same
// checkout (base commit and patches), and only while it is still exactly
// so: a change made while it waits in the pool sends it back to be emptied.
func TestPoolKeptSlot(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	s, r, repo := uploadedRepo(t)
	m := newManager(t, t.TempDir(), s.bundles, s.patches)
	deps := []protocol.PatchRef{putPatch(t, s, "a", r.p1), putPatch(t, s, "b", r.p2)}
	prepare := func(patches []protocol.PatchRef) *Workspace {
		t.Helper()
		ws, err := m.Prepare(ctx, repo, patches, "wf1.kept.a1")
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	closed := func(ws *Workspace) {
		t.Helper()
		if err := ws.Close(); err != nil {
			t.Fatal(err)
		}
	}

	first := prepare(nil)
	closed(first)
	readme := filepath.Join(first.Dir, "README.md")
	mtime := stat(t, readme).ModTime()
	testkit.WriteFile(t, readme, bytes.Repeat([]byte("y"), len(r.baseFiles["README.md"])))
	setTimes(t, readme, mtime) // while the slot waits in the pool

	second := prepare(nil)
	if second.Dir != first.Dir || second.rec == first.rec {
		t.Fatalf("changed kept slot: next job in %s (reused record: %v); want %s emptied", second.Dir, second.rec == first.rec, first.Dir)
	}
	checkBase(t, second, r)
	closed(second)

	withDeps := prepare(deps)
	if withDeps.Dir != first.Dir || withDeps.Base == r.base {
		t.Fatalf("job with patches in %s at %s; want the one slot, at the patches' commit", withDeps.Dir, withDeps.Base)
	}
	checkTree(t, withDeps.Dir, r.afterFiles)
	closed(withDeps)

	again := prepare(deps)
	if again.rec != withDeps.rec || again.Base != withDeps.Base {
		t.Fatalf("the same checkout again: record reused %v, Base %s; want the kept slot at %s", again.rec == withDeps.rec, again.Base, withDeps.Base)
	}
	checkTree(t, again.Dir, r.afterFiles)
	if d, err := again.Diff(ctx); err != nil || len(d) != 0 {
		t.Fatalf("Diff of the kept slot = %q, %v; want empty", d, err)
	}
	closed(again)

	base := prepare(nil) // another checkout: the slot is emptied first
	if base.rec == again.rec {
		t.Fatal("a slot kept for the patches' checkout was handed to a job of the base commit")
	}
	checkBase(t, base, r)
	closed(base)
}

// With a sandbox that makes workspaces writable for its user, Prepare does
// it ahead (SetShape) and refreshes the index: a run that then makes the
// workspace writable again changes nothing, so a job that changed nothing
// still leaves its slot to be handed on (PERF-55), and the index's stat
// data matches every file.
func TestPoolShapedCheckout(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	s, r, repo := uploadedRepo(t)
	m := newManager(t, t.TempDir(), s.bundles, s.patches)
	m.SetShape(func(dir string) error {
		// In the second after the checkout's, so that the index's stat
		// data (to the second, as this git compares it) must be refreshed; the
		// file system takes its times from a clock a tick behind.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
		return sandbox.MakeWritable(dir)
	})

	first, err := m.Prepare(ctx, repo, nil, "wf1.shaped.a1")
	if err != nil {
		t.Fatal(err)
	}
	if perm := stat(t, filepath.Join(first.Dir, "README.md")).Mode().Perm(); perm&0o066 != 0o066 {
		t.Fatalf("README.md is %v; want it writable by group and others", perm)
	}
	data := testkit.ReadFile(t, filepath.Join(first.GitDir(), "index"))
	ix, err := gitindex.Parse(data, gitindex.SHA1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ix.Entries {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(first.Dir, e.Path), &st); err != nil {
			t.Fatal(err)
		}
		if int64(e.Stat.CtimeSec) != st.Ctim.Sec {
			t.Errorf("index entry %s: change time %d, the file's %d", e.Path, e.Stat.CtimeSec, st.Ctim.Sec)
		}
	}
	if err := sandbox.MakeWritable(first.Dir); err != nil { // what a run does first
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := m.Prepare(ctx, repo, nil, "wf1.shaped.a2")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if next.rec == nil || next.rec != first.rec {
		t.Fatal("the unchanged shaped slot was emptied; want it handed on as it was")
	}
	checkBase(t, next, r)
}
