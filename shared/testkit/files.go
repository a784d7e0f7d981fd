package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFile writes data to path (mode 0644), creating its parent
// directories, and fails the test if it cannot.
func WriteFile[D string | []byte](t testing.TB, path string, data D) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ReadFile returns the content of path and fails the test if it cannot
// read it.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
