//go:build linux

package integrity

import (
	"errors"
	"io/fs"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirScanSupported: the fast capture and check read directories and stat
// data through directory descriptors (openat, getdents64, fstatat).
const dirScanSupported = true

// dirent is one directory entry as getdents64 returns it.
type dirent struct {
	name string
	typ  uint8 // unix.DT_*
}

// openDir opens a directory for reading without following a symbolic link
// (a symlink or non-directory there is an error).
func openDir(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

func closeDir(fd int) { _ = unix.Close(fd) }

// openDirAt opens the directory rel ("" = root itself, a dup of rootFd)
// below the directory rootFd one component at a time, never following a
// symbolic link: a component that is a symlink or not a directory is an
// error, as scanner.parents treats it.
func openDirAt(rootFd int, rel string) (int, error) {
	fd, err := unix.Dup(rootFd)
	if err != nil || rel == "" {
		return fd, err
	}
	for _, c := range strings.Split(rel, "/") {
		var next int
		for {
			next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		_ = unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// readDir lists a directory's entries ("." and ".." left out).
func readDir(fd int, buf []byte) ([]dirent, error) {
	var out []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < 19 || reclen > len(b) {
				return nil, errors.New("malformed directory entry")
			}
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, dirent{name: s, typ: b[18]})
			}
			b = b[reclen:]
		}
	}
}

// statFd records the open directory itself.
func statFd(fd int) fileState {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileState{kind: kindError, err: err.Error()}
	}
	return fromStat(&st)
}

// statAt examines name in the directory fd without following a symbolic
// link, as scanner.stat examines a path (without hashing).
func statAt(fd int, name string) fileState {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return fileState{kind: kindMissing}
		}
		if err != nil {
			return fileState{kind: kindError, err: err.Error()}
		}
		break
	}
	fsSt := fromStat(&st)
	if fsSt.kind == kindSymlink {
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(fd, name, buf)
		if err != nil {
			fsSt.err = err.Error()
		} else {
			fsSt.link = string(buf[:n])
		}
	}
	return fsSt
}

// fromStat converts stat data as scanner.stat records it.
func fromStat(st *unix.Stat_t) fileState {
	f := fileState{
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		perm:  fs.FileMode(st.Mode & 0o777),
		sys:   sysStat{ok: true, ctime: st.Ctim.Nano(), ino: st.Ino, dev: st.Dev, uid: st.Uid, gid: st.Gid},
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		f.kind = kindRegular
	case unix.S_IFLNK:
		f = fileState{kind: kindSymlink, mtime: f.mtime, sys: f.sys}
	case unix.S_IFDIR:
		f = fileState{kind: kindDir, perm: f.perm, mtime: f.mtime, sys: f.sys}
	default:
		f.kind = kindOther
	}
	return f
}
