package gates

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseFile checks that parsing never panics, in either syntax, and
// that failures are always a *ValidationError with positioned problems
// naming the file.
func FuzzParseFile(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "configs", "gates", "*.yaml"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data, false)
		}
	}
	f.Add([]byte("[[gate]]\nname = \"t\"\ncommand = [\"go\", \"test\"]\n[gate.env]\nA = \"1\"\n[gate.resources]\nmemory = 1024\n"), true)
	f.Add([]byte("a.b.c = 1\n[x]\ny = [[1, 2], {z = true}]\n[[x.w]]\nq = 1979-05-27T07:32:00Z\n"), true)
	f.Add([]byte("---\ngates:\n  - name: x\n    command: [x]\n---\nrest"), false)
	// #12: inline code and git's shell aliases.
	f.Add([]byte("gates:\n  a: {command: [python3, -c, \"import os\"]}\n  b: {command: [git, -c, \"alias.x=!sh\", x]}\n  c: {command: [make, -f, /dev/stdin], allow_shell: true}\n"), false)
	f.Add([]byte("[[gate]]\nname = \"a\"\ncommand = [\"awk\", \"BEGIN{system(1)}\"]\n[gate.env]\nGIT_CONFIG_COUNT = \"1\"\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, isTOML bool) {
		name := "f.yaml"
		if isTOML {
			name = "f.toml"
		}
		gs, _, err := ParseFile(name, data, OriginUser)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("ParseFile = %v", err)
			}
			for _, p := range ve.Problems {
				if p.File != name {
					t.Fatalf("problem in %q", p.File)
				}
			}
			return
		}
		set := NewSet(gs...)
		for _, g := range gs {
			if !ValidName(g.Name) || len(g.Command) == 0 {
				t.Fatalf("accepted %+v", g)
			}
			_, _ = Resolve(set, []string{g.Name})
		}
		_, _, _ = frontMatter(string(data), "task.md", 1, 1)
	})
}
