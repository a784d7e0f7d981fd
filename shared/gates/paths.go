package gates

import (
	"fmt"
	"path"
	"strings"

	"github.com/supervisorhq/supervisor/shared/pathglob"
)

// Repository-relative paths (GC-08, GC-11, GC-14, PP-01…PP-04).
//
// working_dir, cache_inputs and allowed_writes name paths inside the
// workspace. Backslashes are normalized to '/' before anything is checked,
// so "..\..\x" and ".git\config" are caught like their '/' forms; absolute
// paths, drive letters and '..' components are rejected. allowed_writes
// can never cover .git/ or .supervisor/: a gate that could write the
// repository's metadata or Supervisor's own files could hide what it did.
// Any component equal to .git or .supervisor once glob characters are
// removed is rejected (so ".git/config" and "./.git/x" are caught, not
// only wildcards), and so is any wildcard pattern matching one of the
// probe paths below, and a lone "**".

// protectedProbes are paths a pattern must not match (PP-03).
var protectedProbes = []string{
	".git", ".git/HEAD", ".git/config", ".git/index", ".git/refs/heads/main", ".git/packed-refs",
	".git/objects/ab/cdef0123", ".git/objects/pack/pack-1.pack", ".git/hooks/pre-commit",
	".git/info/exclude", ".git/description", ".git/logs/HEAD", ".git/FETCH_HEAD", ".git/ORIG_HEAD",
	".git/COMMIT_EDITMSG", ".git/modules/sub/HEAD",
	".supervisor", ".supervisor/lock", ".supervisor/cache/test", ".supervisor/artifacts/gate.log",
	".supervisor/gates.yaml", ".supervisor/gates.toml",
}

// relPath checks and normalizes a repository-relative path or pattern. It
// returns the normalized form, or a problem description.
func relPath(s string) (string, string) {
	if strings.TrimSpace(s) == "" {
		return "", "is empty"
	}
	n := strings.ReplaceAll(s, `\`, "/")
	switch {
	case strings.HasPrefix(n, "/"):
		return "", "must be relative to the repository root, not absolute"
	case len(n) >= 2 && n[1] == ':' && isLetter(n[0]):
		return "", "must be relative to the repository root, not a drive path"
	}
	for _, elem := range strings.Split(n, "/") {
		if elem == ".." {
			return "", "must stay inside the repository: '..' is not allowed"
		}
	}
	n = pathglob.Normalize(n)
	return n, ""
}

func isLetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// cleanDir normalizes a working directory: "" is the root.
func cleanDir(n string) string {
	if c := path.Clean(n); c != "." {
		return c
	}
	return ""
}

// cleanPattern normalizes a pattern: a trailing '/' means everything under
// the directory.
func cleanPattern(n string) string {
	if n != "/" && strings.HasSuffix(n, "/") {
		n = strings.TrimRight(n, "/") + "/**"
	}
	return n
}

// protectedProblem returns why an allowed_writes pattern may not be used,
// or "" (PP-01…PP-04).
func protectedProblem(p string) string {
	if p == "**" || p == "**/**" {
		return "matches every path, including .git/ and .supervisor/"
	}
	for _, comp := range strings.Split(p, "/") {
		lit := strings.Map(func(r rune) rune {
			if strings.ContainsRune("*?[]!", r) {
				return -1
			}
			return r
		}, comp)
		if strings.EqualFold(lit, ".git") || strings.EqualFold(lit, ".supervisor") {
			return fmt.Sprintf("names %s, which can never be allow-listed", strings.ToLower(lit)+"/")
		}
	}
	// A first component that can match .git or .supervisor (.g?t, *, .*)
	// lets the pattern reach inside them.
	first, _, _ := strings.Cut(p, "/")
	if first != "**" {
		seg := pathglob.Compile(strings.ToLower(first))
		for _, dir := range []string{".git", ".supervisor"} {
			if seg.Match(dir) {
				return fmt.Sprintf("can match %s/; .git/ and .supervisor/ can never be allow-listed", dir)
			}
		}
	}
	pat := pathglob.Compile(p)
	for _, probe := range protectedProbes {
		if pat.Match(probe) {
			return fmt.Sprintf("matches %s; .git/ and .supervisor/ can never be allow-listed", probe)
		}
	}
	return ""
}

// sourceLike reports whether an allowed_writes pattern looks like it may
// match source files (GC-14's warning, matched by path segment rather
// than prefix, so *.pyc or library/** do not trigger it).
func sourceLike(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	switch first {
	case "src", "lib", "app", "pkg":
		return true
	}
	base := path.Base(p)
	for _, ext := range []string{".py", ".js", ".ts", ".go", ".rs"} {
		if strings.HasSuffix(base, "*"+ext) {
			return true
		}
	}
	return false
}
