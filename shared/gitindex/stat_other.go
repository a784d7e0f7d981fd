//go:build !linux

package gitindex

import "io/fs"

// StatOf reports ok false outside Linux: the stat data git records is not
// read there, so callers never trust it and read every file.
func StatOf(fs.FileInfo) (Stat, bool) { return Stat{}, false }
