package roles

import (
	"os"
	"path/filepath"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/shared/gates"
)

// Options selects the role directories Load reads.
type Options struct {
	// BuiltinDir is the built-in roles' directory (configs/roles); "" skips it.
	BuiltinDir string
	// UserDir is the user's roles, e.g. DefaultUserDir(); "" skips it.
	UserDir string
	// Project are the project's role files (.supervisor/roles/*.yaml at the
	// workflow's base commit). The caller passes them only when the project
	// is trusted, as it does project gates.
	Project []overlay.File
}

// DefaultUserDir returns ~/.supervisor/roles, or "" if the home directory
// is unknown.
func DefaultUserDir() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".supervisor", "roles")
}

// Catalogue is every role of the loaded layers, resolved and validated.
type Catalogue struct {
	roles map[string]*Role
	names []string
}

// Get returns the role called name.
func (c *Catalogue) Get(name string) (*Role, bool) {
	if c == nil {
		return nil, false
	}
	r, ok := c.roles[name]
	return r, ok
}

// Names returns the roles' names, sorted.
func (c *Catalogue) Names() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.names...)
}

// Load reads the role directories and resolves every role: its file is the
// highest layer's of its name (project, user, built-in: ROLE-08), its
// extends chain is followed with cycles rejected and named (ROLE-09), the
// chain is merged (ROLE-07) and the result validated (ROLE-04). Every
// problem of every file comes back in one *gates.ValidationError, each at
// its file:line.
func Load(o Options) (*Catalogue, error) {
	files, problems := overlay.ReadLayers(o.BuiltinDir, o.UserDir)
	return FromFiles(append(files, o.Project...), problems)
}

// FromFiles resolves roles from files already read (Load's second half);
// problems found while reading are reported with the rest.
func FromFiles(files []overlay.File, problems []gates.Problem) (*Catalogue, error) {
	ix, ps := overlay.NewIndex(files)
	problems = append(problems, ps...)
	type key struct {
		l overlay.Layer
		n string
	}
	defs := map[key]*def{}
	bad := map[key]bool{}
	for _, f := range files {
		k := key{f.Layer, f.Name}
		if _, done := defs[k]; done || bad[k] {
			continue
		}
		d, ps := parseFile(f)
		problems = append(problems, ps...)
		if d == nil || len(ps) > 0 {
			bad[k] = true
			continue
		}
		defs[k] = d
	}
	c := &Catalogue{roles: map[string]*Role{}}
	for _, name := range ix.Names() {
		chain, p := ix.Chain("role", name, func(f overlay.File) (overlay.Parent, bool) {
			d, ok := defs[key{f.Layer, f.Name}]
			if !ok {
				return overlay.Parent{}, false
			}
			return d.extends, true
		})
		if p != nil {
			problems = appendOnce(problems, *p)
		}
		if chain == nil {
			continue
		}
		ds := make([]*def, len(chain))
		for i, f := range chain {
			ds[i] = defs[key{f.Layer, f.Name}]
		}
		r := merge(name, ds)
		if ps := r.validate(); len(ps) > 0 {
			problems = append(problems, ps...)
			continue
		}
		c.roles[name] = r
		c.names = append(c.names, name)
	}
	if len(problems) > 0 {
		return c, &gates.ValidationError{Problems: problems}
	}
	return c, nil
}

// appendOnce adds p unless an equal problem is there (a cycle is found
// from each of its roles).
func appendOnce(ps []gates.Problem, p gates.Problem) []gates.Problem {
	for _, q := range ps {
		if q == p {
			return ps
		}
	}
	return append(ps, p)
}
