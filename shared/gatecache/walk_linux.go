//go:build linux

package gatecache

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/supervisorhq/supervisor/shared/gitindex"
)

// walkSupported: fastTree compares the index's stat data with the work
// tree through directory descriptors (openat, fstatat).
const walkSupported = true

// walkChunk is how many index entries one goroutine of walkIndex takes at
// least.
const walkChunk = 2048

// walkIndex returns the tree entries `git add -A` would leave of the
// index's entries (all stage 0, regular files or symbolic links): each
// path is examined with fstatat in its directory, opened from root one
// component at a time without following symbolic links. A path that is
// missing, or below a component that is missing, not a directory or a
// symbolic link (git's "leading symlink" rule), is deleted: it is left
// out. A path whose stat data equals the entry's (every field, nanoseconds
// included) and that is not racily clean keeps the entry's mode and id;
// any other is re-read: a regular file's content or a symbolic link's
// target is hashed as a blob. A .gitattributes file in any directory
// opened, a path of another type (a directory is a deleted file), an
// unreadable one or a name git would refuse is a fallback.
//
// The entries are split in a few contiguous ranges walked in parallel.
func walkIndex(ctx context.Context, root string, entries []gitindex.Entry, indexMtime time.Time, format gitindex.Format) ([]gitindex.TreeEntry, error) {
	rootFd, err := openDirNoFollow(unix.AT_FDCWD, root)
	if err != nil {
		return nil, fallBack("open the work tree: %v", err)
	}
	defer unix.Close(rootFd)
	if exists(rootFd, ".gitattributes") {
		return nil, fallBack(".gitattributes: content conversion may apply")
	}
	out := make([]gitindex.TreeEntry, len(entries))
	workers := max(1, min(runtime.GOMAXPROCS(0), 8, len(entries)/walkChunk))
	per := (len(entries) + workers - 1) / workers
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*per, min(len(entries), (w+1)*per)
		wg.Go(func() {
			cw := chunkWalker{ctx: ctx, mtime: indexMtime, format: format, stack: []dirFrame{{fd: rootFd}}}
			defer cw.popTo(0)
			errs[w] = cw.walk(entries[lo:hi], out[lo:hi])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		var fb *fallback
		for _, e := range errs {
			if errors.As(e, &fb) {
				return nil, fb
			}
		}
		return nil, err
	}
	kept := out[:0]
	for _, te := range out {
		if te.ID != nil {
			kept = append(kept, te)
		}
	}
	return kept, nil
}

// dirFrame is a directory on the way to the current entry: its path
// relative to the root ("" for the root) and a descriptor, or -1 when it
// does not exist as a directory (everything below it is deleted).
type dirFrame struct {
	path string
	fd   int
}

// chunkWalker walks a contiguous, sorted range of index entries, keeping
// the directories from the root to the current entry open.
type chunkWalker struct {
	ctx    context.Context
	mtime  time.Time
	format gitindex.Format
	stack  []dirFrame // stack[0] is the root, not owned
}

func (cw *chunkWalker) walk(entries []gitindex.Entry, out []gitindex.TreeEntry) error {
	for i := range entries {
		if i%256 == 0 && cw.ctx.Err() != nil {
			return cw.ctx.Err()
		}
		e := &entries[i]
		dir, name := "", e.Path
		if j := strings.LastIndexByte(e.Path, '/'); j >= 0 {
			dir, name = e.Path[:j], e.Path[j+1:]
		}
		fd, err := cw.dir(dir)
		if err != nil {
			return err
		}
		if fd < 0 {
			continue // deleted
		}
		te, err := cw.examine(fd, name, e)
		if err != nil {
			return err
		}
		out[i] = te
	}
	return nil
}

// dir returns the descriptor of the directory rel, opening what is
// missing of the stack; -1 when rel is not a directory reached without
// following a symbolic link.
func (cw *chunkWalker) dir(rel string) (int, error) {
	// Pop the frames that are not rel or one of its parents.
	n := len(cw.stack)
	for n > 1 {
		p := cw.stack[n-1].path
		if rel == p || strings.HasPrefix(rel, p) && rel[len(p)] == '/' {
			break
		}
		n--
	}
	cw.popTo(n)
	for {
		top := cw.stack[len(cw.stack)-1]
		if top.path == rel {
			return top.fd, nil
		}
		rest := rel
		if top.path != "" {
			rest = rel[len(top.path)+1:]
		}
		name, _, _ := strings.Cut(rest, "/")
		next := dirFrame{path: name, fd: -1}
		if top.path != "" {
			next.path = top.path + "/" + name
		}
		if top.fd >= 0 {
			fd, err := openDirNoFollow(top.fd, name)
			switch {
			case err == nil:
				next.fd = fd
				if exists(fd, ".gitattributes") {
					cw.stack = append(cw.stack, next)
					return -1, fallBack("%s/.gitattributes: content conversion may apply", next.path)
				}
			case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
				// Missing, a file or a symbolic link: every path below is deleted.
			default:
				return -1, fallBack("open directory %s: %v", next.path, err)
			}
		}
		cw.stack = append(cw.stack, next)
	}
}

// popTo closes the frames from n on (never the root's).
func (cw *chunkWalker) popTo(n int) {
	for len(cw.stack) > max(n, 1) {
		if fd := cw.stack[len(cw.stack)-1].fd; fd >= 0 {
			_ = unix.Close(fd)
		}
		cw.stack = cw.stack[:len(cw.stack)-1]
	}
}

// examine returns the tree entry of the index entry e, whose file is name
// in the directory dirFd; an entry without ID when the file is deleted.
func (cw *chunkWalker) examine(dirFd int, name string, e *gitindex.Entry) (gitindex.TreeEntry, error) {
	var st unix.Stat_t
	if err := fstatat(dirFd, name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return gitindex.TreeEntry{}, nil
		}
		return gitindex.TreeEntry{}, fallBack("%s: %v", e.Path, err)
	}
	var mode uint32
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		mode = gitindex.ModeFile
		if st.Mode&0o100 != 0 {
			mode = gitindex.ModeExecutable
		}
	case unix.S_IFLNK:
		mode = gitindex.ModeSymlink
	case unix.S_IFDIR:
		return gitindex.TreeEntry{}, nil // the file is deleted; what the directory holds is untracked
	default:
		return gitindex.TreeEntry{}, fallBack("%s is neither a regular file nor a symbolic link", e.Path)
	}
	//nolint:gosec // git truncates every field to 32 bits
	cur := gitindex.Stat{
		CtimeSec: uint32(st.Ctim.Sec), CtimeNsec: uint32(st.Ctim.Nsec),
		MtimeSec: uint32(st.Mtim.Sec), MtimeNsec: uint32(st.Mtim.Nsec),
		Dev: uint32(st.Dev), Ino: uint32(st.Ino), Mode: mode,
		UID: st.Uid, GID: st.Gid, Size: uint32(st.Size),
	}
	if e.Matches(cur) && !racy(e, cw.mtime) {
		return gitindex.TreeEntry{Path: e.Path, Mode: e.Stat.Mode, ID: e.ID}, nil
	}
	if !addable(e.Path, mode == gitindex.ModeSymlink) {
		return gitindex.TreeEntry{}, fallBack("git may refuse to add %q", e.Path)
	}
	var id []byte
	var err error
	if mode == gitindex.ModeSymlink {
		id, err = hashLink(dirFd, name, st.Size, cw.format)
	} else {
		id, err = hashAt(dirFd, name, cw.format)
	}
	if err != nil {
		return gitindex.TreeEntry{}, fallBack("%s: %v", e.Path, err)
	}
	return gitindex.TreeEntry{Path: e.Path, Mode: mode, ID: id}, nil
}

