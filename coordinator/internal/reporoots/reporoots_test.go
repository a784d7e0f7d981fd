package reporoots

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "src")
	other := filepath.Join(base, "other")
	for _, d := range []string{filepath.Join(root, "proj"), other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A link under the root that leads out of it.
	if err := os.Symlink(other, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	r, err := New([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{root, filepath.Join(root, "proj"), filepath.Join(root, "proj", "..", "proj"),
		filepath.Join(root, "not-yet")}
	for _, p := range allowed {
		if err := r.Check(p); err != nil {
			t.Errorf("Check(%s) = %v, want allowed", p, err)
		}
	}
	refused := []string{other, base, filepath.Join(root, "..", "other"), filepath.Join(root, "escape"),
		filepath.Join(root, "escape", "sub"), root + "-sibling"}
	for _, p := range refused {
		if err := r.Check(p); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("Check(%s) = %v, want ErrNotAllowed", p, err)
		}
	}
	if err := r.Check("relative/path"); err == nil || errors.Is(err, ErrNotAllowed) {
		t.Errorf("Check(relative) = %v, want a not-absolute error", err)
	}
}

func TestNoRootsAllowNothing(t *testing.T) {
	var r Roots
	if err := r.Check(t.TempDir()); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("zero Roots allowed a path: %v", err)
	}
	if r.String() != "none" {
		t.Fatalf("String() = %q", r.String())
	}
	if _, err := New([]string{"rel"}); err == nil {
		t.Fatal("New accepted a relative root")
	}
}

func TestRootThroughSymlink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.MkdirAll(filepath.Join(real, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	r, err := New([]string{link})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(filepath.Join(link, "proj")); err != nil {
		t.Fatalf("a repository under a root given through a link: %v", err)
	}
}
