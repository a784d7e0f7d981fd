package contextpack

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

var repoFiles = map[string]string{
	"go.mod":                       "module example.com/app\n\ngo 1.22\n",
	"main.go":                      "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/app/internal/store\"\n)\n\nfunc main() { fmt.Println(store.Name) }\n",
	"internal/store/store.go":      "package store\n\n// Name is the store's name.\nconst Name = \"store\"\n",
	"internal/store/store_test.go": "package store\n",
	"internal/other/other.go":      "package other\n",
	"README.md":                    "# App\n\nThe app.\n",
	".gitignore":                   "ignored.txt\n",
	"config.py":                    "API_KEY = \"abc123notreal\"\nHOST = \"example.com\"\n",
	".env":                         "DB_PASSWORD=hunter2\n",
	"web/app.ts":                   "import { util } from './util';\nimport lib from '../lib/index';\nconst x = require(\"./data.json\");\nexport * from './esm.js';\n",
	"web/esm.ts":                   "export const e = 1;\n",
	"web/util.ts":                  "export const util = 1;\n",
	"web/data.json":                "{}\n",
	"lib/index.js":                 "module.exports = {};\n",
	"py/pkg/__init__.py":           "",
	"py/pkg/a.py":                  "from . import b\nfrom .c import d\nimport py.pkg.e\nimport os\n",
	"py/pkg/b.py":                  "B = 1\n",
	"py/pkg/c.py":                  "d = 1\n",
	"py/pkg/e.py":                  "E = 1\n",
	"py/pkg/unused.py":             "U = 1\n",
}

func newRepo(t *testing.T) (string, string) {
	t.Helper()
	dir, base := testkit.Repo(t, repoFiles)
	testkit.WriteFile(t, filepath.Join(dir, "ignored.txt"), "IGNORED CONTENT\n")
	return dir, base
}

func strategy(parts []protocol.ContextPart, priority []string, keep ...string) protocol.ContextStrategy {
	return protocol.ContextStrategy{Name: "test", TokenBudget: MaxBudget, Parts: parts, PriorityOrder: priority, Keep: keep}
}

func pack(t *testing.T, dir, base string, spec protocol.ContextSpec, task string) *Packed {
	t.Helper()
	p, err := Pack(context.Background(), Request{Dir: dir, Git: gitexec.Runner{Dir: dir}, Base: base, Spec: spec, Task: task})
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	return p
}

func partOf(m Manifest, name string) PartInfo {
	for _, p := range m.Parts {
		if p.Name == name {
			return p
		}
	}
	return PartInfo{}
}

// CTX-02, CTX-09: a target's imports are resolved: Go packages of the
// repository's module, Python and JS/TS relative imports.
func TestPackImports(t *testing.T) {
	dir, base := newRepo(t)
	s := strategy([]protocol.ContextPart{
		{Name: "target", Kind: KindFiles, Include: []string{PlaceholderTarget}},
		{Name: "imports", Kind: KindImports, Of: "target"},
	}, []string{"target", "imports"})
	cases := []struct {
		target string
		want   []string
	}{
		{"main.go", []string{"internal/store/store.go"}},
		{"web/app.ts", []string{"web/util.ts", "lib/index.js", "web/data.json", "web/esm.ts"}},
		{"py/pkg/a.py", []string{"py/pkg/b.py", "py/pkg/c.py", "py/pkg/e.py"}},
		{"README.md", nil},
	}
	for _, c := range cases {
		t.Run(c.target, func(t *testing.T) {
			p := pack(t, dir, base, protocol.ContextSpec{Definition: s, Targets: []string{c.target}}, "do it")
			got := partOf(p.Manifest, "imports").Files
			slices.Sort(got)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("imports of %s = %v, want %v", c.target, got, want)
			}
			if tf := partOf(p.Manifest, "target").Files; !slices.Equal(tf, []string{c.target}) {
				t.Fatalf("target files %v", tf)
			}
			for _, f := range want {
				if !strings.Contains(p.Text, "### "+f+"\n") {
					t.Errorf("packed text has no header for %s:\n%s", f, p.Text)
				}
			}
		})
	}
}

