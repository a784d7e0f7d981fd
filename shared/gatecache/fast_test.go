package gatecache

import (
	"bytes"
	"context"
	"crypto/sha1" //nolint:gosec // git's index checksum
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// keysOf computes the key of in on the Go path (treeAuto) and on the git
// path (treeGit) and fails unless they agree: both disabled, or both
// enabled with the same tree and key. It returns the Go path's key.
func keysOf(t *testing.T, in KeyInput) Key {
	t.Helper()
	ctx := context.Background()
	fast, err := computeKey(ctx, in, treeAuto)
	if err != nil {
		t.Fatalf("Go path: %v", err)
	}
	slow, err := computeKey(ctx, in, treeGit)
	if err != nil {
		t.Fatalf("git path: %v", err)
	}
	if (fast.Disabled == "") != (slow.Disabled == "") || fast.ID != slow.ID || fast.Tree != slow.Tree {
		t.Fatalf("keys differ:\n Go path  %s (tree %s) disabled %q, git path because %q\n git path %s (tree %s) disabled %q\n%s",
			fast.ID, fast.Tree, fast.Disabled, fast.GitPath, slow.ID, slow.Tree, slow.Disabled,
			testkit.GitOutput(t, in.Dir, "status", "--porcelain=v1", "--ignored", "--untracked-files=all"))
	}
	return fast
}

// genRepo makes a committed repository from seed: nested directories,
// names with spaces and non-ASCII letters, executables, empty files,
// symbolic links, a .gitignore (build/, *.log) and a force-added file
// under build/. objectFormat is "sha1" or "sha256".
func genRepo(t *testing.T, seed uint64, objectFormat string) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 13))
	dir := filepath.Join(t.TempDir(), "repo")
	testkit.Git(t, "", "init", "-q", "--object-format="+objectFormat, dir)
	writeFile(t, dir, ".gitignore", "build/\n*.log\n")
	dirs := []string{"", "a", "a/b", "a/b/c", "a.d", "c d", "é", "z"}
	for i := range 30 + rng.IntN(30) {
		d := dirs[rng.IntN(len(dirs))]
		name := fmt.Sprintf("f%02d%s", i, []string{".go", ".txt", " with space", "", "-é"}[rng.IntN(5)])
		rel := filepath.ToSlash(filepath.Join(d, name))
		content := strings.Repeat(fmt.Sprintf("line %d of %s\n", rng.IntN(1000), rel), rng.IntN(4))
		writeFile(t, dir, rel, content)
		if rng.IntN(5) == 0 {
			if err := os.Chmod(filepath.Join(dir, filepath.FromSlash(rel)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 2 {
		if err := os.Symlink(fmt.Sprintf("target-%d", rng.IntN(100)), filepath.Join(dir, "a", fmt.Sprintf("link%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, dir, "build/keep.txt", "tracked though ignored\n")
	testkit.Git(t, dir, "add", "-A")
	testkit.Git(t, dir, "add", "-f", "build/keep.txt")
	testkit.Git(t, dir, "commit", "-q", "-m", "generated")
	return dir
}

// settle rewrites the index more than a second after the last file was
// written, so no entry is racily clean any more.
func settle(t *testing.T, dir string) {
	t.Helper()
	time.Sleep(1100 * time.Millisecond)
	testkit.Git(t, dir, "update-index", "-q", "--refresh", "--force-write-index")
}

// tracked lists the repository's tracked regular files.
func tracked(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for p := range strings.SplitSeq(testkit.GitOutput(t, dir, "ls-files", "-z"), "\x00") {
		if fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p))); p != "" && err == nil && fi.Mode().IsRegular() {
			out = append(out, p)
		}
	}
	return out
}

// TestFastTreeSameKeyAsGit: on generated repositories with every kind of
// change, the key computed in Go from the index's stat data equals the key
// computed by `git add -A` and `git write-tree` (PERF-13), and the Go path
// applies wherever it should.
func TestFastTreeSameKeyAsGit(t *testing.T) {
	t.Parallel()
	full := func(dir, rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		// fast: the Go path must apply (GitPath empty) or, false, it must
		// not; the keys must agree either way.
		fast   bool
		mutate func(t *testing.T, dir string)
	}{
		{"unchanged", true, func(t *testing.T, dir string) {}},
		{"modified", true, func(t *testing.T, dir string) {
			writeFile(t, dir, "a/b/new content.txt", "x")
			for _, p := range tracked(t, dir)[:3] {
				writeFile(t, dir, p, "changed "+p+"\n")
			}
		}},
		{"same size, mtime restored", true, func(t *testing.T, dir string) {
			p := tracked(t, dir)[1]
			fi, err := os.Stat(full(dir, p))
			must(t, err)
			b, err := os.ReadFile(full(dir, p))
			must(t, err)
			if len(b) == 0 {
				b = []byte("y")
			} else {
				b[0] ^= 1
			}
			must(t, os.WriteFile(full(dir, p), b, fi.Mode()))
			setMtime(t, full(dir, p), fi.ModTime())
		}},
		{"deleted file and directory", true, func(t *testing.T, dir string) {
			must(t, os.Remove(full(dir, tracked(t, dir)[0])))
			must(t, os.RemoveAll(full(dir, "a/b")))
		}},
		{"untracked and ignored", true, func(t *testing.T, dir string) {
			writeFile(t, dir, "new.go", "package main\n")
			writeFile(t, dir, "brand/new/dir/x y.txt", "deep\n")
			writeFile(t, dir, "empty", "")
			writeFile(t, dir, "debug.log", "ignored\n")
			writeFile(t, dir, "build/out.bin", "ignored\n")
			writeFile(t, dir, "a/exec.sh", "#!/bin/sh\n")
			must(t, os.Chmod(full(dir, "a/exec.sh"), 0o755))
		}},
		{"executable bit", true, func(t *testing.T, dir string) {
			for i, p := range tracked(t, dir)[:4] {
				must(t, os.Chmod(full(dir, p), []os.FileMode{0o755, 0o644, 0o744, 0o700}[i]))
			}
		}},
		{"symbolic links", true, func(t *testing.T, dir string) {
			p := tracked(t, dir)[2]
			must(t, os.Remove(full(dir, p)))
			must(t, os.Symlink("../somewhere", full(dir, p)))
			must(t, os.Remove(full(dir, "a/link0")))
			must(t, os.Symlink("retargeted", full(dir, "a/link0")))
			must(t, os.Remove(full(dir, "a/link1")))
			writeFile(t, dir, "a/link1", "now a file\n")
		}},
		{"file replaced by a directory", true, func(t *testing.T, dir string) {
			ps := tracked(t, dir)
			must(t, os.Remove(full(dir, ps[0])))
			writeFile(t, dir, ps[0]+"/inside.txt", "inside\n")
			must(t, os.Remove(full(dir, ps[1])))
			must(t, os.Mkdir(full(dir, ps[1]), 0o755))
		}},
		{"directory replaced by a file", true, func(t *testing.T, dir string) {
			must(t, os.RemoveAll(full(dir, "a/b/c")))
			writeFile(t, dir, "a/b/c", "a file now\n")
		}},
		{"directory replaced by a symbolic link", true, func(t *testing.T, dir string) {
			// git treats the files below as deleted and the link as
			// untracked: caching is disabled (CD-11) on both paths.
			must(t, os.Rename(full(dir, "a/b"), full(dir, "moved")))
			must(t, os.Symlink("../moved", full(dir, "a/b")))
		}},
		{"staged, unstaged and removed from the index", true, func(t *testing.T, dir string) {
			ps := tracked(t, dir)
			writeFile(t, dir, ps[0], "staged\n")
			testkit.Git(t, dir, "add", "--", ps[0])
			writeFile(t, dir, ps[0], "staged, then changed again\n")
			writeFile(t, dir, "staged-new.txt", "new\n")
			testkit.Git(t, dir, "add", "staged-new.txt")
			must(t, os.Remove(full(dir, "staged-new.txt")))
			testkit.Git(t, dir, "rm", "-q", "--cached", "--", ps[1])
		}},
		{"tracked file under an ignored directory", true, func(t *testing.T, dir string) {
			writeFile(t, dir, "build/keep.txt", "changed\n")
		}},
		{"index version 4", true, func(t *testing.T, dir string) {
			testkit.Git(t, dir, "update-index", "--index-version", "4")
			writeFile(t, dir, tracked(t, dir)[3], "v4\n")
		}},
		{"fifo where a file was", true, func(t *testing.T, dir string) {
			p := tracked(t, dir)[0]
			must(t, os.Remove(full(dir, p)))
			must(t, syscall.Mkfifo(full(dir, p), 0o644))
		}},
		{"untracked nested repository", true, func(t *testing.T, dir string) {
			testkit.Git(t, "", "init", "-q", full(dir, "vendor/nested"))
		}},
		{"names git refuses", true, func(t *testing.T, dir string) {
			writeFile(t, dir, "GIT~1", "x")
			writeFile(t, dir, "sub/.GIT./x", "x")
		}},
		{"assume-unchanged", false, func(t *testing.T, dir string) {
			p := tracked(t, dir)[0]
			testkit.Git(t, dir, "update-index", "--assume-unchanged", "--", p)
			writeFile(t, dir, p, "hidden change\n")
		}},
		{"skip-worktree", false, func(t *testing.T, dir string) {
			p := tracked(t, dir)[0]
			testkit.Git(t, dir, "update-index", "--skip-worktree", "--", p)
			writeFile(t, dir, p, "hidden change\n")
		}},
		{"intent-to-add", false, func(t *testing.T, dir string) {
			writeFile(t, dir, "ita.txt", "intent\n")
			testkit.Git(t, dir, "add", "-N", "ita.txt")
		}},
		{"unmerged", false, func(t *testing.T, dir string) {
			p := tracked(t, dir)[0]
			testkit.Git(t, dir, "checkout", "-q", "-b", "side")
			writeFile(t, dir, p, "side\n")
			testkit.Git(t, dir, "commit", "-q", "-am", "side")
			testkit.Git(t, dir, "checkout", "-q", "main")
			writeFile(t, dir, p, "main\n")
			testkit.Git(t, dir, "commit", "-q", "-am", "main")
			if _, err := (gitexec.Runner{Dir: dir}).Output(context.Background(), "merge", "side"); err == nil {
				t.Fatal("the merge did not conflict")
			}
		}},
		{"gitlink", false, func(t *testing.T, dir string) {
			head := testkit.Git(t, dir, "rev-parse", "HEAD")
			testkit.Git(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+head+",deps/sub")
		}},
		{"tracked .gitattributes", false, func(t *testing.T, dir string) {
			writeFile(t, dir, ".gitattributes", "*.txt text eol=crlf\n")
			testkit.Git(t, dir, "add", ".gitattributes")
			writeFile(t, dir, "crlf.txt", "one\r\ntwo\r\n")
		}},
		{"untracked .gitattributes", false, func(t *testing.T, dir string) {
			writeFile(t, dir, "a/.gitattributes", "* text\n")
			writeFile(t, dir, "a/crlf.txt", "one\r\ntwo\r\n")
		}},
		{"ignored .gitattributes", false, func(t *testing.T, dir string) {
			writeFile(t, dir, "z/.gitignore", ".gitattributes\n")
			writeFile(t, dir, "z/.gitattributes", "* text\n")
			writeFile(t, dir, "z/crlf.txt", "one\r\ntwo\r\n")
		}},
		{"untracked .gitattributes in a new directory", false, func(t *testing.T, dir string) {
			writeFile(t, dir, "new/.gitattributes", "* text\n")
			writeFile(t, dir, "new/crlf.txt", "one\r\ntwo\r\n")
		}},
		{"ignored .gitattributes above a new directory", false, func(t *testing.T, dir string) {
			writeFile(t, dir, "new/.gitignore", ".gitattributes\n")
			writeFile(t, dir, "new/.gitattributes", "* text\n")
			writeFile(t, dir, "new/deeper/crlf.txt", "one\r\ntwo\r\n")
		}},
		{"info/attributes", false, func(t *testing.T, dir string) {
			writeFile(t, dir, ".git/info/attributes", "* text\n")
			writeFile(t, dir, "crlf.txt", "one\r\ntwo\r\n")
		}},
		{"core.autocrlf", false, func(t *testing.T, dir string) {
			testkit.Git(t, dir, "config", "core.autocrlf", "true")
			writeFile(t, dir, "crlf.txt", "one\r\ntwo\r\n")
		}},
		{"core.fileMode false", false, func(t *testing.T, dir string) {
			testkit.Git(t, dir, "config", "core.fileMode", "false")
			p := tracked(t, dir)[0]
			must(t, os.Chmod(full(dir, p), 0o755))
			writeFile(t, dir, p, "mode ignored\n")
		}},
		{"include", false, func(t *testing.T, dir string) {
			writeFile(t, dir, ".git/extra.config", "[core]\n\tautocrlf = true\n")
			testkit.Git(t, dir, "config", "include.path", "extra.config")
			writeFile(t, dir, "crlf.txt", "one\r\ntwo\r\n")
		}},
	}
	for _, c := range cases {
		for _, settled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/settled=%v", c.name, settled), func(t *testing.T) {
				t.Parallel()
				dir := genRepo(t, uint64(len(c.name)), "sha1")
				if settled {
					settle(t, dir)
				}
				c.mutate(t, dir)
				k := keysOf(t, baseInput(dir))
				if c.fast && k.GitPath != "" && k.Disabled == "" {
					t.Fatalf("the Go path did not apply: %s", k.GitPath)
				}
				if !c.fast && k.GitPath == "" {
					t.Fatal("the Go path applied where it must not")
				}
			})
		}
	}
}

// TestFastTreeRandomChanges applies random mixes of changes to generated
// repositories (SHA-1 and SHA-256, racily clean or settled) and compares
// the Go path's key with the git path's after each round.
func TestFastTreeRandomChanges(t *testing.T) {
	t.Parallel()
	for seed := range uint64(12) {
		format := []string{"sha1", "sha256"}[seed%2]
		t.Run(fmt.Sprintf("seed=%d/%s", seed, format), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			dir := genRepo(t, seed+100, format)
			if seed%3 != 0 {
				settle(t, dir)
			}
			for round := range 4 {
				ps := tracked(t, dir)
				for range 1 + rng.IntN(5) {
					if len(ps) == 0 {
						break
					}
					p := ps[rng.IntN(len(ps))]
					full := filepath.Join(dir, filepath.FromSlash(p))
					switch rng.IntN(8) {
					case 0:
						writeFile(t, dir, p, fmt.Sprintf("round %d\n", round))
					case 1:
						_ = os.Remove(full)
					case 2:
						_ = os.Chmod(full, 0o755)
					case 3:
						_ = os.Chmod(full, 0o644)
					case 4:
						writeFile(t, dir, fmt.Sprintf("%s.new%d", p, round), "untracked\n")
					case 5:
						writeFile(t, dir, fmt.Sprintf("%s.%d.log", p, round), "ignored\n")
					case 6:
						if d := filepath.ToSlash(filepath.Dir(p)); d != "build" {
							testkit.Git(t, dir, "add", "-A", "--", d)
						}
					case 7:
						if fi, err := os.Stat(full); err == nil {
							b, _ := os.ReadFile(full)
							b = append(b[:max(0, len(b)-1):max(0, len(b)-1)], 'Q')
							writeFile(t, dir, p, string(b))
							setMtime(t, full, fi.ModTime())
						}
					}
				}
				k := keysOf(t, baseInput(dir))
				if k.Disabled == "" && k.GitPath != "" {
					t.Fatalf("round %d: the Go path did not apply: %s", round, k.GitPath)
				}
				if rng.IntN(2) == 0 {
					testkit.Git(t, dir, "add", "-A")
					testkit.Git(t, dir, "commit", "-q", "--allow-empty", "-m", fmt.Sprintf("round %d", round))
				}
			}
		})
	}
}

