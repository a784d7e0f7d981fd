//go:build !linux

package integrity

import "io/fs"

// sysStatOf reports no stat data outside Linux: Check then re-reads every
// hashed file, as it always did.
func sysStatOf(fs.FileInfo) sysStat { return sysStat{} }
