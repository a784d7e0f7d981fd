//go:build !linux

package integrity

import "errors"

// dirScanSupported: outside Linux the capture always lists the work tree
// with git status and the check re-reads every hashed file.
const dirScanSupported = false

var errNoDirScan = errors.New("directory descriptors are not used on this platform")

func openDir(string) (int, error)        { return -1, errNoDirScan }
func openDirAt(int, string) (int, error) { return -1, errNoDirScan }
func closeDir(int)                       {}
func statFd(int) fileState               { return fileState{kind: kindError, err: errNoDirScan.Error()} }
func statAt(int, []byte, bool) fileState {
	return fileState{kind: kindError, err: errNoDirScan.Error()}
}
func scanDir(int, []byte, func([]byte, uint8) error) error { return errNoDirScan }

// d_type values (unused: scanDir is never called here).
const (
	dtDir     = 4
	dtReg     = 8
	dtUnknown = 0
)
