package integrity

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // git's checksum of the index
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitindex"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// settled waits until the fixture's files are older than the racy margin,
// as the files of a workspace prepared a moment before its gate are.
func settled() { time.Sleep(2 * racyMargin) }

// TestFastCapture: a work tree holding only tracked paths is captured from
// the index without git status, its unchanged files are not read, and a
// check of an untouched tree needs no git either (PERF-11, PERF-12).
func TestFastCapture(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			f := l.make(t)
			settled()
			b := capture(t, f, Options{})
			st := b.Stats()
			if st.SlowPath != "" {
				t.Fatalf("slow path taken: %s", st.SlowPath)
			}
			// Files written in the clock tick of the index are racily
			// clean and read; the others come from the index.
			if st.FromIndex == 0 || st.Hashed != len(initialFiles) {
				t.Fatalf("stats %+v: want all %d tracked files hashed, most from the index", st, len(initialFiles))
			}
			r := check(t, b)
			assertReport(t, r, nil, nil)
			if !r.skippedGit {
				t.Fatal("the check of an untouched tree ran git status")
			}
			// An identical rewrite changes the stat data but not the content.
			p := f.path("src/a.go")
			testkit.WriteFile(t, p, initialFiles["src/a.go"])
			assertReport(t, check(t, b), nil, nil)
		})
	}
}

// TestFastCaptureStatTrust: rewrites that keep the size and restore the
// mtime (touch -d) are caught for files whose hash came from the index and
// for files hashed at capture, because the ctime moves (WI-20, PERF-11).
func TestFastCaptureStatTrust(t *testing.T) {
	f := newRepo(t)
	testkit.WriteFile(t, f.path("src/b.go"), "package a\n\nfunc B() int { return 3 }\n") // modified before capture
	settled()
	b := capture(t, f, Options{})
	if !recorded(t, b, "src/a.go").blob || recorded(t, b, "src/b.go").blob || recorded(t, b, "src/b.go").hash == "" {
		t.Fatalf("src/a.go should come from the index, src/b.go be hashed: %+v / %+v", recorded(t, b, "src/a.go"), recorded(t, b, "src/b.go"))
	}
	for _, rel := range []string{"src/a.go", "src/b.go"} {
		p := f.path(rel)
		data, err := os.ReadFile(p)
		must(t, err)
		keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(string(data))) })
	}
	assertReport(t, check(t, b), []Violation{
		{Path: "src/a.go", Kind: KindModified, Detail: "content changed with size and mtime unchanged"},
		{Path: "src/b.go", Kind: KindModified, Detail: "content changed with size and mtime unchanged"},
	}, nil)
}

// TestFastCaptureRacy: an index entry whose mtime is not older than the
// index file is racily clean: its stat data may match a content other than
// the one the index names, so the file is read. The index below names
// other content for README.md than the file holds, with README.md's true
// stat data, as a write in the same clock tick as `git add` leaves it.
func TestFastCaptureRacy(t *testing.T) {
	f := newRepo(t)
	settled()
	indexPath := filepath.Join(f.gitDir, "index")
	other := gitindex.BlobID(gitindex.SHA1, []byte(sameLength(initialFiles["README.md"])))
	forgeID(t, indexPath, gitindex.BlobID(gitindex.SHA1, []byte(initialFiles["README.md"])), other)

	for _, racy := range []bool{false, true} {
		fi, err := os.Lstat(f.path("README.md"))
		must(t, err)
		at := fi.ModTime().Add(time.Second)
		if racy {
			at = fi.ModTime()
		}
		must(t, os.Chtimes(indexPath, at, at))
		b := capture(t, f, Options{})
		if got := recorded(t, b, "README.md").blob; got == racy {
			t.Fatalf("racy=%v: README.md taken from the index = %v", racy, got)
		}
		if racy {
			// The content the forged index names, size and mtime kept:
			// trusting the index would call it unchanged.
			p := f.path("README.md")
			keepMtime(t, p, func() { testkit.WriteFile(t, p, sameLength(initialFiles["README.md"])) })
			assertReport(t, check(t, b), []Violation{{Path: "README.md", Kind: KindModified, Detail: "content changed with size and mtime unchanged"}}, nil)
		}
	}
}

// forgeID replaces an object id in the index file and fixes its checksum.
func forgeID(t *testing.T, path string, from, to []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	i := bytes.Index(data, from)
	if i < 0 {
		t.Fatalf("id %x not in the index", from)
	}
	copy(data[i:], to)
	sum := sha1.Sum(data[:len(data)-sha1.Size]) //nolint:gosec // git's checksum
	copy(data[len(data)-sha1.Size:], sum[:])
	must(t, os.WriteFile(path, data, 0o644))
}

// TestFastCaptureFallsBack: untracked or ignored paths, and an index the
// reader does not take (sparse index), send the capture through git status;
// the check then catches changes as before.
func TestFastCaptureFallsBack(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, f fixture)
	}{
		{"untracked file", func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("notes.txt"), "x\n") }},
		{"ignored file", func(t *testing.T, f fixture) { testkit.WriteFile(t, f.path("build/out.bin"), "x\n") }},
		{"sparse index", func(t *testing.T, f fixture) {
			runGit(t, f.dir, "sparse-checkout", "set", "--cone", "--sparse-index", "src")
		}},
		{"autocrlf", func(t *testing.T, f fixture) { runGit(t, f.dir, "config", "core.autocrlf", "input") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newRepo(t)
			c.setup(t, f)
			settled()
			b := capture(t, f, Options{})
			if b.Stats().SlowPath == "" {
				t.Fatal("fast path taken")
			}
			assertReport(t, check(t, b), nil, nil)
			testkit.WriteFile(t, f.path("src/a.go"), "package changed\n")
			assertReport(t, check(t, b), []Violation{{Path: "src/a.go", Kind: KindModified}}, nil)
		})
	}
}

// TestFastCheckNewPaths: after a fast capture, a path created anywhere,
// an empty directory included, changes a directory's stat data, and the
// check asks git status, which reports it.
func TestFastCheckNewPaths(t *testing.T) {
	f := newRepo(t)
	must(t, os.MkdirAll(f.path("empty/deeper"), 0o755))
	settled()
	b := capture(t, f, Options{})
	if b.Stats().SlowPath != "" {
		t.Fatalf("slow path: %s", b.Stats().SlowPath)
	}
	testkit.WriteFile(t, f.path("empty/deeper/x.txt"), "x\n")
	r := check(t, b)
	assertReport(t, r, []Violation{{Path: "empty/deeper/x.txt", Kind: KindNew}}, nil)
	if r.skippedGit {
		t.Fatal("git status skipped although a directory changed")
	}
}
