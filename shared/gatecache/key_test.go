package gatecache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

func TestKeySameTreeInDifferentWorkspaces(t *testing.T) {
	t.Parallel()
	a := newRepo(t)
	base := t.TempDir()
	clone := filepath.Join(base, "clone")
	testkit.Git(t, base, "clone", "-q", a, clone)
	wt := filepath.Join(base, "worktree")
	testkit.Git(t, a, "worktree", "add", "-q", "--detach", wt, "HEAD")

	ka := mustKey(t, baseInput(a))
	kc := mustKey(t, baseInput(clone))
	kw := mustKey(t, baseInput(wt))
	if ka.ID != kc.ID || ka.ID != kw.ID {
		t.Fatalf("keys differ across workspaces with the same tree:\n repo     %s\n clone    %s\n worktree %s", ka.ID, kc.ID, kw.ID)
	}
	if ka.Tree == "" || ka.Tree != kc.Tree || ka.Tree != kw.Tree {
		t.Fatalf("trees = %q %q %q; want equal and set", ka.Tree, kc.Tree, kw.Tree)
	}
	if want := testkit.Git(t, a, "rev-parse", "HEAD^{tree}"); ka.Tree != want {
		t.Fatalf("Tree = %s; want HEAD's tree %s", ka.Tree, want)
	}

	// The same uncommitted change in two workspaces: same key.
	writeFile(t, a, "pkg/a.go", "package pkg\n\nconst A = 2\n")
	writeFile(t, clone, "pkg/a.go", "package pkg\n\nconst A = 2\n")
	writeFile(t, a, "new.txt", "new\n")
	writeFile(t, clone, "new.txt", "new\n")
	ka, kc = mustKey(t, baseInput(a)), mustKey(t, baseInput(clone))
	if ka.ID != kc.ID {
		t.Fatalf("same dirty content in two workspaces: keys %s and %s differ", ka.ID, kc.ID)
	}

	// Another commit with an identical tree: the same key, by design.
	testkit.Git(t, wt, "commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", "empty")
	if k := mustKey(t, baseInput(wt)); k.ID != kw.ID {
		t.Fatalf("a new commit with the same tree changed the key: %s → %s", kw.ID, k.ID)
	}
}

