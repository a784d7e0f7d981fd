package workspace

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// Diff decides from the snapshot that nothing changed only when git would
// find nothing either: for every kind of change a job makes right after
// Prepare, the patch equals the one git computes.
func TestDiffWithoutGitMatchesGit(t *testing.T) {
	t.Parallel()
	s, _, repo := uploadedRepo(t)
	write := func(rel, data string) func(*testing.T, string) {
		return func(t *testing.T, dir string) { testkit.WriteFile(t, filepath.Join(dir, rel), []byte(data)) }
	}
	cases := []struct {
		name string
		do   func(t *testing.T, dir string)
		// unchanged is what the snapshot must say (nil: either answer
		// is right, the patch decides).
		unchanged *bool
	}{
		{"nothing", func(*testing.T, string) {}, ptr(true)},
		{"permissions as a sandbox widens them", func(t *testing.T, dir string) {
			for rel, mode := range map[string]os.FileMode{".": 0o777, "src": 0o777, "README.md": 0o666, "src/a.txt": 0o666, "data.bin": 0o666} {
				if err := os.Chmod(filepath.Join(dir, rel), mode); err != nil {
					t.Fatal(err)
				}
			}
		}, ptr(true)},
		{"same content written again", write("README.md", "hello\n"), nil},
		{"same-size rewrite", write("README.md", "HELLO\n"), ptr(false)},
		{"longer rewrite", write("src/a.txt", "a1\na2\na3\na4\n"), ptr(false)},
		{"binary rewrite", func(t *testing.T, dir string) {
			testkit.WriteFile(t, filepath.Join(dir, "data.bin"), binaryData(7))
		}, ptr(false)},
		{"execute bit", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "README.md"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, ptr(false)},
		{"file replaced by a link", func(t *testing.T, dir string) {
			path := filepath.Join(dir, "README.md")
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("src/a.txt", path); err != nil {
				t.Fatal(err)
			}
		}, ptr(false)},
		{"deleted file", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "src/a.txt")); err != nil {
				t.Fatal(err)
			}
		}, ptr(false)},
		{"new untracked file", write("src/deep/new.go", "package deep\n"), ptr(false)},
		{"new ignored file", write("debug.log", "ignored\n"), ptr(false)},
		{"new empty directory", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, ptr(false)},
		{"a commit", func(t *testing.T, dir string) {
			testkit.WriteFile(t, filepath.Join(dir, "src/a.txt"), []byte("committed\n"))
			testkit.Git(t, dir, "commit", "--quiet", "-am", "job's commit")
		}, ptr(false)},
		{"a rewritten .git file only", func(t *testing.T, dir string) {
			testkit.WriteFile(t, filepath.Join(dir, ".git"), []byte("gitdir: /nowhere\n"))
		}, ptr(true)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := testkit.Context(t, 60*time.Second)
			m := newManager(t, t.TempDir(), s.bundles, s.patches)
			ws, err := m.Prepare(ctx, repo, nil, "wf1.snap.a1")
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			if ws.snap == nil {
				t.Fatal("Prepare took no snapshot")
			}
			c.do(t, ws.Dir)
			if got := ws.snap.unchanged(ws.Dir); c.unchanged != nil && got != *c.unchanged {
				t.Errorf("snapshot says unchanged = %v, want %v", got, *c.unchanged)
			}
			got, err := ws.Diff(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ws.snap = nil // git alone, as before snapshots
			want, err := ws.Diff(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Diff = %q, git says %q", got, want)
			}
		})
	}
}

// A file written in the same tick of the clock as the checkout may keep
// its size and modification time: the snapshot compares its content.
func TestSnapshotRacyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "f.txt")
	testkit.WriteFile(t, path, []byte("before\n"))
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	mtime, err := mtimeOf(path)
	if err != nil {
		t.Fatal(err)
	}
	snap := takeSnapshot(dir, mtime) // the index written in the same tick
	if snap == nil || !snap.unchanged(dir) {
		t.Fatal("a fresh snapshot does not match its tree")
	}
	if err := os.WriteFile(path, []byte("after!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if now, _ := mtimeOf(path); now != mtime {
		t.Fatalf("modification time not restored: %d, want %d", now, mtime)
	}
	if snap.unchanged(dir) {
		t.Fatal("a racy file rewritten with the same size and time counts as unchanged")
	}
}

func ptr[T any](v T) *T { return &v }
