package integrity

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	// gitTreeHashMax: a file below a .git subdirectory (refs/, hooks/,
	// logs/, info/ …) is hashed in full up to this size, larger ones by size
	// and mtime (GI-02).
	gitTreeHashMax = 1 << 20
	// packFullMax / packEdge: a pack or pack index is hashed in full up to
	// packFullMax bytes, otherwise its first and last packEdge bytes (GI-03).
	packFullMax = 8192
	packEdge    = 4096
	// maxPointerFile caps the size of a .git file, commondir and gitdir.
	maxPointerFile = 4096
)

// errNotRepo: the directory has no .git at all (GI-05).
var errNotRepo = errors.New("no .git: not a git work tree")

// gitLayout is where a work tree's repository lives.
type gitLayout struct {
	// gitDir is the canonical per-work-tree git directory: <root>/.git, or
	// for a linked worktree the directory its .git file points at
	// (<common>/worktrees/<name>), where HEAD and the index live.
	gitDir string
	// commonDir is the canonical directory of config, refs, packed-refs,
	// hooks and objects: gitDir itself, or what gitDir/commondir names.
	commonDir string
	// shared: the common directory lies outside the work tree, so other
	// work trees of the same mirror share it (see sharedExcluded).
	shared bool
}

// resolveLayout finds the repository of the work tree root (canonical).
// unsafe is non-empty when .git cannot be trusted (GI-04): a symlink, a
// file in an unexpected format, a git directory that does not exist, or one
// outside the expected locations. The expected locations of a .git file's
// target are: inside the work tree; expected (Options.GitDir) when set;
// otherwise a linked-worktree git directory whose "gitdir" back-pointer
// names this work tree's .git file, i.e. one that git itself registered
// for this work tree (asking `git rev-parse --git-dir` would prove
// nothing: it only reads the same .git file back).
func resolveLayout(root, expected string) (l gitLayout, unsafe string, err error) {
	dotgit := filepath.Join(root, ".git")
	fi, err := os.Lstat(dotgit)
	if err != nil {
		if isNotExist(err) {
			return l, "", errNotRepo
		}
		return l, "cannot examine .git: " + errText(err), nil
	}
	if expected != "" {
		if expected, err = canonical(expected); err != nil {
			return l, "expected git directory: " + errText(err), nil
		}
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return l, ".git is a symbolic link", nil
	case fi.IsDir():
		l.gitDir = dotgit
		if expected != "" && expected != l.gitDir {
			return l, fmt.Sprintf(".git is a directory, expected the git directory %s", expected), nil
		}
	case fi.Mode().IsRegular():
		target, why := readPointer(dotgit, "gitdir: ")
		if why != "" {
			return l, ".git file: " + why, nil
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(root, target)
		}
		gd, err := canonical(target)
		if err != nil {
			return l, fmt.Sprintf(".git points to %s, which cannot be resolved: %s", target, errText(err)), nil
		}
		l.gitDir = gd
		switch {
		case within(root, gd):
		case expected != "":
			if gd != expected {
				return l, fmt.Sprintf(".git points to %s, expected %s", gd, expected), nil
			}
		default:
			back, why := readPointer(filepath.Join(gd, "gitdir"), "")
			if why != "" {
				return l, fmt.Sprintf(".git points to %s, outside the work tree and not a worktree git directory (gitdir: %s)", gd, why), nil
			}
			if b, err := canonical(filepath.Dir(back)); err != nil || filepath.Join(b, ".git") != dotgit {
				return l, fmt.Sprintf(".git points to %s, which is registered for %s, not this work tree", gd, back), nil
			}
		}
	default:
		return l, ".git is neither a file nor a directory", nil
	}
	if fi, err := os.Stat(l.gitDir); err != nil || !fi.IsDir() {
		return l, fmt.Sprintf("git directory %s is not a directory", l.gitDir), nil
	}
	l.commonDir = l.gitDir
	if _, err := os.Lstat(filepath.Join(l.gitDir, "commondir")); err == nil {
		cd, why := readPointer(filepath.Join(l.gitDir, "commondir"), "")
		if why != "" {
			return l, "commondir: " + why, nil
		}
		if !filepath.IsAbs(cd) {
			cd = filepath.Join(l.gitDir, cd)
		}
		if l.commonDir, err = canonical(cd); err != nil {
			return l, fmt.Sprintf("common git directory %s cannot be resolved: %s", cd, errText(err)), nil
		}
		if fi, err := os.Stat(l.commonDir); err != nil || !fi.IsDir() {
			return l, fmt.Sprintf("common git directory %s is not a directory", l.commonDir), nil
		}
	}
	l.shared = !within(root, l.commonDir)
	return l, "", nil
}

