package workspace

import (
	"io/fs"
	"os"
	"path/filepath"
)

// isObjectID reports whether s is a full lowercase hex object id (SHA-1 or
// SHA-256).
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// removeAll removes path like os.RemoveAll, first making directories that a
// job made read-only writable again if needed. Symbolic links are never
// followed.
func removeAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	chmodDirs(path)
	return os.RemoveAll(path)
}

// chmodDirs gives the owner full access to root and every directory below
// it, so their entries can be listed and removed.
func chmodDirs(root string) {
	info, err := os.Lstat(root)
	if err != nil || !info.IsDir() {
		return
	}
	_ = os.Chmod(root, 0o700)
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.Type()&fs.ModeType == fs.ModeDir {
			chmodDirs(filepath.Join(root, e.Name()))
		}
	}
}
