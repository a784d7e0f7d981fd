package gates

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxFileSize is the largest gate file the loader reads (1 MiB).
const MaxFileSize = 1 << 20

// ParseFile parses a gate file. A name ending in .toml is TOML, anything
// else YAML. The file is only named in messages, and each gate's Source
// records origin, file and line. On failure the error is a
// *ValidationError listing every problem with its position; warnings
// (suspicious but valid) are returned either way.
//
// Shapes accepted:
//
//	gates:                # YAML, mapping form (name → definition)
//	  test: {command: [go, test, ./...]}
//	gates:                # YAML, list form (as in workflow files)
//	  - {name: test, command: [go, test, ./...]}
//	[[gate]]              # TOML, one table per gate
//	name = "test"
//	command = ["go", "test", "./..."]
//
// TOML also accepts the gates key of the YAML shapes. An empty file, or one
// without gates, defines no gates (LD-07). Dependencies are not checked:
// they may name gates of other sources (see Load and CheckDeps).
func ParseFile(filename string, data []byte, origin Origin) ([]Gate, []Problem, error) {
	c := NewChecker(filename)
	gs := c.GateFile(data, ParseOptions{Origin: origin}, strings.EqualFold(filepath.Ext(filename), ".toml"))
	return gs, c.Warnings, c.Err()
}

// GateFile parses a whole gate file's content into gates, recording problems.
// toml selects the TOML syntax.
func (c *Checker) GateFile(data []byte, o ParseOptions, toml bool) []Gate {
	if len(data) > MaxFileSize {
		c.Addf(nil, "file is %d bytes; a gate file may be at most %d bytes (1 MiB)", len(data), MaxFileSize)
		return nil
	}
	var root *yaml.Node
	known := []string{"gates"}
	if toml {
		root = c.decodeTOML(data)
		known = append(known, "gate")
	} else {
		root = c.Decode(data)
	}
	if root == nil {
		return nil // empty (LD-07) or already reported
	}
	f, ok := c.Fields(root, "gate file", known...)
	if !ok {
		return nil
	}
	var out []Gate
	if x, ok := f["gates"]; ok {
		out = append(out, c.GateList(x.Val, "gates", o)...)
	}
	if x, ok := f["gate"]; ok {
		if x.Val.Kind != yaml.SequenceNode {
			c.Addf(x.Val, "gate must be an array of tables ([[gate]]), got %s", Describe(x.Val))
		} else {
			out = append(out, c.GateList(x.Val, "gate", o)...)
		}
	}
	// Names must be unique across both keys too.
	seen := map[string]Source{}
	uniq := out[:0]
	for _, g := range out {
		if prev, dup := seen[g.Name]; dup {
			c.AddAt(g.Source, "duplicate gate name %q (first defined at line %d)", g.Name, prev.Line)
			continue
		}
		seen[g.Name] = g.Source
		uniq = append(uniq, g)
	}
	return uniq
}

// readFile reads a gate file: missing files are skipped (LD-05: ok false,
// no error); directories, oversized files and, with noSymlink, symbolic
// links are errors.
func readFile(path string, noSymlink bool) ([]byte, bool, error) {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		if noSymlink {
			return nil, false, fmt.Errorf("%s is a symbolic link; a project gate file must be a regular file", path)
		}
		if info, err = os.Stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, false, nil
			}
			return nil, false, err
		}
	}
	if !info.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// Options selects the gate sources Load reads. Sources are listed from the
// lowest precedence to the highest (LD-01); a gate of a
// later source replaces the whole gate of the same name (LD-04).
type Options struct {
	// BuiltinDir holds the built-in gate files (configs/gates): every
	// *.yaml, *.yml and *.toml in it, in name order. Two files of the
	// directory may not define the same gate. "" skips the source.
	BuiltinDir string
	// UserFile is the user's gate file, e.g. DefaultUserFile(). "" skips it.
	UserFile string
	// ProjectDir is the root of the project's worktree (not the current
	// directory, LD-02); its gates are .supervisor/gates.yaml or
	// .supervisor/gates.toml. "" skips the source.
	ProjectDir string
	// TrustProject loads the project's gates. Project gates run commands
	// the repository chose, so they are ignored unless the project is
	// trusted (LD-03); Result.IgnoredProject then names the files.
	TrustProject bool
	// Workflow and Task are gates defined by the workflow and by the task
	// (its prompt's front matter), already parsed.
	Workflow []Gate
	Task     []Gate
}

// Result is what Load found.
type Result struct {
	// Set holds the merged gates.
	Set *Set
	// Files lists the files read, in precedence order.
	Files []string
	// IgnoredProject lists project gate files that exist but were not read
	// because the project is not trusted; callers should warn about them.
	IgnoredProject []string
	// Warnings are suspicious but valid definitions.
	Warnings []Problem
}

