//go:build linux

package integrity

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirScanSupported: the fast capture and check read directories and stat
// data through directory descriptors (openat, getdents64, fstatat).
const dirScanSupported = true

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

// scanDir calls fn for each entry of the directory fd ("." and ".." left
// out) with its name and d_type (unix.DT_*). name points into buf and is
// valid only during the call; the byte after it is the NUL that ends it
// in the directory record. fn's error stops the scan and is returned.
func scanDir(fd int, buf []byte, fn func(name []byte, typ uint8) error) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < 19 || reclen > len(b) {
				return errors.New("malformed directory entry")
			}
			name := b[19:reclen]
			end := bytes.IndexByte(name, 0)
			if end < 0 {
				return errors.New("directory entry name not NUL-terminated")
			}
			name = name[:end]
			if dot := string(name); dot != "." && dot != ".." {
				if err := fn(name, b[18]); err != nil {
					return err
				}
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

// statAt examines the name nameZ[:len(nameZ)-1] (nameZ ends in a NUL) in
// the directory fd without following a symbolic link, as scanner.stat
// examines a path (without hashing). With readLink a symbolic link's
// target is read too; without, it is left empty (the stat data alone
// decides whether the link is unchanged).
func statAt(fd int, nameZ []byte, readLink bool) fileState {
	var st unix.Stat_t
	for {
		err := fstatatZ(fd, nameZ, &st)
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
	if fsSt.kind == kindSymlink && readLink {
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(fd, string(nameZ[:len(nameZ)-1]), buf)
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

// d_type values scanDir passes.
const (
	dtDir     = unix.DT_DIR
	dtReg     = unix.DT_REG
	dtUnknown = unix.DT_UNKNOWN
)
