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
// ignored (from `git status --porcelain=v1 -z`, parsed exactly: nothing is
// ever dropped as malformed), everything below .supervisor/, and the .git
// state. Each path's type, size, mtime, permission bits and symlink target
// are kept, with the SHA-256 of regular files within the size limits of
// Options. A recorded hash is authoritative: the file is re-hashed at check
// time whatever git status says, so a rewrite with the same size and mtime
// is caught, and one with identical content is not a modification. Paths
// are examined without following symbolic links, and nothing is read
// outside the work tree.
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
// compared by size and mtime only. Untracked files inside a skipped
// directory, content inside an already ignored directory, empty
// directories and the content of nested repositories and submodules are
// not examined. A gate that runs git in the work tree without
// GIT_OPTIONAL_LOCKS=0 may refresh the index and trip the check. The check
// is a snapshot: the sandbox must have ended every process of the gate
// before Check runs.
package integrity