// CTX-06: the reviewer gets the diff against the base, the changed files in
// full, and the plan; ignored files and secret files are never packed, and
// secrets are redacted (CTX-07).
func TestPackReviewerDiff(t *testing.T) {
	dir, base := newRepo(t)
	testkit.WriteFile(t, filepath.Join(dir, "internal/store/store.go"),
		"package store\n\n// Name is the store's name.\nconst Name = \"shop\"\n\nvar token = \"ghp_"+strings.Repeat("a1B2", 9)+"\"\n")
	testkit.WriteFile(t, filepath.Join(dir, "internal/store/new.go"), "package store\n\n// New is new.\nfunc New() {}\n")
	testkit.Git(t, dir, "add", "internal/store/new.go")
	testkit.WriteFile(t, filepath.Join(dir, ".env"), "DB_HOST=internal2.example\n")
	cat, err := Load(filepath.Join("..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := cat.Lookup("reviewer_diff")
	spec := protocol.ContextSpec{Strategy: s.Name, Definition: s, Plan: "## implement\n\nRename the store to shop.\n"}
	p := pack(t, dir, base, spec, "Review the change.")

	for _, want := range []string{
		"## diff (", "-const Name = \"store\"\n+const Name = \"shop\"",
		"## changed (", "### internal/store/new.go\n\n```go\npackage store\n\n// New is new.",
		"### internal/store/store.go\n",
		"## plan (", "Rename the store to shop.",
		"var token = \"[REDACTED]\"",
	} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("packed text lacks %q:\n%s", want, p.Text)
		}
	}
	for _, never := range []string{"IGNORED CONTENT", "ghp_a1B2", "hunter2", "internal2", ".env"} {
		if strings.Contains(p.Text, never) {
			t.Errorf("packed text holds %q", never)
		}
	}
	prompt := p.Prompt("Review the change.")
	if !strings.HasPrefix(prompt, "# Context (strategy reviewer_diff)") || !strings.HasSuffix(prompt, "# Task\n\nReview the change.") {
		t.Errorf("prompt does not put the context first and the task last:\n%s", prompt)
	}
	if p.Manifest.Tokens <= p.Manifest.TaskTokens || p.Manifest.Estimated || p.Manifest.Encoding != Encoding {
		t.Errorf("manifest %+v", p.Manifest)
	}
	if st := partOf(p.Manifest, "standards"); st.Included || st.Reason != reasonEmpty {
		t.Errorf("standards part %+v, want empty", st)
	}
}

// CTX-07: secrets in packed files are redacted; secret files (.env) and
// ignored files are never read.
func TestPackRedactsAndSkips(t *testing.T) {
	dir, base := newRepo(t)
	testkit.WriteFile(t, filepath.Join(dir, "keys/id.txt"), "-----BEGIN PRIVATE KEY-----\nMIIEabc\n-----END PRIVATE KEY-----\npassword: hunter3\n")
	testkit.Git(t, dir, "add", "keys/id.txt")
	s := strategy([]protocol.ContextPart{
		{Name: "all", Kind: KindFiles, Include: []string{"**"}},
		{Name: "tree", Kind: KindTree},
	}, []string{"all", "tree"})
	p := pack(t, dir, base, protocol.ContextSpec{Definition: s}, "t")
	for _, never := range []string{"abc123notreal", "MIIEabc", "hunter2", "hunter3", "IGNORED CONTENT", "### ignored.txt", "### .env"} {
		if strings.Contains(p.Text, never) {
			t.Errorf("packed text holds %q:\n%s", never, p.Text)
		}
	}
	_, tree, _ := strings.Cut(p.Text, "## tree")
	if !strings.Contains(tree, "\nmain.go\n") || strings.Contains(tree, "ignored.txt") || strings.Contains(tree, ".env") {
		t.Errorf("tree section:\n%s", tree)
	}
	for _, want := range []string{"API_KEY = \"[REDACTED]\"", "password: [REDACTED]", "### keys/id.txt", "### config.py"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("packed text lacks %q", want)
		}
	}
	// Files are packed once, by the most important part.
	if tree := partOf(p.Manifest, "tree"); tree.Included != true || strings.Count(p.Text, "### config.py") != 1 {
		t.Errorf("tree %+v; config.py headers %d", tree, strings.Count(p.Text, "### config.py"))
	}
}

