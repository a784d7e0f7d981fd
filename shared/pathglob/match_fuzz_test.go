package pathglob

import (
	"strings"
	"testing"
)

// FuzzMatch checks the glob matcher on any pattern and path: it never
// panics; Normalize is idempotent; Match agrees with Compile(...).Match; a
// pattern without glob syntax matches exactly the paths equal to it after
// normalization; "**" matches everything; a pattern that fell back to a
// literal (PM-06) still matches itself; and without "**" or a character
// class, a match never crosses a "/" (both have as many segments).
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"*.log", "error.log"}, {"**/*.log", "a/b/error.log"}, {"a/**/b", "a/x/y/b"},
		{"htmlcov/**", "htmlcov/index.html"}, {"a**b", "ax/xb"}, {"file?.txt", "file/.txt"},
		{"[!ab].go", "c.go"}, {"[ab.go", "[ab.go"}, {"[z-a]", "[z-a]"}, {"./out//x.txt", "out/x.txt"},
		{"a+b(c).txt", "a+b(c).txt"}, {"[/]", "/"}, {"[\\]", "\\"}, {".//./x", "/./x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		for _, s := range []string{pattern, path} {
			if n := Normalize(s); Normalize(n) != n {
				t.Fatalf("Normalize(%q) = %q, not a fixed point", s, n)
			}
		}
		c := Compile(pattern)
		got := c.Match(path)
		if got != Match(pattern, path) {
			t.Fatalf("Compile(%q).Match(%q) != Match", pattern, path)
		}
		np, nx := Normalize(pattern), Normalize(path)
		if !HasMeta(pattern) && got != (np == nx) {
			t.Fatalf("literal %q matching %q = %v", pattern, path, got)
		}
		if np == "**" && !got {
			t.Fatalf("** does not match %q", path)
		}
		if c.re == nil && !c.Match(pattern) {
			t.Fatalf("literal fallback %q does not match itself", pattern)
		}
		if got && !strings.Contains(np, "**") && !strings.Contains(np, "[") &&
			strings.Count(np, "/") != strings.Count(nx, "/") {
			t.Fatalf("%q matched %q across a /", pattern, path)
		}
	})
}
