package integrity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

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

// fastTree is what captureFast recorded: every directory of the work
// tree with the tracked paths directly in it, in one record per directory
// rather than one map entry per path (PERF-15).
type fastTree struct {
	// tracked is the number of paths in the index.
	tracked int
	dirs    []fastDir
	// byRel maps a directory's path ("" for the root) to its index in dirs.
	byRel map[string]int
}

// fastDir is one directory of a fast capture.
type fastDir struct {
	rel string
	// walked: the capture listed the directory through its descriptor and
	// recorded its stat data in self. A directory of the index's paths that
	// was not walked (missing at capture, below a symbolic link, or below
	// .supervisor/) has its paths examined one by one, by full path.
	walked bool
	self   fileState
	// names are the tracked paths directly in the directory (their last
	// component), sorted; states[i] is the record of names[i].
	names  []string
	states []fileState
}

// path is the work tree path of name in d.
func (d *fastDir) path(name string) string {
	if d.rel == "" {
		return name
	}
	return d.rel + "/" + name
}

// splitPath splits a work tree path into its directory ("" at the root)
// and its last component.
func splitPath(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// dir returns the index of the directory rel in t.dirs, adding it if new.
func (t *fastTree) dir(rel string) int {
	k, ok := t.byRel[rel]
	if !ok {
		k = len(t.dirs)
		t.byRel[rel] = k
		t.dirs = append(t.dirs, fastDir{rel: rel})
	}
	return k
}

// lookup returns the record of the tracked path p.
func (t *fastTree) lookup(p string) (fileState, bool) {
	rel, name := splitPath(p)
	k, ok := t.byRel[rel]
	if !ok {
		return fileState{}, false
	}
	d := &t.dirs[k]
	j, ok := slices.BinarySearch(d.names, name)
	if !ok {
		return fileState{}, false
	}
	return d.states[j], true
}

// each calls fn with every recorded path's state.
func (t *fastTree) each(fn func(fileState)) {
	for i := range t.dirs {
		for _, st := range t.dirs[i].states {
			fn(st)
		}
	}
}

// indexSlot is what the walk needs of a tracked path's index entry.
type indexSlot struct {
	e       *gitindex.Entry
	trusted bool // a plain stage-0 regular file: its id may stand for its content
	found   bool // the walk found and recorded the path
}

// captureFast records the work tree without running git, when the work
// tree holds nothing but tracked paths (and .supervisor/): it reads the
// index, walks every directory (without following symbolic links), and
// records each tracked path's full stat data. A tracked regular file whose
// stat data equals what the index recorded, and that is not racily clean
// (its mtime or ctime not before the index file's), has the content the
// index names: its git object id is its hash, and it is not read. Every
// other tracked file is hashed as Capture hashes (PERF-11). With
// Options.IndexFresh, a tracked regular file is not examined at all when
// its index entry may stand for it (see scanner.fromIndex, PERF-53).
//
// The index's paths are grouped by directory first; the walk then lists
// each directory through its descriptor, finds each name among the
// directory's tracked names by binary search and examines it with fstatat
// by that name, directories of a level in parallel on up to GOMAXPROCS
// goroutines (PERF-15).
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
	t, slots, bases, err := groupIndex(ix)
	if err != nil {
		return nil, err
	}
	// One string holds every path's object id, so a path's recorded hash
	// is a slice of it rather than an allocation of its own.
	hs := format.Size()
	idBuf := make([]byte, len(slots)*hs)
	for g := range slots {
		copy(idBuf[g*hs:], slots[g].e.ID)
	}
	ids := string(idBuf)

	// Walk, a level of directories at a time, each level's directories in
	// parallel: every name must be a tracked path or a directory (holding
	// tracked paths, or empty ones only); .git and .supervisor at the top
	// are recorded elsewhere. Tracked paths are examined through the
	// directory's descriptor.
	rootFd, err := openDir(b.root)
	if err != nil {
		return nil, slow("open the work tree: %v", err)
	}
	defer closeDir(rootFd)
	fresh := b.opts.IndexFresh
	level := []int{t.dir("")}
	for len(level) > 0 {
		for len(bases) < len(t.dirs) {
			bases = append(bases, 0) // a directory without tracked paths of its own
		}
		subdirs := make([][]string, len(level))
		errs := make([]error, len(level))
		if err := parallel(ctx, len(level), func(i int) {
			d := &t.dirs[level[i]]
			base := bases[level[i]]
			fd, err := openDirAt(rootFd, d.rel)
			if err != nil {
				errs[i] = slow("open directory %s: %v", d.rel, err)
				return
			}
			defer closeDir(fd)
			d.walked = true
			d.self = statFd(fd)
			d.self.racy = s.racy(d.self)
			buf := dirBufPool.Get().(*[]byte)
			defer dirBufPool.Put(buf)
			var statted, unstatted int64
			defer func() { s.statted.Add(statted); s.unstatted.Add(unstatted) }()
			err = scanDir(fd, *buf, func(raw []byte, typ uint8) error {
				// name is valid during this call only: whatever is kept is
				// copied (d.names' own strings, string(raw)).
				name := unsafe.String(unsafe.SliceData(raw), len(raw))
				if d.rel == "" && (name == ".git" || name == ".supervisor") {
					return nil
				}
				nameZ := raw[:len(raw)+1] // the record's NUL after the name
				if j, ok := slices.BinarySearch(d.names, name); ok {
					g := base + j
					slots[g].found = true
					if fresh && typ == dtReg {
						if st, ok := s.fromIndex(slots[g], ids[g*hs:(g+1)*hs], indexMtime, format); ok {
							d.states[j] = st
							unstatted++
							return nil
						}
					}
					st := statAt(fd, nameZ, true)
					statted++
					st.racy = s.racy(st)
					d.states[j] = s.identify(ctx, d, d.names[j], st, slots[g], ids[g*hs:(g+1)*hs], indexMtime, format)
					return nil
				}
				isDir := typ == dtDir
				if typ == dtUnknown {
					isDir = statAt(fd, nameZ, false).kind == kindDir
					statted++
				}
				if isDir && name != ".git" {
					subdirs[i] = append(subdirs[i], d.path(string(raw)))
					return nil
				}
				return slow("%s is not tracked", d.path(string(raw)))
			})
			var why *errSlowPath
			switch {
			case errors.As(err, &why):
				errs[i] = err
			case err != nil:
				errs[i] = slow("read directory %s: %v", d.rel, err)
			}
		}); err != nil {
			return nil, err
		}
		var next []int
		for i := range level {
			if errs[i] != nil {
				return nil, errs[i]
			}
			for _, rel := range subdirs[i] {
				next = append(next, t.dir(rel))
			}
		}
		level = next
	}
	for len(bases) < len(t.dirs) {
		bases = append(bases, 0)
	}
	// Tracked paths the walk did not find (deleted ones, those below
	// .supervisor/) are recorded too.
	for k := range t.dirs {
		d := &t.dirs[k]
		for j, name := range d.names {
			g := bases[k] + j
			if !slots[g].found {
				d.states[j] = s.identify(ctx, d, name, s.stat(ctx, d.path(name), -1), slots[g], ids[g*hs:(g+1)*hs], indexMtime, format)
				s.statted.Add(1)
			}
		}
	}
	return t, nil
}