// readPointer reads a small one-line file (.git, commondir, gitdir) and
// returns its content after prefix, or why it is unusable.
func readPointer(path, prefix string) (string, string) {
	f, err := openNoFollow(path)
	if err != nil {
		return "", errText(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPointerFile+1))
	if err != nil {
		return "", errText(err)
	}
	if len(b) > maxPointerFile {
		return "", "unexpectedly large"
	}
	s := strings.TrimRight(string(b), "\r\n")
	if !strings.HasPrefix(s, prefix) || strings.ContainsAny(s, "\x00\n") {
		return "", "unexpected format"
	}
	s = strings.TrimPrefix(s, prefix)
	if s == "" {
		return "", "empty"
	}
	return s, ""
}

// canonical returns the absolute path with every symbolic link resolved.
func canonical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// within reports whether p is root or lies below it (both clean).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// gitItem is the recorded state of one entry of the git directories.
type gitItem struct {
	fileState
	// pack: a pack or pack index, compared by name, size and sampled
	// content, not mtime (git freshens pack mtimes when it rewrites an
	// object that already exists).
	pack bool
}

// gitState maps keys to items: "pointer" for the work tree's .git itself,
// "wt:<rel>" for the per-worktree git directory of a linked worktree,
// "common:<rel>" for the common directory.
type gitState map[string]gitItem

// label names a key for people: every key reads as a path under .git/.
func label(key string) string {
	switch {
	case key == "pointer":
		return ".git"
	case strings.HasPrefix(key, "wt:"):
		return ".git/" + key[len("wt:"):]
	case strings.HasPrefix(key, "common:"):
		return ".git/" + key[len("common:"):]
	}
	return key
}

// trustKeys are the items that decide which configuration git reads (and
// so whether a program named in it could run): when one of them changed,
// the check does not run git again (see Baseline.Check).
var trustKeys = []string{
	"pointer", "wt:gitdir", "wt:commondir", "wt:config.worktree",
	"common:config", "common:config.worktree", "common:commondir",
}

// commonSkip lists the common directory's top-level entries that are not
// hashed: loose objects (GI-03 relies on the read-only mount for them; packs
// are sampled below), other work trees' git directories, submodule and LFS
// storage.
var commonSkip = map[string]bool{"objects": true, "worktrees": true, "modules": true, "lfs": true}

// sharedExcluded lists what the host itself writes into a shared mirror
// while a gate runs, for other jobs: the workspace Manager pins commits
// under refs/supervisor/ (and fetch may log them). They are not hashed when
// the common directory is shared; new pack files are tolerated then too
// (see compareGit).
var sharedExcluded = []string{"refs/supervisor", "logs/refs/supervisor"}

