package pathglob

import "testing"

// PM-01…PM-06 test vectors.
func TestMatch(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		// PM-05 examples.
		{"*.log", "error.log", true},
		{"*.log", "src/error.log", false},
		{"**/*.log", "error.log", true},
		{"**/*.log", "a/b/error.log", true},
		{".coverage*", ".coverage", true},
		{".coverage*", ".coveragerc", true},
		{".coverage*", "src/.coverage", false},
		{"**/foo", "foo", true},
		{"**/foo", "a/foo", true},
		{"**/foo", "barfoo", false},
		// PM-04.
		{"**", "anything/at/all", true},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/c", false},
		{"htmlcov/**", "htmlcov/index.html", true},
		{"htmlcov/**", "htmlcov/a/b.css", true},
		{"htmlcov/**", "htmlcov", false},
		{"a**b", "axxb", true},
		{"a**b", "ax/xb", false},
		// PM-03.
		{"file?.txt", "file1.txt", true},
		{"file?.txt", "file/.txt", false},
		{"[ab].go", "a.go", true},
		{"[ab].go", "c.go", false},
		{"[!ab].go", "c.go", true},
		{"[ab.go", "[ab.go", true},
		// PM-01: case-sensitive, anchored.
		{"README", "readme", false},
		{"src", "src/main.go", false},
		// PM-02 normalization.
		{"./out//x.txt", "out/x.txt", true},
		{"out/x.txt", "./out/x.txt", true},
		// Regex metacharacters are literal.
		{"a+b(c).txt", "a+b(c).txt", true},
		{"a.txt", "abtxt", false},
		// Non-ASCII characters are characters, not bytes (found by FuzzMatch).
		{"é.txt", "é.txt", true},
		{"docs/ü*.md", "docs/über.md", true},
		{"?.go", "é.go", true},
		{"\x80", "\x80", true},
		// A newline in a file name is matched like any other character.
		{"secrets/**", "secrets/a\nb", true},
		{"**/*.key", "a\nb/c.key", true},
		{"a*b", "a\nb", true},
		{"\x80", "\xc2\x80", false},
	}
	for _, c := range cases {
		if got := Match(c.pattern, c.path); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

func TestHasMeta(t *testing.T) {
	if !HasMeta("a/*") || HasMeta("a/b") {
		t.Fatal("HasMeta")
	}
}
