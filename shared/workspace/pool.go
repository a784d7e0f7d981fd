package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// A slot is one pooled worktree of a mirror: a directory registered in the
// mirror once, handed to one job at a time and emptied between jobs
// (unless a job left it exactly as Prepare made it: see pristine).
//
//	<root>/pool/<repo-id>/<n>/        the worktree (Workspace.Dir)
//	<root>/pool/<repo-id>/<n>.lock    flock held while a process owns the slot
//	<mirror>/worktrees/pool-<n>/      its registration (git's admin directory)
//
// The registration is written here rather than by `git worktree add`: it is
// a directory holding gitdir (the path of the worktree's .git file),
// commondir ("../..", the mirror), HEAD (the detached commit) and locked,
// which keeps `git worktree prune` (run by anyone, an agent included) from
// dropping it while the slot is being emptied.
type slot struct {
	repo, mirror string
	n            int
	dir, admin   string
	lockPath     string
	lock         *os.File
	// kept is the record of a slot that went back to the pool as Prepare
	// left it, not emptied (nil: emptied, or not known to this process).
	kept *pristine
}

// slotLocked is the content of a slot's locked file: `git worktree list`
// shows it as the reason the worktree is locked.
const slotLocked = "supervisor workspace pool slot\n"

// maxSlotFailures bounds how many slots a Prepare tries to empty before it
// gives up with the last failure.
const maxSlotFailures = 3

func (m *Manager) poolDir(repo string) string { return filepath.Join(m.pool, repo) }

func (m *Manager) newSlot(repo, mirror string, n int) *slot {
	dir := filepath.Join(m.poolDir(repo), strconv.Itoa(n))
	return &slot{repo: repo, mirror: mirror, n: n, dir: dir, lockPath: dir + ".lock",
		admin: filepath.Join(mirror, "worktrees", "pool-"+strconv.Itoa(n))}
}

// takeSlot returns a slot of repo's pool for this process alone: an idle
// one this process kept, or the first on the host no process holds (its
// flock taken), created if need be. It is not emptied yet.
//
// An idle slot kept as Prepare left it for state (see pristine) is
// preferred; it is handed out with its record, which the caller checks.
func (m *Manager) takeSlot(repo, mirror string, skip map[int]bool, state string) (*slot, error) {
	m.mu.Lock()
	idle := m.idle[repo]
	pick := -1
	for i := len(idle) - 1; i >= 0; i-- {
		s := idle[i]
		if skip[s.n] {
			continue
		}
		if s.kept != nil && s.kept.state == state {
			pick = i
			break
		}
		if pick < 0 {
			pick = i
		}
	}
	if pick >= 0 {
		s := idle[pick]
		m.idle[repo] = append(idle[:pick:pick], idle[pick+1:]...)
		m.mu.Unlock()
		if s.mirror != mirror {
			s.mirror, s.kept = mirror, nil
		}
		return s, nil
	}
	m.mu.Unlock()
	if err := os.MkdirAll(m.poolDir(repo), 0o755); err != nil {
		return nil, fmt.Errorf("workspace pool of %s: %w", repo, err)
	}
	for n := 0; ; n++ {
		if skip[n] {
			continue
		}
		s := m.newSlot(repo, mirror, n)
		lock, ok, err := tryLockFile(s.lockPath)
		if err != nil {
			return nil, fmt.Errorf("workspace pool of %s: slot %d: %w", repo, n, err)
		}
		if ok {
			s.lock = lock
			return s, nil
		}
	}
}

// putSlot keeps a slot, emptied or as Prepare left it (s.kept), its flock
// still held, for this process's next job of the same repository.
func (m *Manager) putSlot(s *slot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.idle[s.repo] = append(m.idle[s.repo], s)
}

// release gives the slot up to any process on the host.
func (s *slot) release() {
	s.kept = nil
	s.lock.Close()
}

