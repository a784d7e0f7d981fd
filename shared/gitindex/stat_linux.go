//go:build linux

package gitindex

import (
	"io/fs"
	"syscall"
)

// StatOf converts a file's FileInfo (from os.Lstat) into the stat data git
// records, each field truncated to 32 bits as git stores it. ok is false
// when the platform's stat data is not available.
func StatOf(fi fs.FileInfo) (st Stat, ok bool) {
	s, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return st, false
	}
	//nolint:gosec // git truncates every field to 32 bits
	return Stat{
		CtimeSec: uint32(s.Ctim.Sec), CtimeNsec: uint32(s.Ctim.Nsec),
		MtimeSec: uint32(s.Mtim.Sec), MtimeNsec: uint32(s.Mtim.Nsec),
		Dev: uint32(s.Dev), Ino: uint32(s.Ino),
		Mode: GitMode(fi.Mode()),
		UID:  s.Uid, GID: s.Gid,
		Size: uint32(s.Size),
	}, true
}
