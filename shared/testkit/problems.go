package testkit

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// problem is the shape of a validation problem (gates.Problem, which the
// workflow parser shares): a message at a position in a file. Line 0 is
// about the whole file.
type problem = struct {
	File         string
	Line, Column int
	Message      string
}

// CheckProblems asserts that err is a validation error E (found with
// errors.As) whose problems, as problems returns them, match wants
// exactly: as many, each at the given position with a message containing
// the given text, and (when file is not "") in file. A want is
// "line:col: message substring", or ":: message substring" for a problem
// about the whole file. With no wants, err must be nil. An unexpected
// problem is shown with its line of src and a caret under its column.
func CheckProblems[E error, P ~problem](t testing.TB, file, src string, err error, wants []string, problems func(E) []P) {
	t.Helper()
	if len(wants) == 0 {
		if err != nil {
			t.Fatalf("unexpected error:\n%v", err)
		}
		return
	}
	var ve E
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v (%T), want %T", err, err, ve)
	}
	got := problems(ve)
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
		for i, gp := range got {
			p := problem(gp)
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
			t.Errorf("unexpected problem: %v%s", p, caret(src, problem(p)))
		}
	}
}

// caret shows the source line of a problem with a caret under its column.
func caret(src string, p problem) string {
	lines := strings.Split(src, "\n")
	if p.Line < 1 || p.Line > len(lines) || len(lines[p.Line-1]) > 200 {
		return ""
	}
	return "\n\t" + lines[p.Line-1] + "\n\t" + strings.Repeat(" ", max(p.Column-1, 0)) + "^"
}
