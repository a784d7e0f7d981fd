package integrity

import (
	"strings"

	"github.com/supervisorhq/supervisor/shared/pathglob"
)

// SkipCandidates are the directories whose untracked and ignored content is
// not examined (WI-01): dependency trees, virtual environments and build
// output, which are large and rebuilt by tools. A path is in one if it
// starts with the candidate or contains "/" + the candidate, at any depth.
// Tracked files in them are always checked (WI-02), and .git/ is never a
// candidate (WI-03).
//
// Accepted limitation (WI-04): a gate can create or change untracked files
// in a skipped directory without detection. Listing the directory in
// allowed_writes turns checking on for it (WI-05, see activeSkips); writes
// there that match no allowed pattern are then violations again.
var SkipCandidates = []string{
	"node_modules/", ".venv/", "venv/", "__pycache__/", "build/",
	"dist/", "vendor/", "target/", ".next/",
}

// protectedNames are the directories that hold internal state and that no
// allowed_writes pattern can open, at whatever depth (PP-01, PP-02).
var protectedNames = []string{".git", ".supervisor"}

// isProtected reports whether a path is, or lies below, a .git or
// .supervisor directory.
func isProtected(path string) bool {
	for _, c := range strings.Split(path, "/") {
		for _, n := range protectedNames {
			if c == n {
				return true
			}
		}
	}
	return false
}

// activeSkips returns the skip candidates that stay skipped under the
// allowed_writes patterns (WI-05). A candidate is checked after all if an
// allowed pattern (a) starts with it, or equals it without the trailing
// "/"; (b) glob-matches "<candidate>test", i.e. could match a file directly
// inside it; or (c) starts with "**/" and contains the candidate's name.
func activeSkips(allowed []string) []string {
	var skips []string
	for _, c := range SkipCandidates {
		name := strings.TrimSuffix(c, "/")
		overridden := false
		for _, p := range allowed {
			np := pathglob.Normalize(p)
			if strings.HasPrefix(np, c) || strings.TrimSuffix(np, "/") == name ||
				pathglob.Match(np, c+"test") ||
				(strings.HasPrefix(np, "**/") && strings.Contains(np, name)) {
				overridden = true
				break
			}
		}
		if !overridden {
			skips = append(skips, c)
		}
	}
	return skips
}

// skipped reports whether an untracked or ignored path lies in one of the
// skipped directories (WI-01). Protected paths are never skipped.
func skipped(path string, skips []string) bool {
	if isProtected(path) {
		return false
	}
	for _, c := range skips {
		if strings.HasPrefix(path, c) || strings.Contains(path, "/"+c) {
			return true
		}
	}
	return false
}

// allowList is the compiled allowed_writes.
type allowList []*pathglob.Pattern

func compileAllowed(patterns []string) allowList {
	l := make(allowList, 0, len(patterns))
	for _, p := range patterns {
		l = append(l, pathglob.Compile(p))
	}
	return l
}

// match reports whether path (a directory path may end in "/") matches an
// allowed pattern. Protected paths never match.
func (l allowList) match(path string) bool {
	if isProtected(path) {
		return false
	}
	for _, p := range l {
		if p.Match(path) {
			return true
		}
		if strings.HasSuffix(path, "/") && p.Match(strings.TrimSuffix(path, "/")) {
			return true
		}
	}
	return false
}
