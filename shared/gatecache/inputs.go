package gatecache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/shared/pathglob"
)

// inputEntry is one cache_inputs match in the key document.
type inputEntry struct {
	Path string `json:"path"`
	// Digest describes the content: "sha256:<hex>", "large:<size>:<mtime_ns>",
	// "huge:<size>:<mtime_ns>", "dir:<count>:<hex>", "symlink:<target>:…",
	// "special".
	Digest string `json:"digest"`
}

// inputHasher hashes the matches of cache_inputs patterns (CI-*).
type inputHasher struct {
	ctx   context.Context
	root  string // the worktree top, symlinks resolved
	force bool
	// matches maps a match's slash-separated path relative to root to its
	// kind (what Lstat said).
	matches map[string]fs.FileMode
	steps   int
	lim     inputLimits
}

// inputLimits are the cache_inputs limits (tests lower them).
type inputLimits struct {
	matches  int // MaxInputMatches
	dirFiles int // MaxDirFiles
}

var defaultInputLimits = inputLimits{matches: MaxInputMatches, dirFiles: MaxDirFiles}

// hashInputs returns the sorted entries of every cache_inputs match under
// root. Patterns with a ".." component or a leading "/" are skipped (CI-01):
// nothing outside the workspace is ever read.
func hashInputs(ctx context.Context, root string, patterns []string, force bool, lim inputLimits) ([]inputEntry, error) {
	h := &inputHasher{ctx: ctx, root: root, force: force, matches: map[string]fs.FileMode{}, lim: lim}
	for _, p := range sorted(patterns) {
		if err := h.collect(p); err != nil {
			return nil, err
		}
	}
	paths := make([]string, 0, len(h.matches))
	for p := range h.matches {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	entries := make([]inputEntry, 0, len(paths))
	for _, rel := range paths {
		d, err := h.digest(rel, h.matches[rel], true)
		if err != nil {
			return nil, err
		}
		entries = append(entries, inputEntry{Path: rel, Digest: d})
	}
	return entries, nil
}

// tick checks the deadline every 64 steps of traversal or hashing.
func (h *inputHasher) tick() error {
	h.steps++
	if h.steps%64 == 0 {
		return h.ctx.Err()
	}
	return nil
}

// collect adds the matches of one pattern. The walk starts at the pattern's
// literal prefix (the directories before the first segment with glob
// syntax), never follows symlinks and never enters .git. A matched
// directory is one match; its files are not matched separately (CI-02).
func (h *inputHasher) collect(pattern string) error {
	p := strings.TrimSuffix(pathglob.Normalize(pattern), "/")
	if p == "" || strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..") {
		return nil // CI-01
	}
	segs := strings.Split(p, "/")
	lit := 0
	for lit < len(segs) && !pathglob.HasMeta(segs[lit]) {
		lit++
	}
	// Every directory on the way to the walk's start must be a real
	// directory, not a symlink: symlinked directories are never entered.
	dirs := segs[:lit]
	if lit == len(segs) {
		dirs = segs[:lit-1]
	}
	for i := range dirs {
		if dirs[i] == ".git" {
			return nil
		}
		info, err := os.Lstat(h.abs(strings.Join(dirs[:i+1], "/")))
		if err != nil || !info.IsDir() {
			return nil // nothing can match beneath it
		}
	}
	if lit == len(segs) { // no glob syntax: a single path
		if segs[lit-1] == ".git" {
			return nil
		}
		info, err := os.Lstat(h.abs(p))
		if err != nil {
			if isNotExist(err) {
				return nil
			}
			return disable("cache_inputs %s: %v", p, err)
		}
		return h.add(p, info.Mode())
	}

	glob := pathglob.Compile(p)
	anyDepth := strings.Contains(p, "**")
	start := h.abs(strings.Join(segs[:lit], "/"))
	return h.walk(start, p, func(rel string, d fs.DirEntry) error {
		if !glob.Match(rel) {
			if d.IsDir() && tooDeep(rel, len(segs), anyDepth) {
				return filepath.SkipDir
			}
			return nil
		}
		if err := h.add(rel, d.Type()); err != nil {
			return err
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
}

// walk walks the tree below start without following symlinks, skipping
// .git entries, and calls fn with each entry's slash-separated path
// relative to the root. An error reading the tree disables caching (the
// reason names pattern); the walk stops when the deadline passes (tick).
func (h *inputHasher) walk(start, pattern string, fn func(rel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(start, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return disable("cache_inputs %s: %v", pattern, err)
		}
		if err := h.tick(); err != nil {
			return err
		}
		if path == start {
			return nil
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(h.root, path)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), d)
	})
}

// tooDeep reports whether nothing below the directory rel can match a
// pattern of segs segments without "**".
func tooDeep(rel string, segs int, anyDepth bool) bool {
	return !anyDepth && strings.Count(rel, "/")+1 >= segs
}

func (h *inputHasher) add(rel string, mode fs.FileMode) error {
	h.matches[rel] = mode.Type()
	if len(h.matches) > h.lim.matches {
		return disable("more than %d cache_inputs matches (CD-14)", h.lim.matches)
	}
	return nil
}

func (h *inputHasher) abs(rel string) string {
	return filepath.Join(h.root, filepath.FromSlash(rel))
}

// digest describes the match at rel, of type mode. top is false for the
// members of a matched directory.
func (h *inputHasher) digest(rel string, mode fs.FileMode, top bool) (string, error) {
	if err := h.tick(); err != nil {
		return "", err
	}
	path := h.abs(rel)
	switch {
	case mode.IsDir():
		if !top {
			return "", fmt.Errorf("gatecache: unexpected directory %s", rel)
		}
		return h.dirDigest(rel)
	case mode&fs.ModeSymlink != 0:
		return h.symlinkDigest(rel)
	case mode.IsRegular():
		info, err := os.Lstat(path)
		if err != nil {
			return "", disable("cache_inputs %s vanished or is unreadable: %v", rel, err)
		}
		return h.fileDigest(rel, path, info)
	default:
		return "special", nil // a device, socket or pipe: never read
	}
}

// fileDigest hashes a regular file by content if it is small or force is
// set, by size and mtime otherwise (CI-07, CI-08).
func (h *inputHasher) fileDigest(rel, path string, info fs.FileInfo) (string, error) {
	size := info.Size()
	switch {
	case size > MaxForceHashSize:
		return fmt.Sprintf("huge:%d:%d", size, info.ModTime().UnixNano()), nil
	case size > ContentHashThreshold && !h.force:
		return fmt.Sprintf("large:%d:%d", size, info.ModTime().UnixNano()), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", disable("cache_inputs %s vanished or is unreadable: %v", rel, err)
	}
	defer f.Close()
	sum := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		if err := h.ctx.Err(); err != nil {
			return "", err
		}
		n, err := f.Read(buf)
		sum.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", disable("cache_inputs %s: read: %v", rel, err)
		}
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

// symlinkDigest records a symlink's target text and, if it resolves to a
// regular file inside the workspace, that file's digest; a target outside
// the workspace is not read (CI-04). A symlink to a directory disables
// caching (CD-16).
func (h *inputHasher) symlinkDigest(rel string) (string, error) {
	path := h.abs(rel)
	target, err := os.Readlink(path)
	if err != nil {
		return "", disable("cache_inputs %s vanished or is unreadable: %v", rel, err)
	}
	prefix := "symlink:" + target + ":"
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return prefix + "dangling", nil
	}
	if r, err := filepath.Rel(h.root, resolved); err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return prefix + "outside", nil
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return prefix + "dangling", nil
	}
	switch {
	case info.IsDir():
		return "", disable("cache_inputs %s is a symlink to a directory (CD-16)", rel)
	case info.Mode().IsRegular():
		d, err := h.fileDigest(rel, resolved, info)
		if err != nil {
			return "", err
		}
		return prefix + d, nil
	default:
		return prefix + "special", nil
	}
}

// dirDigest walks a matched directory without following symlinks and
// summarizes its members (CI-06). More than MaxDirFiles files disables
// caching (CD-15): a partial hash is never used.
func (h *inputHasher) dirDigest(rel string) (string, error) {
	start := h.abs(rel)
	type member struct {
		rel  string
		mode fs.FileMode
	}
	var members []member
	err := h.walk(start, rel, func(r string, d fs.DirEntry) error {
		if d.IsDir() {
			return nil
		}
		members = append(members, member{r, d.Type()})
		if len(members) > h.lim.dirFiles {
			return disable("cache_inputs directory %s has more than %d files (CD-15)", rel, h.lim.dirFiles)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	for _, m := range members { // WalkDir visits in lexical order
		d, err := h.digest(m.rel, m.mode, false)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(sum, "%d:%s\x00%s\n", len(m.rel), m.rel, d)
	}
	return fmt.Sprintf("dir:%d:%s", len(members), hex.EncodeToString(sum.Sum(nil))), nil
}
