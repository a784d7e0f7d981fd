package integrity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	if !dirScanSupported {
		return nil, slow("the index is not trusted on this platform")
	}
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

	// Walk, a level of directories at a time, each level's directories in
	// parallel: every name must be a tracked path or a directory (holding
	// tracked paths, or empty ones only); .git and .supervisor at the top
	// are recorded elsewhere. Tracked paths are examined through the
	// directory's descriptor.
	ft := &fastTree{tracked: len(tracked), files: make(map[string]fileState, len(tracked)), dirs: make(map[string]fileState)}
	type dirResult struct {
		self    fileState
		files   []string
		states  []fileState
		subdirs []string
		slow    error
	}
	rootFd, err := openDir(b.root)
	if err != nil {
		return nil, slow("open the work tree: %v", err)
	}
	defer closeDir(rootFd)
	level := []string{""}
	for len(level) > 0 {
		results := make([]dirResult, len(level))
		if err := parallel(ctx, len(level), func(i int) {
			rel := level[i]
			res := &results[i]
			fd, err := openDirAt(rootFd, rel)
			if err != nil {
				res.slow = slow("open directory %s: %v", rel, err)
				return
			}
			defer closeDir(fd)
			res.self = statFd(fd)
			res.self.racy = s.racy(res.self)
			buf := dirBufPool.Get().(*[]byte)
			names, err := readDir(fd, *buf)
			dirBufPool.Put(buf)
			if err != nil {
				res.slow = slow("read directory %s: %v", rel, err)
				return
			}
			for _, d := range names {
				p := d.name
				if rel != "" {
					p = rel + "/" + p
				} else if p == ".git" || p == ".supervisor" {
					continue
				}
				t, ok := tracked[p]
				st := statAt(fd, d.name)
				st.racy = s.racy(st)
				switch {
				case ok:
					res.files = append(res.files, p)
					res.states = append(res.states, s.identify(ctx, p, st, t.e, t.trusted, indexMtime, format))
				case st.kind == kindDir && d.name != ".git":
					res.subdirs = append(res.subdirs, p)
				default:
					res.slow = slow("%s is not tracked", p)
					return
				}
			}
		}); err != nil {
			return nil, err
		}
		cur := level
		level = nil
		for i := range results {
			if results[i].slow != nil {
				return nil, results[i].slow
			}
			ft.dirs[cur[i]] = results[i].self
			for j, p := range results[i].files {
				ft.files[p] = results[i].states[j]
			}
			level = append(level, results[i].subdirs...)
		}
	}
	// Tracked paths the walk did not find (deleted ones) are recorded too.
	for p, t := range tracked {
		if _, ok := ft.files[p]; !ok {
			ft.files[p] = s.identify(ctx, p, s.stat(ctx, p, -1), t.e, t.trusted, indexMtime, format)
		}
	}
	return ft, nil
}

// dirBufPool holds getdents buffers.
var dirBufPool = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

// identify completes the stat data st of the tracked path rel with its
// content hash: the index's object id when the stat data matches the
// index entry and the entry is not racily clean, the file read otherwise
// (within the limits and budget of the capture).
func (s *scanner) identify(ctx context.Context, rel string, st fileState, e *gitindex.Entry, trusted bool, indexMtime time.Time, format gitindex.Format) fileState {
	if st.kind != kindRegular || st.size > s.maxHash || st.err != "" || !s.budget.take(st.size) {
		return st
	}
	if cur, ok := gitStat(st); ok && trusted && e.Matches(cur) && !e.Racy(indexMtime) {
		st.hash, st.blob, st.format = string(e.ID), true, format
		return st
	}
	if h, err := s.hash(ctx, s.full(rel)); err != nil {
		st.err = errText(err)
	} else {
		st.hash = h
	}
	return st
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

// checkFast is Check's step 2 for a fast capture: each recorded directory
// is opened through its parents without following a symbolic link, and
// each recorded path in it examined through the directory's descriptor;
// a path whose stat data is unchanged (see unchanged) is not read, any
// other goes through scanner.restat. A directory that cannot be opened
// that way has its paths examined one by one by scanner.restat, which
// reports them missing or behind a symlink. It returns the current state
// of every path it re-read (any path not returned is unchanged) and
// whether every directory is unchanged.
func (b *Baseline) checkFast(ctx context.Context, s *scanner) (map[string]fileState, bool, error) {
	type dirWork struct {
		rel   string
		names []string
	}
	work := make([]dirWork, 0, len(b.dirs))
	index := make(map[string]int, len(b.dirs))
	for d := range b.dirs {
		index[d] = len(work)
		work = append(work, dirWork{rel: d})
	}
	var loose []string
	for p := range b.files {
		d, name := "", p
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			d, name = p[:i], p[i+1:]
		}
		if i, ok := index[d]; ok && !strings.HasPrefix(p, ".supervisor/") {
			work[i].names = append(work[i].names, name)
		} else {
			loose = append(loose, p)
		}
	}
	rootFd, err := openDir(b.root)
	if err != nil {
		rootFd = -1
	} else {
		defer closeDir(rootFd)
	}
	// reread[i] holds the paths of work[i] that were re-read, and their
	// states: unchanged paths are left out.
	type reread struct {
		paths  []string
		states []fileState
	}
	rereads := make([]reread, len(work))
	same := make([]bool, len(work))
	if err := parallel(ctx, len(work), func(i int) {
		w := work[i]
		rr := &rereads[i]
		path := func(name string) string {
			if w.rel == "" {
				return name
			}
			return w.rel + "/" + name
		}
		fd := -1
		if rootFd >= 0 {
			if d, err := openDirAt(rootFd, w.rel); err == nil {
				fd = d
			}
		}
		if fd < 0 {
			for _, n := range w.names {
				p := path(n)
				rr.paths = append(rr.paths, p)
				rr.states = append(rr.states, s.restat(ctx, p, b.files[p]))
			}
			return
		}
		defer closeDir(fd)
		same[i] = unchanged(b.dirs[w.rel], statFd(fd))
		for _, n := range w.names {
			p := path(n)
			old := b.files[p]
			if cur := statAt(fd, n); !unchanged(old, cur) {
				rr.paths = append(rr.paths, p)
				rr.states = append(rr.states, s.restat(ctx, p, old))
			}
		}
	}); err != nil {
		return nil, false, err
	}
	out := make(map[string]fileState)
	allSame := true
	for i := range work {
		allSame = allSame && same[i]
		for j, p := range rereads[i].paths {
			out[p] = rereads[i].states[j]
		}
	}
	for _, p := range loose {
		out[p] = s.restat(ctx, p, b.files[p])
	}
	return out, allSame, ctx.Err()
}
