package gitindex

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// repoFiles is every fixture's content: nested directories, names that
// sort differently as files and as directories ("a.b", "a/", "a-b"), an
// executable and a symlink.
var repoFiles = map[string]string{
	"a.b":                        "dot\n",
	"a/x.txt":                    "x\n",
	"a/y/z.txt":                  "z\n",
	"a-b":                        "dash\n",
	"b.sh":                       "#!/bin/sh\n",
	"dir with space/naïve ✓.txt": "weird\n",
	"long/" + strings.Repeat("n", 200) + "/" + strings.Repeat("m", 200) + ".txt": "long name\n",
}

// newRepo makes a repository of repoFiles in the given object format with
// the index at the given version, and a staged but uncommitted file.
func newRepo(t *testing.T, format string, version int) (dir string, f Format) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "repo")
	testkit.Git(t, "", "init", "-q", "--object-format="+format, dir)
	for rel, content := range repoFiles {
		testkit.WriteFile(t, filepath.Join(dir, filepath.FromSlash(rel)), content)
	}
	if err := os.Chmod(filepath.Join(dir, "b.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/x.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	testkit.Git(t, dir, "add", "-A")
	testkit.Git(t, dir, "commit", "-q", "-m", "initial")
	testkit.WriteFile(t, filepath.Join(dir, "staged.txt"), "staged\n")
	testkit.Git(t, dir, "add", "staged.txt")
	testkit.Git(t, dir, "update-index", "--index-version", string(rune('0'+version)))
	f, err := ParseFormat(format)
	if err != nil {
		t.Fatal(err)
	}
	return dir, f
}

func readIndex(t *testing.T, dir string, f Format) *Index {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := Parse(data, f)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return ix
}

// TestParseMatchesGit reads indexes of versions 2, 3 and 4 in both object
// formats and compares every entry with `git ls-files -s`, the tree id
// with `git write-tree`, and the stat data with the files (PERF-10).
func TestParseMatchesGit(t *testing.T) {
	for _, format := range []string{"sha1", "sha256"} {
		for _, version := range []int{2, 3, 4} {
			t.Run(format+"/v"+string(rune('0'+version)), func(t *testing.T) {
				dir, f := newRepo(t, format, version)
				if version == 3 {
					// An extended flag forces a version 3 entry.
					testkit.WriteFile(t, filepath.Join(dir, "new.txt"), "new\n")
					testkit.Git(t, dir, "add", "-N", "new.txt")
				}
				ix := readIndex(t, dir, f)
				if ix.Version != version {
					t.Fatalf("version %d, want %d", ix.Version, version)
				}
				want := testkit.GitOutput(t, dir, "ls-files", "-s", "-z")
				var got strings.Builder
				var tree []TreeEntry
				for _, e := range ix.Entries {
					got.WriteString(modeString(e.Stat.Mode) + " " + hex.EncodeToString(e.ID) + " " + string(rune('0'+e.Stage)) + "\t" + e.Path + "\x00")
					if e.Flags&FlagIntentToAdd == 0 {
						tree = append(tree, TreeEntry{Path: e.Path, Mode: e.Stat.Mode, ID: e.ID})
					}
				}
				if got.String() != want {
					t.Fatalf("entries differ from git ls-files -s:\n got %q\nwant %q", got.String(), want)
				}
				if version == 3 {
					if e := find(ix, "new.txt"); e == nil || e.Flags != FlagIntentToAdd {
						t.Fatalf("new.txt: %+v, want intent-to-add", e)
					}
					testkit.Git(t, dir, "rm", "-q", "--cached", "new.txt")
					if err := os.Remove(filepath.Join(dir, "new.txt")); err != nil {
						t.Fatal(err)
					}
				}
				id, err := TreeID(f, tree)
				if err != nil {
					t.Fatal(err)
				}
				if w := testkit.Git(t, dir, "write-tree"); hex.EncodeToString(id) != w {
					t.Fatalf("TreeID %x, git write-tree %s", id, w)
				}
				for _, e := range ix.Entries {
					fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(e.Path)))
					if err != nil {
						continue
					}
					st, ok := StatOf(fi)
					if !ok {
						t.Skip("no stat data on this platform")
					}
					if e.Flags == 0 && !e.Matches(st) {
						t.Errorf("%s: stat %+v, index %+v", e.Path, st, e.Stat)
					}
				}
			})
		}
	}
}