// hashAt returns the blob id of the regular file name in dirFd.
func hashAt(dirFd int, name string, format gitindex.Format) ([]byte, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return hashOpen(f, format)
}

// hashLink returns the blob id of the symbolic link name's target text.
func hashLink(dirFd int, name string, size int64, format gitindex.Format) ([]byte, error) {
	buf := make([]byte, max(size, 64)+1)
	for {
		n, err := unix.Readlinkat(dirFd, name, buf)
		if err != nil {
			return nil, err
		}
		if n < len(buf) {
			return gitindex.BlobID(format, buf[:n]), nil
		}
		if len(buf) > 1<<20 {
			return nil, errors.New("symbolic link target too long")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// openDirNoFollow opens the directory name in dirFd, failing (ELOOP or
// ENOTDIR) on a symbolic link or a non-directory.
func openDirNoFollow(dirFd int, name string) (int, error) {
	return retry(func() (int, error) {
		return unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
}

// openNoFollow opens the file at p for reading, failing on a symbolic
// link (intermediate directories are the caller's concern).
func openNoFollow(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
}

// fstatat is lstat of name in dirFd.
func fstatat(dirFd int, name string, st *unix.Stat_t) error {
	_, err := retry(func() (int, error) { return 0, unix.Fstatat(dirFd, name, st, unix.AT_SYMLINK_NOFOLLOW) })
	return err
}

// exists reports whether name exists in dirFd, as anything; an error other
// than "does not exist" counts as existing.
func exists(dirFd int, name string) bool {
	var st unix.Stat_t
	return !errors.Is(fstatat(dirFd, name, &st), unix.ENOENT)
}

// retry runs a system call again while it is interrupted.
func retry(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}