// collectGit records the .git state (GI-01…GI-03): the work tree's .git
// itself; for a linked worktree its whole per-worktree git directory
// (HEAD, index, gitdir, commondir, logs, per-worktree refs); from the
// common directory every top-level file (config, packed-refs, HEAD, …) and
// every subdirectory (refs/, hooks/, logs/, info/, …) except those in
// commonSkip, plus objects/info/ and the packs of objects/pack/. Symbolic
// links are recorded as links, never followed. Top-level files are hashed
// in full up to maxHash bytes; files in subdirectories up to 1 MiB
// (GI-02); larger ones by size and mtime.
func collectGit(ctx context.Context, root string, l gitLayout, maxHash int64) (gitState, error) {
	st := make(gitState)
	dotgit := filepath.Join(root, ".git")
	st["pointer"] = gitItem{fileState: statGitFile(ctx, dotgit, maxPointerFile)}
	if l.gitDir != l.commonDir {
		if err := walkGit(ctx, st, "wt:", l.gitDir, "", maxHash, nil); err != nil {
			return nil, err
		}
	}
	var excluded []string
	if l.shared {
		excluded = sharedExcluded
	}
	entries, err := os.ReadDir(l.commonDir)
	if err != nil {
		return nil, fmt.Errorf("read git directory %s: %w", l.commonDir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if commonSkip[name] {
			continue
		}
		if err := walkGit(ctx, st, "common:", l.commonDir, name, maxHash, excluded); err != nil {
			return nil, err
		}
	}
	if err := walkGit(ctx, st, "common:", l.commonDir, "objects/info", maxHash, nil); err != nil {
		return nil, err
	}
	packs, err := os.ReadDir(filepath.Join(l.commonDir, "objects", "pack"))
	if err != nil && !isNotExist(err) {
		return nil, fmt.Errorf("read pack directory: %w", err)
	}
	for _, e := range packs {
		name := e.Name()
		if !strings.HasSuffix(name, ".pack") && !strings.HasSuffix(name, ".idx") {
			continue
		}
		st["common:objects/pack/"+name] = gitItem{fileState: statPack(filepath.Join(l.commonDir, "objects", "pack", name)), pack: true}
	}
	return st, ctx.Err()
}

// walkGit records base/rel and, if it is a directory, everything below it,
// under prefix+path. Files at depth 0 of base are hashed up to maxHash,
// deeper ones up to gitTreeHashMax.
func walkGit(ctx context.Context, st gitState, prefix, base, rel string, maxHash int64, excluded []string) error {
	start := filepath.Join(base, filepath.FromSlash(rel))
	return filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		r, relErr := filepath.Rel(base, p)
		if relErr != nil {
			return relErr
		}
		r = filepath.ToSlash(r)
		if err != nil {
			if p == start && isNotExist(err) {
				return nil
			}
			st[prefix+r] = gitItem{fileState: fileState{kind: kindError, err: errText(err)}}
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		for _, x := range excluded {
			if r == x || strings.HasPrefix(r, x+"/") {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
		}
		if d.IsDir() {
			return nil // WalkDir never follows a symlink to a directory
		}
		limit := int64(gitTreeHashMax)
		if !strings.Contains(r, "/") {
			limit = maxHash
		}
		st[prefix+r] = gitItem{fileState: statGitFile(ctx, p, limit)}
		return nil
	})
}

// statGitFile records one file of a git directory, hashing a regular file
// of at most limit bytes in full.
func statGitFile(ctx context.Context, full string, limit int64) fileState {
	s := scanner{root: filepath.Dir(full), dirs: map[string]dirCheck{}}
	return s.stat(ctx, filepath.Base(full), limit)
}

// statPack records a pack or pack index by name, size and content: all of
// it up to packFullMax bytes, otherwise the first and last packEdge bytes
// (GI-03).
func statPack(full string) fileState {
	fi, err := os.Lstat(full)
	if err != nil {
		return fileState{kind: kindError, err: errText(err)}
	}
	if !fi.Mode().IsRegular() {
		return fileState{kind: kindOther, perm: fi.Mode().Perm()}
	}
	f, err := openNoFollow(full)
	if err != nil {
		return fileState{kind: kindError, err: errText(err)}
	}
	defer f.Close()
	h := sha256.New()
	size := fi.Size()
	var sz [8]byte
	binary.BigEndian.PutUint64(sz[:], uint64(size))
	h.Write(sz[:])
	if size <= packFullMax {
		_, err = io.Copy(h, f)
	} else {
		buf := make([]byte, packEdge)
		if _, err = f.ReadAt(buf, 0); err == nil {
			h.Write(buf)
			_, err = f.ReadAt(buf, size-packEdge)
			h.Write(buf)
		}
	}
	if err != nil {
		return fileState{kind: kindError, err: errText(err)}
	}
	return fileState{kind: kindRegular, size: size, perm: fi.Mode().Perm(), hash: string(h.Sum(nil))}
}

// gitChange is one difference between two git states.
type gitChange struct {
	key    string
	detail string // "changed", "created", "removed"
}

// compareGit lists what differs between the recorded and the current .git
// state: every difference counts, mtime included (GI-06), except that
// packs are compared without mtime and, in a shared mirror, new packs are
// tolerated (another job's fetch).
func compareGit(old, cur gitState, shared bool) []gitChange {
	var changes []gitChange
	for k, o := range old {
		n, ok := cur[k]
		switch {
		case !ok:
			changes = append(changes, gitChange{k, "removed"})
		case o.pack:
			if o.fileState != n.fileState {
				changes = append(changes, gitChange{k, "changed"})
			}
		default:
			if changed, _ := diff(o.fileState, n.fileState); changed || (o.kind != kindDir && o.mtime != n.mtime) {
				changes = append(changes, gitChange{k, "changed"})
			}
		}
	}
	for k, n := range cur {
		if _, ok := old[k]; ok {
			continue
		}
		if shared && n.pack {
			continue
		}
		changes = append(changes, gitChange{k, "created"})
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].key < changes[j].key })
	return changes
}