// groupIndex groups the index's paths by directory: a fastTree whose
// directories hold the names of their tracked paths (sorted, as the index
// is) with room for their states, and for each path, at
// bases[directory]+position, its index entry. A path with several stages
// (unmerged) is one path whose entry is not trusted. A .gitattributes file
// anywhere is an errSlowPath.
func groupIndex(ix *gitindex.Index) (*fastTree, []indexSlot, []int, error) {
	ents := ix.Entries
	t := &fastTree{byRel: make(map[string]int)}
	dirOf := make([]int32, len(ents)) // -1: a further stage of the previous path
	var counts []int
	lastDir, last := "", -1
	for i := range ents {
		p := ents[i].Path
		if i > 0 && ents[i-1].Path == p {
			dirOf[i] = -1
			continue
		}
		rel, name := splitPath(p)
		if name == ".gitattributes" {
			return nil, nil, nil, slow(".gitattributes: content conversion may apply")
		}
		if last < 0 || rel != lastDir {
			last, lastDir = t.dir(rel), rel
			for len(counts) < len(t.dirs) {
				counts = append(counts, 0)
			}
		}
		dirOf[i] = int32(last) //nolint:gosec // at most gitindex's entry limit
		counts[last]++
		t.tracked++
	}
	names := make([]string, t.tracked)
	states := make([]fileState, t.tracked)
	slots := make([]indexSlot, t.tracked)
	bases := make([]int, len(t.dirs))
	off := 0
	for k := range t.dirs {
		bases[k] = off
		n := counts[k]
		t.dirs[k].names = names[off : off : off+n]
		t.dirs[k].states = states[off : off+n : off+n]
		off += n
	}
	prev := -1
	for i := range ents {
		e := &ents[i]
		k := dirOf[i]
		if k < 0 {
			slots[prev].trusted = false // unmerged: several stages
			continue
		}
		d := &t.dirs[k]
		_, name := splitPath(e.Path)
		if n := len(d.names); n > 0 && d.names[n-1] >= name {
			return nil, nil, nil, slow("index: %s out of order", e.Path)
		}
		prev = bases[k] + len(d.names)
		d.names = append(d.names, name)
		slots[prev] = indexSlot{e: e, trusted: e.Stage == 0 && e.Flags == 0 && (e.Stat.Mode == gitindex.ModeFile || e.Stat.Mode == gitindex.ModeExecutable)}
	}
	return t, slots, bases, nil
}

