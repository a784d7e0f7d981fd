// Package boom indexes past the end of a slice.
package boom

// Third returns the third element of xs.
func Third(xs []int) int { return xs[3] }
