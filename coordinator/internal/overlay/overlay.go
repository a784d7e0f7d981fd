// Package overlay finds layered configuration files — roles and workflow
// templates — in the built-in, user and project directories, and resolves
// a file's chain of parents (extends) with cycle detection. The layers
// mirror the gate sources: built-in (configs/X), user (~/.supervisor/X),
// project (.supervisor/X in the repository, read only when trusted).
// Lookup is project, then user, then built-in: the first found wins
// (ROLE-08). A file that extends its own name extends the next lower layer's
// file of that name, which is how a project overlays a built-in role.
package overlay

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/supervisorhq/supervisor/shared/gates"
)

// MaxFileSize is the largest config file read (1 MiB).
const MaxFileSize = 1 << 20

// Layer is where a file comes from; a higher layer wins.
type Layer int

// The layers, lowest first.
const (
	Builtin Layer = iota
	User
	Project
)

// String names the layer.
func (l Layer) String() string {
	switch l {
	case Builtin:
		return "built-in"
	case User:
		return "user"
	case Project:
		return "project"
	}
	return fmt.Sprintf("layer %d", int(l))
}

// File is one configuration file of a layer; Name is its base name
// without the extension.
type File struct {
	Layer Layer
	Name  string
	Path  string
	Data  []byte
}

var nameRE = regexp.MustCompile(`^[a-z0-9_][a-z0-9_-]{0,63}$`)

// NameRule describes a valid file name for messages.
const NameRule = "lowercase letters, digits, '-' and '_', at most 64 characters"

// ValidName reports whether s may name a role or template.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ReadDir reads every *.yaml and *.yml file of dir as files of layer, in
// name order. A missing directory gives no files. With noSymlink (project
// files, which the repository chose), symbolic links are refused.
func ReadDir(dir string, layer Layer, noSymlink bool) ([]File, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var out []File
	var errs []error
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := readFile(path, noSymlink)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, File{Layer: layer, Name: strings.TrimSuffix(e.Name(), filepath.Ext(e.Name())), Path: path, Data: data})
	}
	return out, errors.Join(errs...)
}

// ReadLayers reads the built-in and the user directory ("" skips one);
// problems reading them are returned, not fatal, so the caller can report
// them with the files' own.
func ReadLayers(builtinDir, userDir string) ([]File, []gates.Problem) {
	var files []File
	var problems []gates.Problem
	for _, src := range []struct {
		dir   string
		layer Layer
	}{{builtinDir, Builtin}, {userDir, User}} {
		fs, err := ReadDir(src.dir, src.layer, false)
		if err != nil {
			problems = append(problems, gates.Problem{File: src.dir, Message: err.Error()})
		}
		files = append(files, fs...)
	}
	return files, problems
}

func readFile(path string, noSymlink bool) ([]byte, error) {
	info, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if info.Mode()&fs.ModeSymlink != 0 && noSymlink {
		return nil, fmt.Errorf("%s is a symbolic link; a project file must be a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s is over %d bytes (1 MiB)", path, MaxFileSize)
	}
	return data, nil
}

// Index holds the files of every layer by name.
type Index struct {
	layers [Project + 1]map[string]File
}

// NewIndex indexes files. Invalid names and two files of one layer with
// the same name (x.yaml and x.yml) are problems.
func NewIndex(files []File) (*Index, []gates.Problem) {
	ix := &Index{}
	var problems []gates.Problem
	for _, f := range files {
		if f.Layer < Builtin || f.Layer > Project {
			problems = append(problems, gates.Problem{File: f.Path, Message: fmt.Sprintf("unknown layer %d", f.Layer)})
			continue
		}
		if !ValidName(f.Name) {
			problems = append(problems, gates.Problem{File: f.Path, Message: fmt.Sprintf("invalid name %q: use %s", f.Name, NameRule)})
			continue
		}
		m := ix.layers[f.Layer]
		if m == nil {
			m = map[string]File{}
			ix.layers[f.Layer] = m
		}
		if prev, dup := m[f.Name]; dup {
			problems = append(problems, gates.Problem{File: f.Path, Message: fmt.Sprintf("%s also defines %q; keep one", prev.Path, f.Name)})
			continue
		}
		m[f.Name] = f
	}
	return ix, problems
}

