package integrity

import (
	"log/slog"
	"slices"
	"time"
)

// Defaults for Options.
const (
	// DefaultGitTimeout bounds each git invocation, at capture and at check
	// (WI-07's 10 s; see Options.GitTimeout for why the check does not use
	// WI-15's 5 s).
	DefaultGitTimeout = 10 * time.Second
	// DefaultHashThreshold: every recorded regular file up to this size is
	// hashed in full (WI-10, BASELINE_CONTENT_HASH_THRESHOLD).
	DefaultHashThreshold int64 = 100 << 10
	// DefaultMaxHashSize: tracked files up to this size are hashed too,
	// streaming (WI-10, BASELINE_GIT_HASH_MAX_SIZE).
	DefaultMaxHashSize int64 = 1 << 30
	// DefaultMaxHashBytes caps the bytes one capture hashes in total.
	DefaultMaxHashBytes int64 = 4 << 30
)

// maxProtectedEntries caps the walk of .supervisor/.
const maxProtectedEntries = 10000

// Options configure Capture.
type Options struct {
	// AllowedWrites are the gate's allowed_writes, pathglob patterns
	// relative to the work tree root. A change to a matching path is not a
	// violation, except below .git/ or .supervisor/ (at any depth), which no
	// pattern can allow, and except a path that resolves outside the work
	// tree (WI-22). Listing a skip candidate turns skipping off for it
	// (WI-05).
	AllowedWrites []string
	// GitDir, if set, is the only git directory the work tree's .git may
	// name besides one inside the work tree (GI-04). If empty, a .git file
	// must name a git directory inside the work tree or a linked-worktree
	// git directory registered (by its "gitdir" file) for this work tree.
	GitDir string
	// GitTimeout bounds each git invocation (default DefaultGitTimeout).
	// The check uses it too: a check timing out is a violation (fail safe,
	// WI-15), so it must not be tighter than the capture that succeeded.
	GitTimeout time.Duration
	// HashThreshold: regular files up to this size are hashed in full
	// (default DefaultHashThreshold). Larger untracked files are compared
	// by size and mtime only.
	HashThreshold int64
	// MaxHashSize: tracked files up to this size are hashed, streaming
	// (default DefaultMaxHashSize). Larger ones are compared by size and
	// mtime only, as are top-level files of the git directories.
	MaxHashSize int64
	// MaxHashBytes caps the bytes a capture hashes in total (default
	// DefaultMaxHashBytes); once it is spent, further files are recorded
	// by size and mtime only. The check re-hashes exactly the files the
	// capture hashed, so it is bounded by the same amount.
	MaxHashBytes int64
	// IndexFresh is the caller's promise that git's index holds the
	// current stat data of every tracked file: the trusted caller has just
	// written the work tree and the index together (`git read-tree -u`,
	// `git apply --index`, as workspace.Manager.Prepare does) and nothing
	// has written the work tree since. The fast capture then takes a
	// tracked regular file's stat data and object id from its index entry
	// without examining the file (PERF-53); entries that are racily clean,
	// or whose times are not before the capture's start (see racyMargin),
	// are examined as without the option, as is every path that is not a
	// plain tracked regular file. The check compares such a file with its
	// index entry as the capture otherwise does, and reads it only if the
	// stat data differs. A false promise cannot hide a change the gate
	// makes; it can only make the check report a file that differed from
	// the index before the gate (fail safe; see the package
	// documentation). It has no effect when git status lists the work
	// tree (Stats.SlowPath).
	IndexFresh bool
	// Git is the git binary (default "git", looked up in PATH).
	Git string
	// Logger receives a line when the index cannot be read and the slower
	// git status path is taken (default slog.Default()).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.GitTimeout <= 0 {
		o.GitTimeout = DefaultGitTimeout
	}
	if o.HashThreshold <= 0 {
		o.HashThreshold = DefaultHashThreshold
	}
	if o.MaxHashSize <= 0 {
		o.MaxHashSize = DefaultMaxHashSize
	}
	if o.MaxHashBytes <= 0 {
		o.MaxHashBytes = DefaultMaxHashBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.AllowedWrites = slices.Clone(o.AllowedWrites)
	return o
}
