//go:build !unix

package integrity

import "os"

// openNoFollow opens a file for reading. Without O_NOFOLLOW the caller's
// Lstat and the regular-file check after opening are the only guards.
func openNoFollow(path string) (*os.File, error) {
	return os.Open(path)
}
