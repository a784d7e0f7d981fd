//go:build linux

package integrity

import (
	"io/fs"
	"syscall"
)

// sysStatOf extracts the ctime, inode, device and owner from an Lstat
// result.
func sysStatOf(fi fs.FileInfo) sysStat {
	s, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return sysStat{}
	}
	return sysStat{ok: true, ctime: s.Ctim.Nano(), ino: s.Ino, dev: s.Dev, uid: s.Uid, gid: s.Gid}
}
