package integrity

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// manyDirs is a work tree of tracked paths spread over many directories
// at several depths (the root included), with executables and symbolic
// links, so that a fast capture's walk and check run on many directories
// in parallel.
type manyDirs struct {
	fixture
	dirs []string // every directory holding tracked paths, "" for the root
}

func newManyDirs(t *testing.T) manyDirs {
	t.Helper()
	files := map[string]string{"README.md": "# many\n", "top.go": "package top\n"}
	dirs := []string{""}
	for i := range 36 {
		d := fmt.Sprintf("a%d/b%d/c%02d", i%3, i%4, i)
		if i%5 == 0 {
			d = fmt.Sprintf("a%d", i%3) // a shallower one
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
		for j := range 3 {
			files[fmt.Sprintf("%s/f%d-%d.txt", d, i, j)] = fmt.Sprintf("file %d of %s\n", j, d)
		}
	}
	dir, _ := testkit.Repo(t, files)
	dir, _ = filepath.EvalSymlinks(dir)
	f := manyDirs{fixture: fixture{dir: dir, gitDir: filepath.Join(dir, ".git"), commonDir: filepath.Join(dir, ".git")}, dirs: dirs}
	// An executable and a symbolic link in a few directories.
	for i, d := range dirs {
		if i%4 != 1 {
			continue
		}
		must(t, os.WriteFile(f.path(filepath.Join(d, "run.sh")), []byte("#!/bin/sh\n"), 0o755))
		must(t, os.Symlink("run.sh", f.path(filepath.Join(d, "link"))))
	}
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-q", "-m", "more")
	return f
}

// withProcs runs fn with GOMAXPROCS set to n, which bounds the goroutines
// of the walk and the check (see parallel).
func withProcs(n int, fn func()) {
	prev := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(prev)
	fn()
}

// TestFastWalkParallelEqualsSerial: the fast capture's walk and check give
// the same records and the same report whether the directories are
// examined one at a time or in parallel, and every tracked path is
// recorded in its directory (PERF-15).
func TestFastWalkParallelEqualsSerial(t *testing.T) {
	f := newManyDirs(t)
	settled()
	var serial, par *Baseline
	withProcs(1, func() { serial = capture(t, f.fixture, Options{}) })
	withProcs(max(4, runtime.GOMAXPROCS(0)), func() { par = capture(t, f.fixture, Options{}) })
	for _, b := range []*Baseline{serial, par} {
		if b.fast == nil {
			t.Fatalf("slow path taken: %s", b.Stats().SlowPath)
		}
	}
	if s, p := serial.Stats(), par.Stats(); s.Files != p.Files || s.Tracked != p.Tracked || s.Hashed != p.Hashed || s.FromIndex != p.FromIndex {
		t.Fatalf("stats differ: serial %+v, parallel %+v", s, p)
	}
	if got := len(serial.fast.dirs); got < len(f.dirs) {
		t.Fatalf("%d directories recorded, want at least %d", got, len(f.dirs))
	}
	for _, d := range serial.fast.dirs {
		k, ok := par.fast.byRel[d.rel]
		if !ok {
			t.Fatalf("directory %q recorded serially only", d.rel)
		}
		p := par.fast.dirs[k]
		if d.walked != p.walked || d.self != p.self || !slices.Equal(d.names, p.names) || !slices.Equal(d.states, p.states) {
			t.Errorf("directory %q differs:\nserial   %+v\nparallel %+v", d.rel, d, p)
		}
	}
	tracked := strings.Split(strings.TrimRight(runGit(t, f.dir, "ls-files", "-z"), "\x00"), "\x00")
	if len(tracked) != par.Stats().Tracked {
		t.Fatalf("%d tracked paths recorded, git lists %d", par.Stats().Tracked, len(tracked))
	}
	for _, p := range tracked {
		st := recorded(t, par, p)
		if st.kind != kindRegular && st.kind != kindSymlink {
			t.Errorf("%s recorded as %v", p, st.kind)
		}
	}
	for _, procs := range []int{1, 4} {
		withProcs(procs, func() {
			for _, b := range []*Baseline{serial, par} {
				r := check(t, b)
				assertReport(t, r, nil, nil)
				if !r.skippedGit {
					t.Errorf("GOMAXPROCS %d: the check of an untouched tree ran git status", procs)
				}
			}
		})
	}
}

// TestFastCheckEveryDirectory: whichever directory a change is made in,
// the root, a shallow or a deep one, the parallel check finds it: content
// rewritten with size and mtime kept, a mode change, a deletion, a new
// file, a file replaced by a symbolic link, a symbolic link retargeted
// (PERF-15).
func TestFastCheckEveryDirectory(t *testing.T) {
	f := newManyDirs(t)
	type change struct {
		name  string
		apply func(t *testing.T, dir string) Violation
	}
	first := func(t *testing.T, dir string) string {
		t.Helper()
		entries, err := os.ReadDir(f.path(dir))
		must(t, err)
		for _, e := range entries {
			if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".txt") || e.Name() == "README.md" {
				return filepath.ToSlash(filepath.Join(dir, e.Name()))
			}
		}
		t.Fatalf("no file in %q", dir)
		return ""
	}
	changes := []change{
		{"content, size and mtime kept", func(t *testing.T, dir string) Violation {
			rel := first(t, dir)
			p := f.path(rel)
			data, err := os.ReadFile(p)
			must(t, err)
			keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(string(data))) })
			return Violation{Path: rel, Kind: KindModified, Detail: "size and mtime unchanged"}
		}},
		{"made executable", func(t *testing.T, dir string) Violation {
			rel := first(t, dir)
			must(t, os.Chmod(f.path(rel), 0o755))
			return Violation{Path: rel, Kind: KindModified, Detail: "mode"}
		}},
		{"deleted", func(t *testing.T, dir string) Violation {
			rel := first(t, dir)
			must(t, os.Remove(f.path(rel)))
			return Violation{Path: rel, Kind: KindDeleted}
		}},
		{"new file", func(t *testing.T, dir string) Violation {
			rel := filepath.ToSlash(filepath.Join(dir, "new.txt"))
			testkit.WriteFile(t, f.path(rel), "new\n")
			return Violation{Path: rel, Kind: KindNew}
		}},
		{"replaced by a symbolic link", func(t *testing.T, dir string) Violation {
			rel := first(t, dir)
			must(t, os.Remove(f.path(rel)))
			must(t, os.Symlink(".", f.path(rel))) // resolves inside the work tree
			return Violation{Path: rel, Kind: KindModified, Detail: "was a file, now a symlink"}
		}},
	}
	// Every directory gets each change in turn, with and without
	// Options.IndexFresh (git reset leaves the index fresh: the files it
	// did not rewrite come from the index, PERF-53); the work tree is
	// reset to its commit after each, so every capture takes the fast
	// path.
	for _, fresh := range []bool{false, true} {
		mode := ""
		if fresh {
			mode = "index-fresh/"
		}
		for i, dir := range f.dirs {
			for j, c := range changes {
				if (i+j)%2 == 1 && dir != "" && i != len(f.dirs)-1 {
					continue // half of the pairs, but every change at the root and the last directory
				}
				t.Run(fmt.Sprintf("%s%q/%s", mode, dir, c.name), func(t *testing.T) {
					b := capture(t, f.fixture, Options{IndexFresh: fresh})
					if b.fast == nil {
						t.Fatalf("slow path taken: %s", b.Stats().SlowPath)
					}
					if st := b.Stats(); fresh && st.StatFromIndex == 0 {
						t.Fatalf("stats %+v: nothing taken from the index", st)
					}
					want := c.apply(t, dir)
					assertReport(t, check(t, b), []Violation{want}, nil)
					runGit(t, f.dir, "reset", "-q", "--hard")
					runGit(t, f.dir, "clean", "-q", "-fd")
				})
			}
		}
	}
	// A symbolic link retargeted, in each directory that has one.
	for i, dir := range f.dirs {
		if i%4 != 1 {
			continue
		}
		t.Run(fmt.Sprintf("%q/symlink retargeted", dir), func(t *testing.T) {
			b := capture(t, f.fixture, Options{})
			rel := filepath.ToSlash(filepath.Join(dir, "link"))
			target := filepath.Base(first(t, dir))
			must(t, os.Remove(f.path(rel)))
			must(t, os.Symlink(target, f.path(rel)))
			assertReport(t, check(t, b), []Violation{{Path: rel, Kind: KindModified, Detail: fmt.Sprintf("link %q -> %q", "run.sh", target)}}, nil)
			runGit(t, f.dir, "reset", "-q", "--hard")
		})
	}
}
