//go:build linux && (amd64 || arm64)

package integrity

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// fstatatZ is fstatat(fd, name, AT_SYMLINK_NOFOLLOW) for a name whose
// terminating NUL is nameZ's last byte, passed to the kernel as it is
// (unix.Fstatat would copy the name to add the NUL: an allocation per
// path, PERF-15).
func fstatatZ(fd int, nameZ []byte, st *unix.Stat_t) error {
	_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(fd), uintptr(unsafe.Pointer(&nameZ[0])), uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
