package integrity

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// runGit runs git in dir (see testkit.Git) with paths unquoted and the
// local file transport allowed.
func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return testkit.Git(t, dir, append([]string{"-c", "core.quotePath=false", "-c", "protocol.file.allow=always"}, args...)...)
}

// weirdName is a tracked file name with spaces, a newline and non-ASCII
// characters: -z output must carry it verbatim (WI-11, WI-13).
const weirdName = "dir with space/naïve\nfile ✓.txt"

// initialFiles is the content of every fixture's first commit.
var initialFiles = map[string]string{
	"README.md":      "# demo\n",
	"src/a.go":       "package a\n\nfunc A() int { return 1 }\n",
	"src/b.go":       "package a\n\nfunc B() int { return 2 }\n",
	"vendor/lib.go":  "package lib\n",
	"big.dat":        strings.Repeat("0123456789abcdef", 16<<10), // 256 KiB: above the 100 KiB threshold
	".gitignore":     "build/\n*.log\n.supervisor/cache/\n",
	weirdName:        "weird\n",
	"coverage.out":   "old coverage\n",
	"docs/guide.txt": "guide\n",
}

// fixture is a work tree to check.
type fixture struct {
	dir       string // work tree root
	gitDir    string // per-worktree git directory (HEAD, index)
	commonDir string // config, refs, hooks, objects
	linked    bool   // a linked worktree of a bare mirror
}

func (f fixture) path(rel string) string { return filepath.Join(f.dir, filepath.FromSlash(rel)) }

// layouts are the two shapes of work tree the check must handle: a plain
// repository (.git is a directory) and a linked worktree of a bare mirror,
// as the workspace package makes them (.git is a file naming
// <mirror>/worktrees/<name>).
var layouts = []struct {
	name string
	make func(t testing.TB) fixture
}{
	{"repo", newRepo},
	{"worktree", newWorktree},
}

func newRepo(t testing.TB) fixture {
	t.Helper()
	dir, _ := testkit.Repo(t, initialFiles)
	dir, _ = filepath.EvalSymlinks(dir)
	return fixture{dir: dir, gitDir: filepath.Join(dir, ".git"), commonDir: filepath.Join(dir, ".git")}
}

func newWorktree(t testing.TB) fixture {
	t.Helper()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	runGit(t, "", "init", "-q", src)
	for rel, content := range initialFiles {
		testkit.WriteFile(t, filepath.Join(src, filepath.FromSlash(rel)), content)
	}
	runGit(t, src, "add", "-A")
	runGit(t, src, "commit", "-q", "-m", "initial")
	mirror := filepath.Join(base, "mirror.git")
	runGit(t, base, "clone", "-q", "--bare", src, mirror)
	runGit(t, base, "--git-dir="+mirror, "config", "gc.auto", "0")
	wt := filepath.Join(base, "jobs", "job-1")
	runGit(t, base, "--git-dir="+mirror, "worktree", "add", "-q", "--detach", wt, "HEAD")
	base, _ = filepath.EvalSymlinks(base)
	f := fixture{
		dir:       filepath.Join(base, "jobs", "job-1"),
		gitDir:    filepath.Join(base, "mirror.git", "worktrees", "job-1"),
		commonDir: filepath.Join(base, "mirror.git"),
		linked:    true,
	}
	if b, err := os.ReadFile(filepath.Join(f.dir, ".git")); err != nil || !bytes.HasPrefix(b, []byte("gitdir: ")) {
		t.Fatalf("worktree .git is not a gitdir file: %q, %v", b, err)
	}
	return f
}

// capture captures f and fails the test on error.
func capture(t testing.TB, f fixture, opts Options) *Baseline {
	t.Helper()
	b, err := Capture(testkit.Context(t, time.Minute), f.dir, opts)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if b.unsafe != "" {
		t.Fatalf("Capture: unexpectedly unsafe: %s", b.unsafe)
	}
	return b
}

// check checks b and fails the test on error.
func check(t testing.TB, b *Baseline) *Report {
	t.Helper()
	r, err := b.Check(testkit.Context(t, time.Minute))
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return r
}

// keepMtime runs fn and then restores path's mtime (and atime).
func keepMtime(t testing.TB, path string, fn func()) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	fn()
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// sameLength returns s with its first byte changed.
func sameLength(s string) string {
	c := byte('X')
	if s[0] == 'X' {
		c = 'Y'
	}
	return string(c) + s[1:]
}

// must fails the test at once when a setup step returns an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// recorded returns the baseline's record of the path rel, failing the test
// when rel was not recorded.
func recorded(t testing.TB, b *Baseline, rel string) fileState {
	t.Helper()
	st, ok := b.file(rel)
	if !ok {
		t.Fatalf("%s not recorded", rel)
	}
	return st
}
