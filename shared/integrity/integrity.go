package integrity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Stats describe a capture.
type Stats struct {
	// Tracked is the number of paths in the index (`git ls-files`).
	Tracked int
	// Files is the number of paths recorded: tracked ones, every path of a
	// non-ignored status entry (both paths of a rename), and .supervisor/.
	Files int
	// Skipped is the number of untracked paths left out as in a skip
	// candidate directory (WI-01).
	Skipped int
	// Ignored is the number of ignored entries recorded (one per wholly
	// ignored directory).
	Ignored int
	// Hashed and HashedBytes count the files whose content hash is
	// recorded (read, or taken from the index: FromIndex); Unhashed the
	// regular files recorded by size and mtime only.
	Hashed      int
	HashedBytes int64
	Unhashed    int
	// FromIndex counts the files whose hash is the object id the index
	// records, trusted from their stat data instead of read (PERF-11).
	FromIndex int
	// StatFromIndex counts the tracked files whose stat data too was taken
	// from the index, the file not examined at all (Options.IndexFresh,
	// PERF-53); StatCalls the stat calls the fast capture made on the
	// work tree's entries (tracked paths, and names whose type the
	// directory listing did not give), directories' own not counted.
	StatFromIndex int
	StatCalls     int
	// SlowPath says why git status was run to list the work tree's paths
	// (an untracked or ignored path, an index this package cannot read,
	// content conversion); "" when the index and a walk sufficed.
	SlowPath string
	// GitItems is the number of .git entries recorded.
	GitItems int
	// Duration is how long the capture took.
	Duration time.Duration
}

// Baseline is the recorded state of a work tree before a gate.
type Baseline struct {
	root    string
	opts    Options
	allowed allowList
	skips   []string
	// unsafe is why .git could not be trusted at capture (GI-04); then
	// nothing else is recorded and every check is a violation.
	unsafe string
	layout gitLayout
	git    gitState
	// files holds the recorded paths; after a fast capture only those
	// outside fast (below .supervisor/).
	files   map[string]fileState
	ignored map[string]fileState
	// fast holds every directory of the work tree and the tracked paths in
	// each when the capture took the fast path (captureFast), nil
	// otherwise: while none of the directories changed, no path can have
	// appeared, and Check does not run git.
	fast  *fastTree
	stats Stats
}

// file returns the recorded state of the path p, if it was recorded.
func (b *Baseline) file(p string) (fileState, bool) {
	if st, ok := b.files[p]; ok {
		return st, true
	}
	if b.fast != nil {
		return b.fast.lookup(p)
	}
	return fileState{}, false
}

// Stats returns figures about the capture.
func (b *Baseline) Stats() Stats { return b.stats }

func (b *Baseline) runner() gitRunner {
	return gitRunner{bin: b.opts.Git, gitDir: b.layout.gitDir, workTree: b.root, timeout: b.opts.GitTimeout}
}

