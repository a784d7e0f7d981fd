package pathglob

import (
	"strings"
	"testing"
)

// Overlap is exact on these: every "true" has a path both match, every
// "false" none (DAG-07's file sets).
func TestOverlap(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"src/a.go", "src/a.go", true},
		{"src/a.go", "src/b.go", false},
		{"src/*.go", "src/a*", true},
		{"src/*.go", "src/a.txt", false},
		{"src/*.go", "docs/**", false},
		{"src/**", "src/x/y/z.go", true},
		{"src/**", "src", false},
		{"**", "anything", true},
		{"**/*.go", "cmd/main.go", true},
		{"**/*.go", "README.md", false},
		{"**/*_test.go", "pkg/*.go", true},
		{"pkg/**/x.go", "pkg/x.go", true},
		{"pkg/**/x.go", "pkg/a/b/y.go", false},
		{"*.md", "docs/*.md", false},
		{"file?.txt", "file10.txt", false},
		{"file?.txt", "file[0-9].txt", true},
		{"[ab].go", "[cd].go", false},
		{"[!a].go", "a.go", false},
		{"[!a].go", "[ab].go", true},
		{"./out//x.txt", "out/*.txt", true},
		{"a+b(c).txt", "a+b*", true},
		{"[ab.go", "[ab.go", true},
		{"[ab.go", "[*", true},
		{"a**b", "a/b", false},
		{"a**b", "axb", true},
		{"api/openapi.yaml", "api/**/*.yaml", true},
		// A class of a letter's cases compiles to a case-folding
		// instruction (found by FuzzOverlapConservative).
		{"[Xx]", "0", false},
		{"[Xx]", "X", true},
		{"[Kk].go", "\u212a.go", false}, // no fold: the class lacks the KELVIN SIGN
		{"é.txt", "é.*", true},
		{"secrets/**", "secrets/a\nb", true},
	}
	for _, c := range cases {
		for _, pq := range [][2]string{{c.a, c.b}, {c.b, c.a}} {
			ex, got := Overlap(pq[0], pq[1])
			if got != c.want {
				t.Errorf("Overlap(%q, %q) = %v, want %v", pq[0], pq[1], got, c.want)
				continue
			}
			if got && (!Match(pq[0], ex) || !Match(pq[1], ex)) {
				t.Errorf("Overlap(%q, %q): example %q does not match both", pq[0], pq[1], ex)
			}
		}
	}
}

// Against brute force: for every pair of these patterns, every path of up
// to four characters over a small alphabet that matches both makes
// Overlap true, and a true answer's example matches both.
func TestOverlapConservativeExhaustive(t *testing.T) {
	patterns := []string{"a", "a/b", "*", "*/*", "**", "**/a", "a/**", "a/**/b", "?", "?/?", "[ab]", "[!a]/*",
		"a*", "*b", "a**b", "**/*.b", ".*", "a/*/b", "b/**", "[a.]*"}
	alphabet := []byte("ab/.")
	var paths []string
	var grow func(string)
	grow = func(s string) {
		if s != "" {
			paths = append(paths, s)
		}
		if len(s) == 4 {
			return
		}
		for _, c := range alphabet {
			grow(s + string(c))
		}
	}
	grow("")
	compiled := make([]*Pattern, len(patterns))
	for i, p := range patterns {
		compiled[i] = Compile(p)
	}
	for i, p := range compiled {
		for j, q := range compiled {
			ex, got := p.Overlap(q)
			var both string
			for _, path := range paths {
				if p.Match(path) && q.Match(path) {
					both = path
					break
				}
			}
			if both != "" && !got {
				t.Errorf("Overlap(%q, %q) = false, but %q matches both", patterns[i], patterns[j], both)
			}
			if got && ex != "" && Normalize(ex) == ex && (!p.Match(ex) || !q.Match(ex)) {
				t.Errorf("Overlap(%q, %q): example %q does not match both", patterns[i], patterns[j], ex)
			}
		}
	}
}

// FuzzOverlapConservative checks that Overlap never calls disjoint two
// globs that a path matches, with random globs and paths: the fuzzed path
// itself, and paths made from each glob by filling its wildcards with
// fuzzed text.
func FuzzOverlapConservative(f *testing.F) {
	f.Add("src/*.go", "src/a*", "src/a.go", "x")
	f.Add("**/*_test.go", "pkg/**", "pkg/a_test.go", "ab/c")
	f.Add("a/**/b", "a/*/b", "a/x/b", "")
	f.Add("[!a].go", "?.go", "b.go", "/")
	f.Fuzz(func(t *testing.T, a, b, path, fill string) {
		if len(a) > 64 || len(b) > 64 || len(path) > 128 || len(fill) > 16 {
			return
		}
		pa, pb := Compile(a), Compile(b)
		ex, ok := pa.Overlap(pb)
		if ok && ex != "" && (!pa.Match(ex) || !pb.Match(ex)) && Normalize(ex) == ex {
			t.Fatalf("Overlap(%q, %q): example %q does not match both", a, b, ex)
		}
		for _, p := range []string{path, instantiate(a, fill), instantiate(b, fill)} {
			if pa.Match(p) && pb.Match(p) && !ok {
				t.Fatalf("Overlap(%q, %q) = false, but %q matches both", a, b, p)
			}
		}
	})
}

// instantiate makes a path a glob may match: every wildcard becomes fill
// (stars) or its first character (?, classes).
func instantiate(glob, fill string) string {
	one := "x"
	if fill != "" {
		one = fill[:1]
	}
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(fill)
		case '?':
			b.WriteString(one)
		case '[':
			if end := strings.IndexByte(glob[i+1:], ']'); end > 0 {
				class := glob[i+1 : i+1+end]
				if !strings.HasPrefix(class, "!") {
					b.WriteByte(class[0])
				} else {
					b.WriteString(one)
				}
				i += end + 1
				continue
			}
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
