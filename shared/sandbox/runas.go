package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// RunAs is the unprivileged user the process sandbox runs commands as
// (ProcessOptions.RunAs), with no supplementary groups.
type RunAs struct {
	UID, GID uint32
}

// DefaultRunAs is the user a root runner's process sandbox runs commands as
// unless told otherwise: nobody/nogroup on Debian.
var DefaultRunAs = RunAs{UID: 65534, GID: 65534}

// String returns "uid:gid".
func (u RunAs) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// ParseRunAs reads a sandbox user: "uid:gid", a bare uid (the gid is the
// same number), or a user name known to this host (its primary group).
// Root (uid or gid 0) is refused: the point is to run as someone else.
func ParseRunAs(s string) (RunAs, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return RunAs{}, errors.New("sandbox user: empty")
	}
	var u RunAs
	uidText, gidText, hasGID := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(uidText, 10, 32)
	switch {
	case err == nil:
		u.UID, u.GID = uint32(uid), uint32(uid)
		if hasGID {
			gid, err := strconv.ParseUint(gidText, 10, 32)
			if err != nil {
				return RunAs{}, fmt.Errorf("sandbox user %q: gid %q is not a number", s, gidText)
			}
			u.GID = uint32(gid)
		}
	case hasGID:
		return RunAs{}, fmt.Errorf("sandbox user %q: want uid:gid with numbers, a uid, or a user name", s)
	default:
		found, err := user.Lookup(s)
		if err != nil {
			return RunAs{}, fmt.Errorf("sandbox user %q: %w", s, err)
		}
		uid, err1 := strconv.ParseUint(found.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(found.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return RunAs{}, fmt.Errorf("sandbox user %q: uid %q or gid %q is not a number", s, found.Uid, found.Gid)
		}
		u = RunAs{UID: uint32(uid), GID: uint32(gid)}
	}
	if u.UID == 0 || u.GID == 0 {
		return RunAs{}, fmt.Errorf("sandbox user %q: uid and gid must not be 0 (root)", s)
	}
	return u, nil
}

// CanSwitchUser returns nil if this process can run sandboxed commands as
// another user, and otherwise why not. Only root can: switching users
// needs CAP_SETUID and CAP_SETGID, and removing what the command wrote
// afterwards (its files in its own directories) needs root's permission
// to override file modes, which a runner holding only the first two lacks.
func CanSwitchUser() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("the runner runs as uid %d, not root", uid)
	}
	return nil
}

// CanReach returns nil if u can search every directory from / down to dir
// (dir included), and otherwise an error naming the first it cannot: the
// sandbox user must reach the workspaces under the runner's data directory.
func (u RunAs) CanReach(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	path := string(filepath.Separator)
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(abs), path), string(filepath.Separator))
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			if parts[i] == "" {
				continue
			}
			path = filepath.Join(path, parts[i])
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner information", path)
		}
		var bit fs.FileMode = 0o001
		switch {
		case st.Uid == u.UID:
			bit = 0o100
		case st.Gid == u.GID:
			bit = 0o010
		}
		if fi.Mode().Perm()&bit == 0 {
			return fmt.Errorf("user %s cannot enter %s (mode %v, owner %d:%d)", u, path, fi.Mode().Perm(), st.Uid, st.Gid)
		}
	}
	return nil
}

// credential is the Credential commands run with as u.
func (u RunAs) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// prepareRunAs gets a run's directories ready for a command running as u:
// the workspace writable by it (everything but .git, see MakeWritable),
// the scratch directory its own, with a Git configuration trusting the
// workspace (safe.directory: the worktree belongs to the runner, and Git
// refuses another user's repository otherwise).
func prepareRunAs(u RunAs, workspace, scratch string) error {
	if err := u.CanReach(filepath.Dir(workspace)); err != nil {
		return err
	}
	if err := MakeWritable(workspace); err != nil {
		return fmt.Errorf("making the workspace writable for %s: %w", u, err)
	}
	cfg := "[safe]\n\tdirectory = " + gitConfigValue(workspace) + "\n"
	if err := os.WriteFile(filepath.Join(scratch, ".gitconfig"), []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	if err := os.Chown(scratch, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	return nil
}

// gitConfigValue quotes s as a Git configuration value.
func gitConfigValue(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// chownTree makes u the owner of dir and everything in it (symbolic links
// themselves, never their targets), skipping entries that already are.
func chownTree(dir string, u RunAs) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == u.UID && st.Gid == u.GID {
			return nil
		}
		return os.Lchown(p, int(u.UID), int(u.GID))
	})
}
