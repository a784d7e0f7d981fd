package doccheck

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the directory holding go.work, above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test's directory")
		}
		dir = parent
	}
}

// requirement is one row of docs/requirements.md.
type requirement struct {
	id, status string
	refs       []string // the implemented-in and tested-in cells' `code` spans
	line       int
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// bareRef is a repository path, optionally with :Func, in plain text.
	bareRef = regexp.MustCompile(`(?:coordinator|worker|gaterunner|shared|configs|deploy|docs|scripts)/[A-Za-z0-9_./*-]+(?::[A-Za-z0-9_/]+)?`)
)

func readRequirements(t *testing.T, root string) []requirement {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "requirements.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []requirement
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 5 || strings.TrimSpace(cells[0]) == "ID" {
			continue
		}
		r := requirement{id: strings.TrimSpace(cells[0]), status: strings.TrimSpace(cells[2]), line: n}
		for _, c := range cells[3:] {
			for _, m := range codeSpan.FindAllStringSubmatch(c, -1) {
				r.refs = append(r.refs, m[1])
			}
			// Paths written without backticks count too.
			for _, m := range bareRef.FindAllString(codeSpan.ReplaceAllString(c, ""), -1) {
				r.refs = append(r.refs, strings.TrimRight(m, ".,;"))
			}
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("read %d requirement rows from docs/requirements.md; the table is malformed", len(out))
	}
	return out
}

// goFiles lists the repository's Go files, outside testdata.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", ".data", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var citedID = regexp.MustCompile(`\b([A-Z]{1,6})-[0-9]{1,3}(\.[0-9]+)?\b`)

// Every requirement ID a Go file cites is defined in docs/requirements.md:
// a reader of the code can look up what it means.
func TestCitedRequirementIDsAreDefined(t *testing.T) {
	root := repoRoot(t)
	defined := map[string]bool{}
	families := map[string]bool{}
	for _, r := range readRequirements(t, root) {
		defined[r.id] = true
		if m := citedID.FindStringSubmatch(r.id); m != nil {
			families[m[1]] = true
		}
	}
	for _, f := range goFiles(t, root) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range citedID.FindAllStringSubmatch(string(data), -1) {
			if families[m[1]] && !defined[m[0]] {
				rel, _ := filepath.Rel(root, f)
				t.Errorf("%s cites %s, which docs/requirements.md does not define", rel, m[0])
			}
		}
	}
}

// Every file, and every function or variable (a table of test cases) that
// docs/requirements.md names as
// where a requirement is implemented or tested, exists.
func TestRequirementReferencesExist(t *testing.T) {
	root := repoRoot(t)
	funcs := map[string]map[string]bool{} // file → declared functions
	declared := func(file, fn string) bool {
		if funcs[file] == nil {
			data, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				return false
			}
			funcs[file] = map[string]bool{}
			for _, m := range regexp.MustCompile(`(?m)^(?:func (?:\([^)]*\) )?|var )([A-Za-z0-9_]+)`).FindAllStringSubmatch(string(data), -1) {
				funcs[file][m[1]] = true
			}
		}
		return funcs[file][fn]
	}
	for _, r := range readRequirements(t, root) {
		for _, ref := range r.refs {
			path, fn, _ := strings.Cut(ref, ":")
			path, _, _ = strings.Cut(path, " ")
			if !strings.Contains(path, "/") || strings.Contains(path, "<") || !looksLikePath(path) {
				continue // a value, a key or a command, not a file
			}
			if strings.ContainsAny(path, "*?[") {
				if m, _ := filepath.Glob(filepath.Join(root, path)); len(m) == 0 {
					t.Errorf("docs/requirements.md:%d (%s): no file matches %s", r.line, r.id, path)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(root, path)); err != nil {
				t.Errorf("docs/requirements.md:%d (%s): %s does not exist", r.line, r.id, path)
				continue
			}
			if fn == "" || !strings.HasSuffix(path, ".go") {
				continue
			}
			name, _, _ := strings.Cut(fn, "/")
			name = strings.TrimSuffix(strings.TrimSpace(name), "()")
			if !declared(path, name) {
				t.Errorf("docs/requirements.md:%d (%s): %s declares no function %s", r.line, r.id, path, name)
			}
		}
	}
}

// looksLikePath reports whether a code span names a file or directory of
// the repository rather than, say, a NATS subject or a URL.
func looksLikePath(s string) bool {
	for _, top := range []string{"coordinator/", "worker/", "gaterunner/", "shared/", "configs/", "deploy/", "docs/", "scripts/", ".ci/"} {
		if strings.HasPrefix(s, top) {
			return true
		}
	}
	return false
}

// requirementStatuses are the statuses a row's status cell starts with.
var requirementStatuses = []string{"done", "partial", "planned", "replaced", "not carried over", "open", "not applicable"}

// The "In all" table of docs/requirements.md counts the rows by status:
// every row has one of the known statuses, and each count is the number
// of rows that have it.
func TestRequirementTotals(t *testing.T) {
	root := repoRoot(t)
	counts := map[string]int{}
	for _, r := range readRequirements(t, root) {
		known := false
		for _, s := range requirementStatuses {
			if strings.HasPrefix(r.status, s) {
				counts[s]++
				known = true
				break
			}
		}
		if !known {
			t.Errorf("docs/requirements.md:%d: %s has status %.40q, not one of %q", r.line, r.id, r.status, requirementStatuses)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "requirements.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| ([a-z ]+) \| ([0-9]+) \|$`)
	stated := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		if _, dup := stated[m[1]]; dup {
			t.Errorf("docs/requirements.md states the count of %q twice", m[1])
		}
		stated[m[1]], _ = strconv.Atoi(m[2])
	}
	all := 0
	for _, s := range requirementStatuses {
		all += counts[s]
		if stated[s] != counts[s] {
			t.Errorf("docs/requirements.md says %d rows are %q; %d are", stated[s], s, counts[s])
		}
	}
	if stated["all"] != all {
		t.Errorf("docs/requirements.md says %d rows in all; there are %d", stated["all"], all)
	}
}