func TestKeyStable(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	writeFile(t, dir, "main.go", "package main // dirty\n")
	writeFile(t, dir, "untracked.txt", "u\n")
	k1 := mustKey(t, baseInput(dir))
	in := baseInput(dir)
	in.AllowedWrites = []string{"build/**", "coverage.out"} // another order
	in.Env = map[string]string{"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
	k2 := mustKey(t, in)
	if k1.ID != k2.ID {
		t.Fatalf("key not stable: %s then %s", k1.ID, k2.ID)
	}
	// The fresh-index path computes the same tree as the copied index.
	k3, err := computeKey(context.Background(), baseInput(dir), treeGitFresh)
	if err != nil || k3.ID != k1.ID || k3.Tree != k1.Tree {
		t.Fatalf("fresh index: %+v, %v; want %s (tree %s)", k3, err, k1.ID, k1.Tree)
	}
	if k1.Took <= 0 {
		t.Fatalf("Took = %v", k1.Took)
	}
}

func TestKeyChanges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir string, in *KeyInput)
	}{
		{"one byte of a tracked file", func(t *testing.T, dir string, in *KeyInput) {
			writeFile(t, dir, "pkg/a.go", "package pkg\n\nconst A = 3\n")
		}},
		{"new untracked file", func(t *testing.T, dir string, in *KeyInput) {
			writeFile(t, dir, "extra.go", "package main\n")
		}},
		{"empty untracked file", func(t *testing.T, dir string, in *KeyInput) {
			writeFile(t, dir, "empty", "")
		}},
		{"deleted tracked file", func(t *testing.T, dir string, in *KeyInput) {
			if err := os.Remove(filepath.Join(dir, "README.md")); err != nil {
				t.Fatal(err)
			}
		}},
		{"staged change", func(t *testing.T, dir string, in *KeyInput) {
			writeFile(t, dir, "README.md", "# staged\n")
			testkit.Git(t, dir, "add", "README.md")
		}},
		{"executable bit", func(t *testing.T, dir string, in *KeyInput) {
			if err := os.Chmod(filepath.Join(dir, "main.go"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"command", func(t *testing.T, dir string, in *KeyInput) { in.Command = []string{"go", "test", "-race", "./..."} }},
		{"command split differently", func(t *testing.T, dir string, in *KeyInput) { in.Command = []string{"go", "test ./..."} }},
		{"env value", func(t *testing.T, dir string, in *KeyInput) { in.Env["CGO_ENABLED"] = "1" }},
		{"env added", func(t *testing.T, dir string, in *KeyInput) { in.Env["X"] = "" }},
		{"working dir", func(t *testing.T, dir string, in *KeyInput) { in.WorkingDir = "pkg" }},
		{"timeout", func(t *testing.T, dir string, in *KeyInput) { in.TimeoutSeconds = 301 }},
		{"environment id", func(t *testing.T, dir string, in *KeyInput) { in.EnvironmentID = "sha256:fedcba" }},
		{"resources", func(t *testing.T, dir string, in *KeyInput) { in.Resources = "memory=4g,cpus=2,pids=512" }},
		{"allowed_writes", func(t *testing.T, dir string, in *KeyInput) { in.AllowedWrites = append(in.AllowedWrites, "tmp/**") }},
		{"gate name", func(t *testing.T, dir string, in *KeyInput) { in.Gate = "test2" }},
		{"cache_inputs pattern matching nothing", func(t *testing.T, dir string, in *KeyInput) { in.CacheInputs = []string{"nothing/**"} }},
		{"force hash flag", func(t *testing.T, dir string, in *KeyInput) { in.ForceHashLarge = true }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := newRepo(t)
			before := mustKey(t, baseInput(dir))
			in := baseInput(dir)
			c.mutate(t, dir, &in)
			after := mustKey(t, in)
			if after.ID == before.ID {
				t.Fatalf("key unchanged (%s)", after.ID)
			}
		})
	}
}

// Ignored files count only as cache_inputs match them: each step writes
// one file and says whether the key, with the cache_inputs given, changes.
func TestKeyIgnoredFilesAndCacheInputs(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	steps := []struct {
		inputs        []string // cache_inputs
		file, content string
		changes       bool
	}{
		{nil, "build/out.bin", "v1", false},
		{nil, "debug.log", "noise", false},
		{[]string{"build/out.bin"}, "build/out.bin", "v2", true},
		{[]string{"build/out.bin"}, "debug.log", "more noise", false}, // other ignored files still don't count
		// A directory match and a glob match.
		{[]string{"build/"}, "build/sub/x.o", "x", true},
		{[]string{"build/**/*.o"}, "build/sub/x.o", "y", true},
		{[]string{"build/**/*.o"}, "build/sub/x.txt", "not matched", false},
		// A one-segment glob matches at the top only.
		{[]string{"*.log"}, "build/deep/x.log", "deep", false},
		{[]string{"*.log"}, "debug.log", "changed again", true},
	}
	for _, s := range steps {
		in := baseInput(dir)
		in.CacheInputs = s.inputs
		before := mustKey(t, in)
		writeFile(t, dir, s.file, s.content)
		if changed := mustKey(t, in).ID != before.ID; changed != s.changes {
			t.Fatalf("cache_inputs %q: writing %s changed the key: %v, want %v", s.inputs, s.file, changed, s.changes)
		}
	}
}

// A large cache input (over ContentHashThreshold) is compared by size and
// mtime unless ForceHashLarge, whether it is matched by name or inside a
// matched directory.
func TestKeyLargeCacheInput(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	path := filepath.Join(dir, "build", "big.bin")
	content := bytes.Repeat([]byte("a"), ContentHashThreshold+1)
	mt := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	// write writes content with the same size and mtime every time.
	write := func() {
		writeFile(t, dir, "build/big.bin", string(content))
		setMtime(t, path, mt)
	}
	write()
	for i, pattern := range []string{"build/big.bin", "build"} {
		in := baseInput(dir)
		in.CacheInputs = []string{pattern}
		force := in
		force.ForceHashLarge = true
		k1, f1 := mustKey(t, in), mustKey(t, force)
		// Same size, same mtime, different content: size+mtime cannot see
		// it, force hashing can.
		content[i] = 'b'
		write()
		if k2 := mustKey(t, in); k2.ID != k1.ID {
			t.Fatalf("%s, size+mtime proxy: key changed though size and mtime did not", pattern)
		}
		if f2 := mustKey(t, force); f2.ID == f1.ID {
			t.Fatalf("%s, force hash: key unchanged though the content changed", pattern)
		}
	}
	// A new mtime changes the key without force.
	in := baseInput(dir)
	in.CacheInputs = []string{"build/big.bin"}
	k1 := mustKey(t, in)
	setMtime(t, path, mt.Add(time.Second))
	if k2 := mustKey(t, in); k2.ID == k1.ID {
		t.Fatalf("size+mtime proxy: key unchanged though mtime changed")
	}
}

func TestKeyCacheInputsOutsideAndSymlinks(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := baseInput(dir)
	in.CacheInputs = []string{"../secret.txt", "/etc/passwd"}
	mustKey(t, in) // skipped, not disabled

	// A symlink (ignored) to a file outside: its target text counts, the
	// content outside is not read.
	writeFile(t, dir, "build/.keep", "")
	if err := os.Symlink(outside, filepath.Join(dir, "build", "link")); err != nil {
		t.Fatal(err)
	}
	in.CacheInputs = []string{"build/link"}
	k1 := mustKey(t, in)
	if err := os.WriteFile(outside, []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if k2 := mustKey(t, in); k2.ID != k1.ID {
		t.Fatalf("content outside the workspace changed the key")
	}

	// A symlink to a file inside: its content counts.
	writeFile(t, dir, "build/real.txt", "1")
	if err := os.Symlink("real.txt", filepath.Join(dir, "build", "inside")); err != nil {
		t.Fatal(err)
	}
	in.CacheInputs = []string{"build/inside"}
	s1 := mustKey(t, in)
	writeFile(t, dir, "build/real.txt", "2")
	if s2 := mustKey(t, in); s2.ID == s1.ID {
		t.Fatalf("a symlinked file's content change left the key unchanged")
	}

	// A symlink to a directory disables caching (CD-16).
	if err := os.Mkdir(filepath.Join(dir, "build", "realdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("realdir", filepath.Join(dir, "build", "dirlink")); err != nil {
		t.Fatal(err)
	}
	in.CacheInputs = []string{"build/dirlink"}
	mustDisabled(t, in, "symlink to a directory")
	in.CacheInputs = []string{"build/*"}
	mustDisabled(t, in, "symlink to a directory")
}

func TestKeyCacheInputsLimits(t *testing.T) {
	t.Parallel()
	t.Run("directory over MaxDirFiles", func(t *testing.T) {
		t.Parallel()
		dir := newRepo(t)
		for i := range MaxDirFiles + 1 {
			writeFile(t, dir, fmt.Sprintf("build/gen/%02d/f%04d", i%10, i), "x")
		}
		in := baseInput(dir)
		in.CacheInputs = []string{"build/gen"}
		mustDisabled(t, in, "CD-15")
		// Exactly at the limit is fine.
		if err := os.Remove(filepath.Join(dir, "build", "gen", "00", "f0000")); err != nil {
			t.Fatal(err)
		}
		mustKey(t, in)
	})
	t.Run("matches over the limit", func(t *testing.T) {
		t.Parallel()
		// MaxInputMatches files take seconds to create on a slow disk: the
		// same code with a lower limit.
		dir := newRepo(t)
		for i := range 51 {
			writeFile(t, dir, fmt.Sprintf("build/%02d/f%03d.o", i%5, i), "")
		}
		lim := inputLimits{matches: 50, dirFiles: MaxDirFiles}
		_, err := hashInputs(context.Background(), dir, []string{"build/**/*.o"}, false, lim)
		var d *disabled
		if !errors.As(err, &d) || !strings.Contains(d.reason, "CD-14") {
			t.Fatalf("51 matches over a limit of 50: %v; want CD-14", err)
		}
		lim.matches = 51
		if _, err := hashInputs(context.Background(), dir, []string{"build/**/*.o"}, false, lim); err != nil {
			t.Fatalf("51 matches at a limit of 51: %v", err)
		}
		if defaultInputLimits.matches != 10_000 || defaultInputLimits.dirFiles != 1000 {
			t.Fatalf("default limits = %+v", defaultInputLimits)
		}
	})
}

func TestKeyDisabled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		want   string
		mutate func(t *testing.T, dir string, in *KeyInput)
	}{
		{"more than 500 untracked files", "CD-10", func(t *testing.T, dir string, in *KeyInput) {
			for i := range MaxUntrackedFiles + 1 {
				writeFile(t, dir, fmt.Sprintf("gen/f%03d.txt", i), "x")
			}
		}},
		{"1 MB untracked file", "CD-13", func(t *testing.T, dir string, in *KeyInput) {
			writeFile(t, dir, "big.bin", strings.Repeat("x", 1<<20))
		}},
		{"untracked symlink", "CD-11", func(t *testing.T, dir string, in *KeyInput) {
			if err := os.Symlink("main.go", filepath.Join(dir, "link.go")); err != nil {
				t.Fatal(err)
			}
		}},
		{"untracked nested repository", "nested git repository", func(t *testing.T, dir string, in *KeyInput) {
			nested := filepath.Join(dir, "vendor", "nested")
			if err := os.MkdirAll(nested, 0o755); err != nil {
				t.Fatal(err)
			}
			testkit.Git(t, nested, "init", "-q")
			writeFile(t, nested, "x", "x")
		}},
		{"no environment id", "CD-19", func(t *testing.T, dir string, in *KeyInput) { in.EnvironmentID = "" }},
		{"tiny deadline", "CD-17", func(t *testing.T, dir string, in *KeyInput) { in.Deadline = time.Nanosecond }},
		{"not a git repository", "CD-02", func(t *testing.T, dir string, in *KeyInput) {
			in.Dir = t.TempDir()
		}},
		{"subdirectory of a worktree", "not the top", func(t *testing.T, dir string, in *KeyInput) {
			in.Dir = filepath.Join(dir, "pkg")
		}},
		{"no commit", "CD-02", func(t *testing.T, dir string, in *KeyInput) {
			in.Dir = filepath.Join(t.TempDir(), "empty")
			if err := os.Mkdir(in.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			testkit.Git(t, in.Dir, "init", "-q")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := newRepo(t)
			in := baseInput(dir)
			c.mutate(t, dir, &in)
			mustDisabled(t, in, c.want)
		})
	}
	t.Run("at the limits", func(t *testing.T) {
		t.Parallel()
		dir := newRepo(t)
		for i := range MaxUntrackedFiles {
			writeFile(t, dir, fmt.Sprintf("gen/f%03d.txt", i), "x")
		}
		writeFile(t, dir, "gen/f000.txt", strings.Repeat("x", MaxUntrackedFileSize-1))
		mustKey(t, baseInput(dir))
	})
	t.Run("cancelled context is an error", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := ComputeKey(ctx, baseInput(newRepo(t))); err == nil {
			t.Fatal("ComputeKey with a cancelled context: no error")
		}
		if _, err := ComputeKey(context.Background(), KeyInput{}); err == nil {
			t.Fatal("ComputeKey with no Dir: no error")
		}
	})
}

// TestKeyAssumeUnchanged: an index flag that hides changes from git add
// must not hide them from the key.
func TestKeyAssumeUnchanged(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	k0 := mustKey(t, baseInput(dir))
	testkit.Git(t, dir, "update-index", "--assume-unchanged", "main.go")
	writeFile(t, dir, "main.go", "package main // hidden change\n")
	k1 := mustKey(t, baseInput(dir))
	if k1.ID == k0.ID {
		t.Fatal("an assume-unchanged file's change was not seen")
	}
	testkit.Git(t, dir, "update-index", "--no-assume-unchanged", "main.go")
	testkit.Git(t, dir, "update-index", "--skip-worktree", "pkg/a.go")
	writeFile(t, dir, "pkg/a.go", "package pkg // hidden\n")
	if k2 := mustKey(t, baseInput(dir)); k2.ID == k1.ID {
		t.Fatal("a skip-worktree file's change was not seen")
	}
}

func TestKeyLeavesWorkspaceUntouched(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	writeFile(t, dir, "pkg/a.go", "package pkg\n\nconst A = 9\n") // unstaged
	writeFile(t, dir, "README.md", "# staged\n")
	testkit.Git(t, dir, "add", "README.md")
	writeFile(t, dir, "new.txt", "untracked\n")
	writeFile(t, dir, "build/x", "ignored\n")

	index := filepath.Join(dir, ".git", "index")
	statusBefore := testkit.Git(t, dir, "status", "--porcelain=v1", "--ignored")
	indexBefore, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	infoBefore, _ := os.Stat(index)
	objectsBefore := countFiles(t, filepath.Join(dir, ".git", "objects"))

	k := mustKey(t, baseInput(dir))
	if k.Tree == testkit.Git(t, dir, "rev-parse", "HEAD^{tree}") {
		t.Fatal("the tree should include the uncommitted changes")
	}

	indexAfter, _ := os.ReadFile(index)
	infoAfter, _ := os.Stat(index)
	if !bytes.Equal(indexBefore, indexAfter) || !infoBefore.ModTime().Equal(infoAfter.ModTime()) {
		t.Fatal("the workspace index was modified")
	}
	if n := countFiles(t, filepath.Join(dir, ".git", "objects")); n != objectsBefore {
		t.Fatalf("the object store gained files: %d → %d", objectsBefore, n)
	}
	if statusAfter := testkit.Git(t, dir, "status", "--porcelain=v1", "--ignored"); statusAfter != statusBefore {
		t.Fatalf("git status changed:\nbefore:\n%s\nafter:\n%s", statusBefore, statusAfter)
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestKeySubmodules(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.Git(t, sub, "-c", "init.defaultBranch=main", "init", "-q")
	writeFile(t, sub, "lib.txt", "v1\n")
	testkit.Git(t, sub, "add", "-A")
	testkit.Git(t, sub, "commit", "-q", "--no-gpg-sign", "-m", "sub")

	super := newRepo(t)
	testkit.Git(t, super, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "deps/sub")
	testkit.Git(t, super, "commit", "-q", "--no-gpg-sign", "-m", "add submodule")

	clean := mustKey(t, baseInput(super))

	t.Run("dirty", func(t *testing.T) {
		writeFile(t, filepath.Join(super, "deps", "sub"), "lib.txt", "dirty\n")
		mustDisabled(t, baseInput(super), "CD-06")
		testkit.Git(t, filepath.Join(super, "deps", "sub"), "checkout", "-q", "--", "lib.txt")
		writeFile(t, filepath.Join(super, "deps", "sub"), "untracked", "x")
		mustDisabled(t, baseInput(super), "CD-06")
		if err := os.Remove(filepath.Join(super, "deps", "sub", "untracked")); err != nil {
			t.Fatal(err)
		}
		if k := mustKey(t, baseInput(super)); k.ID != clean.ID {
			t.Fatal("a cleaned submodule changed the key")
		}
	})
	t.Run("moved", func(t *testing.T) {
		subWT := filepath.Join(super, "deps", "sub")
		writeFile(t, subWT, "lib.txt", "v2\n")
		testkit.Git(t, subWT, "commit", "-q", "-a", "--no-gpg-sign", "-m", "v2")
		mustDisabled(t, baseInput(super), "CD-05")
		testkit.Git(t, subWT, "checkout", "-q", "HEAD~1")
		mustKey(t, baseInput(super))
	})
	t.Run("uninitialized", func(t *testing.T) {
		clone := filepath.Join(t.TempDir(), "clone")
		testkit.Git(t, root, "clone", "-q", super, clone)
		mustDisabled(t, baseInput(clone), "CD-05")
	})
}
