package integrity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitindex"
)

// errSlowPath: the fast capture does not apply to this work tree (a path
// git does not track, an index it cannot read); Capture asks git status.
type errSlowPath struct {
	reason string
	index  bool // the index itself is the reason
}

func (e *errSlowPath) Error() string { return e.reason }

func slow(format string, args ...any) error {
	return &errSlowPath{reason: fmt.Sprintf(format, args...)}
}

// maxIndexSize caps the index file captureFast reads.
const maxIndexSize = 512 << 20

// fastTree is what captureFast found.
type fastTree struct {
	tracked int
	files   map[string]fileState
	dirs    map[string]fileState
}

// captureFast records the work tree without running git, when the work
// tree holds nothing but tracked paths (and .supervisor/): it reads the
// index, walks every directory (without following symbolic links), and
// records each tracked path's full stat data. A tracked regular file whose
// stat data equals what the index recorded, and that is not racily clean
// (its mtime or ctime not before the index file's), has the content the
// index names: its git object id is its hash, and it is not read. Every
// other tracked file is hashed as Capture hashes (PERF-11).
//
// It returns an errSlowPath when any path is not tracked (untracked or
// ignored files, a nested repository, a symbolic link where the index has
// a directory, …), when the index cannot be read or uses a split or sparse
// index, or when content conversion could make the index's ids differ from
// the files' bytes (.gitattributes, info/attributes, core.autocrlf or
// core.eol): git status then classifies the paths, as it always did.
func captureFast(ctx context.Context, b *Baseline, s *scanner) (*fastTree, error) {
	ix, indexMtime, format, err := readIndex(b.layout.gitDir)
	if err != nil {
		return nil, err
	}
	if convertible(b.layout) {
		return nil, slow("content conversion may apply (core.autocrlf, core.eol or info/attributes)")
	}
	type entry struct {
		e       *gitindex.Entry
		trusted bool
	}
	tracked := make(map[string]entry, len(ix.Entries))
	for i := range ix.Entries {
		e := &ix.Entries[i]
		if prev, dup := tracked[e.Path]; dup {
			prev.trusted = false // unmerged: several stages
			tracked[e.Path] = prev
			continue
		}
		if e.Path == ".gitattributes" || strings.HasSuffix(e.Path, "/.gitattributes") {
			return nil, slow(".gitattributes: content conversion may apply")
		}
		tracked[e.Path] = entry{e: e, trusted: e.Stage == 0 && e.Flags == 0 && (e.Stat.Mode == gitindex.ModeFile || e.Stat.Mode == gitindex.ModeExecutable)}
	}

	// Walk: every name must be a tracked path or a directory on the way
	// to one (or an empty directory); .git and .supervisor at the top are
	// recorded elsewhere.
	ft := &fastTree{tracked: len(tracked), files: make(map[string]fileState, len(tracked)), dirs: make(map[string]fileState)}
	var paths []string
	var walk func(rel string) error
	walk = func(rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		st := s.stat(ctx, rel, -1)
		if st.kind != kindDir && rel != "" {
			return slow("%s changed while it was walked", rel)
		}
		ft.dirs[rel] = st
		entries, err := os.ReadDir(s.full(rel))
		if err != nil {
			return slow("read directory %s: %v", rel, errText(err))
		}
		for _, d := range entries {
			p := d.Name()
			if rel != "" {
				p = rel + "/" + p
			} else if p == ".git" || p == ".supervisor" {
				continue
			}
			if _, ok := tracked[p]; ok {
				paths = append(paths, p)
				continue
			}
			if d.Type() == fs.ModeDir && d.Name() != ".git" {
				// A directory with no tracked path below may hold empty
				// directories only: anything else in it is untracked.
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			return slow("%s is not tracked", p)
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	// Tracked paths not found by the walk (deleted ones) are recorded too.
	if len(paths) < len(tracked) {
		seen := make(map[string]bool, len(paths))
		for _, p := range paths {
			seen[p] = true
		}
		for p := range tracked {
			if !seen[p] {
				paths = append(paths, p)
			}
		}
	}

	states := make([]fileState, len(paths))
	if err := parallel(ctx, len(paths), func(i int) {
		p := paths[i]
		t := tracked[p]
		st := s.stat(ctx, p, -1)
		if st.kind == kindRegular && st.size <= b.opts.MaxHashSize && st.err == "" && s.budget.take(st.size) {
			if cur, ok := gitStat(st); ok && t.trusted && t.e.Matches(cur) && !t.e.Racy(indexMtime) {
				st.hash, st.blob, st.format = string(t.e.ID), true, format
			} else if h, err := s.hash(ctx, s.full(p)); err != nil {
				st.err = errText(err)
			} else {
				st.hash = h
			}
		}
		states[i] = st
	}); err != nil {
		return nil, err
	}
	for i, p := range paths {
		ft.files[p] = states[i]
	}
	return ft, nil
}

// gitStat is a regular file's stat data as git records it in the index.
func gitStat(st fileState) (gitindex.Stat, bool) {
	if !st.sys.ok || st.kind != kindRegular {
		return gitindex.Stat{}, false
	}
	mode := gitindex.ModeFile
	if st.perm&0o100 != 0 {
		mode = gitindex.ModeExecutable
	}
	sec := int64(time.Second)
	//nolint:gosec // git truncates every field to 32 bits
	return gitindex.Stat{
		CtimeSec: uint32(st.sys.ctime / sec), CtimeNsec: uint32(st.sys.ctime % sec),
		MtimeSec: uint32(st.mtime / sec), MtimeNsec: uint32(st.mtime % sec),
		Dev: uint32(st.sys.dev), Ino: uint32(st.sys.ino), Mode: mode,
		UID: st.sys.uid, GID: st.sys.gid, Size: uint32(st.size),
	}, true
}

// readIndex reads and parses the index of the git directory, trying both
// object formats (only the right one passes the checksum and the entry
// layout). The index's own mtime decides which entries are racily clean.
func readIndex(gitDir string) (*gitindex.Index, time.Time, gitindex.Format, error) {
	path := filepath.Join(gitDir, "index")
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, time.Time{}, 0, slow("index: %v", errText(err))
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxIndexSize {
		return nil, time.Time{}, 0, slow("index: not a regular file of at most %d bytes", maxIndexSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, time.Time{}, 0, slow("index: %v", errText(err))
	}
	var errs []error
	for _, f := range []gitindex.Format{gitindex.SHA1, gitindex.SHA256} {
		ix, err := gitindex.Parse(data, f)
		if err == nil {
			return ix, fi.ModTime(), f, nil
		}
		errs = append(errs, err)
	}
	return nil, time.Time{}, 0, &errSlowPath{reason: fmt.Sprintf("index not read: %v", errors.Join(errs...)), index: true}
}

// convertible reports whether the repository's configuration could make
// git convert file content on its way into the index (core.autocrlf,
// core.eol, an info/attributes file): the index's ids then need not be the
// ids of the files' bytes. It errs on the side of true.
func convertible(l gitLayout) bool {
	if _, err := os.Lstat(filepath.Join(l.commonDir, "info", "attributes")); err == nil {
		return true
	}
	for _, p := range []string{filepath.Join(l.commonDir, "config"), filepath.Join(l.gitDir, "config.worktree"), filepath.Join(l.commonDir, "config.worktree")} {
		data, err := os.ReadFile(p)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return true
		}
		low := bytes.ToLower(data)
		if bytes.Contains(low, []byte("autocrlf")) || bytes.Contains(low, []byte("eol")) || bytes.Contains(low, []byte("include")) {
			return true
		}
	}
	return false
}
