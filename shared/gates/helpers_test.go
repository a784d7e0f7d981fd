package gates

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// want is an expected problem: "line:col: message substring", or
// ":: message substring" for a problem about the whole file.
type want = string

// checkProblems asserts that err is a *ValidationError whose problems match
// wants exactly: same count, each in file at the given position with a
// message containing the given text.
func checkProblems(t *testing.T, file, src string, err error, wants []want) {
	t.Helper()
	if len(wants) == 0 {
		if err != nil {
			t.Fatalf("unexpected error:\n%v", err)
		}
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v (%T), want *ValidationError", err, err)
	}
	got := ve.Problems
	used := make([]bool, len(got))
	for _, w := range wants {
		loc, text, _ := strings.Cut(w, " ")
		line, col := 0, 0
		if loc != "::" {
			l, c, _ := strings.Cut(strings.TrimSuffix(loc, ":"), ":")
			line, _ = strconv.Atoi(l)
			col, _ = strconv.Atoi(c)
		}
		found := false
		for i, p := range got {
			if !used[i] && p.Line == line && p.Column == col && strings.Contains(p.Message, text) {
				used[i], found = true, true
				if file != "" && p.File != file {
					t.Errorf("problem file = %q, want %q", p.File, file)
				}
				break
			}
		}
		if !found {
			t.Errorf("missing problem %q in:\n%v", w, err)
		}
	}
	for i, p := range got {
		if !used[i] {
			t.Errorf("unexpected problem: %s%s", p, caret(src, p))
		}
	}
}

// caret shows the source line of a problem with a caret under its column.
func caret(src string, p Problem) string {
	lines := strings.Split(src, "\n")
	if p.Line < 1 || p.Line > len(lines) || len(lines[p.Line-1]) > 200 {
		return ""
	}
	return "\n\t" + lines[p.Line-1] + "\n\t" + strings.Repeat(" ", max(p.Column-1, 0)) + "^"
}

// parseYAML parses a YAML gate file named g.yaml.
func parseYAML(t *testing.T, src string) ([]Gate, error) {
	t.Helper()
	gs, _, err := ParseFile("g.yaml", []byte(src), OriginProject)
	return gs, err
}
