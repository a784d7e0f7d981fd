//go:build !linux

package bench

// residentBytes is not measured off Linux.
func residentBytes() int64 { return 0 }
