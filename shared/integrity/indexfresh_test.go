package integrity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitindex"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// freshFixture is a repository whose index was just rewritten with the
// current stat data of every tracked file, as a workspace the runner has
// prepared holds it, its files older than the racy margin (PERF-53).
func freshFixture(t *testing.T, make func(testing.TB) fixture) fixture {
	t.Helper()
	f := make(t)
	settled()
	runGit(t, f.dir, "update-index", "-q", "--refresh", "--force-write-index")
	settled()
	return f
}

// captureFresh captures f with Options.IndexFresh and checks that every
// tracked regular file was recorded from the index, unexamined.
func captureFresh(t *testing.T, f fixture) *Baseline {
	t.Helper()
	b := capture(t, f, Options{IndexFresh: true})
	st := b.Stats()
	if b.fast == nil || st.StatFromIndex != len(initialFiles) || st.StatCalls != 0 {
		t.Fatalf("stats %+v: want all %d tracked files from the index and no stat call", st, len(initialFiles))
	}
	return b
}

// TestIndexFreshGateChanges: with Options.IndexFresh, every way a gate
// can change a tracked file whose stat data the capture took from the
// index is reported, and an identical rewrite is not (PERF-53).
func TestIndexFreshGateChanges(t *testing.T) {
	cases := []struct {
		name string
		gate func(t *testing.T, f fixture)
		want []Violation
	}{
		{"untouched", func(*testing.T, fixture) {}, nil},
		{"identical rewrite", func(t *testing.T, f fixture) {
			testkit.WriteFile(t, f.path("src/a.go"), initialFiles["src/a.go"])
			later := time.Now().Add(time.Hour)
			must(t, os.Chtimes(f.path("src/b.go"), later, later))
		}, nil},
		{"content changed, size and mtime restored", func(t *testing.T, f fixture) {
			p := f.path("src/a.go")
			keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["src/a.go"])) })
		}, []Violation{{Path: "src/a.go", Kind: KindModified, Detail: "content changed with size and mtime unchanged"}}},
		{"large file changed, size and mtime restored", func(t *testing.T, f fixture) {
			p := f.path("big.dat")
			keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["big.dat"])) })
		}, []Violation{{Path: "big.dat", Kind: KindModified, Detail: "size and mtime unchanged"}}},
		{"made executable", func(t *testing.T, f fixture) { must(t, os.Chmod(f.path("src/b.go"), 0o755)) },
			[]Violation{{Path: "src/b.go", Kind: KindModified, Detail: "mode"}}},
		{"deleted", func(t *testing.T, f fixture) { must(t, os.Remove(f.path("README.md"))) },
			[]Violation{{Path: "README.md", Kind: KindDeleted}}},
		{"replaced by a symlink", func(t *testing.T, f fixture) {
			must(t, os.Remove(f.path("src/b.go")))
			must(t, os.Symlink("a.go", f.path("src/b.go")))
		}, []Violation{{Path: "src/b.go", Kind: KindModified, Detail: "was a file, now a symlink"}}},
		{"replaced by a directory", func(t *testing.T, f fixture) {
			must(t, os.Remove(f.path("docs/guide.txt")))
			testkit.WriteFile(t, f.path("docs/guide.txt/inner.txt"), "x\n")
		}, []Violation{{Path: "docs/guide.txt", Kind: KindModified, Detail: "was a file, now a directory"}, {Path: "docs/guide.txt/inner.txt", Kind: KindNew}}},
		{"renamed over, size and mtime kept", func(t *testing.T, f fixture) {
			// A file of the same size elsewhere, renamed over the tracked one
			// with its mtime set to the tracked file's.
			p, tmp := f.path("src/a.go"), f.path("src/a.go.tmp")
			fi, err := os.Lstat(p)
			must(t, err)
			testkit.WriteFile(t, tmp, sameLength(initialFiles["src/a.go"]))
			must(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
			must(t, os.Rename(tmp, p))
		}, []Violation{{Path: "src/a.go", Kind: KindModified, Detail: "content changed with size and mtime unchanged"}}},
		{"renamed over with identical content", func(t *testing.T, f fixture) {
			tmp := f.path("src/a.go.tmp")
			testkit.WriteFile(t, tmp, initialFiles["src/a.go"])
			must(t, os.Rename(tmp, f.path("src/a.go")))
		}, nil},
	}
	for _, l := range layouts {
		for _, c := range cases {
			t.Run(l.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				f := freshFixture(t, l.make)
				b := captureFresh(t, f)
				if st := recorded(t, b, "src/a.go"); !st.indexStat || !st.blob {
					t.Fatalf("src/a.go not recorded from the index: %+v", st)
				}
				c.gate(t, f)
				assertReport(t, check(t, b), c.want, nil)
			})
		}
	}
}

