// Package reporoots decides which repositories the coordinator may write
// into: a submission's repo_path is where the coordinator delivers the
// workflow's branch and carries out merges, so it must lie under one of
// the directories the coordinator's configuration allows (repo_roots).
// With none configured, the coordinator writes into no repository.
package reporoots

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotAllowed marks a path outside every root.
var ErrNotAllowed = errors.New("not under any of the coordinator's repo roots")

// Roots are the directories the coordinator may write repositories under.
// The zero value allows none.
type Roots struct {
	// dirs are the roots as configured, absolute and cleaned; real the
	// same with symbolic links resolved (equal when one does not exist).
	dirs, real []string
}

// New checks and returns roots: each must be an absolute path. A root
// that does not exist is kept (nothing under it exists either, yet).
func New(dirs []string) (Roots, error) {
	var r Roots
	for _, d := range dirs {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return Roots{}, fmt.Errorf("repo root %q is not an absolute path", d)
		}
		clean := filepath.Clean(d)
		r.dirs = append(r.dirs, clean)
		r.real = append(r.real, resolve(clean))
	}
	return r, nil
}

// Dirs are the roots, as configured.
func (r Roots) Dirs() []string { return append([]string(nil), r.dirs...) }

// String lists the roots for messages ("none" when there are none).
func (r Roots) String() string {
	if len(r.dirs) == 0 {
		return "none"
	}
	return strings.Join(r.dirs, ", ")
}

// Check says whether the coordinator may write into the repository at
// path: it must be absolute and lie, as written and with its symbolic
// links resolved, under a root (or be one). The error wraps ErrNotAllowed
// when the path is outside every root.
func (r Roots) Check(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("repo_path %q is not an absolute path", path)
	}
	clean := filepath.Clean(path)
	if !within(r.dirs, clean) {
		return fmt.Errorf("repo_path %s: %w (%s; see --repo-roots)", path, ErrNotAllowed, r)
	}
	if real := resolve(clean); !within(r.real, real) {
		return fmt.Errorf("repo_path %s resolves to %s: %w (%s; see --repo-roots)", path, real, ErrNotAllowed, r)
	}
	return nil
}

// within reports whether path is one of dirs or lies below one.
func within(dirs []string, path string) bool {
	for _, d := range dirs {
		rel, err := filepath.Rel(d, path)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// resolve is path with the symbolic links of its longest existing prefix
// resolved, the rest appended as written.
func resolve(path string) string {
	rest := ""
	for p := path; ; {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest)
		} else if !errors.Is(err, os.ErrNotExist) {
			return path
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
