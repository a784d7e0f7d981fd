package integrity

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitindex"
)

// fileKind is what a path is on disk.
type fileKind uint8

const (
	kindMissing fileKind = iota
	kindRegular
	kindSymlink
	kindDir
	kindOther // device, FIFO, socket
	// kindBehindSymlink: a parent directory of the path is a symbolic link,
	// so the path resolves elsewhere; it is never read through (WI-22).
	kindBehindSymlink
	kindError // could not be examined (err says why)
)

func (k fileKind) String() string {
	switch k {
	case kindMissing:
		return "missing"
	case kindRegular:
		return "file"
	case kindSymlink:
		return "symlink"
	case kindDir:
		return "directory"
	case kindOther:
		return "special file"
	case kindBehindSymlink:
		return "path through a symbolic link"
	default:
		return "unreadable"
	}
}

// fileState is what the integrity check knows of one path.
type fileState struct {
	kind  fileKind
	size  int64
	mtime int64 // nanoseconds since the epoch
	perm  fs.FileMode
	// hash is the SHA-256 of a regular file's content (32 raw bytes), ""
	// when the file was not hashed (too large, or the hash budget was
	// spent).
	hash string
	// link is a symlink's target, or for kindBehindSymlink the parent that
	// is a symlink.
	link string
	err  string
	// sys is the rest of the stat data (ctime, inode, device, owner), set
	// when the platform provides it; Check trusts a file whose whole stat
	// data is unchanged (see unchanged).
	sys sysStat
	// racy: the capture recorded the path within racyMargin of its start
	// (or in its second, on a file system without sub-second times), so a
	// change during the gate could leave the stat data as recorded; Check
	// always re-reads such a path.
	racy bool
	// blob: hash is the git object id (of format) of the content, taken
	// from the index instead of read (see captureFast), and Check computes
	// the same kind of id to compare.
	blob   bool
	format gitindex.Format
	// indexStat: the stat data is the index entry's, as git records it
	// (each field truncated to 32 bits, the mode 0644 or 0755), taken
	// without examining the file (Options.IndexFresh); unchanged compares
	// the file with it as the capture compares a file with its index
	// entry.
	indexStat bool
}

// sysStat is the stat data beyond fileState's own fields.
type sysStat struct {
	ok       bool
	ctime    int64 // nanoseconds since the epoch
	ino, dev uint64
	uid, gid uint32
}

// unchanged reports whether cur has exactly old's stat data and old was not
// recorded racily: then the path was not written since the capture, since
// every write, rename over it, chmod or chown sets the ctime to the
// current time and no unprivileged process can set it back (WI-20).
//
// A record taken from the index (indexStat) is compared as git's index
// records stat data (see gitStat): its ctime was before the capture's
// start, so a write during the gate cannot leave it in place either.
func unchanged(old, cur fileState) bool {
	if old.indexStat {
		was, _ := gitStat(old)
		now, ok := gitStat(cur)
		return ok && cur.err == "" && !old.racy && now == was
	}
	return old.sys.ok && !old.racy && cur.sys == old.sys && cur.kind == old.kind &&
		cur.size == old.size && cur.mtime == old.mtime && cur.perm == old.perm && cur.err == "" && old.err == ""
}

// diff reports whether cur differs from old, and how. A recorded content
// hash is authoritative: a file whose size and mtime are unchanged but
// whose content is not is caught (racy git, WI-20), and a file rewritten
// with identical content (mtime changed only) is not a modification. A file
// without a hash is compared by size and mtime (WI-10's documented
// limitation for large files).
func diff(old, cur fileState) (bool, string) {
	if old.kind != cur.kind {
		if old.kind == kindMissing || cur.kind == kindMissing {
			return true, ""
		}
		return true, fmt.Sprintf("was a %s, now a %s", old.kind, cur.kind)
	}
	if old.err != cur.err {
		if cur.err != "" {
			return true, "cannot be examined: " + cur.err
		}
		return true, ""
	}
	switch old.kind {
	case kindRegular:
		switch {
		case old.size != cur.size:
			return true, ""
		case old.perm&0o100 != cur.perm&0o100:
			// Only the executable bit is content to git; read and write bits
			// may be widened by the sandbox so a non-root gate can write.
			return true, fmt.Sprintf("mode %v -> %v", old.perm, cur.perm)
		case old.hash != "":
			if old.hash != cur.hash {
				if old.mtime == cur.mtime {
					return true, "content changed with size and mtime unchanged"
				}
				return true, ""
			}
			return false, ""
		default:
			return old.mtime != cur.mtime, ""
		}
	case kindSymlink, kindBehindSymlink:
		if old.link != cur.link {
			return true, fmt.Sprintf("link %q -> %q", old.link, cur.link)
		}
	case kindDir:
		// A directory's mode is not content; what it holds is checked entry
		// by entry.
	case kindOther:
		return old.size != cur.size || old.mtime != cur.mtime || old.perm != cur.perm, ""
	}
	return false, ""
}

