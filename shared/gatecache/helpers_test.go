package gatecache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// git runs git in dir for a test and returns its trimmed output.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitexec.Runner{Dir: dir}.Output(context.Background(), args...)
	if err != nil {
		t.Fatalf("git %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newRepo makes a committed repository with a few files and a .gitignore
// ignoring build/ and *.log.
func newRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "-c", "init.defaultBranch=main", "init", "-q")
	writeFile(t, dir, ".gitignore", "build/\n*.log\n")
	writeFile(t, dir, "main.go", "package main\n\nfunc main() {}\n")
	writeFile(t, dir, "pkg/a.go", "package pkg\n\nconst A = 1\n")
	writeFile(t, dir, "README.md", "# test\n")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "--no-gpg-sign", "-m", "initial")
	return dir
}

// baseInput is a valid KeyInput for dir.
func baseInput(dir string) KeyInput {
	return KeyInput{
		Dir:            dir,
		Gate:           "test",
		Command:        []string{"go", "test", "./..."},
		Env:            map[string]string{"GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
		WorkingDir:     "",
		TimeoutSeconds: 300,
		EnvironmentID:  "sha256:0123456789abcdef",
		Resources:      "memory=2g,cpus=2,pids=512",
		AllowedWrites:  []string{"coverage.out", "build/**"},
	}
}

// mustKey computes a key that must be enabled.
func mustKey(t testing.TB, in KeyInput) Key {
	t.Helper()
	k, err := ComputeKey(context.Background(), in)
	if err != nil {
		t.Fatalf("ComputeKey: %v", err)
	}
	if k.Disabled != "" {
		t.Fatalf("ComputeKey disabled: %s", k.Disabled)
	}
	if !ValidKey(k.ID) {
		t.Fatalf("ComputeKey ID = %q; want 64 hex digits", k.ID)
	}
	return k
}

// mustDisabled computes a key that must be disabled with a reason
// containing want.
func mustDisabled(t testing.TB, in KeyInput, want string) Key {
	t.Helper()
	k, err := ComputeKey(context.Background(), in)
	if err != nil {
		t.Fatalf("ComputeKey: %v", err)
	}
	if k.Disabled == "" || k.ID != "" {
		t.Fatalf("ComputeKey = %+v; want disabled (%s)", k, want)
	}
	if !strings.Contains(k.Disabled, want) {
		t.Fatalf("Disabled = %q; want it to mention %q", k.Disabled, want)
	}
	return k
}

// setMtime sets a file's modification time.
func setMtime(t testing.TB, path string, mt time.Time) {
	t.Helper()
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}