func TestAddable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		path    string
		symlink bool
		want    bool
	}{
		{"a/b.go", false, true},
		{".gitignore", false, true},
		{".github/workflows/ci.yml", false, true},
		{"dir/.gitkeep", false, true},
		{"a:b", false, true},
		{".git", false, false},
		{"x/.GIT/y", false, false},
		{".git. .", false, false},
		{".git:stream", false, false},
		{"GIT~1", false, false},
		{"git~2/x", false, false},
		{"a\\b", false, false},
		{"a//b", false, false},
		{"a/../b", false, false},
		{".gitmodules", false, true},
		{".gitmodules", true, false},
		{"x/GI7EBA~1", true, false},
	} {
		if got := addable(c.path, c.symlink); got != c.want {
			t.Errorf("addable(%q, symlink=%v) = %v; want %v", c.path, c.symlink, got, c.want)
		}
	}
}

func TestUnusualConfig(t *testing.T) {
	t.Parallel()
	plain := "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n" +
		"[remote \"origin\"]\n\turl = /tmp/x\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n"
	for _, c := range []struct {
		config  string
		unusual bool
	}{
		{plain, false},
		{"", false},
		{"# comment\n[core]\n\tautocrlf = false ; not converting\n\tsymlinks\n\tignorecase = no\n", false},
		{"[Core]\n\tAutoCRLF = input\n", true},
		{plain + "[core]\n\tautocrlf = true\n", true},
		{"[core]\n\teol = lf\n", true},
		{"[core]\n\tfilemode = false\n", true},
		{"[core]\n\tsymlinks = 0\n", true},
		{"[core]\n\tignorecase = true\n", true},
		{"[core]\n\tignorecase\n", true},
		{"[core]\n\tprotectHFS = false\n", true},
		{"[include]\n\tpath = other\n", true},
		{"[includeIf \"gitdir:/x/\"]\n\tpath = other\n", true},
		{"[core]\n\tautocrlf = \"true\"\n", true},
		{"[core]\n\tbare = false \\\n", true},
		{"[core] autocrlf = true\n", true},
		{"[core \"sub\"]\n\tautocrlf = true\n", false},
		{"[remote \"origin\"]\n\turl = \"with # and ;\"\n", false},
	} {
		if got := unusualConfig([]byte(c.config)) != ""; got != c.unusual {
			t.Errorf("unusualConfig(%q) = %q; want unusual: %v", c.config, unusualConfig([]byte(c.config)), c.unusual)
		}
	}
}

