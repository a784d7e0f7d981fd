package gatecache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// writeFile writes content to rel (slash-separated) under dir.
func writeFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	testkit.WriteFile(t, filepath.Join(dir, filepath.FromSlash(rel)), content)
}

// newRepo makes a committed repository with a few files and a .gitignore
// ignoring build/ and *.log.
func newRepo(t testing.TB) string {
	t.Helper()
	dir, _ := testkit.Repo(t, map[string]string{
		".gitignore": "build/\n*.log\n",
		"main.go":    "package main\n\nfunc main() {}\n",
		"pkg/a.go":   "package pkg\n\nconst A = 1\n",
		"README.md":  "# test\n",
	})
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
