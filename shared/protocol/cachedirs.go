package protocol

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Cache directories of a gate (GateSpec.CacheDirs, PERF-23).
const (
	// MaxCacheDirs bounds how many cache_dirs a gate may list.
	MaxCacheDirs = 8
	// MaxCacheDirLen bounds the length of one cache_dirs entry.
	MaxCacheDirLen = 200
)

// cacheDirRE is what a cache_dirs entry may be made of: no spaces, and no
// ',' or ':', which separate the options and layers of an overlay mount.
var cacheDirRE = regexp.MustCompile(`^[A-Za-z0-9._+@/-]+$`)

// reservedCacheDirs are container paths a cache may be neither nor lie
// under: the workspace, the files given to the command, and the kernel's.
var reservedCacheDirs = []string{"/workspace", "/run/supervisor", "/proc", "/sys", "/dev"}

// CheckCacheDir checks one cache_dirs entry and returns its clean form: a
// path relative to the command's HOME (.npm, .cache/pip) or an absolute
// path in the container (/root/.cargo/registry). It may not be empty,
// contain a '..' component, name HOME, /, /tmp or a reserved path
// (/workspace, /run/supervisor, /proc, /sys, /dev) or lie under one, nor
// use characters other than letters, digits and ._+@/-.
func CheckCacheDir(s string) (string, error) {
	switch {
	case s == "":
		return "", fmt.Errorf("is empty")
	case len(s) > MaxCacheDirLen:
		return "", fmt.Errorf("is longer than %d characters", MaxCacheDirLen)
	case !cacheDirRE.MatchString(s):
		return "", fmt.Errorf("may only contain letters, digits and . _ + @ / -")
	}
	for _, elem := range strings.Split(s, "/") {
		if elem == ".." {
			return "", fmt.Errorf("must not contain a '..' component")
		}
	}
	p := path.Clean(s)
	if !path.IsAbs(p) {
		if p == "." {
			return "", fmt.Errorf("names HOME itself; name a directory below it (.npm, .cache/pip)")
		}
		return p, nil
	}
	if p == "/" || p == "/tmp" {
		return "", fmt.Errorf("names %s itself; name a directory below it", p)
	}
	for _, r := range reservedCacheDirs {
		if p == r || strings.HasPrefix(p, r+"/") {
			return "", fmt.Errorf("lies in %s, which the sandbox provides itself", r)
		}
	}
	return p, nil
}

// CacheDirsOverlap reports whether two clean cache_dirs entries are the
// same directory or one lies under the other (both relative or both
// absolute; a relative one is under HOME, which differs by sandbox).
func CacheDirsOverlap(a, b string) bool {
	if path.IsAbs(a) != path.IsAbs(b) {
		return false
	}
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}