// TestFastTreeFallbackKeepsKey: where the Go path does not apply, the key
// still comes from git and is the same as before the condition appeared,
// when the condition does not change the content (a .gitattributes that
// converts nothing in the tree is still a reason to ask git).
func TestFastTreeFallbackKeepsKey(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	before := keysOf(t, baseInput(dir))
	if before.GitPath != "" {
		t.Fatalf("the Go path did not apply to a plain repository: %s", before.GitPath)
	}
	testkit.Git(t, dir, "config", "core.autocrlf", "false")
	if k := keysOf(t, baseInput(dir)); k.GitPath != "" || k.ID != before.ID {
		t.Fatalf("core.autocrlf=false: %+v; want the Go path and key %s", k, before.ID)
	}
	testkit.Git(t, dir, "config", "core.eol", "lf")
	k := keysOf(t, baseInput(dir))
	if !strings.Contains(k.GitPath, "core.eol") || k.ID != before.ID {
		t.Fatalf("core.eol set: %+v; want the git path, the same key %s", k, before.ID)
	}
}

// forgeStat rewrites the index entry of rel (a version 2 or 3 index,
// SHA-1) so that its stat data is the file's current one while its object
// id stays that of the content it had when added, and gives the index file
// the modification time indexMtime: the state git calls racily clean when
// indexMtime is not after the file's mtime.
func forgeStat(t *testing.T, dir, rel string, indexMtime time.Time) {
	t.Helper()
	file := filepath.Join(dir, ".git", "index")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dir, filepath.FromSlash(rel)), &st); err != nil {
		t.Fatal(err)
	}
	n := int(binary.BigEndian.Uint32(data[8:12]))
	off := 12
	found := false
	for range n {
		flags := binary.BigEndian.Uint16(data[off+60:])
		name := off + 62
		if flags&0x4000 != 0 {
			name += 2
		}
		end := name + bytes.IndexByte(data[name:], 0)
		if string(data[name:end]) == rel {
			//nolint:gosec // git's 32-bit fields
			for i, v := range []uint32{uint32(st.Ctim.Sec), uint32(st.Ctim.Nsec), uint32(st.Mtim.Sec), uint32(st.Mtim.Nsec),
				uint32(st.Dev), uint32(st.Ino)} {
				binary.BigEndian.PutUint32(data[off+4*i:], v)
			}
			binary.BigEndian.PutUint32(data[off+36:], uint32(st.Size)) //nolint:gosec // git's 32-bit field
			found = true
		}
		off += (end - off + 8) &^ 7
	}
	if !found {
		t.Fatalf("forgeStat: %s not in the index", rel)
	}
	sum := sha1.Sum(data[:len(data)-sha1.Size]) //nolint:gosec // git's checksum
	copy(data[len(data)-sha1.Size:], sum[:])
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	setMtime(t, file, indexMtime)
}

