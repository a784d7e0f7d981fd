// Package integrity checks that a gate left its workspace alone (DESIGN
// decision 7, seed 000 §11 and §12): Capture records the work tree before
// the gate, Baseline.Check compares after it and reports every change
// outside the gate's allowed_writes. A violation always blocks, whatever
// the gate's severity. Nothing is restored or cleaned up: workspaces are
// disposable and thrown away (so seed §11.7, RS-01…RS-06, and WI-12's
// pre_tracked_clean have no counterpart here).
//
//	base, err := integrity.Capture(ctx, ws.Dir, integrity.Options{AllowedWrites: gate.AllowedWrites})
//	… run the gate …
//	rep, err := base.Check(ctx)
//	if !rep.Clean() { result.IntegrityViolation = true; result.Violations = rep.Strings() }
//
// # What is recorded
//
// Every tracked path (`git ls-files -z`: a clean tracked file does not
// appear in git status, yet changing it must be caught), every path of
// `git status --porcelain=v1 -z --untracked-files=all --ignored=matching`
// that is not ignored, everything below .supervisor/, and the .git state.
// The status parser follows the -z format exactly: `XY path` entries, the
// status being the first two bytes whatever they are, and a rename or copy
// (R or C in either column) followed by its original path in one more
// field (WI-11, WI-13). Both paths of a rename are recorded and nothing is
// ever dropped as "malformed" (spec §30 C1); output that does not parse is
// an error at capture and a violation at check.
//
// Each path's type, size, mtime, permission bits and symlink target are
// kept, and the SHA-256 of regular files up to Options.HashThreshold
// (100 KiB), tracked ones up to Options.MaxHashSize (1 GiB, streamed), as
// long as Options.MaxHashBytes (4 GiB per capture) lasts (WI-10). A
// recorded hash is authoritative at check time: the file is re-hashed
// whenever its size is unchanged, so content rewritten with the same size
// and mtime is caught (racy git, WI-20, and spec §30 C7 closed the strict
// way: every recorded file is compared, whatever git status says), and a
// file rewritten with identical content is not a modification.
// Limitation: a file without a hash (a larger untracked file, a tracked one
// over 1 GiB, any file once the budget is spent) is compared by size and
// mtime only, so a same-size rewrite that restores the mtime goes
// unnoticed there.
//
// Paths are examined without following symbolic links, their own or their
// parents': a path whose parent directory became a symlink is a change, and
// nothing is read outside the work tree.
//
// # Ignored paths
//
// With --ignored=matching git reports a wholly ignored directory as one
// "dir/" entry. Ignored entries are recorded by type, size and mtime only,
// and are never violations: they are reported in Report.Ignored when they
// appear, change or vanish (unless an allowed_writes pattern matches). An
// ignored directory is therefore never taken for new files (spec §30 C2),
// and what happens inside a directory that was already ignored is not
// examined. This follows DESIGN decision 7 (the check covers tracked and
// untracked-not-ignored files) over the seed's wider scope (WI-25, C8).
// .supervisor/ is the exception: it is walked in full, ignored or not.
//
// # Skip candidates
//
// Untracked paths in the SkipCandidates directories (node_modules/, .venv/,
// venv/, __pycache__/, build/, dist/, vendor/, target/, .next/, at any
// depth: WI-01) are neither recorded nor reported as new; tracked files in
// them always are (WI-02). An allowed_writes pattern naming a candidate
// turns skipping off for it (WI-05), and writes there outside the allowed
// patterns are violations again. Ignored entries are reported in
// Report.Ignored whether or not they lie in a candidate (one stat per
// entry, and they are never violations). Accepted limitation (WI-04):
// untracked files in a skipped directory can be created or changed
// without detection.
//
// # allowed_writes
//
// Patterns are pathglob patterns (PM-*). A deleted path is allowed by its
// name; any other changed path only if it also resolves, symbolic links
// followed, inside the work tree: a path that escapes it (a symlink to /etc,
// a directory replaced by a symlink) or cannot be resolved is always a
// violation (WI-22). A path with a .git or .supervisor component is never
// allowed, whatever the patterns, even "**" (PP-01…PP-03; rejecting such
// patterns at load is the config loader's job, this layer simply ignores
// them). A tracked file matched by a pattern may change (spec §30 C8: the
// filter allows it).
//
// # The .git state
//
// The work tree's .git must be a directory, or a file `gitdir: <path>`
// naming a git directory inside the work tree, Options.GitDir, or (without
// Options.GitDir) a linked-worktree git directory whose "gitdir" file names
// this work tree's .git, i.e. one git registered for it. Anything else (a
// symlink, an unexpected format, a target elsewhere or missing) is unsafe
// (GI-04): the baseline records nothing more and every check reports a
// KindGit violation; the same holds when .git turns unsafe during the gate.
//
// For a linked worktree (how the workspace package makes workspaces: `git
// worktree add` from a bare mirror) HEAD and the index live in the
// per-worktree git directory <mirror>/worktrees/<name>, which is recorded
// in full; config, packed-refs, refs/, hooks/, logs/ and info/ live in the
// common directory. From the common directory every top-level file and
// every subdirectory is recorded except objects/ (only objects/info/ and a
// sample of each pack and pack index: size plus the whole content up to
// 8 KiB, else the first and last 4 KiB, GI-03; loose objects rely on the
// read-only mount, GP-01), worktrees/ (other work trees), modules/ and
// lfs/. Top-level files are hashed in full, files below up to 1 MiB, larger
// ones by size and mtime (GI-01, GI-02); symbolic links are recorded as
// links. Any difference, mtime included (packs: without mtime, since git
// freshens them), is a KindGit violation named like ".git/config".
//
// When the common directory lies outside the work tree it is a mirror
// shared with other jobs of the host, and the workspace Manager writes to
// it while gates run: refs/supervisor/ (and its logs) are not recorded then,
// and new packs are tolerated; changed or removed packs still count.
//
// Check reads the .git state before running git, and runs git with the
// git directory recorded at capture, so a rewritten .git file cannot
// redirect it. If the .git entry, gitdir, commondir, config or
// config.worktree changed, git is not run at all after the gate (a gate
// could have configured a filter program for git to run on the host): the
// KindGit violation stands, recorded paths are still compared, and a
// KindUnknown violation says new files were not looked for.
//
// The index is hashed as bytes (GI-01): a gate that runs git in the work
// tree without a read-only .git and without GIT_OPTIONAL_LOCKS=0 may
// refresh it and trip the check (spec §30 C20). Every git this package
// runs uses --no-optional-locks, so capturing and checking never write.
//
// # git
//
// git is run through package gitexec, as an argv (never a shell) with a
// hardened environment: no GIT_* variable of the host, no system or global
// configuration, no prompts, no hooks, no fsmonitor, no LFS filters, no
// untracked cache (it trusts directory mtimes, which a gate can forge), no
// optional locks, submodules ignored (git never runs inside one; their
// content is not checked). Each invocation is bounded by Options.GitTimeout
// (10 s, WI-07; the check uses the same bound rather than WI-15's 5 s,
// since a check that times out is a violation) and its output by 256 MiB.
// git failing at capture is an error (no baseline, WI-07); git failing
// after the gate is the violation UnknownGitStatusFailed (fail safe,
// WI-15).
//
// # Other limitations
//
// Empty directories are invisible to git and are not checked. A nested
// repository (a directory with its own .git) is one "dir/" entry whose
// content is not examined; one the gate creates is always a violation. The
// check is a snapshot: the sandbox must have ended every process of the
// gate before Check runs, or a process left behind could write afterwards.
package integrity
