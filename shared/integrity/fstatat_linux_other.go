//go:build linux && !amd64 && !arm64

package integrity

import "golang.org/x/sys/unix"

// fstatatZ is fstatat(fd, name, AT_SYMLINK_NOFOLLOW) for a name whose
// terminating NUL is nameZ's last byte.
func fstatatZ(fd int, nameZ []byte, st *unix.Stat_t) error {
	return unix.Fstatat(fd, string(nameZ[:len(nameZ)-1]), st, unix.AT_SYMLINK_NOFOLLOW)
}