// CTX-05: over budget, whole parts are dropped from the lowest priority up;
// kept parts never are, and when they do not fit Pack fails naming the
// budget and the minimum.
func TestPackPruning(t *testing.T) {
	files := map[string]string{}
	for name, n := range map[string]int{"a.txt": 1200, "b.txt": 900, "c.txt": 600, "d.txt": 300} {
		files[name] = strings.Repeat(strings.TrimSuffix(name, ".txt")+"lpha beta gamma\n", n/4)
	}
	dir, base := testkit.Repo(t, files)
	var parts []protocol.ContextPart
	for _, n := range []string{"d", "c", "b", "a"} { // printed in reverse priority
		parts = append(parts, protocol.ContextPart{Name: n, Kind: KindFiles, Include: []string{n + ".txt"}})
	}
	s := strategy(parts, []string{"a", "b", "c", "d"}, "b")
	full := pack(t, dir, base, protocol.ContextSpec{Definition: s, Budget: MaxBudget}, "task")
	tok := func(n string) int { return partOf(full.Manifest, n).Tokens }
	total := full.Manifest.Tokens
	for _, n := range []string{"a", "b", "c", "d"} {
		if !partOf(full.Manifest, n).Included || tok(n) == 0 {
			t.Fatalf("at the largest budget part %s is not included: %+v", n, full.Manifest)
		}
	}
	if tok("a") <= tok("d") {
		t.Fatalf("part sizes: %+v", full.Manifest.Parts)
	}
	minimum := total - tok("a") - tok("c") - tok("d") // task and b
	cases := []struct {
		name    string
		budget  int
		dropped []string
	}{
		{"everything fits", total, nil},
		{"one short: the lowest goes", total - 1, []string{"d"}},
		{"two parts go", total - tok("d") - 1, []string{"c", "d"}},
		{"a goes, the kept b stays", total - tok("d") - tok("c") - 1, []string{"a", "c", "d"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.budget < MinBudget {
				t.Fatalf("budget %d below the minimum: make the parts larger", c.budget)
			}
			p := pack(t, dir, base, protocol.ContextSpec{Definition: s, Budget: c.budget}, "task")
			var dropped []string
			for _, pi := range p.Manifest.Parts {
				if !pi.Included {
					dropped = append(dropped, pi.Name)
					if !strings.HasPrefix(pi.Reason, "dropped: over budget") {
						t.Errorf("part %s reason %q", pi.Name, pi.Reason)
					}
				}
			}
			slices.Sort(dropped)
			if !slices.Equal(dropped, c.dropped) {
				t.Fatalf("budget %d dropped %v, want %v", c.budget, dropped, c.dropped)
			}
			if p.Manifest.Tokens > c.budget {
				t.Fatalf("packed %d tokens over budget %d", p.Manifest.Tokens, c.budget)
			}
			for _, n := range c.dropped {
				if strings.Contains(p.Text, "### "+n+".txt") {
					t.Errorf("dropped part %s is in the text", n)
				}
			}
		})
	}
	if minimum-1 >= MinBudget {
		_, err := Pack(context.Background(), Request{Dir: dir, Git: gitexec.Runner{Dir: dir}, Base: base,
			Spec: protocol.ContextSpec{Definition: s, Budget: minimum - 1}, Task: "task"})
		var tl *TooLargeError
		if !errors.As(err, &tl) || tl.Budget != minimum-1 || tl.Minimum < minimum-5 || tl.Minimum > minimum+5 {
			t.Fatalf("Pack at budget %d = %v, want TooLargeError with minimum about %d", minimum-1, err, minimum)
		}
		if !strings.Contains(err.Error(), "(b)") || !strings.Contains(err.Error(), "the budget is") {
			t.Fatalf("error %q names neither the kept part nor the budget", err)
		}
	}
	// A task alone over the budget fails too.
	_, err := Pack(context.Background(), Request{Dir: dir, Git: gitexec.Runner{Dir: dir}, Base: base,
		Spec: protocol.ContextSpec{Definition: strategy(parts, []string{"a", "b", "c", "d"}), Budget: MinBudget}, Task: strings.Repeat("word ", 3000)})
	var tl *TooLargeError
	if !errors.As(err, &tl) || !strings.Contains(err.Error(), "the task alone") {
		t.Fatalf("Pack with a huge task = %v, want TooLargeError naming the task", err)
	}
}

// Placeholders with nothing to stand for give empty parts, not every file.
func TestPackEmptyTargets(t *testing.T) {
	dir, base := newRepo(t)
	s := strategy([]protocol.ContextPart{
		{Name: "target", Kind: KindFiles, Include: []string{PlaceholderTarget}},
		{Name: "ifaces", Kind: KindFiles, Include: []string{PlaceholderInterfaces}},
		{Name: "diff", Kind: KindDiff},
	}, []string{"target", "ifaces", "diff"})
	p := pack(t, dir, base, protocol.ContextSpec{Definition: s}, "t")
	if p.Text != "" {
		t.Fatalf("text %q, want none", p.Text)
	}
	if p.Prompt("t") != "t" {
		t.Fatalf("prompt %q, want the task alone", p.Prompt("t"))
	}
	p = pack(t, dir, base, protocol.ContextSpec{Definition: s, Interfaces: []string{"internal/**/*.go"}}, "t")
	if got := partOf(p.Manifest, "ifaces").Files; !slices.Equal(got, []string{"internal/other/other.go", "internal/store/store.go", "internal/store/store_test.go"}) {
		t.Fatalf("interfaces %v", got)
	}
}

// CTX-11: tokens are counted with o200k_base; Estimate is the fallback.
func TestTokenizer(t *testing.T) {
	n, exact := NewTokenizer().Count("hello world")
	if n != 2 || !exact {
		t.Fatalf("Count(hello world) = %d, %v; want 2 by the tokenizer", n, exact)
	}
	var none *Tokenizer
	if n, exact := none.Count("1234567"); n != 3 || exact {
		t.Fatalf("fallback = %d, %v; want 3 estimated (bytes/3, rounded up)", n, exact)
	}
}

func TestValidateRejects(t *testing.T) {
	good := strategy([]protocol.ContextPart{{Name: "a", Kind: KindDiff}}, []string{"a"})
	if err := Validate(good); err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.PriorityOrder = nil
	bad.TokenBudget = 10
	err := Validate(bad)
	if err == nil || !strings.Contains(err.Error(), "token_budget 10 is out of range") || !strings.Contains(err.Error(), `priority_order does not list part "a"`) {
		t.Fatalf("Validate = %v", err)
	}
	if _, err := Pack(context.Background(), Request{Spec: protocol.ContextSpec{Definition: bad}}); err == nil {
		t.Fatal("Pack accepted an invalid strategy")
	}
}