// empty removes everything the last job left in the slot: its files (all
// but the .git file, rewritten if it changed) and everything in its
// registration but gitdir, commondir and locked (HEAD, the index, refs and
// logs of the worktree), which it creates if missing. The caller holds the
// slot.
func (m *Manager) empty(s *slot) error {
	s.kept = nil
	if err := ensureDir(s.dir); err != nil {
		return fmt.Errorf("slot %s: %w", s.dir, err)
	}
	dotGit := "gitdir: " + s.admin + "\n"
	if err := clearDir(s.dir, map[string]string{".git": dotGit}); err != nil {
		return fmt.Errorf("empty slot %s: %w", s.dir, err)
	}
	if err := writeNew(filepath.Join(s.dir, ".git"), dotGit); err != nil {
		return fmt.Errorf("slot %s: %w", s.dir, err)
	}
	want := map[string]string{"locked": slotLocked, "gitdir": filepath.Join(s.dir, ".git") + "\n", "commondir": "../..\n"}
	fi, err := os.Lstat(s.admin)
	switch {
	case err == nil && fi.IsDir():
		// locked first: from then on no prune drops the registration,
		// whatever state the rest is in.
		if err := writeNew(filepath.Join(s.admin, "locked"), slotLocked); err != nil {
			return fmt.Errorf("slot %s: registration: %w", s.dir, err)
		}
		if err := clearDir(s.admin, want); err != nil {
			return fmt.Errorf("slot %s: registration: %w", s.dir, err)
		}
		for _, name := range []string{"gitdir", "commondir"} {
			if err := writeNew(filepath.Join(s.admin, name), want[name]); err != nil {
				return fmt.Errorf("slot %s: registration: %w", s.dir, err)
			}
		}
		return nil
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if err == nil {
			// Not a directory (a job replaced it): drop it.
			if err := removeAll(s.admin); err != nil {
				return fmt.Errorf("slot %s: registration: %w", s.dir, err)
			}
		}
		return m.register(s, want)
	default:
		return fmt.Errorf("slot %s: registration: %w", s.dir, err)
	}
}

// register creates the slot's registration in the mirror whole: built
// under tmp/ and renamed into worktrees/, so no prune ever sees it half
// made.
func (m *Manager) register(s *slot, files map[string]string) error {
	tmp, err := os.MkdirTemp(m.tmp, "worktree-")
	if err != nil {
		return fmt.Errorf("slot %s: registration: %w", s.dir, err)
	}
	defer os.RemoveAll(tmp)
	// Readable by the process sandbox's user, like the mirror.
	if err := os.Chmod(tmp, mirrorMode); err != nil {
		return fmt.Errorf("slot %s: registration: %w", s.dir, err)
	}
	for name, content := range files {
		if err := writeNew(filepath.Join(tmp, name), content); err != nil {
			return fmt.Errorf("slot %s: registration: %w", s.dir, err)
		}
	}
	// Never MkdirAll: a mirror removed meanwhile must not be recreated
	// as an empty directory.
	if err := os.Mkdir(filepath.Join(s.mirror, "worktrees"), mirrorMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("slot %s: registration: %w", s.dir, err)
	}
	if err := os.Rename(tmp, s.admin); err != nil {
		return fmt.Errorf("slot %s: registration: %w", s.dir, err)
	}
	return nil
}

// unregister removes the slot's directory and its registration (Sweep).
func (s *slot) unregister() error {
	var errs []error
	if err := removeAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeAll(s.admin); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ensureDir makes dir a real directory (not a symbolic link), searchable by
// everyone like the rest of the pool.
func ensureDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case err == nil && fi.IsDir():
		if fi.Mode().Perm()&0o700 != 0o700 {
			// A job made it read-only: its entries could not be removed.
			return os.Chmod(dir, 0o755)
		}
		return nil
	case err == nil:
		if err := os.Remove(dir); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.Mkdir(dir, 0o755)
}

// clearDir removes every entry of dir but those named in keep that are
// regular files holding exactly the given content. Directories a job made
// read-only are made writable first; symbolic links are removed, never
// followed.
func clearDir(dir string, keep map[string]string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		path := filepath.Join(dir, name)
		if want, ok := keep[name]; ok && hasContent(path, want) {
			continue
		}
		if err := removeAll(path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hasContent reports whether path is a regular file (not a link) holding
// exactly content.
func hasContent(path, content string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(content)) {
		return false
	}
	buf := make([]byte, len(content)+1)
	n, _ := f.Read(buf)
	return n == len(content) && string(buf[:n]) == content
}

// writeNew makes path a regular file holding content, unless it already is
// one: whatever else is there (a file with other content, a link, a
// directory) is removed first, and the file is created exclusively, so no
// link a job left is ever followed.
func writeNew(path, content string) error {
	if hasContent(path, content) {
		return nil
	}
	if err := removeAll(path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