// TestIndexFreshRacy: an entry racily clean with respect to the index file
// (its file written in the index's clock tick) is examined and hashed at
// capture even with Options.IndexFresh, as without it: the index below
// names other content for README.md than the file holds, with README.md's
// true stat data, as a write in the same tick as `git add` leaves it. A
// gate writing the content the index names, size and mtime kept, is
// caught; trusting the entry would have taken that content for the
// baseline.
func TestIndexFreshRacy(t *testing.T) {
	f := freshFixture(t, newRepo)
	indexPath := filepath.Join(f.gitDir, "index")
	other := gitindex.BlobID(gitindex.SHA1, []byte(sameLength(initialFiles["README.md"])))
	forgeID(t, indexPath, gitindex.BlobID(gitindex.SHA1, []byte(initialFiles["README.md"])), other)
	fi, err := os.Lstat(f.path("README.md"))
	must(t, err)
	// The index written in the file's instant: README.md's entry is racily
	// clean (so may be others whose files were written in that tick).
	must(t, os.Chtimes(indexPath, fi.ModTime(), fi.ModTime()))
	b := capture(t, f, Options{IndexFresh: true})
	if st := recorded(t, b, "README.md"); st.indexStat || st.blob || st.hash == "" {
		t.Fatalf("racily clean README.md taken from the index: %+v", st)
	}
	if st := b.Stats(); st.StatCalls == 0 || st.StatCalls+st.StatFromIndex != len(initialFiles) {
		t.Fatalf("stats %+v: README.md not examined", st)
	}
	p := f.path("README.md")
	keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["README.md"])) })
	assertReport(t, check(t, b), []Violation{{Path: "README.md", Kind: KindModified, Detail: "content changed with size and mtime unchanged"}}, nil)
}

// TestIndexFreshRecentEntry: an entry whose times are not before the
// capture's start (s.racy) is examined even with Options.IndexFresh,
// though it is not racily clean with respect to the index file: a change
// in the same clock tick could keep its ctime. src/a.go gets an mtime an
// hour ahead, its entry is refreshed, and the index file's mtime is set
// later still, so only the capture's own raciness rule applies.
func TestIndexFreshRecentEntry(t *testing.T) {
	f := freshFixture(t, newRepo)
	p := f.path("src/a.go")
	ahead := time.Now().Add(time.Hour)
	must(t, os.Chtimes(p, ahead, ahead))
	runGit(t, f.dir, "update-index", "-q", "--refresh", "--force-write-index")
	later := ahead.Add(time.Hour)
	must(t, os.Chtimes(filepath.Join(f.gitDir, "index"), later, later))
	b := capture(t, f, Options{IndexFresh: true})
	if st := recorded(t, b, "src/a.go"); st.indexStat || !st.racy || st.hash == "" {
		t.Fatalf("src/a.go, not before the capture, taken from the index: %+v", st)
	}
	if st := recorded(t, b, "src/b.go"); !st.indexStat {
		t.Fatalf("src/b.go not taken from the index: %+v", st)
	}
	assertReport(t, check(t, b), nil, nil)
	keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["src/a.go"])) })
	assertReport(t, check(t, b), []Violation{{Path: "src/a.go", Kind: KindModified, Detail: "size and mtime unchanged"}}, nil)
}

