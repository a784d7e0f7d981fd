// Package integrity checks that a gate left its workspace alone: Capture
// records the work tree before the gate, Baseline.Check compares after it
// and reports every change outside the gate's allowed_writes. A violation
// always blocks, whatever the gate's severity. Nothing is restored or
// cleaned up: workspaces are disposable and thrown away.
//
//	base, err := integrity.Capture(ctx, ws.Dir, integrity.Options{AllowedWrites: gate.AllowedWrites})
//	… run the gate …
//	rep, err := base.Check(ctx)
//	if !rep.Clean() { result.IntegrityViolation = true; result.Violations = rep.Strings() }
//
// # What is checked
//
// Every tracked path (a clean tracked file does not appear in git status,
// yet changing it must be caught), every untracked path that is not
// ignored, everything below .supervisor/, and the .git state. Each path's
// type, size, mtime, permission bits, symlink target and the rest of its
// stat data (ctime, inode, device, owner) are kept, with a content hash of
// regular files within the size limits of Options. Paths are examined
// without following symbolic links, and nothing is read outside the work
// tree.
//
// # Trusting stat data (WI-20, PERF-11, PERF-12)
//
// Like git status, the capture and the check trust stat data instead of
// reading every file. A write, a rename over the path, a chmod or a chown
// sets the file's ctime to the current time, and an unprivileged process
// cannot set the ctime back, so a rewrite that keeps the size and restores
// the mtime still changes the stat data. Therefore:
//
//   - A tracked regular file whose stat data equals what git's index
//     recorded, and whose entry is not racily clean (its mtime or ctime not
//     before the index file's own mtime), holds the content the index
//     names: its git object id is recorded as its hash, unread. Any other
//     file is hashed (SHA-256).
//   - Check re-reads a path only when its stat data differs from the
//     capture's, or the capture recorded it racily: its ctime or mtime
//     within 50 ms of the capture's start (or in that second, on a file
//     system without sub-second times), when a change during the gate
//     could leave the same stat data. A re-read file is compared by content
//     with the hash of the same kind, so a rewrite with identical content
//     is not a modification.
//
// When the work tree holds tracked paths only (the usual freshly prepared
// gate workspace), the capture runs no git at all: it reads the index
// (package gitindex) and walks every directory, recording each directory's
// stat data too; the check then runs git status only if a path or a
// directory changed (a path created, removed or renamed anywhere changes
// its directory's ctime). Any untracked or ignored path, an index that
// cannot be read (split index, sparse index), or possible content
// conversion (.gitattributes, info/attributes, core.autocrlf, core.eol, an
// include in the configuration) sends the capture through
// `git status --porcelain=v1 -z` (parsed exactly: nothing is ever dropped
// as malformed) and `git ls-files`, as before; Stats.SlowPath says why,
// and an unreadable index is logged.
//
// # Trusting a freshly written index (PERF-53)
//
// The fast capture above still examines every tracked file once, and the
// check once more: two stat passes where git status makes one. A caller
// that has just written the work tree and the index together (the gate
// runner: `git read-tree -u`, `git apply --index`) can promise that the
// index holds every tracked file's current stat data (Options.IndexFresh).
// The capture then records a tracked regular file (a plain stage-0 entry,
// and a regular file in the directory listing) with the index entry's stat
// data and object id, without examining it. Still examined as above: an
// entry racily clean with respect to the index file, an entry whose ctime
// or mtime is not before the capture's start (less than 50 ms before it),
// a file over the hash limits, symbolic links, gitlinks, a name the
// listing shows as anything but a regular file (or of unknown type), a
// tracked path missing from its directory, and .supervisor/. Every
// directory is still listed and its stat data recorded, and the .git
// state is recorded as always. The check compares such a file's stat
// data with the index entry's as the capture otherwise does (each field
// truncated to 32 bits, see gitindex.Stat), and a file whose stat data
// differs is read and compared by content with the index's object id.
//
// Why this is sound: a gate cannot write, rename over, chmod or chown a
// file without setting its ctime to a time after the capture's start,
// and every entry taken from the index has a ctime before it, so any
// change the gate makes leaves stat data that differs from the index's
// and the file is read. If the promise is false (a tracked file differed
// from the index before the gate), the check compares that file with the
// index rather than with the work tree before the gate: it reports the
// file although the gate did not change it (a false violation: fail
// safe), and reports any further change the gate makes to it, except a
// change that puts back exactly the index's content and executable bit:
// that cannot be told from an identical rewrite (which is no violation),
// and leaves the file as the runner prepared it. A tracked file missing,
// or a symbolic link or a directory, before the gate is examined (the
// directory listing does not show a regular file), so whatever the gate
// does to it is reported.
//
// Ignored paths are recorded by type, size and mtime and reported in
// Report.Ignored when they change, never as violations; a wholly ignored
// directory is one entry, not a set of new files. Untracked paths in the
// SkipCandidates directories (node_modules/, .venv/, build/, … at any
// depth) are not recorded, unless an allowed_writes pattern names the
// directory (WI-01…WI-05).
//
// # allowed_writes
//
// Patterns are pathglob patterns. A deleted path is allowed by its name;
// any other changed path only if it also resolves, symbolic links followed,
// inside the work tree (WI-22). A path with a .git or .supervisor component
// is never allowed, whatever the patterns, even "**".
//
// # The .git state
//
// The work tree's .git must be a directory or a `gitdir:` file naming a
// git directory inside the work tree, Options.GitDir, or a linked worktree
// registered for this work tree; anything else is unsafe and every check
// reports a violation (GI-04). HEAD, the index, config, refs, hooks and a
// sample of the packs are recorded; any difference is a KindGit violation
// no pattern can lift. If .git or a configuration file changed, git is not
// run again after the gate (a gate could have configured a program for git
// to run on the host).
//
// git runs through package gitexec (argv only, hardened environment, no
// hooks, filters, fsmonitor, untracked cache or optional locks), so
// capturing and checking never write .git. git failing at capture is an
// error; failing after the gate is a violation (fail safe).
//
// # Limitations
//
// A file without a hash (over the size limits or the hashing budget) is
// compared by size and mtime only. Stat trust assumes the gate cannot set
// the clock or write the file system's blocks directly (CAP_SYS_TIME, a
// raw block device), and that the work tree is not on a network file
// system written by another host with a skewed clock. Outside Linux stat
// data beyond size and mtime is not read, and every hashed file is re-read. Untracked files inside a skipped
// directory, content inside an already ignored directory, empty
// directories and the content of nested repositories and submodules are
// not examined. A gate that runs git in the work tree without
// GIT_OPTIONAL_LOCKS=0 may refresh the index and trip the check. The check
// is a snapshot: the sandbox must have ended every process of the gate
// before Check runs.
package integrity
