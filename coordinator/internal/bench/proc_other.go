//go:build !linux

package bench

import "time"

// processCPU is not measured outside Linux.
func processCPU(int) time.Duration { return 0 }
