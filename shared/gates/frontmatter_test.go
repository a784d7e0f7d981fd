package gates

import (
	"reflect"
	"testing"
)

// frontMatter splits text, which starts at line, col of file, as the
// workflow parser does with a task's prompt: its front matter gates, the
// rest, and the problems found.
func frontMatter(text, file string, line, col int) ([]Gate, string, error) {
	c := NewChecker(file).Sub(line, col)
	gs, rest, _ := c.FrontMatter(text, ParseOptions{Origin: OriginTask})
	return gs, rest, c.Err()
}

// Task-level gates in the context's YAML front matter.
func TestFrontMatter(t *testing.T) {
	text := `---
gates:
  - name: integration-tests
    command: [npm, run, test:integration]
    timeout_secs: 900
  - name: performance-check
    command: [./scripts/perf-baseline.sh]
---
Implement the new caching layer for API responses.
`
	gs, rest, err := frontMatter(text, "task.md", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rest != "Implement the new caching layer for API responses.\n" {
		t.Errorf("rest = %q", rest)
	}
	if len(gs) != 2 || gs[0].Name != "integration-tests" || gs[0].Timeout != 900e9 || gs[1].Name != "performance-check" {
		t.Fatalf("gates = %+v", gs)
	}
	if gs[0].Source != (Source{Origin: OriginTask, File: "task.md", Line: 3, Column: 11}) {
		t.Errorf("source = %+v", gs[0].Source)
	}

	tests := []struct {
		name, text, rest string
		gates            []string
	}{
		{"no front matter", "Just do it.\n---\nmore", "Just do it.\n---\nmore", nil},
		{"not at the start", "\n---\ngates: []\n---\nx", "\n---\ngates: []\n---\nx", nil},
		{"dashes without newline", "---", "---", nil},
		{"empty front matter", "---\n---\nDo it.", "Do it.", nil},
		{"mapping form, CRLF", "---\r\ngates:\r\n  vet: {command: [go, vet]}\r\n---\r\nDo it.\r\n", "Do it.\r\n", []string{"vet"}},
		{"closing line at the end", "---\ngates: {vet: {command: [go, vet]}}\n---", "", []string{"vet"}},
		{"closing with trailing blanks", "---\ngates: {}\n---  \nx", "x", nil},
	}
	for _, tc := range tests {
		gs, rest, err := frontMatter(tc.text, "task.md", 1, 1)
		var names []string
		for _, g := range gs {
			names = append(names, g.Name)
		}
		if err != nil || rest != tc.rest || !reflect.DeepEqual(names, tc.gates) {
			t.Errorf("%s: = %v, %q, %v; want %v, %q", tc.name, names, rest, err, tc.gates, tc.rest)
		}
	}
}

// D-32: malformed front matter is an error with a position in the
// containing file, never silently prompt text.
func TestFrontMatterProblems(t *testing.T) {
	tests := []struct {
		name, text string
		wants      []want
	}{
		{"unclosed", "---\ngates: []\nDo it.\n", []want{"10:7: front matter opened by '---' is not closed"}},
		{"not a mapping", "---\n- a\n---\nx", []want{"11:7: front matter must be a mapping, got a list"}},
		{"unknown key", "---\ntitle: x\n---\nx", []want{`11:7: unknown field "title" in front matter`}},
		{"invalid YAML", "---\ngates: [\n---\nx", []want{"12: invalid YAML"}},
		{"bad gates", "---\ngates:\n  - name: a\n    command: make a\n  - {name: a, command: [x], env: {HOME: /}}\n---\nx", []want{
			`13:20: gate "a" command must be an argv list, e.g. [make, a], not a string`,
			`14:41: gate "a" env may not set HOME`,
			`14:18: duplicate gate name "a" (first defined at line 12)`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := frontMatter(tc.text, "task.md", 10, 7)
			checkProblems(t, "task.md", "", err, tc.wants)
		})
	}
}
