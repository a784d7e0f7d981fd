package integrity

import (
	"bytes"
	"fmt"
)

// StatusEntry is one entry of `git status --porcelain=v1 -z`.
type StatusEntry struct {
	// X and Y are the two status letters: index and work tree ('?' and '!'
	// for untracked and ignored, ' ' for unmodified).
	X, Y byte
	// Path is the entry's path relative to the work tree root, exactly as
	// git wrote it (no quoting under -z). An ignored directory reported as a
	// whole ends in '/'.
	Path string
	// Orig is the source path of a rename or copy (R or C in either column),
	// "" otherwise.
	Orig string
}

// Untracked reports whether the entry is an untracked file ("??").
func (e StatusEntry) Untracked() bool { return e.X == '?' }

// Ignored reports whether the entry is an ignored path ("!!").
func (e StatusEntry) Ignored() bool { return e.X == '!' }

// String renders the entry like git's porcelain format without -z.
func (e StatusEntry) String() string {
	if e.Orig != "" {
		return fmt.Sprintf("%c%c %s -> %s", e.X, e.Y, e.Orig, e.Path)
	}
	return fmt.Sprintf("%c%c %s", e.X, e.Y, e.Path)
}

func isStatusLetter(c byte) bool {
	switch c {
	case ' ', 'M', 'T', 'A', 'D', 'R', 'C', 'U', '?', '!':
		return true
	}
	return false
}

// ParseStatusZ parses the output of `git status --porcelain=v1 -z`:
// NUL-terminated entries `XY<space>path`, where a rename or copy (R or C in
// either column) is followed by one more NUL-terminated field holding the
// original path (WI-11, WI-13). No entry is ever dropped: status letters are the first two bytes, the path
// starts at byte 3, whatever the letters are (space included). Anything
// that does not fit the format is an error, never silently skipped, so a
// caller can fail safe.
func ParseStatusZ(out []byte) ([]StatusEntry, error) {
	var entries []StatusEntry
	for len(out) > 0 {
		end := bytes.IndexByte(out, 0)
		if end < 0 {
			return nil, fmt.Errorf("git status: entry %q is not NUL-terminated", truncate(string(out), 80))
		}
		field := out[:end]
		out = out[end+1:]
		if len(field) < 4 || field[2] != ' ' || !isStatusLetter(field[0]) || !isStatusLetter(field[1]) {
			return nil, fmt.Errorf("git status: malformed entry %q", truncate(string(field), 80))
		}
		e := StatusEntry{X: field[0], Y: field[1], Path: string(field[3:])}
		if e.X == 'R' || e.X == 'C' || e.Y == 'R' || e.Y == 'C' {
			end := bytes.IndexByte(out, 0)
			if end <= 0 {
				return nil, fmt.Errorf("git status: rename/copy entry %q lacks its original path", e.String())
			}
			e.Orig = string(out[:end])
			out = out[end+1:]
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// parseNulList splits NUL-terminated fields (`git ls-files -z`), dropping
// duplicates (an unmerged path is listed once per stage).
func parseNulList(out []byte) ([]string, error) {
	var list []string
	seen := make(map[string]bool)
	for len(out) > 0 {
		end := bytes.IndexByte(out, 0)
		if end < 0 {
			return nil, fmt.Errorf("git ls-files: entry %q is not NUL-terminated", truncate(string(out), 80))
		}
		p := string(out[:end])
		out = out[end+1:]
		if p == "" {
			return nil, fmt.Errorf("git ls-files: empty path")
		}
		if !seen[p] {
			seen[p] = true
			list = append(list, p)
		}
	}
	return list, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
