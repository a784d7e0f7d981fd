package gaterunner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStdimportsImportsEveryPublicStdPackage runs the warm-up's module as
// CacheWarmup writes it (go run ./stdimports std, with the go command
// these tests run with): the imports package it writes imports the public
// standard packages (fmt, net/http, testing/quick), none internal or
// vendored, and every import resolves, so that go vet ./imports can vet
// them all as dependencies (PERF-79).
func TestStdimportsImportsEveryPublicStdPackage(t *testing.T) {
	t.Parallel()
	warm := CacheWarmup()
	ws := t.TempDir()
	for name, body := range warm.WarmFiles {
		p := filepath.Join(ws, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var gen []string
	for _, argv := range warm.Warmup {
		if len(argv) > 2 && argv[1] == "run" {
			gen = argv
		}
	}
	if gen == nil || gen[len(gen)-1] != "std" {
		t.Fatalf("the warm-up %q has no go run of the standard library's imports", warm.Warmup)
	}
	env := append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOPROXY=off")
	run := func(argv ...string) string {
		t.Helper()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = ws, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", argv, err, out)
		}
		return string(out)
	}
	run(gen...)
	b, err := os.ReadFile(filepath.Join(ws, "imports", "imports.go"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, want := range []string{`_ "fmt"`, `_ "net/http"`, `_ "testing/quick"`, `_ "unsafe"`} {
		if !strings.Contains(src, want) {
			t.Errorf("imports.go lacks %s", want)
		}
	}
	for _, line := range strings.Split(src, "\n") {
		if strings.Contains(line, "internal") || strings.Contains(line, "vendor/") {
			t.Errorf("imports.go imports what no other module may: %s", line)
		}
	}
	// Every import resolves: no package is missing, internal or in error.
	errs := run("go", "list", "-e", "-deps", "-f", "{{with .Error}}{{.}}\n{{end}}{{range .DepsErrors}}{{.}}\n{{end}}", "./imports")
	if strings.TrimSpace(errs) != "" {
		t.Errorf("go list -deps ./imports reports errors:\n%s", errs)
	}
	if n := strings.Count(src, "\t_ \""); n < 100 {
		t.Errorf("imports.go imports %d packages; want the whole public standard library (over 100)", n)
	}
}
