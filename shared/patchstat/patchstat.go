// Package patchstat reads what a git patch changes: which files, by how
// many lines, and whether any change is binary. It parses the output of
// `git diff --binary` (the patches agents produce) without running git,
// so a worker can summarize its patch for free and the coordinator can
// show or judge one it only has as bytes.
package patchstat

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// File is one file a patch changes. OldPath differs from Path for a
// rename or a copy; a deleted file has Path equal to OldPath.
type File struct {
	Path       string
	OldPath    string
	Insertions int
	Deletions  int
	Binary     bool
}

// Stat is what a whole patch changes.
type Stat struct {
	Files      []File
	Insertions int
	Deletions  int
}

// Parse reads a git patch. Input that is not a patch yields an empty
// Stat; a file whose name cannot be read from its header keeps the raw
// header text as its path, so nothing it touches goes unnamed.
func Parse(patch []byte) Stat {
	var st Stat
	var cur *File
	inHunk := false
	for len(patch) > 0 {
		var line []byte
		if i := bytes.IndexByte(patch, '\n'); i >= 0 {
			line, patch = patch[:i], patch[i+1:]
		} else {
			line, patch = patch, nil
		}
		s := string(line)
		switch {
		case strings.HasPrefix(s, "diff --git "):
			if cur != nil {
				st.add(*cur)
			}
			old, path := headerPaths(strings.TrimPrefix(s, "diff --git "))
			cur, inHunk = &File{Path: path, OldPath: old}, false
		case cur == nil:
		case strings.HasPrefix(s, "@@"):
			inHunk = true
		case inHunk && strings.HasPrefix(s, "+"):
			cur.Insertions++
		case inHunk && strings.HasPrefix(s, "-"):
			cur.Deletions++
		case inHunk && (s == "" || s[0] == ' ' || s[0] == '\\'):
		case strings.HasPrefix(s, "GIT binary patch"), strings.HasPrefix(s, "Binary files "):
			cur.Binary, inHunk = true, false
		case strings.HasPrefix(s, "--- "):
			inHunk = false
			if p, ok := sidePath(s[4:], "a/"); ok {
				cur.OldPath = p
			}
		case strings.HasPrefix(s, "+++ "):
			inHunk = false
			if p, ok := sidePath(s[4:], "b/"); ok {
				cur.Path = p
			}
		case strings.HasPrefix(s, "rename from "), strings.HasPrefix(s, "copy from "):
			cur.OldPath = unquote(s[strings.Index(s, " from ")+6:])
		case strings.HasPrefix(s, "rename to "), strings.HasPrefix(s, "copy to "):
			cur.Path = unquote(s[strings.Index(s, " to ")+4:])
		default:
			inHunk = false
		}
	}
	if cur != nil {
		st.add(*cur)
	}
	return st
}

func (st *Stat) add(f File) {
	if f.Path == "" {
		f.Path = f.OldPath
	}
	if f.OldPath == "" {
		f.OldPath = f.Path
	}
	st.Files = append(st.Files, f)
	st.Insertions += f.Insertions
	st.Deletions += f.Deletions
}

// headerPaths reads the two names of a "diff --git a/X b/Y" header. Git
// quotes a name holding unusual characters; an unquoted header of an
// unrenamed file is "a/P b/P", which is split at its middle, since P may
// itself contain " b/".
func headerPaths(rest string) (old, path string) {
	if strings.HasPrefix(rest, `"`) || strings.HasSuffix(rest, `"`) {
		if a, b, ok := quotedPair(rest); ok {
			return strings.TrimPrefix(a, "a/"), strings.TrimPrefix(b, "b/")
		}
		return rest, rest
	}
	if n := len(rest); n >= 5 && (n-5)%2 == 0 {
		p := rest[2 : 2+(n-5)/2]
		if rest[:2] == "a/" && rest[2+len(p):] == " b/"+p {
			return p, p
		}
	}
	if i := strings.LastIndex(rest, " b/"); i >= 0 && strings.HasPrefix(rest, "a/") {
		return rest[2:i], rest[i+3:]
	}
	return rest, rest
}

// quotedPair splits a header whose names may be C-quoted by git.
func quotedPair(rest string) (a, b string, ok bool) {
	first, tail, ok := token(rest)
	if !ok || !strings.HasPrefix(tail, " ") {
		return "", "", false
	}
	second, tail, ok := token(tail[1:])
	if !ok || tail != "" {
		return "", "", false
	}
	return first, second, true
}

// token reads one name, quoted or not, from the start of s.
func token(s string) (tok, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return s, "", s != ""
		}
		return s[:i], s[i:], true
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			u, err := strconv.Unquote(s[:i+1])
			return u, s[i+1:], err == nil
		}
	}
	return "", "", false
}

// sidePath reads the name on a "--- a/X" or "+++ b/X" line; /dev/null
// (an added or deleted file) names nothing.
func sidePath(s, prefix string) (string, bool) {
	s = strings.TrimSuffix(s, "\t")
	if s == "/dev/null" {
		return "", false
	}
	s = unquote(s)
	if !strings.HasPrefix(s, prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

// unquote undoes git's C-style quoting of a name, if it has any.
func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

// MaxPaths caps the names a Summary carries: a patch that touches more is
// summarized with PathsTruncated set.
const MaxPaths = 256

// Summary is the compact form of st carried in a PatchRef: counts, and the
// names touched (both sides of a rename), up to MaxPaths.
func (st Stat) Summary() *protocol.PatchStat {
	sum := &protocol.PatchStat{Files: len(st.Files), Insertions: st.Insertions, Deletions: st.Deletions}
	seen := map[string]bool{}
	for _, f := range st.Files {
		sum.Binary = sum.Binary || f.Binary
		for _, p := range []string{f.OldPath, f.Path} {
			if seen[p] {
				continue
			}
			seen[p] = true
			if len(sum.Paths) == MaxPaths {
				sum.PathsTruncated = true
				continue
			}
			sum.Paths = append(sum.Paths, p)
		}
	}
	return sum
}
