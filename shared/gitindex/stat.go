package gitindex

import (
	"io/fs"
	"time"
)

// Git modes of index entries.
const (
	ModeFile       uint32 = 0o100644
	ModeExecutable uint32 = 0o100755
	ModeSymlink    uint32 = 0o120000
	ModeGitlink    uint32 = 0o160000
)

// GitMode is the mode git records for a file of mode m: a regular file is
// 100755 when its owner may execute it, 100644 otherwise; 0 for a type git
// does not store as a file.
func GitMode(m fs.FileMode) uint32 {
	switch {
	case m.IsRegular():
		if m&0o100 != 0 {
			return ModeExecutable
		}
		return ModeFile
	case m&fs.ModeSymlink != 0:
		return ModeSymlink
	}
	return 0
}

// Matches reports whether the file's stat data, as StatOf read it, equals
// what the index recorded for the entry: every field, nanoseconds
// included. This is stricter than git (which, depending on its build and
// core.checkStat, may ignore nanoseconds, ctime or the device), so a
// match here is a match for git too.
func (e *Entry) Matches(st Stat) bool { return e.Stat == st }

// Racy reports whether the entry's recorded times are not older than the
// index file's own modification time: the file may have been changed in
// the same clock tick as it was recorded, without its stat data showing it
// (git's "racily clean" entries, which git re-reads by content). Unlike
// git, the ctime counts too.
func (e *Entry) Racy(indexMtime time.Time) bool {
	return notBefore(e.Stat.MtimeSec, e.Stat.MtimeNsec, indexMtime) ||
		notBefore(e.Stat.CtimeSec, e.Stat.CtimeNsec, indexMtime)
}

// notBefore reports whether the recorded time (seconds truncated to 32
// bits) is at or after t.
func notBefore(sec, nsec uint32, t time.Time) bool {
	ts := uint32(t.Unix()) //nolint:gosec // git stores 32 bits
	if sec != ts {
		return sec > ts
	}
	return nsec >= uint32(t.Nanosecond()) //nolint:gosec // below 1e9
}
