package gates

import (
	"strings"
	"testing"
)

// FuzzFrontMatter checks the task front matter splitter on any
// prompt text: it never panics; text whose first line is not "---" has no
// front matter and comes back whole, with no problem; otherwise the rest is
// a proper suffix of the text; every problem names the file and sits at
// or after the line the text starts on (0, the whole file, when YAML
// gives no line); and gates it
// accepts without a problem have valid, unique names and a command, and
// come from the task.
func FuzzFrontMatter(f *testing.F) {
	for _, s := range []string{
		"---\ngates:\n  - name: integration-tests\n    command: [npm, run, test]\n    timeout_secs: 900\n---\nImplement it.\n",
		"---\r\ngates:\r\n  unit: {command: [go, test, ./...]}\r\n--- \t\r\nrest",
		"---\ngates: []\n---",
		"---\ngates:\n  - name: a\n    command: [a]\n  - name: a\n    command: [b]\n---\n",
		"---\nnot: closed\n",
		"---\n- a list\n---\n",
		"--- \nx\n",
		"no front matter\n---\ngates: {}\n---\n",
		"---\ngates:\n  x: {command: [sh, -c, id]}\n---\n",
		"---\n&a [*a]\n---\n",
		"---\n%\n---",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c := NewChecker("task.md").Sub(3, 5)
		gs, rest, found := c.FrontMatter(text, ParseOptions{Origin: OriginTask})
		first, _, _ := strings.Cut(text, "\n")
		opens := strings.Contains(text, "\n") && strings.TrimSuffix(first, "\r") == "---"
		if found != opens {
			t.Fatalf("FrontMatter(%q): found = %v", text, found)
		}
		if !found {
			if rest != text || len(gs) != 0 || len(c.Problems) != 0 {
				t.Fatalf("FrontMatter(%q) without front matter = %d gates, %q, %v", text, len(gs), rest, c.Problems)
			}
			return
		}
		for _, p := range c.Problems {
			if p.File != "task.md" || (p.Line != 0 && p.Line < 3) {
				t.Fatalf("FrontMatter(%q): problem at %s:%d", text, p.File, p.Line)
			}
		}
		if len(c.Problems) > 0 {
			return
		}
		if !strings.HasSuffix(text, rest) || len(rest) >= len(text) {
			t.Fatalf("FrontMatter(%q): rest %q is not what follows the front matter", text, rest)
		}
		seen := map[string]bool{}
		for _, g := range gs {
			if !ValidName(g.Name) || len(g.Command) == 0 || seen[g.Name] || g.Source.Origin != OriginTask {
				t.Fatalf("FrontMatter(%q) accepted %+v", text, g)
			}
			seen[g.Name] = true
		}
	})
}
