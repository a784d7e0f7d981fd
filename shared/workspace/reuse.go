package workspace

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// A pristine record is a slot exactly as Prepare left it: every entry of
// its worktree (the .git file included) and of its registration in the
// mirror (HEAD, the index and the rest), with the stat data that any
// change to an entry alters. A job that leaves the slot as the record says
// leaves nothing of its own in it, so the slot goes back to the pool
// without being emptied, and the next job that needs the same checkout
// gets it without `git read-tree` (PERF-55). Whatever differs, the slot is
// emptied and checked out again, as before.
//
// The record is stricter than the Diff snapshot: it compares each entry's
// change time, full mode, size, inode and modification time. No
// unprivileged process can set a change time: every write, truncation,
// chmod, chown, link, rename or attribute change sets it to the current
// time, as does adding or removing an entry of a directory. Entries whose
// change or modification time is not older than the file system's clock
// when the record was taken are racy (a change in the same clock tick
// would keep their times), and their content, a link's target, is
// recorded too and compared.
type pristine struct {
	// state is what Prepare made: the base commit and the patches
	// applied on it (pristineState).
	state string
	// base is the workspace's Base (the commit of the applied patches,
	// if any).
	base string
	// snap is the Diff snapshot Prepare took, still true of the files.
	snap *snapshot
	// tree and admin are the worktree's entries and the registration's,
	// by path relative to the directory ("." for the directory itself).
	tree, admin map[string]strictEntry
}

// strictEntry is one entry of a pristine record.
type strictEntry struct {
	mode         fs.FileMode
	size         int64
	ino          uint64
	mtime, ctime int64 // nanoseconds
	sum          *[sha256.Size]byte
}

// pristineState names what Prepare makes of commit and patches; a kept
// slot is reused only for the same state.
func pristineState(commit string, patches []protocol.PatchRef) string {
	var b strings.Builder
	b.WriteString(commit)
	for _, p := range patches {
		if p.Size == 0 {
			continue // not applied
		}
		b.WriteString("\x00")
		b.WriteString(p.Object)
		b.WriteString("\x00")
		b.WriteString(p.SHA256)
	}
	return b.String()
}

// recordPristine records the slot of ws as Prepare has just left it. It
// returns nil when some entry cannot be read: the slot is then emptied
// after the job.
func recordPristine(ws *Workspace, state string) *pristine {
	now := coarseNow()
	tree, err := strictWalk(ws.Dir, now)
	if err != nil {
		return nil
	}
	admin, err := strictWalk(ws.slot.admin, now)
	if err != nil {
		return nil
	}
	return &pristine{state: state, base: ws.Base, snap: ws.snap, tree: tree, admin: admin}
}

// holds reports whether the slot is still exactly as recorded.
func (p *pristine) holds(s *slot) bool {
	return strictSame(s.dir, p.tree) && strictSame(s.admin, p.admin)
}

// coarseNow is the clock file times are taken from, read before a record
// is: an entry whose change or modification time is at or after it may
// change again without its times changing.
func coarseNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		return 0 // every entry racy: all content compared
	}
	return ts.Nano()
}

// strictWalk records every entry under dir, dir itself included, never
// following links; entries at or after racyFrom get their content hashed.
func strictWalk(dir string, racyFrom int64) (map[string]strictEntry, error) {
	out := make(map[string]strictEntry)
	err := walkStrict(dir, func(rel, path string, fi fs.FileInfo, e strictEntry) (err error) {
		if (e.ctime >= racyFrom || e.mtime >= racyFrom) && !fi.IsDir() {
			if e.sum, err = contentSum(path, fi); err != nil {
				return err
			}
		}
		out[rel] = e
		return nil
	})
	return out, err
}

// strictSame reports whether dir holds exactly the recorded entries.
// Anything it cannot read counts as a difference.
func strictSame(dir string, want map[string]strictEntry) bool {
	seen := 0
	err := walkStrict(dir, func(rel, path string, fi fs.FileInfo, e strictEntry) error {
		w, ok := want[rel]
		if !ok || e.mode != w.mode || e.size != w.size || e.ino != w.ino || e.mtime != w.mtime || e.ctime != w.ctime {
			return errChanged
		}
		if w.sum != nil {
			sum, err := contentSum(path, fi)
			if err != nil || *sum != *w.sum {
				return errChanged
			}
		}
		seen++
		return nil
	})
	return err == nil && seen == len(want)
}

// walkStrict calls fn for every entry under dir, dir itself included ("."),
// never following links, with its stat data as a strictEntry.
func walkStrict(dir string, fn func(rel, path string, fi fs.FileInfo, e strictEntry) error) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e, err := strictEntryOf(path, fi)
		if err != nil {
			return err
		}
		return fn(relOf(dir, path), path, fi, e)
	})
}

func relOf(dir, path string) string {
	if path == dir {
		return "."
	}
	return filepath.ToSlash(path[len(dir)+1:])
}

func strictEntryOf(path string, fi fs.FileInfo) (strictEntry, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return strictEntry{}, &fs.PathError{Op: "stat", Path: path, Err: errors.ErrUnsupported}
	}
	return strictEntry{
		mode:  fi.Mode(),
		size:  fi.Size(),
		ino:   st.Ino,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}, nil
}