// Find returns the file called name in the highest layer at or below top.
func (ix *Index) Find(name string, top Layer) (File, bool) {
	for l := top; l >= Builtin; l-- {
		if f, ok := ix.layers[l][name]; ok {
			return f, true
		}
	}
	return File{}, false
}

// Names returns every name of every layer, sorted, once each.
func (ix *Index) Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ix.layers {
		for n := range m {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Parent is what a file extends: the parent's name ("" for none) and the
// position of the extends value, for messages.
type Parent struct {
	Name         string
	Line, Column int
}

// Parent finds the file that f's extends names: f's own name means the
// next lower layer's file of that name, any other name the highest layer's.
func (ix *Index) Parent(f File, name string) (File, bool) {
	if name == f.Name {
		if f.Layer == Builtin {
			return File{}, false
		}
		return ix.Find(name, f.Layer-1)
	}
	return ix.Find(name, Project)
}

// Chain returns the chain of files from name's file (the highest layer's)
// up through its parents: the file first, its root ancestor last. parent
// says what a file extends. An unknown parent is a problem at the extends
// value; a cycle is a problem naming every file of it, at the extends
// value that closes it. what names the kind of file ("role", "template").
// When parent cannot tell (the file did not parse, its problems reported
// already), Chain returns nil and no problem.
func (ix *Index) Chain(what, name string, parent func(File) (Parent, bool)) ([]File, *gates.Problem) {
	f, ok := ix.Find(name, Project)
	if !ok {
		return nil, &gates.Problem{Message: fmt.Sprintf("unknown %s %q (known: %s)", what, name, strings.Join(ix.Names(), ", "))}
	}
	type key struct {
		l Layer
		n string
	}
	seen := map[key]int{}
	var chain []File
	for {
		seen[key{f.Layer, f.Name}] = len(chain)
		chain = append(chain, f)
		p, ok := parent(f)
		if !ok {
			return nil, nil
		}
		if p.Name == "" {
			return chain, nil
		}
		next, found := ix.Parent(f, p.Name)
		if !found {
			msg := fmt.Sprintf("%s %q extends unknown %s %q (known: %s)", what, f.Name, what, p.Name, strings.Join(ix.Names(), ", "))
			if p.Name == f.Name {
				msg = fmt.Sprintf("%s %q extends %q, its own name, but no lower layer than %s defines it", what, f.Name, p.Name, f.Layer)
			}
			return nil, &gates.Problem{File: f.Path, Line: p.Line, Column: p.Column, Message: msg}
		}
		if i, loop := seen[key{next.Layer, next.Name}]; loop {
			var names []string
			for _, c := range chain[i:] {
				names = append(names, fmt.Sprintf("%s (%s)", c.Name, c.Layer))
			}
			names = append(names, fmt.Sprintf("%s (%s)", next.Name, next.Layer))
			return nil, &gates.Problem{File: f.Path, Line: p.Line, Column: p.Column,
				Message: fmt.Sprintf("%s extends cycle: %s", what, strings.Join(names, " -> "))}
		}
		f = next
	}
}

// MergeMaps merges child over parent deeply (ROLE-07): maps merge, lists
// append, anything else is replaced. Neither argument is modified.
func MergeMaps(parent, child map[string]any) map[string]any {
	out := make(map[string]any, len(parent)+len(child))
	maps.Copy(out, parent)
	for k, cv := range child {
		pv, ok := out[k]
		if !ok {
			out[k] = cv
			continue
		}
		pm, pIsMap := pv.(map[string]any)
		cm, cIsMap := cv.(map[string]any)
		pl, pIsList := pv.([]any)
		cl, cIsList := cv.([]any)
		switch {
		case pIsMap && cIsMap:
			out[k] = MergeMaps(pm, cm)
		case pIsList && cIsList:
			out[k] = append(append([]any(nil), pl...), cl...)
		default:
			out[k] = cv
		}
	}
	return out
}