// DefaultUserFile returns ~/.supervisor/gates.yaml, or "" if the home
// directory is unknown.
func DefaultUserFile() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".supervisor", "gates.yaml")
}

// ProjectFiles returns the paths of a project's gate files, in the order
// they are looked for.
func ProjectFiles(projectDir string) []string {
	return []string{
		filepath.Join(projectDir, ".supervisor", "gates.yaml"),
		filepath.Join(projectDir, ".supervisor", "gates.toml"),
	}
}

// Load reads the gate sources of o and merges them: built-in < user <
// project (only when trusted) < workflow < task, a later gate replacing
// the whole gate of the same name (LD-01, LD-04). Missing files are
// skipped (LD-05). Every problem of every file is collected into one
// *ValidationError; after merging, each gate's depends_on must name a gate
// of the result and no cycle may remain (DP-05, DP-06), reported at
// the entry or the gate that causes it.
func Load(o Options) (*Result, error) {
	res := &Result{}
	var problems []Problem
	var sets []*Set
	var all []Gate // every gate read, for positions of dependency problems
	addFile := func(path string, data []byte, origin Origin) []Gate {
		gs, warns, err := ParseFile(path, data, origin)
		res.Files = append(res.Files, path)
		res.Warnings = append(res.Warnings, warns...)
		var ve *ValidationError
		if errors.As(err, &ve) {
			problems = append(problems, ve.Problems...)
		}
		return gs
	}
	fileErr := func(path string, err error) {
		problems = append(problems, Problem{File: path, Message: err.Error()})
	}

	if o.BuiltinDir != "" {
		entries, err := os.ReadDir(o.BuiltinDir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			fileErr(o.BuiltinDir, err)
		}
		var names []string
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".toml":
				if !e.IsDir() {
					names = append(names, e.Name())
				}
			}
		}
		sort.Strings(names)
		builtin := &Set{}
		for _, name := range names {
			path := filepath.Join(o.BuiltinDir, name)
			data, ok, err := readFile(path, false)
			if err != nil {
				fileErr(path, err)
				continue
			}
			if !ok {
				continue
			}
			for _, g := range addFile(path, data, OriginBuiltin) {
				if prev, dup := builtin.Get(g.Name); dup {
					problems = append(problems, Problem{File: g.Source.File, Line: g.Source.Line, Column: g.Source.Column,
						Message: fmt.Sprintf("gate %q is also defined in %s; built-in gate files must not share names", g.Name, prev.Source)})
					continue
				}
				builtin.Add(g)
				all = append(all, g)
			}
		}
		sets = append(sets, builtin)
	}
	if o.UserFile != "" {
		data, ok, err := readFile(o.UserFile, false)
		switch {
		case err != nil:
			fileErr(o.UserFile, err)
		case ok:
			gs := addFile(o.UserFile, data, OriginUser)
			all = append(all, gs...)
			sets = append(sets, NewSet(gs...))
		}
	}
	if o.ProjectDir != "" {
		var found []string
		for _, path := range ProjectFiles(o.ProjectDir) {
			if _, err := os.Lstat(path); err == nil {
				found = append(found, path)
			}
		}
		switch {
		case !o.TrustProject:
			res.IgnoredProject = found
		case len(found) > 1:
			problems = append(problems, Problem{File: found[1],
				Message: fmt.Sprintf("both %s and %s exist; keep one", found[0], found[1])})
		case len(found) == 1:
			data, ok, err := readFile(found[0], true)
			switch {
			case err != nil:
				fileErr(found[0], err)
			case ok:
				gs := addFile(found[0], data, OriginProject)
				all = append(all, gs...)
				sets = append(sets, NewSet(gs...))
			}
		}
	}
	all = append(all, o.Workflow...)
	all = append(all, o.Task...)
	sets = append(sets, NewSet(o.Workflow...), NewSet(o.Task...))
	res.Set = Merge(sets...)

	// Dependencies of the gates in effect (the last definition of each name).
	var effective []Gate
	seen := map[string]bool{}
	for i := len(all) - 1; i >= 0; i-- {
		g := all[i]
		if cur, ok := res.Set.Get(g.Name); ok && !seen[g.Name] && cur.Source == g.Source {
			seen[g.Name] = true
			effective = append(effective, g)
		}
	}
	sort.Slice(effective, func(i, j int) bool { return effective[i].Name < effective[j].Name })
	c := NewChecker("")
	c.CheckDeps(effective, res.Set)
	problems = append(problems, c.Problems...)
	if len(problems) > 0 {
		sortProblems(problems)
		return res, &ValidationError{Problems: problems}
	}
	return res, nil
}
