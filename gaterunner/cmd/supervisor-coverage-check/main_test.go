package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const profile = `mode: set
example.com/m/a.go:3.10,5.2 2 1
example.com/m/a.go:7.10,9.2 3 0
example.com/m/b.go:1.1,2.2 5 1
example.com/m/a.go:7.10,9.2 3 1
`

func TestParseProfile(t *testing.T) {
	covered, total, err := parseProfile(strings.NewReader(profile))
	if err != nil {
		t.Fatal(err)
	}
	// The repeated block counts once, covered by its second listing.
	if covered != 10 || total != 10 {
		t.Errorf("parseProfile = %d/%d, want 10/10", covered, total)
	}
	for _, bad := range []string{"", "hello\n", "mode: set\nx.go:1.1,2.2 two 1\n", "mode: set\nx.go 1\n"} {
		if _, _, err := parseProfile(strings.NewReader(bad)); err == nil {
			t.Errorf("parseProfile(%q) accepted", bad)
		}
	}
}

func TestThreshold(t *testing.T) {
	tests := []struct {
		flag, env string
		want      float64
		ok        bool
	}{
		{"", "", DefaultMin, true},
		{"", "75", 75, true},
		{"90", "75", 90, true},
		{"85.5%", "", 85.5, true},
		{"", "lots", 0, false},
		{"101", "", 0, false},
		{"-1", "", 0, false},
	}
	for _, tc := range tests {
		got, err := threshold(tc.flag, tc.env)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("threshold(%q, %q) = %v, %v", tc.flag, tc.env, got, err)
		}
	}
}

// EXE-002: pass iff coverage ≥ threshold, inclusive.
func TestRunWithProfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cover.out")
	// 8 of 10 statements: exactly 80 %.
	data := "mode: set\nm/a.go:1.1,2.2 8 1\nm/a.go:3.1,4.2 2 0\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "COVERAGE_MIN" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		args []string
		env  string
		want int
		out  string
	}{
		{[]string{"-profile", path}, "", 0, "coverage: 80.0% of statements (8/10); minimum 80%"},
		{[]string{"-profile", path}, "80.1", 1, "below the minimum 80.1%"},
		{[]string{"-profile", path, "-min", "50"}, "90", 0, "minimum 50%"},
		{[]string{"-profile", filepath.Join(dir, "missing")}, "", 2, ""},
		{[]string{"-min", "x", "-profile", path}, "", 2, ""},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		if got := run(tc.args, env(tc.env), &stdout, &stderr); got != tc.want || !strings.Contains(stdout.String(), tc.out) {
			t.Errorf("run(%q, COVERAGE_MIN=%q) = %d, %q (stderr %q); want %d, %q",
				tc.args, tc.env, got, stdout.String(), stderr.String(), tc.want, tc.out)
		}
	}
}

// The tool runs go test itself when given no profile.
func TestRunGoTest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/cov\n\ngo 1.21\n")
	write("cov.go", "package cov\n\nfunc Half(x int) int {\n\tif x > 0 {\n\t\treturn x / 2\n\t}\n\treturn 0\n}\n")
	write("cov_test.go", "package cov\n\nimport \"testing\"\n\nfunc TestHalf(t *testing.T) {\n\tif Half(4) != 2 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n")
	t.Chdir(dir) // back to the previous directory when the test ends
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOTOOLCHAIN", "local")
	t.Setenv("GOPROXY", "off")
	var stdout, stderr bytes.Buffer
	// 2 of 3 statements are covered.
	if got := run([]string{"-min", "60"}, func(string) string { return "" }, &stdout, &stderr); got != 0 {
		t.Fatalf("run = %d\nstdout: %s\nstderr: %s", got, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if got := run([]string{"-min", "70", "./..."}, func(string) string { return "" }, &stdout, &stderr); got != 1 {
		t.Fatalf("run -min 70 = %d, want 1\nstdout: %s", got, stdout.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("the workspace changed: %v", entries)
	}
}
