//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time, user and system, of this process and of its
// children that have been waited for (git, agents and gates).
func cpuTime() (self, children time.Duration) {
	get := func(who int) time.Duration {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return get(syscall.RUSAGE_SELF), get(syscall.RUSAGE_CHILDREN)
}