// budget bounds how many bytes a scan hashes; nil means unbounded.
type budget struct{ left atomic.Int64 }

func newBudget(n int64) *budget {
	b := &budget{}
	b.left.Store(n)
	return b
}

// take reserves n bytes, reporting whether they were available.
func (b *budget) take(n int64) bool {
	if b == nil {
		return true
	}
	for {
		left := b.left.Load()
		if n > left {
			return false
		}
		if b.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// scanner examines paths under one root without ever following a symbolic
// link: not the path's own, and not one of its parent directories.
type scanner struct {
	root   string
	budget *budget
	// since: a path whose ctime or mtime is not before it is recorded as
	// racy (zero: none is).
	since time.Time
	// maxHash: tracked files up to this size are hashed (captureFast).
	maxHash int64

	hashed atomic.Int64 // bytes hashed
	files  atomic.Int64 // files hashed
	// statted counts the tracked paths (and entries of unknown type) the
	// fast capture examined with a stat call; unstatted those it recorded
	// from the index instead (Options.IndexFresh).
	statted, unstatted atomic.Int64

	mu   sync.Mutex
	dirs map[string]dirCheck
}

// dirCheck is a parent directory's state: a real directory, missing (or
// not a directory), or a symlink.
type dirCheck uint8

const (
	dirOK dirCheck = iota
	dirMissing
	dirSymlink
	dirError
)

func newScanner(root string, b *budget) *scanner {
	return &scanner{root: root, budget: b, dirs: make(map[string]dirCheck)}
}

func (s *scanner) full(rel string) string {
	return filepath.Join(s.root, filepath.FromSlash(strings.TrimSuffix(rel, "/")))
}

// parents checks every parent directory of rel, shallowest first.
func (s *scanner) parents(rel string) (dirCheck, string) {
	rel = strings.TrimSuffix(rel, "/")
	for i := 0; i < len(rel); i++ {
		if rel[i] != '/' {
			continue
		}
		d := rel[:i]
		s.mu.Lock()
		c, ok := s.dirs[d]
		s.mu.Unlock()
		if !ok {
			fi, err := os.Lstat(s.full(d))
			switch {
			case err == nil && fi.Mode()&fs.ModeSymlink != 0:
				c = dirSymlink
			case err == nil && fi.IsDir():
				c = dirOK
			case err == nil, isNotExist(err):
				c = dirMissing
			default:
				c = dirError
			}
			s.mu.Lock()
			s.dirs[d] = c
			s.mu.Unlock()
		}
		if c != dirOK {
			return c, d
		}
	}
	return dirOK, ""
}

// racyMargin is how long before a capture's start a path's recorded ctime
// or mtime still makes it racy: more than a kernel clock tick, by which
// file times may lag the clock the capture reads.
const racyMargin = 50 * time.Millisecond

// racy reports whether st was recorded racily (see fileState.racy): its
// ctime or mtime is not before s.since, or, on a file system whose times
// have no nanoseconds, falls in since's second.
func (s *scanner) racy(st fileState) bool {
	if s.since.IsZero() {
		return false
	}
	l := s.since.UnixNano()
	if st.mtime >= l || !st.sys.ok || st.sys.ctime >= l {
		return true
	}
	sec := s.since.Unix() * int64(time.Second)
	return (st.sys.ctime%int64(time.Second) == 0 && st.sys.ctime >= sec) || (st.mtime%int64(time.Second) == 0 && st.mtime >= sec)
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// stat examines rel. A regular file of at most hashLimit bytes is hashed
// if the budget allows (hashLimit < 0: never).
func (s *scanner) stat(ctx context.Context, rel string, hashLimit int64) fileState {
	switch c, d := s.parents(rel); c {
	case dirMissing:
		return fileState{kind: kindMissing}
	case dirSymlink:
		target, _ := os.Readlink(s.full(d))
		return fileState{kind: kindBehindSymlink, link: d + " -> " + target}
	case dirError:
		return fileState{kind: kindError, err: "cannot examine parent directory " + d}
	}
	full := s.full(rel)
	fi, err := os.Lstat(full)
	if err != nil {
		if isNotExist(err) {
			return fileState{kind: kindMissing}
		}
		return fileState{kind: kindError, err: errText(err)}
	}
	st := fileState{size: fi.Size(), mtime: fi.ModTime().UnixNano(), perm: fi.Mode().Perm(), sys: sysStatOf(fi)}
	st.racy = s.racy(st)
	switch fi.Mode().Type() {
	case 0:
		st.kind = kindRegular
		if hashLimit >= 0 && st.size <= hashLimit && s.budget.take(st.size) {
			h, err := s.hash(ctx, full)
			if err != nil {
				st.err = errText(err)
			} else {
				st.hash = h
			}
		}
	case fs.ModeSymlink:
		st = fileState{kind: kindSymlink, sys: st.sys, racy: st.racy, mtime: st.mtime}
		st.link, err = os.Readlink(full)
		if err != nil {
			st.err = errText(err)
		}
	case fs.ModeDir:
		// mtime is kept for Report.Ignored; diff ignores it.
		st = fileState{kind: kindDir, perm: fi.Mode().Perm(), mtime: fi.ModTime().UnixNano(), sys: st.sys, racy: st.racy}
	default:
		st.kind = kindOther
	}
	return st
}

// restat examines rel again for comparison with old. A path whose whole
// stat data is unchanged and was not recorded racily is old itself
// (unchanged). Otherwise its content is hashed exactly when old carries a
// hash (or a hashing error, to see whether it persists) and the size is
// unchanged (otherwise the size alone already tells it changed), with the
// kind of hash old has. The capture's budget decided which files carry a
// hash, so a check never hashes more than its capture could have.
func (s *scanner) restat(ctx context.Context, rel string, old fileState) fileState {
	cur := s.stat(ctx, rel, -1)
	if unchanged(old, cur) {
		return old
	}
	if old.kind == kindRegular && (old.hash != "" || old.err != "") && cur.kind == kindRegular && cur.size == old.size {
		var h string
		var err error
		if old.blob {
			h, err = s.blobHash(ctx, s.full(rel), old.format)
		} else {
			h, err = s.hash(ctx, s.full(rel))
		}
		if err != nil {
			cur.err = errText(err)
		} else {
			cur.hash = h
			cur.blob, cur.format = old.blob, old.format
		}
	}
	return cur
}

// hash streams a regular file through SHA-256. The file is opened without
// following a symlink and without blocking, and must still be a regular
// file once open.
func (s *scanner) hash(ctx context.Context, full string) (string, error) {
	return s.digest(ctx, full, func(int64) hash.Hash { return sha256.New() }, false)
}

// blobHash computes the git object id (of format) of a regular file's
// content as a blob, opened as hash opens it; no conversion is applied
// (captureFast trusts the index only where none can apply).
func (s *scanner) blobHash(ctx context.Context, full string, format gitindex.Format) (string, error) {
	return s.digest(ctx, full, func(size int64) hash.Hash {
		h := format.New()
		fmt.Fprintf(h, "blob %d\x00", size)
		return h
	}, true)
}

// digest opens full as hash documents, streams it through the hash newHash
// returns for its size, and counts it; with sameSize a file whose length
// changed while it was read is an error (the blob header named the old
// length).
func (s *scanner) digest(ctx context.Context, full string, newHash func(size int64) hash.Hash, sameSize bool) (string, error) {
	f, err := openNoFollow(full)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file")
	}
	h := newHash(fi.Size())
	buf := bufPool.Get().(*[]byte)
	defer bufPool.Put(buf)
	n, err := io.CopyBuffer(h, ctxReader{ctx: ctx, r: f}, *buf)
	if err != nil {
		return "", err
	}
	if sameSize && n != fi.Size() {
		return "", fmt.Errorf("size changed while reading")
	}
	s.hashed.Add(n)
	s.files.Add(1)
	return string(h.Sum(nil)), nil
}

// bufPool holds the read buffers of hash.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 256<<10)
	return &b
}}

// ctxReader stops a long read when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// errText renders a filesystem error without the absolute path, which is
// host-specific and already known from the violation's path.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// parallel runs fn(0..n-1) on a few goroutines; it stops early when ctx is
// done and returns ctx's error.
func parallel(ctx context.Context, n int, fn func(i int)) error {
	workers := min(runtime.GOMAXPROCS(0), 8, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}
