//go:build !unix

package bench

import "time"

// cpuTime is not measured on this platform.
func cpuTime() (self, children time.Duration) { return 0, 0 }