// Capture records the work tree at dir (its root, holding .git) before a
// gate runs:
//
//   - the .git state (GI-01…GI-03): the .git entry itself, the per-worktree
//     git directory of a linked worktree in full, and the common
//     directory's config, packed-refs, HEAD, refs/, hooks/, logs/, info/,
//     objects/info/ and sampled packs (see collectGit);
//   - every tracked path (`git ls-files -z`, so clean files are covered)
//     and every path of `git status --porcelain=v1 -z --untracked-files=all
//     --ignored=matching` that is not ignored, both paths of a rename or
//     copy included (WI-11), untracked ones in a skip candidate directory
//     excepted (WI-01…WI-05): type, size, mtime, mode, symlink target, the
//     rest of the stat data, and a content hash of files up to
//     Options.HashThreshold, tracked files up to Options.MaxHashSize, within
//     Options.MaxHashBytes in total (WI-10): the index's object id for a
//     tracked file whose stat data the index vouches for, the SHA-256 of
//     the content otherwise (see the package documentation);
//   - ignored entries (a whole ignored directory is one "dir/" entry): type,
//     size and mtime only, for Report.Ignored;
//   - everything below .supervisor/, ignored or not.
//
// When the work tree holds tracked paths only, the index and a walk of
// the directories replace git status and git ls-files (captureFast), and
// every directory's stat data is recorded too. The .git state is recorded
// before git runs, and git runs without optional locks, so capturing
// changes nothing. A .git that cannot be
// trusted (GI-04) gives a baseline whose Check reports the violation;
// errors are for a directory that is not a git work tree, git failing
// (WI-07), or ctx ending.
func Capture(ctx context.Context, dir string, opts Options) (*Baseline, error) {
	start := time.Now()
	opts = opts.withDefaults()
	root, err := canonical(dir)
	if err != nil {
		return nil, fmt.Errorf("integrity: capture %s: %w", dir, err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("integrity: capture %s: not a directory", dir)
	}
	b := &Baseline{
		root:    root,
		opts:    opts,
		allowed: compileAllowed(opts.AllowedWrites),
		skips:   activeSkips(opts.AllowedWrites),
		files:   make(map[string]fileState),
		ignored: make(map[string]fileState),
	}
	l, unsafe, err := resolveLayout(root, opts.GitDir)
	if err != nil {
		return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
	}
	if unsafe != "" {
		b.unsafe = unsafe
		b.stats.Duration = time.Since(start)
		return b, nil
	}
	b.layout = l
	// The .git state is recorded while captureFast reads the index and
	// walks the work tree alongside (neither writes anything); git runs
	// only once both are done (PERF-15).
	var gitErr error
	gitDone := make(chan struct{})
	go func() {
		defer close(gitDone)
		b.git, gitErr = collectGit(ctx, root, l, opts.MaxHashSize)
	}()
	s := newScanner(root, newBudget(opts.MaxHashBytes))
	s.since, s.maxHash = start.Add(-racyMargin), opts.MaxHashSize
	ft, err := captureFast(ctx, b, s)
	<-gitDone
	if gitErr != nil {
		return nil, fmt.Errorf("integrity: capture %s: .git state: %w", root, gitErr)
	}
	// The check may need git even when the capture does not.
	if _, err := exec.LookPath(cmp.Or(opts.Git, "git")); err != nil {
		return nil, fmt.Errorf("integrity: capture %s: git: %w", root, err)
	}
	var why *errSlowPath
	switch {
	case err == nil:
		if err := b.recordFast(ctx, s, ft); err != nil {
			return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
		}
		b.stats.Duration = time.Since(start)
		return b, nil
	case errors.As(err, &why):
		b.stats.SlowPath = why.reason
		if why.index {
			opts.Logger.Info("integrity: the index could not be read, git status lists the work tree", "dir", root, "reason", why.reason)
		}
		s = newScanner(root, newBudget(opts.MaxHashBytes))
		s.since = start.Add(-racyMargin)
	default:
		return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
	}
	g := b.runner()
	entries, err := g.status(ctx)
	if err != nil {
		return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
	}
	tracked, err := g.lsFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
	}

	// Paths to record, each with the size up to which it is hashed.
	limits := make(map[string]int64)
	want := func(p string, limit int64) {
		if old, ok := limits[p]; !ok || limit > old {
			limits[p] = limit
		}
	}
	for _, p := range tracked {
		want(p, opts.MaxHashSize)
	}
	var ignored []string
	for _, e := range entries {
		if e.Ignored() {
			if !isProtected(e.Path) {
				ignored = append(ignored, e.Path)
			}
			continue
		}
		limit := opts.MaxHashSize // a tracked path with changes
		if e.Untracked() {
			limit = opts.HashThreshold
		}
		for _, p := range []string{e.Path, e.Orig} {
			switch {
			case p == "":
			case e.Untracked() && skipped(p, b.skips):
				b.stats.Skipped++
			default:
				want(p, limit)
			}
		}
	}
	prot, complete, err := walkProtected(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
	}
	if !complete {
		return nil, fmt.Errorf("integrity: capture %s: .supervisor/ has more than %d entries", root, maxProtectedEntries)
	}
	for _, p := range prot {
		want(p, opts.HashThreshold)
	}

	paths := make([]string, 0, len(limits))
	for p := range limits {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	states := make([]fileState, len(paths))
	if err := parallel(ctx, len(paths), func(i int) {
		states[i] = s.stat(ctx, paths[i], limits[paths[i]])
	}); err != nil {
		return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
	}
	for i, p := range paths {
		b.files[p] = states[i]
		if states[i].kind == kindRegular && states[i].hash == "" {
			b.stats.Unhashed++
		}
	}
	istates := make([]fileState, len(ignored))
	if err := parallel(ctx, len(ignored), func(i int) {
		istates[i] = s.stat(ctx, ignored[i], -1)
	}); err != nil {
		return nil, fmt.Errorf("integrity: capture %s: %w", root, err)
	}
	for i, p := range ignored {
		b.ignored[p] = istates[i]
	}

	b.stats.Tracked = len(tracked)
	b.stats.Files = len(b.files)
	b.stats.Ignored = len(b.ignored)
	b.stats.Hashed = int(s.files.Load())
	b.stats.HashedBytes = s.hashed.Load()
	b.stats.GitItems = len(b.git)
	b.stats.Duration = time.Since(start)
	return b, nil
}

// recordFast completes a capture from captureFast's records: .supervisor/
// is walked and recorded as the slow path records it.
func (b *Baseline) recordFast(ctx context.Context, s *scanner, ft *fastTree) error {
	prot, complete, err := walkProtected(ctx, b.root)
	if err != nil {
		return err
	}
	if !complete {
		return fmt.Errorf(".supervisor/ has more than %d entries", maxProtectedEntries)
	}
	b.fast = ft
	for _, p := range prot {
		if _, ok := b.file(p); !ok {
			b.files[p] = s.stat(ctx, p, b.opts.HashThreshold)
		}
	}
	count := func(st fileState) {
		switch {
		case st.kind != kindRegular:
		case st.hash == "":
			b.stats.Unhashed++
		default:
			b.stats.Hashed++
			b.stats.HashedBytes += st.size
			if st.blob {
				b.stats.FromIndex++
			}
		}
	}
	ft.each(count)
	for _, st := range b.files {
		count(st)
	}
	b.stats.Tracked = ft.tracked
	b.stats.StatFromIndex = int(s.unstatted.Load())
	b.stats.StatCalls = int(s.statted.Load())
	b.stats.Files = ft.tracked + len(b.files)
	b.stats.GitItems = len(b.git)
	return ctx.Err()
}

// Check examines the work tree again after the gate and reports every
// change against the baseline:
//
//  1. The .git state is re-read before git runs (after a fast capture,
//     while step 2 runs alongside), from the git directories recorded at
//     capture (a rewritten .git file never redirects the check). Any difference, mtime included, is a KindGit
//     violation that no allowed_writes pattern can lift (GI-06, PP-01), as
//     is a .git that is unsafe now (GI-04).
//  2. Every recorded path is compared with the file system, whatever git
//     says: a path whose stat data (ctime included) differs from the
//     capture's, or that was recorded racily, has its recorded hash
//     re-computed (WI-20: a rewrite that keeps size and mtime still moves
//     the ctime), a deleted path is KindDeleted (WI-19).
//  3. git status lists the paths that are new since the capture; after a
//     fast capture it is not run when nothing so far changed and every
//     directory has its recorded stat data (no entry can have been
//     created, removed or renamed in it). If the
//     .git entry, gitdir, commondir or a config file changed, git is NOT
//     run (it would read configuration the gate wrote, which could name a
//     program to run); the violation already blocks, and a KindUnknown
//     UnknownNotRescanned says new files were not looked for. If git
//     fails, the check fails safe with UnknownGitStatusFailed (WI-15).
//  4. .supervisor/ is walked again for new entries.
//  5. allowed_writes filter the modified, new and deleted paths (WI-22):
//     a deleted path by its name; any other path only if it also resolves
//     (symbolic links followed) inside the work tree: one that escapes it
//     or cannot be resolved is always a violation. Paths below .git/ or
//     .supervisor/ are never allowed.
//
// An error is returned only for a nil baseline or when ctx ends; everything
// else the check cannot establish is a violation.
func (b *Baseline) Check(ctx context.Context) (*Report, error) {
	if b == nil {
		return nil, errors.New("integrity: check: no baseline")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("integrity: check %s: %w", b.root, err)
	}
	r := &Report{}
	if b.unsafe != "" {
		r.Violations = append(r.Violations, Violation{Path: ".git", Kind: KindGit, Detail: "unsafe: " + b.unsafe})
		return r, nil
	}

	// 2 (after a fast capture) runs alongside 1: both only read.
	s := newScanner(b.root, nil)
	var fast struct {
		current map[string]fileState
		same    bool
		err     error
	}
	fastDone := make(chan struct{})
	if b.fast != nil {
		go func() {
			defer close(fastDone)
			fast.current, fast.same, fast.err = b.checkFast(ctx, s)
		}()
		defer func() { <-fastDone }()
	} else {
		close(fastDone)
	}

	// 1. .git.
	runGit, indexChanged := true, false
	if _, unsafe, err := resolveLayout(b.root, b.opts.GitDir); err != nil || unsafe != "" {
		detail := "unsafe: " + unsafe
		if err != nil {
			detail = "removed"
		}
		r.Violations = append(r.Violations, Violation{Path: ".git", Kind: KindGit, Detail: detail})
		runGit, indexChanged = false, true
	}
	cur, err := collectGit(ctx, b.root, b.layout, b.opts.MaxHashSize)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("integrity: check %s: %w", b.root, ctx.Err())
		}
		r.Violations = append(r.Violations, Violation{Path: UnknownGitState, Kind: KindUnknown, Detail: err.Error()})
		runGit = false
	} else {
		for _, c := range compareGit(b.git, cur, b.layout.shared) {
			if c.key == "pointer" && slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Path == ".git" }) {
				runGit = false
				continue // already reported as unsafe
			}
			detail := c.detail
			if rel, ok := strings.CutPrefix(c.key, "common:"); ok && b.layout.gitDir != b.layout.commonDir {
				if _, dup := b.git["wt:"+rel]; dup {
					detail += " (in the common git directory)"
				} else if _, dup := cur["wt:"+rel]; dup {
					detail += " (in the common git directory)"
				}
			}
			r.Violations = append(r.Violations, Violation{Path: label(c.key), Kind: KindGit, Detail: detail})
			if c.key == "pointer" || strings.HasSuffix(c.key, ":index") {
				indexChanged = true
			}
			if slices.Contains(trustKeys, c.key) {
				runGit = false
			}
		}
	}

	// 2. Recorded paths. After a fast capture, checkFast returns only the
	// paths whose stat data changed (or that were recorded racily), with
	// their current state: every other path is as recorded.
	var current map[string]fileState
	dirsSame := false
	if b.fast != nil {
		<-fastDone
		if fast.err != nil {
			return nil, fmt.Errorf("integrity: check %s: %w", b.root, fast.err)
		}
		current, dirsSame = fast.current, fast.same
	} else {
		paths := make([]string, 0, len(b.files))
		for p := range b.files {
			paths = append(paths, p)
		}
		states := make([]fileState, len(paths))
		if err := parallel(ctx, len(paths), func(i int) {
			states[i] = s.restat(ctx, paths[i], b.files[paths[i]])
		}); err != nil {
			return nil, fmt.Errorf("integrity: check %s: %w", b.root, err)
		}
		current = make(map[string]fileState, len(paths))
		for i, p := range paths {
			current[p] = states[i]
		}
	}
	var cands []candidate
	for p, now := range current {
		old, _ := b.file(p)
		changed, detail := diff(old, now)
		if !changed {
			continue
		}
		kind := KindModified
		switch {
		case old.kind == kindMissing:
			kind = KindNew
		case now.kind == kindMissing:
			kind = KindDeleted
		}
		cands = append(cands, candidate{Violation{Path: p, Kind: kind, Detail: detail}})
	}

	// 3. New paths, from git, unless the fast capture's directories show
	// that none can have appeared: nothing else changed, and no directory
	// of the work tree has a different stat (every entry created, removed
	// or renamed in a directory sets its ctime) or was recorded racily.
	seen := func(p string) bool { _, ok := b.file(p); return ok }
	curIgnored := make(map[string]bool)
	if runGit && len(cands) == 0 && len(r.Violations) == 0 && dirsSame {
		r.skippedGit = true
	} else if !runGit {
		r.Violations = append(r.Violations, Violation{Path: UnknownNotRescanned, Kind: KindUnknown})
	} else if entries, err := b.runner().status(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("integrity: check %s: %w", b.root, ctx.Err())
		}
		r.Violations = append(r.Violations, Violation{Path: UnknownGitStatusFailed, Kind: KindUnknown, Detail: truncate(err.Error(), 300)})
	} else {
		for _, e := range entries {
			if e.Ignored() {
				if !isProtected(e.Path) {
					curIgnored[e.Path] = true
				}
				continue
			}
			for _, p := range []string{e.Path, e.Orig} {
				if p == "" || seen(p) || (e.Untracked() && skipped(p, b.skips)) {
					continue
				}
				switch st := s.stat(ctx, p, -1); {
				case st.kind != kindMissing:
					cands = append(cands, candidate{Violation{Path: p, Kind: KindNew}})
				case !e.Untracked() && (b.fast == nil || indexChanged):
					// A tracked path the capture did not know: the index
					// itself changed (also a KindGit violation). A fast
					// capture recorded the index's paths only, not those
					// of HEAD staged for deletion (or renamed away): while
					// the index is unchanged, such a path was missing at
					// capture too.
					cands = append(cands, candidate{Violation{Path: p, Kind: KindDeleted}})
				}
			}
		}
	}

	// 4. .supervisor/.
	prot, complete, err := walkProtected(ctx, b.root)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("integrity: check %s: %w", b.root, ctx.Err())
		}
		complete = false
	}
	if !complete {
		r.Violations = append(r.Violations, Violation{Path: UnknownProtectedWalk, Kind: KindUnknown})
	}
	reported := make(map[string]bool, len(cands))
	for _, c := range cands {
		reported[c.Path] = true
	}
	for _, p := range prot {
		if !seen(p) && !reported[p] {
			cands = append(cands, candidate{Violation{Path: p, Kind: KindNew}})
		}
	}

	// 5. allowed_writes.
	for _, c := range cands {
		if v, ok := b.filter(c.Violation); ok {
			r.Violations = append(r.Violations, v)
		}
	}

	// Ignored paths: reported only.
	for p := range curIgnored {
		if _, ok := b.ignored[p]; !ok && !b.allowed.match(p) {
			r.Ignored = append(r.Ignored, p)
		}
	}
	for p, old := range b.ignored {
		now := s.stat(ctx, p, -1)
		if (now.kind != old.kind || now.size != old.size || now.mtime != old.mtime || now.link != old.link) && !b.allowed.match(p) {
			r.Ignored = append(r.Ignored, p)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("integrity: check %s: %w", b.root, err)
	}
	r.sort()
	return r, nil
}

