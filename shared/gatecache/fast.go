package gatecache

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitindex"
)

// fallback: the tree cannot be computed in Go for this workspace (see
// fastTree); treeOf then computes it with git.
type fallback struct{ reason string }

func (f *fallback) Error() string { return f.reason }

func fallBack(format string, args ...any) error {
	return &fallback{reason: fmt.Sprintf(format, args...)}
}

// maxIndexSize caps the index file fastTree reads.
const maxIndexSize = 512 << 20

// fastTree computes the tree `git add -A` and `git write-tree` would give
// (PERF-13) without running either: it reads the index with gitindex,
// compares each entry's stat data with the work tree as git does (an
// entry whose stat data differs, or that is racily clean, is re-read), and
// hashes the changed and the untracked files as git hashes blobs. The
// untracked files come from `git ls-files -o --exclude-standard` (started
// by treeOf, read from untracked), the ids of the trees from
// gitindex.TreeID.
//
// Whatever could make git's result differ from that computation sends the
// key to the git path with a fallback error: an index that is missing,
// unreadable, split or sparse, or that has unmerged, assume-unchanged,
// skip-worktree or intent-to-add entries or submodules; content conversion
// (a .gitattributes file in any directory the tree's files are in,
// info/attributes, core.autocrlf or core.eol) or a configuration that
// changes how files enter the index (see configUnusual); a path git would
// refuse to add; a file that is neither regular nor a symbolic link where
// the index has one, or that cannot be read. Conditions that disable
// caching on the git path too (the untracked files' limits) disable it
// here with the same reason.
func fastTree(ctx context.Context, loc repoLocation, untracked <-chan untrackedList) (string, error) {
	if !walkSupported {
		return "", fallBack("the index's stat data is not compared on this platform")
	}
	format, err := gitindex.ParseFormat(loc.format)
	if err != nil {
		return "", fallBack("%v", err)
	}
	if reason := configUnusual(loc.configs); reason != "" {
		return "", fallBack("%s", reason)
	}
	if _, err := os.Lstat(loc.attributes); !isNotExist(err) {
		return "", fallBack("info/attributes: content conversion may apply")
	}
	ix, indexMtime, err := readIndex(loc.index, format)
	if err != nil {
		return "", err
	}
	for i := range ix.Entries {
		e := &ix.Entries[i]
		switch {
		case e.Stage != 0 || e.Flags != 0:
			return "", fallBack("the index has unmerged, assume-unchanged, skip-worktree or intent-to-add entries (%s)", e.Path)
		case e.Stat.Mode == gitindex.ModeGitlink:
			return "", fallBack("the index has submodules (%s)", e.Path)
		case e.Stat.Mode != gitindex.ModeFile && e.Stat.Mode != gitindex.ModeExecutable && e.Stat.Mode != gitindex.ModeSymlink:
			return "", fallBack("index entry %s has mode %o", e.Path, e.Stat.Mode)
		case path.Base(e.Path) == ".gitattributes":
			return "", fallBack("%s: content conversion may apply", e.Path)
		}
	}
	entries, err := walkIndex(ctx, loc.root, ix.Entries, indexMtime, format)
	if err != nil {
		return "", err
	}

	var list untrackedList
	select {
	case list = <-untracked:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if list.err != nil {
		return "", list.err
	}
	files, err := checkUntracked(ctx, loc.root, list.paths)
	if err != nil {
		return "", err
	}
	seen := map[string]bool{"": true} // directories checked for .gitattributes; the top by walkIndex
	for _, f := range files {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if !addable(f.path, false) {
			return "", fallBack("git may refuse to add %q", f.path)
		}
		if err := noAttributes(loc.root, f.path, seen); err != nil {
			return "", err
		}
		id, err := hashFile(filepath.Join(loc.root, filepath.FromSlash(f.path)), format)
		if err != nil {
			return "", fallBack("untracked file %s: %v", f.path, err)
		}
		entries = append(entries, gitindex.TreeEntry{Path: f.path, Mode: gitindex.GitMode(f.mode), ID: id})
	}
	id, err := gitindex.TreeID(format, entries)
	if err != nil {
		return "", fallBack("%v", err)
	}
	return hex.EncodeToString(id), nil
}

// readIndex reads and parses the index file; its modification time
// decides which entries are racily clean. Every failure is a fallback
// (the git path reads the tree of HEAD when there is no index).
func readIndex(file string, format gitindex.Format) (*gitindex.Index, time.Time, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, time.Time{}, fallBack("index: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, fallBack("index: %v", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxIndexSize {
		return nil, time.Time{}, fallBack("index: not a regular file of at most %d bytes", maxIndexSize)
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, time.Time{}, fallBack("index: %v", err)
	}
	ix, err := gitindex.Parse(data, format)
	if err != nil {
		return nil, time.Time{}, fallBack("index: %v", err)
	}
	return ix, fi.ModTime(), nil
}

// racy reports whether the index entry is racily clean: its mtime or
// ctime not older than the index file's, compared to the nanosecond
// (gitindex.Entry.Racy) or to the second. git uses one of the two
// comparisons, depending on how it was built; entries racy by either are
// re-read, so no entry git would re-read is trusted.
func racy(e *gitindex.Entry, indexMtime time.Time) bool {
	sec := uint32(indexMtime.Unix()) //nolint:gosec // git stores 32 bits
	return e.Racy(indexMtime) || e.Stat.MtimeSec >= sec || e.Stat.CtimeSec >= sec
}

// noAttributes returns a fallback if a .gitattributes file exists (of any
// type, ignored or not) in a directory above rel that seen does not list
// yet: its attributes could convert rel's content.
func noAttributes(root, rel string, seen map[string]bool) error {
	for dir := path.Dir(rel); ; dir = path.Dir(dir) {
		if dir == "." {
			dir = ""
		}
		if seen[dir] {
			return nil
		}
		seen[dir] = true
		p := filepath.Join(root, filepath.FromSlash(dir), ".gitattributes")
		if _, err := os.Lstat(p); !isNotExist(err) {
			return fallBack("%s: content conversion may apply", path.Join(dir, ".gitattributes"))
		}
		if dir == "" {
			return nil
		}
	}
}

// hashFile returns the blob id of the regular file at p (not following a
// symbolic link).
func hashFile(p string, format gitindex.Format) ([]byte, error) {
	f, err := openNoFollow(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return hashOpen(f, format)
}

// hashOpen returns the blob id of the open regular file f: "blob <size>\0"
// then its content, hashed with the repository's algorithm. A file whose
// size changes while it is read is an error.
func hashOpen(f *os.File, format gitindex.Format) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	size := fi.Size()
	h := format.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	n, err := io.Copy(h, io.LimitReader(f, size+1))
	if err != nil {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("changed while read (%d bytes, then %d)", size, n)
	}
	return h.Sum(nil), nil
}

// addable reports whether git would add the slash-separated path p
// (read-cache.c's verify_path with core.protectNTFS, its default): no
// component is empty, "." or "..", holds a backslash, or is ".git" in any
// case, also followed by dots or spaces or by a colon and more, and none
// starts with the short name "git~"; a symbolic link is not named like
// .gitmodules or a short name. It errs on the side of false: a false sends
// the key to the git path, which decides.
func addable(p string, symlink bool) bool {
	for c := range strings.SplitSeq(p, "/") {
		if c == "" || c == "." || c == ".." || strings.ContainsRune(c, '\\') {
			return false
		}
		l := strings.ToLower(c)
		if i := strings.IndexByte(l, ':'); i >= 0 {
			l = l[:i]
		}
		if rest, ok := strings.CutPrefix(l, ".git"); ok && strings.Trim(rest, ". ") == "" {
			return false
		}
		if strings.HasPrefix(l, "git~") || symlink && (strings.HasPrefix(l, ".gitmodules") || strings.Contains(l, "~")) {
			return false
		}
	}
	return true
}