// TestIndexFreshBrokenPromise documents what a false Options.IndexFresh
// does: the check compares each tracked file whose stat data differs from
// the index with the index, not with the work tree before the gate. A file
// the agent changed before the capture is reported although the gate did
// not touch it (a false violation: fail safe), and so is any further change
// to it; a file removed, or replaced by a symlink or a directory, before the
// capture is examined (the directory listing shows it is not a regular
// file), so whatever the gate does to it is reported. The one change not
// reported is a gate putting back exactly the index's content of a file
// that differed from it: that cannot be told from an identical rewrite,
// and the work tree then holds what the index (the runner) holds.
func TestIndexFreshBrokenPromise(t *testing.T) {
	edited := "package a\n\nfunc A() int { return 7 }\n" // same length as the original
	cases := []struct {
		name   string
		before func(t *testing.T, f fixture)
		gate   func(t *testing.T, f fixture)
		want   []Violation
	}{
		{"modified before, untouched by the gate",
			func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("src/a.go"), edited) },
			func(*testing.T, fixture) {},
			[]Violation{{Path: "src/a.go", Kind: KindModified}}},
		{"modified before, modified again",
			func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("src/a.go"), edited) },
			func(t *testing.T, f fixture) {
				p := f.path("src/a.go")
				keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(edited)) })
			},
			[]Violation{{Path: "src/a.go", Kind: KindModified}}},
		{"modified before, rewritten identically",
			func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("src/a.go"), edited) },
			func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("src/a.go"), edited) },
			[]Violation{{Path: "src/a.go", Kind: KindModified}}},
		{"modified before, the index's content put back (not reported)",
			func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("src/a.go"), edited) },
			func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("src/a.go"), initialFiles["src/a.go"]) },
			nil},
		{"touched before with the same content, untouched",
			func(t *testing.T, f fixture) {
				later := time.Now().Add(time.Hour)
				must(t, os.Chtimes(f.path("src/a.go"), later, later))
			},
			func(*testing.T, fixture) {},
			nil},
		{"made executable before",
			func(t *testing.T, f fixture) { must(t, os.Chmod(f.path("src/b.go"), 0o755)) },
			func(*testing.T, fixture) {},
			[]Violation{{Path: "src/b.go", Kind: KindModified, Detail: "mode"}}},
		{"removed before, untouched",
			func(t *testing.T, f fixture) { must(t, os.Remove(f.path("README.md"))) },
			func(*testing.T, fixture) {},
			nil},
		{"removed before, created with the index's content",
			func(t *testing.T, f fixture) { must(t, os.Remove(f.path("README.md"))) },
			func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("README.md"), initialFiles["README.md"]) },
			[]Violation{{Path: "README.md", Kind: KindNew}}},
		{"symlink before, made a file with the index's content",
			func(t *testing.T, f fixture) {
				must(t, os.Remove(f.path("src/b.go")))
				must(t, os.Symlink("a.go", f.path("src/b.go")))
			},
			func(t *testing.T, f fixture) {
				must(t, os.Remove(f.path("src/b.go")))
				testkit.WriteFile(t, f.path("src/b.go"), initialFiles["src/b.go"])
			},
			[]Violation{{Path: "src/b.go", Kind: KindModified, Detail: "was a symlink, now a file"}}},
		{"symlink before, retargeted",
			func(t *testing.T, f fixture) {
				must(t, os.Remove(f.path("src/b.go")))
				must(t, os.Symlink("a.go", f.path("src/b.go")))
			},
			func(t *testing.T, f fixture) {
				must(t, os.Remove(f.path("src/b.go")))
				must(t, os.Symlink("../README.md", f.path("src/b.go")))
			},
			[]Violation{{Path: "src/b.go", Kind: KindModified, Detail: "link"}}},
		{"directory before, made a file with the index's content",
			func(t *testing.T, f fixture) {
				must(t, os.Remove(f.path("docs/guide.txt")))
				must(t, os.Mkdir(f.path("docs/guide.txt"), 0o755))
			},
			func(t *testing.T, f fixture) {
				must(t, os.Remove(f.path("docs/guide.txt")))
				testkit.WriteFile(t, f.path("docs/guide.txt"), initialFiles["docs/guide.txt"])
			},
			[]Violation{{Path: "docs/guide.txt", Kind: KindModified, Detail: "was a directory, now a file"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := freshFixture(t, newRepo)
			c.before(t, f)
			settled()
			b := capture(t, f, Options{IndexFresh: true})
			if b.fast == nil {
				t.Fatalf("slow path: %s", b.Stats().SlowPath)
			}
			c.gate(t, f)
			assertReport(t, check(t, b), c.want, nil)
		})
	}
}

