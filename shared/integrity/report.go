package integrity

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Kind classifies a violation.
type Kind string

// Violation kinds.
const (
	// KindModified: a recorded path changed (content, size, mode, type, link
	// target; without a content hash: size or mtime).
	KindModified Kind = "modified"
	// KindNew: a path that did not exist at capture, untracked and not
	// ignored (or tracked by now).
	KindNew Kind = "new"
	// KindDeleted: a recorded path no longer exists (WI-19).
	KindDeleted Kind = "deleted"
	// KindGit: the .git state changed or is unsafe (GI-04, GI-06); Path
	// names the entry, as if under .git/.
	KindGit Kind = "git"
	// KindUnknown: the work tree could not be examined; the check fails
	// safe (WI-15).
	KindUnknown Kind = "unknown"
)

// Placeholder paths of KindUnknown violations.
const (
	// UnknownGitStatusFailed: git status failed after the gate (WI-15).
	UnknownGitStatusFailed = "<unknown - git status failed>"
	// UnknownNotRescanned: git was not run after the gate because the
	// configuration it would read changed (see Baseline.Check).
	UnknownNotRescanned = "<unknown - .git changed, new files not scanned>"
	// UnknownGitState: the .git state could not be read after the gate.
	UnknownGitState = "<unknown - .git state unreadable>"
	// UnknownProtectedWalk: .supervisor/ has too many entries to examine.
	UnknownProtectedWalk = "<unknown - .supervisor/ too large to examine>"
)

// Violation is one unexpected change.
type Violation struct {
	// Path is relative to the work tree root, with "/" separators; for
	// KindGit a path under .git/ (".git" for the .git entry itself), for
	// KindUnknown one of the Unknown* placeholders.
	Path string `json:"path"`
	Kind Kind   `json:"kind"`
	// Detail explains an unusual case ("resolves outside the workspace",
	// "content changed with size and mtime unchanged", "unsafe: …"); for
	// KindGit it is "changed", "created", "removed" or "unsafe: …".
	Detail string `json:"detail,omitempty"`
}

// String renders the violation for people: "modified src/a.go",
// "deleted x", ".git/config changed", "<unknown - git status failed> (…)".
func (v Violation) String() string {
	p := displayPath(v.Path)
	switch v.Kind {
	case KindGit:
		d := v.Detail
		if d == "" {
			d = "changed"
		}
		return p + " " + d
	case KindUnknown:
		if v.Detail != "" {
			return p + " (" + v.Detail + ")"
		}
		return p
	}
	s := string(v.Kind) + " " + p
	if v.Detail != "" {
		s += " (" + v.Detail + ")"
	}
	return s
}

// displayPath quotes a path that holds control characters or invalid UTF-8
// so a summary stays one line and unambiguous.
func displayPath(p string) string {
	if !utf8.ValidString(p) || strings.IndexFunc(p, func(r rune) bool { return unicode.IsControl(r) }) >= 0 {
		return strconv.Quote(p)
	}
	return p
}

// Report is the outcome of Baseline.Check.
type Report struct {
	// Violations, ordered by kind (modified, new, deleted, git, unknown),
	// then path.
	Violations []Violation `json:"violations,omitempty"`
	// Ignored lists ignored paths (as git reports them: a whole ignored
	// directory ends in "/") that appeared, changed or disappeared during
	// the gate and match no allowed_writes pattern. They are reported, never
	// violations: ignored files are outside what the gate's patch and the
	// integrity check cover (tracked and untracked-not-ignored files), and
	// a whole ignored directory is never treated as new files. The
	// comparison is by type, size and mtime; content inside a directory
	// that was already ignored at capture is not examined.
	Ignored []string `json:"ignored,omitempty"`
	// skippedGit: the check did not need git status (see Check, step 3).
	skippedGit bool
}

// Clean reports whether there is no violation.
func (r *Report) Clean() bool { return r == nil || len(r.Violations) == 0 }

// Strings renders each violation (Violation.String), e.g. for
// protocol.GateResult.Violations.
func (r *Report) Strings() []string {
	if r == nil {
		return nil
	}
	out := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		out[i] = v.String()
	}
	return out
}

// maxSummary caps the violations a summary spells out.
const maxSummary = 20

// Summary is one line naming the offending paths, e.g.
// "integrity violation: modified src/a.go; new x.txt; .git/config changed",
// or "integrity: clean".
func (r *Report) Summary() string {
	var b strings.Builder
	if r.Clean() {
		b.WriteString("integrity: clean")
	} else {
		b.WriteString("integrity violation: ")
		for i, v := range r.Violations {
			if i == maxSummary {
				fmt.Fprintf(&b, "; … and %d more", len(r.Violations)-maxSummary)
				break
			}
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(v.String())
		}
	}
	if r != nil && len(r.Ignored) > 0 {
		names := make([]string, 0, min(len(r.Ignored), maxSummary))
		for i, p := range r.Ignored {
			if i == maxSummary {
				names = append(names, fmt.Sprintf("… and %d more", len(r.Ignored)-maxSummary))
				break
			}
			names = append(names, displayPath(p))
		}
		b.WriteString(" [ignored paths written, not violations: " + strings.Join(names, ", ") + "]")
	}
	return b.String()
}

var kindOrder = map[Kind]int{KindModified: 0, KindNew: 1, KindDeleted: 2, KindGit: 3, KindUnknown: 4}

func (r *Report) sort() {
	sort.Slice(r.Violations, func(i, j int) bool {
		a, b := r.Violations[i], r.Violations[j]
		if kindOrder[a.Kind] != kindOrder[b.Kind] {
			return kindOrder[a.Kind] < kindOrder[b.Kind]
		}
		return a.Path < b.Path
	})
	sort.Strings(r.Ignored)
}
