//go:build !linux

package bench

import "time"

// processCPU is not measured outside Linux.
func processCPU(int) time.Duration { return 0 }

// machineBusy is not measured outside Linux.
func machineBusy() (time.Duration, bool) { return 0, false }

// enginePIDs finds no engine daemons outside Linux.
func enginePIDs() []int { return nil }