// dirBufPool holds getdents buffers.
var dirBufPool = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

// identify completes the stat data st of the tracked path name in d with
// its content hash: the index's object id (id) when the stat data matches
// the index entry and the entry is not racily clean, the file read
// otherwise (within the limits and budget of the capture).
func (s *scanner) identify(ctx context.Context, d *fastDir, name string, st fileState, slot indexSlot, id string, indexMtime time.Time, format gitindex.Format) fileState {
	if st.kind != kindRegular || st.size > s.maxHash || st.err != "" || !s.budget.take(st.size) {
		return st
	}
	if cur, ok := gitStat(st); ok && slot.trusted && slot.e.Matches(cur) && !slot.e.Racy(indexMtime) {
		st.hash, st.blob, st.format = id, true, format
		return st
	}
	if h, err := s.hash(ctx, s.full(d.path(name))); err != nil {
		st.err = errText(err)
	} else {
		st.hash = h
	}
	return st
}

// fromIndex is the record of a tracked path that the directory listing
// shows as a regular file, taken from its index entry without examining
// the file, when the caller promised that the index holds every tracked
// file's current stat data (Options.IndexFresh): the entry's stat data
// (as indexState makes it) and its object id as the content's hash. It
// reports false, and the file is examined as without the promise, when
// the entry is not a plain stage-0 regular file (trusted), is racily clean
// with respect to the index file, has a time not before the capture's
// start (s.racy: a change during the gate could then keep the ctime), is
// larger than MaxHashSize, or does not fit in the hashing budget (the
// check may read the file, as it reads every file hashed at capture).
func (s *scanner) fromIndex(slot indexSlot, id string, indexMtime time.Time, format gitindex.Format) (fileState, bool) {
	if !slot.trusted || slot.e.Racy(indexMtime) {
		return fileState{}, false
	}
	st, ok := indexState(slot.e.Stat)
	if !ok || s.racy(st) || st.size > s.maxHash || !s.budget.take(st.size) {
		return fileState{}, false
	}
	st.hash, st.blob, st.format = id, true, format
	return st, true
}

// indexState is the record of a regular file whose stat data is the index
// entry's st: gitStat of it gives st back. ok is false for an entry that
// is not a regular file's or whose nanoseconds are out of range.
func indexState(st gitindex.Stat) (fileState, bool) {
	perm := fs.FileMode(0o644)
	switch st.Mode {
	case gitindex.ModeFile:
	case gitindex.ModeExecutable:
		perm = 0o755
	default:
		return fileState{}, false
	}
	if st.CtimeNsec >= 1e9 || st.MtimeNsec >= 1e9 {
		return fileState{}, false
	}
	sec := int64(time.Second)
	return fileState{
		kind:  kindRegular,
		size:  int64(st.Size),
		mtime: int64(st.MtimeSec)*sec + int64(st.MtimeNsec),
		perm:  perm,
		sys: sysStat{ok: true, ctime: int64(st.CtimeSec)*sec + int64(st.CtimeNsec),
			ino: uint64(st.Ino), dev: uint64(st.Dev), uid: st.UID, gid: st.GID},
		indexStat: true,
	}, true
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
