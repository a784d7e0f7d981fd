package contextpack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// LAYOUT-03, CTX-04: the built-in strategies ship as one file each and load.
func TestBuiltinStrategies(t *testing.T) {
	cat, err := Load(filepath.Join("..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"implementer_targeted", "investigator_wide", "planner_docset", "reviewer_diff", "security_audit"}
	if got := strings.Join(cat.Names(), " "); got != strings.Join(want, " ") {
		t.Fatalf("strategies %s, want %s", got, strings.Join(want, " "))
	}
	budgets := map[string]int{"planner_docset": 30000, "implementer_targeted": 25000, "reviewer_diff": 15000, "investigator_wide": MaxBudget}
	for _, name := range want {
		s, _ := cat.Lookup(name)
		if err := Validate(s); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if b, ok := budgets[name]; ok && s.TokenBudget != b {
			t.Errorf("%s budget %d, want %d (CTX-01)", name, s.TokenBudget, b)
		}
	}
	// CTX-06: the reviewer gets the diff, the changed files and the plan.
	rd, _ := cat.Lookup("reviewer_diff")
	kinds := map[string]bool{}
	for _, p := range rd.Parts {
		kinds[p.Kind] = true
	}
	for _, k := range []string{KindDiff, KindChanged, KindPlan} {
		if !kinds[k] {
			t.Errorf("reviewer_diff has no %s part", k)
		}
	}
}

// CTX-03, CTX-08, CTX-09: strategy files are checked, every problem reported
// at its file:line:column, unknown keys rejected.
func TestParseFileProblems(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
	}{
		{"unknown top-level key", "name: s\ntoken_budjet: 100\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n",
			[]string{`s.yaml:2:1: unknown field "token_budjet" in context strategy; did you mean "token_budget"?`}},
		{"unknown part key", "name: s\nparts:\n  - {name: a, kind: diff, prio: 1}\npriority_order: [a]\n",
			[]string{`s.yaml:3:27: unknown field "prio" in part`}},
		{"unknown kind", "name: s\nparts:\n  - {name: a, kind: repomix}\npriority_order: [a]\n",
			[]string{`s.yaml:3:21: unknown part kind "repomix" (known: files, imports, diff, changed, plan, tree)`}},
		{"budget over the maximum", "name: s\ntoken_budget: 60000\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n",
			[]string{`s.yaml:2:15: token_budget 60000 is out of range: must be between 1000 and 50000`}},
		{"part without priority", "name: s\nparts: [{name: a, kind: diff}, {name: b, kind: plan}]\npriority_order: [a]\n",
			[]string{`s.yaml:3:17: priority_order does not list part "b"`}},
		{"priority of an unknown part", "name: s\nparts: [{name: a, kind: diff}]\npriority_order: [a, z]\n",
			[]string{`s.yaml:3:21: priority_order names unknown part "z"`}},
		{"imports of a later part", "name: s\nparts:\n  - {name: i, kind: imports, of: t}\n  - {name: t, kind: files, include: [$TARGET]}\npriority_order: [t, i]\n",
			[]string{`s.yaml:3:5: part "i": of names "t", which is not a part before this one`}},
		{"files without include", "name: s\nparts: [{name: a, kind: files}]\npriority_order: [a]\n",
			[]string{`s.yaml:2:9: part "a": a files part needs include`}},
		{"placeholder inside a glob", "name: s\nparts: [{name: a, kind: files, include: [src/$TARGET]}]\npriority_order: [a]\n",
			[]string{`placeholder ($TARGET or $INTERFACES) must stand alone`}},
		{"glob leaving the repository", "name: s\nexclude: [../x]\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n",
			[]string{`s.yaml:2:11: glob "../x" leaves the repository`}},
		{"name not the file's", "name: t\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n",
			[]string{`s.yaml:1:7: name "t" does not match the file name s.yaml`}},
		{"keep of an unknown part", "name: s\nparts: [{name: a, kind: diff}]\npriority_order: [a]\nkeep: [b]\n",
			[]string{`s.yaml:4:8: keep names unknown part "b"`}},
		{"missing fields", "description: x\n", []string{`missing required field "name"`, `missing required field "parts"`, `missing required field "priority_order"`}},
		{"empty", "", []string{"file is empty"}},
		{"alias", "name: &n s\nparts: [{name: *n, kind: diff}]\npriority_order: [s]\n", []string{"aliases"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFile("s.yaml", []byte(c.text))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestParseFileDefaults(t *testing.T) {
	s, err := ParseFile("s.yaml", []byte("name: s\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.TokenBudget != DefaultBudget {
		t.Fatalf("budget %d, want the default %d (CTX-08)", s.TokenBudget, DefaultBudget)
	}
}

// A later directory's strategy replaces the one of the same name; two files
// of one directory may not define the same strategy.
func TestLoadOverlays(t *testing.T) {
	base, user := t.TempDir(), t.TempDir()
	testkit.WriteFile(t, filepath.Join(base, "s.yaml"), "name: s\ntoken_budget: 2000\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n")
	testkit.WriteFile(t, filepath.Join(user, "s.yml"), "name: s\ntoken_budget: 3000\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n")
	cat, err := Load(base, filepath.Join(t.TempDir(), "missing"), user)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := cat.Lookup("s")
	if !ok || s.TokenBudget != 3000 || cat.File("s") != filepath.Join(user, "s.yml") {
		t.Fatalf("s = %+v from %s, want the user's (3000)", s, cat.File("s"))
	}
	testkit.WriteFile(t, filepath.Join(base, "t.yaml"), "name: s\nparts: [{name: a, kind: diff}]\npriority_order: [a]\n")
	if _, err := Load(base); err == nil || !strings.Contains(err.Error(), "does not match the file name") {
		t.Fatalf("Load = %v, want the name mismatch", err)
	}
	if err := os.Remove(filepath.Join(base, "t.yaml")); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(base, "bad.yaml"), "name: bad\nparts: {}\npriority_order: []\n")
	if _, err := Load(base); err == nil || !strings.Contains(err.Error(), filepath.Join(base, "bad.yaml")+":2:8: parts must be a non-empty list") {
		t.Fatalf("Load = %v, want bad.yaml's problem with its position", err)
	}
}

func FuzzParseFile(f *testing.F) {
	entries, _ := os.ReadDir(filepath.Join("..", "..", "configs", "context"))
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("..", "..", "configs", "context", e.Name()))
		if err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("name: s\nparts: [{name: a, kind: imports, of: a}]\npriority_order: [a, a]\nkeep: [a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseFile("s.yaml", data)
		if err != nil {
			return
		}
		// What the loader accepts, Validate accepts too (a job carries it).
		if verr := Validate(s); verr != nil {
			t.Fatalf("ParseFile accepted %q but Validate says %v", data, verr)
		}
	})
}

// Layers: a later layer's strategy replaces a lower one's of the same
// name, two of one layer is an error, and Over leaves the catalogue it
// starts from as it was.
func TestLoadLayers(t *testing.T) {
	strat := func(name string, budget int) []byte {
		return []byte(fmt.Sprintf("name: %s\ntoken_budget: %d\nparts:\n  - {name: d, kind: diff}\npriority_order: [d]\n", name, budget))
	}
	base, err := LoadLayers([]Source{{Path: "b/a.yaml", Data: strat("a", 2000)}, {Path: "b/b.yaml", Data: strat("b", 3000)}},
		[]Source{{Path: "u/b.yaml", Data: strat("b", 4000)}})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := base.Lookup("b"); s.TokenBudget != 4000 || base.File("b") != "u/b.yaml" {
		t.Fatalf("user layer: %+v from %s", s, base.File("b"))
	}
	over, err := base.Over([]Source{{Path: "p/a.yaml", Data: strat("a", 5000)}, {Path: "p/c.yaml", Data: strat("c", 6000)}})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := over.Lookup("a"); s.TokenBudget != 5000 || strings.Join(over.Names(), ",") != "a,b,c" {
		t.Fatalf("project layer: %+v, names %v", s, over.Names())
	}
	if s, _ := base.Lookup("a"); s.TokenBudget != 2000 || len(base.Names()) != 2 {
		t.Fatalf("Over changed the base: %+v %v", s, base.Names())
	}
	_, err = base.Over([]Source{{Path: "p/a.yaml", Data: strat("a", 5000)}, {Path: "p/a.yml", Data: strat("a", 6000)}})
	if err == nil || !strings.Contains(err.Error(), `p/a.yml: strategy "a" is also defined in p/a.yaml`) {
		t.Fatalf("duplicate in a layer: %v", err)
	}
	_, err = base.Over([]Source{{Path: "p/bad.yaml", Data: []byte("name: a\nbudget: 1\n")}})
	if err == nil || !strings.Contains(err.Error(), "p/bad.yaml:2:1") {
		t.Fatalf("bad file: %v", err)
	}
}