// TestIndexFreshStatCalls: with Options.IndexFresh the capture makes no
// stat call on a tracked regular file (only on the symbolic links), where
// without it every tracked path is examined; the check of an untouched
// tree is clean and needs no git either way (PERF-53).
func TestIndexFreshStatCalls(t *testing.T) {
	f := newManyDirs(t)
	settled()
	runGit(t, f.dir, "update-index", "-q", "--refresh", "--force-write-index")
	settled()
	tracked := strings.Split(strings.TrimRight(runGit(t, f.dir, "ls-files", "-z"), "\x00"), "\x00")
	links := 0
	for _, p := range tracked {
		if fi, err := os.Lstat(f.path(p)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			links++
		}
	}
	if links == 0 {
		t.Fatal("the fixture has no symbolic link")
	}
	for _, fresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("IndexFresh=%v", fresh), func(t *testing.T) {
			b := capture(t, f.fixture, Options{IndexFresh: fresh})
			st := b.Stats()
			wantCalls, wantIndex := len(tracked), 0
			if fresh {
				wantCalls, wantIndex = links, len(tracked)-links
			}
			if b.fast == nil || st.StatCalls != wantCalls || st.StatFromIndex != wantIndex || st.FromIndex != len(tracked)-links {
				t.Fatalf("stats %+v: want %d stat calls and %d files from the index (%d tracked, %d symlinks)", st, wantCalls, wantIndex, len(tracked), links)
			}
			r := check(t, b)
			assertReport(t, r, nil, nil)
			if !r.skippedGit {
				t.Fatal("the check of an untouched tree ran git status")
			}
		})
	}
}

// TestIndexState: a record made from an index entry gives the entry's stat
// data back as the check compares it; other modes are not taken.
func TestIndexState(t *testing.T) {
	for _, mode := range []uint32{gitindex.ModeFile, gitindex.ModeExecutable} {
		e := gitindex.Stat{CtimeSec: 0xfffffff0, CtimeNsec: 999999999, MtimeSec: 1, MtimeNsec: 2, Dev: 0xffffffff, Ino: 7,
			Mode: mode, UID: 1000, GID: 0xfffffffe, Size: 0xffffffff}
		st, ok := indexState(e)
		if !ok || !st.indexStat || st.kind != kindRegular {
			t.Fatalf("indexState(%+v) = %+v, %v", e, st, ok)
		}
		if got, ok := gitStat(st); !ok || got != e {
			t.Errorf("gitStat(indexState(%+v)) = %+v, %v", e, got, ok)
		}
	}
	for _, e := range []gitindex.Stat{{Mode: gitindex.ModeSymlink}, {Mode: gitindex.ModeGitlink}, {Mode: gitindex.ModeFile, MtimeNsec: 1e9}} {
		if _, ok := indexState(e); ok {
			t.Errorf("indexState(%+v) taken", e)
		}
	}
}
