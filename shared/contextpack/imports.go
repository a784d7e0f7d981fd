package contextpack

import (
	"go/parser"
	"go/token"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/mod/modfile"
)

// repoIndex is what import resolution knows of a worktree: its tracked
// files and its Go modules.
type repoIndex struct {
	files   map[string]bool
	byDir   map[string][]string // directory ("" = root) → tracked files directly in it
	modules []goModule          // longest path first
}

type goModule struct {
	path string // module path
	dir  string // directory of go.mod, "" = root
}

func newRepoIndex(files []string, read func(string) ([]byte, bool)) *repoIndex {
	ix := &repoIndex{files: map[string]bool{}, byDir: map[string][]string{}}
	for _, f := range files {
		ix.files[f] = true
		d := path.Dir(f)
		if d == "." {
			d = ""
		}
		ix.byDir[d] = append(ix.byDir[d], f)
		if path.Base(f) == "go.mod" {
			if data, ok := read(f); ok {
				if mp := modfile.ModulePath(data); mp != "" {
					ix.modules = append(ix.modules, goModule{path: mp, dir: dirOf(f)})
				}
			}
		}
	}
	sort.Slice(ix.modules, func(i, j int) bool { return len(ix.modules[i].path) > len(ix.modules[j].path) })
	return ix
}

func dirOf(f string) string {
	d := path.Dir(f)
	if d == "." {
		return ""
	}
	return d
}

// imports returns the tracked files that file imports, as far as they
// can be resolved in the worktree (see docs/context-packing.md):
//
//   - Go: every import path inside a module of the worktree (a go.mod
//     among the tracked files) names a package directory; its non-test .go
//     files are the imports.
//   - Python: relative imports (from . import x, from ..pkg import y) from
//     the file's directory, and absolute ones (import a.b, from a.b import
//     c) from the repository root, as a/b.py or a/b/__init__.py.
//   - JavaScript and TypeScript: relative specifiers (./x, ../y) of import,
//     export … from, require() and import(), with the usual extensions and
//     index files; ./x.js also finds x.ts or x.tsx.
//
// Anything else (standard library, third-party packages, path aliases) is
// not resolved.
func (ix *repoIndex) imports(file string, content []byte) []string {
	switch ext := path.Ext(file); ext {
	case ".go":
		return ix.goImports(file, content)
	case ".py":
		return ix.pyImports(file, content)
	case ".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts":
		return ix.jsImports(file, content)
	}
	return nil
}

func (ix *repoIndex) goImports(file string, content []byte) []string {
	f, err := parser.ParseFile(token.NewFileSet(), file, content, parser.ImportsOnly)
	if err != nil || f == nil {
		return nil
	}
	var out []string
	for _, spec := range f.Imports {
		ip, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			continue
		}
		for _, m := range ix.modules {
			if ip != m.path && !strings.HasPrefix(ip, m.path+"/") {
				continue
			}
			dir := path.Join(m.dir, strings.TrimPrefix(strings.TrimPrefix(ip, m.path), "/"))
			for _, g := range ix.byDir[dir] {
				if strings.HasSuffix(g, ".go") && !strings.HasSuffix(g, "_test.go") {
					out = append(out, g)
				}
			}
			break
		}
	}
	return out
}

var (
	pyFromRE   = regexp.MustCompile(`(?m)^[ \t]*from[ \t]+(\.*)([A-Za-z_][\w.]*)?[ \t]+import[ \t]+([^#\n]+)`)
	pyImportRE = regexp.MustCompile(`(?m)^[ \t]*import[ \t]+([A-Za-z_][\w., \t]*)`)
)

func (ix *repoIndex) pyImports(file string, content []byte) []string {
	var out []string
	try := func(base string) bool {
		for _, c := range []string{base + ".py", path.Join(base, "__init__.py")} {
			if ix.files[c] {
				out = append(out, c)
				return true
			}
		}
		return false
	}
	for _, m := range pyFromRE.FindAllStringSubmatch(string(content), -1) {
		dots, mod, names := m[1], m[2], m[3]
		base := ""
		if dots != "" {
			base = dirOf(file)
			for i := 1; i < len(dots); i++ {
				base = dirOf(base)
			}
		}
		modPath := path.Join(base, strings.ReplaceAll(mod, ".", "/"))
		if mod != "" {
			try(modPath)
		}
		// from pkg import a, b: a and b may be modules of pkg.
		for _, n := range strings.Split(strings.Trim(names, "() \t\r"), ",") {
			n = strings.TrimSpace(strings.SplitN(strings.TrimSpace(n), " ", 2)[0])
			if n != "" && n != "*" {
				try(path.Join(modPath, n))
			}
		}
	}
	for _, m := range pyImportRE.FindAllStringSubmatch(string(content), -1) {
		for _, n := range strings.Split(m[1], ",") {
			n = strings.TrimSpace(strings.SplitN(strings.TrimSpace(n), " ", 2)[0])
			if n != "" {
				try(strings.ReplaceAll(n, ".", "/"))
			}
		}
	}
	return out
}

var jsSpecRE = regexp.MustCompile(`(?:\bfrom|\bimport|\brequire\s*\(|\bimport\s*\()\s*['"](\.{1,2}/[^'"\n]*)['"]`)

var jsExtensions = []string{"", ".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".json"}

func (ix *repoIndex) jsImports(file string, content []byte) []string {
	var out []string
	for _, m := range jsSpecRE.FindAllStringSubmatch(string(content), -1) {
		base := path.Join(dirOf(file), m[1])
		if base == ".." || strings.HasPrefix(base, "../") {
			continue
		}
		found := false
		for _, ext := range jsExtensions {
			if ix.files[base+ext] {
				out = append(out, base+ext)
				found = true
				break
			}
		}
		// TypeScript sources import their compiled names: ./x.js is x.ts.
		for js, ts := range map[string][]string{".js": {".ts", ".tsx"}, ".mjs": {".mts"}, ".cjs": {".cts"}} {
			stem, ok := strings.CutSuffix(base, js)
			for _, ext := range ts {
				if !found && ok && ix.files[stem+ext] {
					out = append(out, stem+ext)
					found = true
				}
			}
		}
		if found {
			continue
		}
		for _, ext := range jsExtensions[1:] {
			if c := path.Join(base, "index"+ext); ix.files[c] {
				out = append(out, c)
				break
			}
		}
	}
	return out
}
