package protocol

import (
	"fmt"
	"strings"
)

// CheckBranchName reports whether name is a valid git branch name, by the
// rules of git check-ref-format applied to refs/heads/<name>, without
// running git: no empty component and no component starting with "." or
// ending in ".lock"; no "..", "@{", "//" or backslash; no control
// characters, space, "~", "^", ":", "?", "*" or "["; not starting or
// ending with "/", not ending with "."; and, as git branch demands, not
// "HEAD", not "@" and not starting with "-". The error says which rule
// name breaks.
func CheckBranchName(name string) error {
	bad := func(why string) error { return fmt.Errorf("invalid branch name %q: %s", name, why) }
	switch {
	case name == "":
		return fmt.Errorf("invalid branch name: empty")
	case name == "HEAD" || name == "@":
		return bad("reserved by git")
	case strings.HasPrefix(name, "-"):
		return bad(`starts with "-"`)
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return bad(`starts or ends with "/"`)
	case strings.HasSuffix(name, "."):
		return bad(`ends with "."`)
	case strings.Contains(name, ".."):
		return bad(`contains ".."`)
	case strings.Contains(name, "@{"):
		return bad(`contains "@{"`)
	case strings.Contains(name, "//"):
		return bad(`contains "//"`)
	}
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f:
			return bad("contains a control character")
		case strings.ContainsRune(" ~^:?*[\\", r):
			return bad(fmt.Sprintf("contains %q", r))
		}
	}
	for _, c := range strings.Split(name, "/") {
		switch {
		case strings.HasPrefix(c, "."):
			return bad(fmt.Sprintf("component %q starts with \".\"", c))
		case strings.HasSuffix(c, ".lock"):
			return bad(fmt.Sprintf("component %q ends with \".lock\"", c))
		}
	}
	return nil
}