// candidate is a change before allowed_writes filtering.
type candidate struct{ Violation }

// filter applies allowed_writes to one change (WI-22) and returns the
// violation to report, if any.
func (b *Baseline) filter(v Violation) (Violation, bool) {
	if v.Kind == KindDeleted {
		return v, !b.allowed.match(v.Path)
	}
	if why := b.escapes(v.Path); why != "" {
		v.Detail = why
		return v, true
	}
	// git reports a nested repository as one "dir/" entry: its .git is a
	// protected path, so no pattern allows it.
	if dir, ok := strings.CutSuffix(v.Path, "/"); ok {
		if _, err := os.Lstat(filepath.Join(b.root, filepath.FromSlash(dir), ".git")); err == nil {
			v.Detail = "nested git repository"
			return v, true
		}
	}
	return v, !b.allowed.match(v.Path)
}

// escapes returns why a work tree path does not resolve inside the work
// tree (symbolic links followed), or "" if it does.
func (b *Baseline) escapes(rel string) string {
	real, err := filepath.EvalSymlinks(filepath.Join(b.root, filepath.FromSlash(strings.TrimSuffix(rel, "/"))))
	if err != nil {
		return "cannot be resolved: " + errText(err)
	}
	if !within(b.root, real) {
		return "resolves outside the workspace"
	}
	return ""
}

// walkProtected lists everything below .supervisor/ that is not a
// directory (and .supervisor itself if it is not a real directory), without
// following symbolic links. complete is false past maxProtectedEntries.
func walkProtected(ctx context.Context, root string) (paths []string, complete bool, err error) {
	base := filepath.Join(root, ".supervisor")
	fi, err := os.Lstat(base)
	if err != nil {
		if isNotExist(err) {
			return nil, true, nil
		}
		return []string{".supervisor"}, true, nil
	}
	if !fi.IsDir() {
		return []string{".supervisor"}, true, nil
	}
	complete = true
	err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if d != nil && d.IsDir() && err == nil {
			return nil
		}
		if len(paths) >= maxProtectedEntries {
			complete = false
			return fs.SkipAll
		}
		rel, relErr := filepath.Rel(root, p)
		if relErr != nil {
			return relErr
		}
		paths = append(paths, filepath.ToSlash(rel))
		if err != nil && d != nil && d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	return paths, complete, err
}
