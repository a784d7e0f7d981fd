package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSealTrustedDatesFiles: a sealed trusted layer's files are read-only
// and dated trustedMtime, ahead of any run's clock, so that Go's build
// cache, which sets the time of an entry it uses when that is over an hour
// old, leaves them alone (on an overlay, setting it copies the whole entry
// up into the run's layer); directories stay reachable and a symbolic link
// is left as it is (PERF-70).
func TestSealTrustedDatesFiles(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-3 * time.Hour)
	for _, f := range []string{"a/a-0123-d", "a/a-0123-a", "trim.txt"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a/a-0123-d", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	linkBefore, err := os.Lstat(filepath.Join(dir, "link"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sealTrusted(dir, false); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a/a-0123-d", "a/a-0123-a", "trim.txt"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(trustedMtime) || fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s: modified %v, mode %v; want %v, read-only", f, fi.ModTime(), fi.Mode(), trustedMtime)
		}
		// Go's test: an entry is marked used unless it is under an hour old.
		if time.Since(fi.ModTime()) >= time.Hour {
			t.Errorf("%s would be marked used by Go's build cache", f)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "a")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("directory a: %v, %v; want mode 0755", fi.Mode(), err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link")); err != nil || !fi.ModTime().Equal(linkBefore.ModTime()) {
		t.Errorf("the symbolic link's time changed: %v (was %v), %v", fi.ModTime(), linkBefore.ModTime(), err)
	}
}
