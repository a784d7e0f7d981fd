package workspace

import (
	"crypto/sha256"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A snapshot records the worktree as Prepare left it, so that Diff can
// tell without git that a job changed nothing: the same trust in stat data
// as `git status`, and the same care for racily clean files.
//
// Each entry but the top-level .git is recorded with its type, its
// owner-execute bit (the only permission git records), size, inode and
// modification time. Change time and the other permission bits are left
// out: sandboxes make the workspace writable for the user their commands
// run as, which changes them and nothing else. A write changes the
// modification time unless it falls in the same tick of the file system's
// clock as the checkout; files modified in or after the tick the index was
// written in (git writes it after the files) are "racy", and their content
// (or a link's target) is recorded too and compared.
type snapshot struct {
	entries map[string]entry
}

type entry struct {
	mode  fs.FileMode // type bits and the owner-execute bit
	size  int64
	ino   uint64
	mtime int64 // nanoseconds
	sum   *[sha256.Size]byte
}

// takeSnapshot records the worktree dir. racyFrom is the modification time
// (nanoseconds) from which a file is racy: the index's. It returns nil if
// the tree cannot be read in full.
func takeSnapshot(dir string, racyFrom int64) *snapshot {
	s := &snapshot{entries: make(map[string]entry)}
	err := walkTree(dir, func(rel, path string, fi fs.FileInfo) error {
		e, err := entryOf(path, fi)
		if err != nil {
			return err
		}
		if e.mtime >= racyFrom && fi.Mode()&fs.ModeDir == 0 {
			if e.sum, err = contentSum(path, fi); err != nil {
				return err
			}
		}
		s.entries[rel] = e
		return nil
	})
	if err != nil {
		return nil
	}
	return s
}

// unchanged reports whether dir still holds exactly what the snapshot
// recorded. Anything it cannot read counts as a change.
func (s *snapshot) unchanged(dir string) bool {
	seen := 0
	err := walkTree(dir, func(rel, path string, fi fs.FileInfo) error {
		want, ok := s.entries[rel]
		if !ok {
			return errChanged
		}
		e, err := entryOf(path, fi)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeDir == 0 && (e.mode != want.mode || e.size != want.size || e.ino != want.ino || e.mtime != want.mtime) {
			return errChanged
		}
		if fi.Mode()&fs.ModeDir != 0 && e.mode != want.mode {
			return errChanged
		}
		if want.sum != nil {
			sum, err := contentSum(path, fi)
			if err != nil || *sum != *want.sum {
				return errChanged
			}
		}
		seen++
		return nil
	})
	return err == nil && seen == len(s.entries)
}

// errChanged stops a walk at the first difference.
var errChanged = fs.ErrExist

// walkTree calls fn for every entry below dir (not dir itself, not its
// top-level .git), with its slash-separated path relative to dir and its
// Lstat information. Links are never followed.
func walkTree(dir string, fn func(rel, path string, fi fs.FileInfo) error) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		rel := filepath.ToSlash(path[len(dir)+1:])
		if rel == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return fn(rel, path, fi)
	})
}

func entryOf(path string, fi fs.FileInfo) (entry, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return entry{}, &fs.PathError{Op: "stat", Path: path, Err: syscall.ENOTSUP}
	}
	return entry{
		mode:  fi.Mode() & (fs.ModeType | 0o100),
		size:  fi.Size(),
		ino:   st.Ino,
		mtime: st.Mtim.Nano(),
	}, nil
}

// contentSum hashes a regular file's content or a link's target.
func contentSum(path string, fi fs.FileInfo) (*[sha256.Size]byte, error) {
	h := sha256.New()
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return nil, err
		}
		h.Write([]byte(target))
	case fi.Mode().IsRegular():
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	// Devices, sockets, pipes: never opened; git records none of them,
	// and their presence alone is compared.
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return &sum, nil
}

// mtimeOf returns path's modification time in nanoseconds.
func mtimeOf(path string) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0, err
	}
	return st.Mtim.Nano(), nil
}
