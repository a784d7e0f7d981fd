package patchstat_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/patchstat"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestParseAgreesWithGit changes a real repository in every way a patch
// can (edit, add, delete, rename, binary, names git quotes or that hold
// " b/"), makes the patch the way workers do (`git diff --binary` of the
// index against HEAD), and checks Parse against `git diff --numstat -z`.
func TestParseAgreesWithGit(t *testing.T) {
	dir, _ := testkit.Repo(t, map[string]string{
		"edit.txt":        "one\ntwo\nthree\n",
		"gone.txt":        "bye\n",
		"old name.txt":    "moved\nunchanged\nlines\nhere\n",
		"dir/a b/c.txt":   "x\n",
		"img.bin":         "\x00\x01\x02",
		"-- dash.txt":     "--- not a header\n",
		"sensitive/k.pem": "key\n",
	})
	testkit.WriteFile(t, filepath.Join(dir, "edit.txt"), "one\n2\nthree\nfour\n")
	testkit.WriteFile(t, filepath.Join(dir, "new\tfile\"é.txt"), "a\nb\n")
	testkit.WriteFile(t, filepath.Join(dir, "dir/a b/c.txt"), "y\n")
	testkit.WriteFile(t, filepath.Join(dir, "img.bin"), "\x00\x01\x03\x04")
	testkit.WriteFile(t, filepath.Join(dir, "-- dash.txt"), "--- still not a header\n+++ nor this\n")
	if err := os.Remove(filepath.Join(dir, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	testkit.Git(t, dir, "mv", "old name.txt", "sensitive/new name.txt")
	testkit.Git(t, dir, "add", "--all")
	patch := testkit.GitOutput(t, dir, "diff", "--cached", "--binary", "-M", "HEAD")

	got := patchstat.Parse([]byte(patch))
	want := numstat(t, dir)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\ngit says\n%+v\npatch:\n%s", got, want, patch)
	}
	sum := got.Summary()
	if sum.Files != 7 || !sum.Binary || sum.PathsTruncated {
		t.Errorf("summary %+v: want 7 files, a binary one, nothing truncated", sum)
	}
	for _, p := range []string{"old name.txt", "sensitive/new name.txt", "gone.txt", "new\tfile\"é.txt"} {
		if !contains(sum.Paths, p) {
			t.Errorf("summary paths %q lack %q", sum.Paths, p)
		}
	}
}

// numstat is git's own account of the staged change, in Parse's terms
// and in the order git diff lists files.
func numstat(t *testing.T, dir string) patchstat.Stat {
	out := testkit.GitOutput(t, dir, "diff", "--cached", "--numstat", "-z", "-M", "HEAD")
	fields := strings.Split(out, "\x00")
	var st patchstat.Stat
	for i := 0; i < len(fields) && fields[i] != ""; i++ {
		parts := strings.SplitN(fields[i], "\t", 3)
		f := patchstat.File{}
		if parts[0] == "-" {
			f.Binary = true
		} else {
			f.Insertions, _ = strconv.Atoi(parts[0])
			f.Deletions, _ = strconv.Atoi(parts[1])
		}
		if parts[2] == "" { // a rename: old and new names follow
			f.OldPath, f.Path = fields[i+1], fields[i+2]
			i += 2
		} else {
			f.OldPath, f.Path = parts[2], parts[2]
		}
		st.Files = append(st.Files, f)
		st.Insertions += f.Insertions
		st.Deletions += f.Deletions
	}
	return st
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestParseEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name, patch string
		want        []patchstat.File
	}{
		{"not a patch", "hello\nworld\n", nil},
		{"empty", "", nil},
		{"mode change only", "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
			[]patchstat.File{{Path: "run.sh", OldPath: "run.sh"}}},
		{"a name holding \" b/\"", "diff --git a/x b/y b/x b/y\nnew file mode 100644\n--- /dev/null\n+++ b/x b/y\n@@ -0,0 +1 @@\n+z\n",
			[]patchstat.File{{Path: "x b/y", OldPath: "x b/y", Insertions: 1}}},
		{"unreadable quoted header keeps the raw text", "diff --git \"a/unterminated b/x\n",
			[]patchstat.File{{Path: "\"a/unterminated b/x", OldPath: "\"a/unterminated b/x"}}},
		{"no final newline", "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file",
			[]patchstat.File{{Path: "f", OldPath: "f", Insertions: 1, Deletions: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := patchstat.Parse([]byte(tc.patch)).Files; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%q).Files = %+v, want %+v", tc.patch, got, tc.want)
			}
		})
	}
}

// TestSummaryCapsPaths: a patch touching more names than MaxPaths says so.
func TestSummaryCapsPaths(t *testing.T) {
	var b strings.Builder
	for i := 0; i < patchstat.MaxPaths+1; i++ {
		n := "f" + strconv.Itoa(i)
		b.WriteString("diff --git a/" + n + " b/" + n + "\n--- a/" + n + "\n+++ b/" + n + "\n@@ -1 +1 @@\n-a\n+b\n")
	}
	sum := patchstat.Parse([]byte(b.String())).Summary()
	if sum.Files != patchstat.MaxPaths+1 || len(sum.Paths) != patchstat.MaxPaths || !sum.PathsTruncated ||
		sum.Insertions != patchstat.MaxPaths+1 {
		t.Errorf("summary: %d files, %d paths, truncated %v, +%d", sum.Files, len(sum.Paths), sum.PathsTruncated, sum.Insertions)
	}
}

// FuzzParse: any input parses without panicking, and the totals are the
// sums of the files'.
func FuzzParse(f *testing.F) {
	f.Add("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
	f.Add("diff --git \"a/\\303\\251\" \"b/\\303\\251\"\nnew file mode 100644\nGIT binary patch\nliteral 3\n")
	f.Add("diff --git a/o b/n\nsimilarity index 90%\nrename from o\nrename to n\n")
	f.Fuzz(func(t *testing.T, patch string) {
		st := patchstat.Parse([]byte(patch))
		ins, del := 0, 0
		for _, file := range st.Files {
			ins, del = ins+file.Insertions, del+file.Deletions
		}
		if ins != st.Insertions || del != st.Deletions {
			t.Fatalf("totals +%d -%d, files sum to +%d -%d", st.Insertions, st.Deletions, ins, del)
		}
		if sum := st.Summary(); sum.Files != len(st.Files) || len(sum.Paths) > patchstat.MaxPaths {
			t.Fatalf("summary %+v of %d files", sum, len(st.Files))
		}
	})
}