// TestStatChanges: a rewrite that keeps the size and restores the mtime
// still changes the ctime, so the entry no longer matches; an entry
// recorded in the index file's own second is racy.
func TestStatChanges(t *testing.T) {
	dir, f := newRepo(t, "sha1", 2)
	ix := readIndex(t, dir, f)
	e := find(ix, "a/x.txt")
	p := filepath.Join(dir, "a", "x.txt")
	fi, _ := os.Lstat(p)
	st, ok := StatOf(fi)
	if !ok {
		t.Skip("no stat data on this platform")
	}
	if !e.Matches(st) {
		t.Fatalf("fresh entry does not match: %+v vs %+v", st, e.Stat)
	}
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(p, []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Lstat(p)
	st2, _ := StatOf(fi2)
	if st2.Size != st.Size || st2.MtimeSec != st.MtimeSec || st2.MtimeNsec != st.MtimeNsec {
		t.Fatalf("the rewrite did not keep size and mtime: %+v vs %+v", st2, st)
	}
	if e.Matches(st2) {
		t.Fatal("a rewrite with size and mtime kept still matches the index (ctime ignored)")
	}
	mt := time.Unix(int64(e.Stat.MtimeSec), int64(e.Stat.MtimeNsec))
	if !e.Racy(mt) || !e.Racy(mt.Add(-time.Second)) || e.Racy(time.Unix(int64(e.Stat.CtimeSec)+1, 0).Add(time.Second)) {
		t.Fatalf("Racy: wrong for entry %+v", e.Stat)
	}
}

// TestParseUnsupported: a split index and a sparse index are refused with
// ErrUnsupported, a corrupt file with another error.
func TestParseUnsupported(t *testing.T) {
	t.Run("split", func(t *testing.T) {
		dir, f := newRepo(t, "sha1", 2)
		testkit.Git(t, dir, "update-index", "--split-index")
		data, _ := os.ReadFile(filepath.Join(dir, ".git", "index"))
		if _, err := Parse(data, f); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("split index: %v, want ErrUnsupported", err)
		}
	})
	t.Run("sparse", func(t *testing.T) {
		dir, f := newRepo(t, "sha1", 2)
		testkit.Git(t, dir, "sparse-checkout", "set", "--cone", "--sparse-index", "a")
		data, _ := os.ReadFile(filepath.Join(dir, ".git", "index"))
		ix, err := Parse(data, f)
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("sparse index: %v (%v), want ErrUnsupported", ix, err)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		dir, f := newRepo(t, "sha1", 2)
		data, _ := os.ReadFile(filepath.Join(dir, ".git", "index"))
		data[20] ^= 1
		if _, err := Parse(data, f); err == nil || errors.Is(err, ErrUnsupported) {
			t.Fatalf("corrupt index: %v, want a checksum error", err)
		}
	})
}

func find(ix *Index, path string) *Entry {
	for i := range ix.Entries {
		if ix.Entries[i].Path == path {
			return &ix.Entries[i]
		}
	}
	return nil
}

func modeString(m uint32) string {
	s := "000000" + strconvOctal(m)
	return s[len(s)-6:]
}

func strconvOctal(m uint32) string {
	var b []byte
	for m > 0 {
		b = append([]byte{byte('0' + m%8)}, b...)
		m /= 8
	}
	return string(b)
}

// FuzzParse: no input panics, and every index Parse accepts has sorted,
// non-empty paths and ids of the format's size.
func FuzzParse(f *testing.F) {
	for _, v := range []int{2, 3, 4} {
		dir := f.TempDir()
		testkit.Git(f, "", "init", "-q", dir)
		testkit.WriteFile(f, filepath.Join(dir, "a", "b.txt"), "b\n")
		testkit.WriteFile(f, filepath.Join(dir, "a.txt"), "a\n")
		testkit.Git(f, dir, "add", "-A")
		testkit.Git(f, dir, "add", "-N", "a")
		testkit.Git(f, dir, "update-index", "--index-version", string(rune('0'+v)))
		data, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		// The same with the checksum zeroed, so mutations are not all
		// rejected by it.
		z := append([]byte(nil), data...)
		clear(z[len(z)-20:])
		f.Add(z)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := Parse(data, SHA1)
		if err != nil {
			return
		}
		for i, e := range ix.Entries {
			if e.Path == "" || len(e.ID) != SHA1.Size() {
				t.Fatalf("entry %d: %+v", i, e)
			}
			if i > 0 && ix.Entries[i-1].Path > e.Path {
				t.Fatalf("entries out of order at %d", i)
			}
		}
	})
}

// TestTreeIDOrder gives TreeID the entries of names that sort differently
// as files and as directories, in shuffled order, and compares the id with
// `git write-tree`.
func TestTreeIDOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	testkit.Git(t, "", "init", "-q", dir)
	for _, rel := range []string{"fo", "foo-", "foo.c", "foo/x", "foo/bar/y", "foo/bar.txt", "foo0", "foo/bar0/z", "g"} {
		testkit.WriteFile(t, filepath.Join(dir, filepath.FromSlash(rel)), rel+"\n")
	}
	testkit.Git(t, dir, "add", "-A")
	ix := readIndex(t, dir, SHA1)
	var entries []TreeEntry
	for _, e := range ix.Entries {
		entries = append(entries, TreeEntry{Path: e.Path, Mode: e.Stat.Mode, ID: e.ID})
	}
	want := testkit.Git(t, dir, "write-tree")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		id, err := TreeID(SHA1, entries)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(id) != want {
			t.Fatalf("TreeID of %v = %x; git write-tree %s", entries, id, want)
		}
		rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	}
}

// TestTreeIDErrors: entries git could not write as a tree are refused.
func TestTreeIDErrors(t *testing.T) {
	id := make([]byte, SHA1.Size())
	e := func(p string) TreeEntry { return TreeEntry{Path: p, Mode: 0o100644, ID: id} }
	for name, entries := range map[string][]TreeEntry{
		"file and directory":            {e("a"), e("a-b"), e("a.c/x"), e("a/x")},
		"file and directory, reordered": {e("a/x"), e("a")},
		"the same file twice":           {e("x/y"), e("x/y")},
		"empty component":               {e("a//b")},
		"trailing slash":                {e("a/")},
		"leading slash":                 {e("/a")},
		"empty path":                    {e("")},
		"short id":                      {{Path: "a", Mode: 0o100644, ID: id[:5]}},
	} {
		if _, err := TreeID(SHA1, entries); err == nil {
			t.Errorf("%s: TreeID accepted %v", name, entries)
		}
	}
	if _, err := TreeID(SHA1, []TreeEntry{e("a"), e("a-b"), e("a.c/x"), e("ab/x")}); err != nil {
		t.Errorf("names sharing a prefix: %v", err)
	}
}
