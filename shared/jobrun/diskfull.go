package jobrun

import (
	"errors"
	"strings"
	"syscall"
)

// DiskFull reports whether err is a file system's refusal to take more
// data — no space left on the device, or a disk quota exceeded — as an
// errno in its chain (the runner's own writes) or in the text of a
// command's error (git's "No space left on device"). A job that fails so
// failed on its runner, not on its repository or its agent or gate
// (CHAOS-05): the runner hands it back without counting it against any
// circuit breaker.
func DiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded")
}
