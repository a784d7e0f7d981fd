//go:build !linux

package integrity

import "errors"

// dirScanSupported: outside Linux the capture always lists the work tree
// with git status and the check re-reads every hashed file.
const dirScanSupported = false

type dirent struct {
	name string
	typ  uint8
}

var errNoDirScan = errors.New("directory descriptors are not used on this platform")

func openDir(string) (int, error)           { return -1, errNoDirScan }
func closeDir(int)                          {}
func readDir(int, []byte) ([]dirent, error) { return nil, errNoDirScan }
func statFd(int) fileState                  { return fileState{kind: kindError, err: errNoDirScan.Error()} }
func statAt(int, string) fileState          { return fileState{kind: kindError, err: errNoDirScan.Error()} }
