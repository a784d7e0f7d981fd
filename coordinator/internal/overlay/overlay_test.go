package overlay

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"a.yaml": "x: 1\n", "b.yml": "y: 2\n", "notes.md": "no\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	files, err := ReadDir(dir, User, false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		if f.Layer != User {
			t.Errorf("%s: layer %v", f.Name, f.Layer)
		}
	}
	if !reflect.DeepEqual(names, []string{"a", "b", "link"}) {
		t.Errorf("names %v", names)
	}
	// Project files are the repository's choice: no symbolic links.
	if _, err := ReadDir(dir, Project, true); err == nil || !strings.Contains(err.Error(), "link.yaml is a symbolic link") {
		t.Errorf("project symlink: %v", err)
	}
	if files, err := ReadDir(filepath.Join(dir, "missing"), Builtin, false); err != nil || files != nil {
		t.Errorf("missing directory: %v %v", files, err)
	}
}

func TestIndexAndChain(t *testing.T) {
	files := []File{
		{Layer: Builtin, Name: "base", Path: "b/base.yaml"},
		{Layer: Builtin, Name: "impl", Path: "b/impl.yaml"},
		{Layer: User, Name: "impl", Path: "u/impl.yaml"},
		{Layer: Project, Name: "impl", Path: "p/impl.yaml"},
		{Layer: Project, Name: "impl", Path: "p/impl.yml"},
		{Layer: Project, Name: "Bad Name", Path: "p/Bad Name.yaml"},
	}
	ix, problems := NewIndex(files)
	if len(problems) != 2 || !strings.Contains(problems[0].Message, "also defines \"impl\"") || !strings.Contains(problems[1].Message, "invalid name") {
		t.Fatalf("problems %v", problems)
	}
	parents := map[string]string{"p/impl.yaml": "impl", "u/impl.yaml": "impl", "b/impl.yaml": "base"}
	chain, p := ix.Chain("role", "impl", func(f File) (Parent, bool) { return Parent{Name: parents[f.Path]}, true })
	if p != nil {
		t.Fatal(p)
	}
	var paths []string
	for _, f := range chain {
		paths = append(paths, f.Path)
	}
	if want := []string{"p/impl.yaml", "u/impl.yaml", "b/impl.yaml", "b/base.yaml"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("chain %v, want %v", paths, want)
	}
	// base extends impl: the project's, which comes back to base.
	parents["b/base.yaml"] = "impl"
	_, p = ix.Chain("role", "impl", func(f File) (Parent, bool) { return Parent{Name: parents[f.Path], Line: 1, Column: 10}, true })
	want := "role extends cycle: impl (project) -> impl (user) -> impl (built-in) -> base (built-in) -> impl (project)"
	if p == nil || p.Message != want || p.File != "b/base.yaml" || p.Line != 1 {
		t.Errorf("cycle: %+v, want %q at b/base.yaml:1", p, want)
	}
}

func TestMergeMaps(t *testing.T) {
	parent := map[string]any{"a": 1, "m": map[string]any{"x": 1, "l": []any{"p"}}, "s": "keep"}
	child := map[string]any{"a": 2, "m": map[string]any{"y": 2, "l": []any{"c"}}, "new": true}
	got := MergeMaps(parent, child)
	want := map[string]any{"a": 2, "s": "keep", "new": true, "m": map[string]any{"x": 1, "y": 2, "l": []any{"p", "c"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if parent["a"] != 1 || len(parent["m"].(map[string]any)) != 2 {
		t.Errorf("parent modified: %v", parent)
	}
}