// TestFastTreeRacilyClean: an entry whose stat data matches the file but
// whose content changed in the same instant (forged here) is re-read when
// the index is not older than the file, as git re-reads it, and trusted
// when the index is later.
func TestFastTreeRacilyClean(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		index func(file time.Time) time.Time // the index's mtime
		stale bool                           // the key keeps the content the index names
	}{
		{"index as old as the file", func(f time.Time) time.Time { return f }, false},
		{"index older than the file", func(f time.Time) time.Time { return f.Add(-3 * time.Second) }, false},
		// git compares the seconds only (unless built with USE_NSEC):
		// still racy.
		{"index later in the same second", func(f time.Time) time.Time { return f.Truncate(time.Second).Add(time.Second - 1) }, false},
		{"index seconds later", func(f time.Time) time.Time { return f.Add(3 * time.Second) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := newRepo(t)
			writeFile(t, dir, "main.go", "package main // v1\n")
			testkit.Git(t, dir, "add", "main.go")
			writeFile(t, dir, "main.go", "package main // v2\n") // the same size
			fi, err := os.Stat(filepath.Join(dir, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			forgeStat(t, dir, "main.go", c.index(fi.ModTime()))
			k := keysOf(t, baseInput(dir))
			if k.GitPath != "" {
				t.Fatalf("the Go path did not apply: %s", k.GitPath)
			}
			// The git path on an index read from HEAD hashes every file.
			truth, err := computeKey(context.Background(), baseInput(dir), treeGitFresh)
			if err != nil || truth.Disabled != "" {
				t.Fatalf("fresh index: %+v, %v", truth, err)
			}
			if stale := k.Tree != truth.Tree; stale != c.stale {
				t.Fatalf("tree %s, the files' content gives %s: stale = %v, want %v", k.Tree, truth.Tree, stale, c.stale)
			}
		})
	}
}
