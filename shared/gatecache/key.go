// Package gatecache is the fleet-wide gate result cache: a
// content-addressed key for a gate run in a workspace (ComputeKey), and a
// store of passing results on state.Store with single flight across runners
// (Cache).
//
// # The key
//
// The key is the SHA-256 of the git TREE id of the exact code under test
// plus everything else that decides the outcome: gate name, command, env
// (sorted), working dir, timeout, environment id (the sandbox image digest,
// or the identity of the executable and PATH for the process sandbox),
// resource limits, allowed_writes (sorted; they decide the integrity
// outcome), the cache_inputs patterns (sorted) and the content of what they
// match, and the force-hash flag. The workspace's path and HEAD commit are
// not part of it: the same code on any runner, in any workspace, gives the
// same key. A gate whose outcome depends on history (git describe, a
// changelog from git log) must therefore set cache: false.
//
// The tree is computed without touching the workspace, in Go where it can
// be (PERF-13): the index is read with gitindex, every entry's stat data
// compared with the work tree as git compares it (an entry whose stat data
// differs or that is racily clean is re-read), the changed files and the
// untracked, not ignored ones (`git ls-files -o --exclude-standard`, the
// only git process besides `git rev-parse`) hashed as git hashes blobs,
// and the tree ids computed by gitindex.TreeID. That is the tree `git add
// -A` and `git write-tree` would give. Where it might not be (content
// conversion by .gitattributes, info/attributes, core.autocrlf or
// core.eol; a repository configuration that changes how files are added;
// an index with unmerged, assume-unchanged, skip-worktree or intent-to-add
// entries, submodules, or a split or sparse index; no index; paths git
// might refuse; see fastTree), the key takes the git path and Key.GitPath
// says why. The git path copies the index to a temporary file (or, if it
// carries assume-unchanged, skip-worktree or unmerged entries, reads a
// fresh one from HEAD), stages the whole worktree into the copy with `git
// add -A` (so .gitignore is honoured and untracked, not ignored files are
// included) and names the result with `git write-tree`. New blobs and
// trees go to a temporary object directory with the repository's objects
// as an alternate, so the object store is not written either.
//
// Whenever the key could be unsound (too many or too large untracked files,
// submodules not at their recorded commit or with changes, a cache_inputs
// file that vanishes or cannot be read, an unknown environment id, the
// deadline passing) ComputeKey disables caching for the run rather than
// guessing. The key does not cover ignored files other than those
// matched by cache_inputs, external state, or tool versions except through
// the environment id (CA-06).
package gatecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// Limits of the key computation (CD-*, CI-*): past any of them caching is
// disabled for the run.
const (
	// DefaultDeadline bounds the whole key computation (CD-17).
	DefaultDeadline = 30 * time.Second
	// MaxUntrackedFiles is the most untracked, not ignored files a
	// cacheable workspace may have (CD-10).
	MaxUntrackedFiles = 500
	// MaxUntrackedFileSize: an untracked file this large or larger disables
	// caching (CD-13).
	MaxUntrackedFileSize = 1_000_000
	// MaxInputMatches is the most cache_inputs matches (CD-14).
	MaxInputMatches = 10_000
	// MaxDirFiles is the most files a matched cache_inputs directory may
	// hold (CD-15).
	MaxDirFiles = 1000
	// ContentHashThreshold: cache_inputs files up to this size are hashed
	// by content, larger ones by size and mtime unless ForceHashLarge (CI-07).
	ContentHashThreshold = 100 * 1024
	// MaxForceHashSize: files above it are never hashed, even with
	// ForceHashLarge (CI-07).
	MaxForceHashSize = 1 << 30
)

// KeyInput is everything that goes into a gate's cache key.
type KeyInput struct {
	// Dir is the workspace: the top of a git worktree.
	Dir string
	// GitDir optionally names the worktree's git directory; it is then
	// passed as --git-dir (with --work-tree=Dir), so git never discovers the
	// repository from Dir/.git. Empty: discovered from Dir.
	GitDir string
	// Gate is the gate's name.
	Gate string
	// Command is the gate's argv.
	Command []string
	// Env is the gate's environment, already filtered.
	Env map[string]string
	// WorkingDir is the gate's working directory relative to Dir ("" = Dir).
	WorkingDir string
	// TimeoutSeconds is the gate's timeout.
	TimeoutSeconds int
	// EnvironmentID identifies the execution environment: the sandbox
	// image digest or, for the process sandbox, an identity of the
	// executable and PATH computed by the caller. Empty disables caching
	// (CD-19).
	EnvironmentID string
	// Resources is the canonical string form of the resource limits
	// (memory, cpus, pids).
	Resources string
	// AllowedWrites are the gate's allowed_writes patterns.
	AllowedWrites []string
	// CacheInputs are the gate's cache_inputs patterns (pathglob syntax,
	// relative to Dir).
	CacheInputs []string
	// ForceHashLarge hashes cache_inputs files over ContentHashThreshold by
	// content (up to MaxForceHashSize) instead of size and mtime (CI-08).
	ForceHashLarge bool
	// Deadline bounds the computation (default DefaultDeadline); exceeding
	// it disables caching (CD-17).
	Deadline time.Duration
	// Fresh, when set, vouches that Dir is a worktree the caller has just
	// written itself, files and index together, and in which nothing has
	// run since: it holds no untracked file, Dir is the top of its
	// worktree, and Fresh says where its repository is. The key then starts
	// no git process (no `git rev-parse`, no `git ls-files -o`) unless the
	// tree must be computed by git (Key.GitPath). Nil: all of it is asked
	// of git.
	Fresh *Layout
}

// Layout is where a worktree's repository keeps what the key reads, as
// the program that made the worktree knows it (KeyInput.Fresh).
type Layout struct {
	// GitDir is the worktree's git directory: its index and
	// config.worktree.
	GitDir string
	// CommonDir is the repository's common directory: objects,
	// info/attributes and config (the same as GitDir for a main worktree).
	CommonDir string
	// Format is the object format, "sha1" or "sha256".
	Format string
}

// FormatOf returns the object format of a full object id: "sha1" for 40
// hex digits, "sha256" for 64, "" otherwise.
func FormatOf(id string) string {
	switch len(id) {
	case 40:
		return "sha1"
	case 64:
		return "sha256"
	}
	return ""
}

// Key is a computed cache key.
type Key struct {
	// ID is the key: 64 lowercase hex digits (SHA-256), "" when disabled.
	ID string
	// Disabled says why caching is off for this run ("" when it is on).
	Disabled string
	// Tree is the git tree id of the workspace's content, if it was
	// computed.
	Tree string
	// Took is how long the computation took.
	Took time.Duration
	// GitPath says why the tree was computed by git (`git add -A` into a
	// copy of the index and `git write-tree`) rather than in Go from the
	// index and the work tree's stat data; "" when it was computed in Go
	// or not at all.
	GitPath string
}

// keyVersion is mixed into every key; bump it when the key's meaning
// changes.
const keyVersion = "supervisor-gatecache-key/v1"

// disabled is returned by the steps of the computation when caching must be
// off; Reason is the human-readable why.
type disabled struct{ reason string }

func (d *disabled) Error() string { return d.reason }

func disable(format string, args ...any) error {
	return &disabled{reason: fmt.Sprintf(format, args...)}
}

// ComputeKey computes the cache key of a gate run in in.Dir. Every condition
// that makes caching unsound, and every git or file-system failure, yields a
// Key with Disabled set and a nil error; the error is non-nil only when ctx
// itself is done or in.Dir is empty.
func ComputeKey(ctx context.Context, in KeyInput) (Key, error) {
	return computeKey(ctx, in, treeAuto)
}

// computeKey is ComputeKey with the tree computed as mode says (tests and
// benchmarks compare the modes).
func computeKey(ctx context.Context, in KeyInput, mode treeMode) (Key, error) {
	start := time.Now()
	if in.Dir == "" {
		return Key{}, errors.New("gatecache: KeyInput.Dir is empty")
	}
	if err := ctx.Err(); err != nil {
		return Key{}, err
	}
	deadline := in.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	kctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()

	var k Key
	err := k.compute(kctx, in, mode)
	k.Took = time.Since(start)
	if err == nil {
		return k, nil
	}
	k.ID = ""
	if ctx.Err() != nil {
		return k, ctx.Err()
	}
	if kctx.Err() != nil {
		k.Disabled = fmt.Sprintf("cache key computation exceeded %s (CD-17); consider cache: false for this gate", deadline)
		return k, nil
	}
	var d *disabled
	if errors.As(err, &d) {
		k.Disabled = d.reason
	} else {
		k.Disabled = "cache key computation failed: " + err.Error()
	}
	return k, nil
}

func (k *Key) compute(ctx context.Context, in KeyInput, mode treeMode) error {
	if in.EnvironmentID == "" {
		return disable("no execution environment id (image digest or executable identity) (CD-19)")
	}
	tree, root, gitPath, err := treeOf(ctx, in, mode)
	k.GitPath = gitPath
	if err != nil {
		return err
	}
	k.Tree = tree
	inputs, err := hashInputs(ctx, root, in.CacheInputs, in.ForceHashLarge, defaultInputLimits)
	if err != nil {
		return err
	}
	doc := keyDoc{
		Version:        keyVersion,
		Tree:           tree,
		Gate:           in.Gate,
		Command:        nonNil(in.Command),
		Env:            in.Env,
		WorkingDir:     in.WorkingDir,
		TimeoutSeconds: in.TimeoutSeconds,
		EnvironmentID:  in.EnvironmentID,
		Resources:      in.Resources,
		AllowedWrites:  sorted(in.AllowedWrites),
		CacheInputs:    sorted(in.CacheInputs),
		ForceHashLarge: in.ForceHashLarge,
		Inputs:         inputs,
	}
	if doc.Env == nil {
		doc.Env = map[string]string{}
	}
	b, err := json.Marshal(doc) // map keys are sorted by encoding/json
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	k.ID = hex.EncodeToString(sum[:])
	return nil
}

// keyDoc is the canonical document whose SHA-256 is the key.
type keyDoc struct {
	Version        string            `json:"v"`
	Tree           string            `json:"tree"`
	Gate           string            `json:"gate"`
	Command        []string          `json:"command"`
	Env            map[string]string `json:"env"`
	WorkingDir     string            `json:"working_dir"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	EnvironmentID  string            `json:"environment_id"`
	Resources      string            `json:"resources"`
	AllowedWrites  []string          `json:"allowed_writes"`
	CacheInputs    []string          `json:"cache_inputs"`
	ForceHashLarge bool              `json:"force_hash_large"`
	Inputs         []inputEntry      `json:"inputs"`
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func sorted(s []string) []string {
	c := slices.Clone(nonNil(s))
	slices.Sort(c)
	return c
}

// treeMode chooses how treeOf computes the tree.
type treeMode int

const (
	// treeAuto computes the tree in Go from the index and the work tree's
	// stat data (fastTree) and falls back to git when that does not apply.
	treeAuto treeMode = iota
	// treeGit always takes the git path: `git add -A` into a copy of the
	// index, then `git write-tree`.
	treeGit
	// treeGitFresh is treeGit with an index read fresh from HEAD, so every
	// file is hashed (for benchmarks and tests).
	treeGitFresh
)

// repoLocation is where a workspace's repository keeps what the key reads,
// as `git rev-parse` reports it.
type repoLocation struct {
	// root is the worktree's top directory, symlinks resolved.
	root string
	// base runs git in the workspace.
	base gitexec.Runner
	// index, objects and attributes are the index file, the object
	// directory and info/attributes.
	index, objects, attributes string
	// configs are the repository's configuration files: the common one
	// and the worktree's config.worktree (either may be absent).
	configs []string
	// format is the object format ("sha1" or "sha256").
	format string
}

// treeOf returns the git tree id of the worktree's content and the
// worktree's top directory (symlinks resolved). With treeAuto, gitPath is
// why the tree was not computed in Go ("" when it was).
func treeOf(ctx context.Context, in KeyInput, mode treeMode) (tree, root, gitPath string, err error) {
	dir, err := filepath.Abs(in.Dir)
	if err != nil {
		return "", "", "", err
	}
	root, err = filepath.EvalSymlinks(dir)
	if err != nil {
		return "", "", "", disable("workspace %s: %v", in.Dir, err)
	}
	base := gitexec.Runner{Dir: root}
	if in.GitDir != "" {
		base.GitDir, base.WorkTree = in.GitDir, root
	}
	var loc repoLocation
	untracked := make(chan untrackedList, 1) // buffered: its sender never blocks
	if in.Fresh != nil {
		// Vouched for: the layout is as given and nothing is untracked.
		if loc, err = freshLocation(root, *in.Fresh); err != nil {
			return "", "", "", err
		}
		untracked <- untrackedList{}
	} else {
		if mode == treeAuto {
			// The untracked listing runs while rev-parse runs and the
			// work tree is examined; cancel stops git if treeOf returns
			// first.
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				paths, err := listUntracked(lctx, base)
				untracked <- untrackedList{paths, err}
			}()
		}
		if loc, err = locate(ctx, in, root, base); err != nil {
			return "", "", "", err
		}
	}
	if mode == treeAuto {
		tree, err := fastTree(ctx, loc, untracked)
		var fb *fallback
		if !errors.As(err, &fb) {
			return tree, root, "", err
		}
		gitPath = fb.reason
	}
	tree, err = gitTree(ctx, loc, mode == treeGitFresh)
	return tree, root, gitPath, err
}

// freshLocation is the repository location of a worktree its maker
// vouches for (KeyInput.Fresh), taken as given.
func freshLocation(root string, f Layout) (repoLocation, error) {
	if f.GitDir == "" || f.CommonDir == "" {
		return repoLocation{}, errors.New("gatecache: KeyInput.Fresh needs GitDir and CommonDir")
	}
	return repoLocation{
		root: root, base: gitexec.Runner{Dir: root, GitDir: f.GitDir, WorkTree: root},
		index:      filepath.Join(f.GitDir, "index"),
		objects:    filepath.Join(f.CommonDir, "objects"),
		attributes: filepath.Join(f.CommonDir, "info", "attributes"),
		configs:    []string{filepath.Join(f.CommonDir, "config"), filepath.Join(f.GitDir, "config.worktree")},
		format:     f.Format,
	}, nil
}

// locate asks git where the workspace's repository is and checks that the
// workspace is the top of its worktree.
func locate(ctx context.Context, in KeyInput, root string, base gitexec.Runner) (repoLocation, error) {
	out, err := base.Output(ctx, "rev-parse", "--show-toplevel", "--git-path", "index", "--git-path", "objects",
		"--git-path", "info/attributes", "--git-path", "config", "--git-path", "config.worktree", "--show-object-format")
	if err != nil {
		return repoLocation{}, disable("not a usable git worktree (CD-02): %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != 7 {
		return repoLocation{}, disable("git rev-parse: unexpected output %q (CD-02)", out)
	}
	top := lines[0]
	if topReal, err := filepath.EvalSymlinks(top); err != nil || topReal != root {
		return repoLocation{}, disable("workspace %s is not the top of its git worktree (%s)", in.Dir, top)
	}
	return repoLocation{
		root: root, base: base,
		index: abs(root, lines[1]), objects: abs(root, lines[2]), attributes: abs(root, lines[3]),
		configs: []string{abs(root, lines[4]), abs(root, lines[5])},
		format:  lines[6],
	}, nil
}

// gitTree computes the tree with git: the index copied to a temporary
// file (or read fresh from HEAD), `git add -A` into it and `git
// write-tree`, new objects going to a temporary object directory.
func gitTree(ctx context.Context, loc repoLocation, freshIndex bool) (string, error) {
	tmp, err := os.MkdirTemp("", "supervisor-gatecache-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Mkdir(filepath.Join(tmp, "objects"), 0o700); err != nil {
		return "", err
	}
	g := loc.base
	g.Env = []string{
		"GIT_INDEX_FILE=" + filepath.Join(tmp, "index"),
		"GIT_OBJECT_DIRECTORY=" + filepath.Join(tmp, "objects"),
		"GIT_ALTERNATE_OBJECT_DIRECTORIES=" + loc.objects,
	}

	gitlinks, err := prepareIndex(ctx, g, loc.index, filepath.Join(tmp, "index"), freshIndex)
	if err != nil {
		return "", err
	}
	if gitlinks { // `git submodule status` costs ~100 ms even with none
		if err := checkSubmodules(ctx, g, loc.root); err != nil {
			return "", err
		}
	}
	paths, err := listUntracked(ctx, g)
	if err != nil {
		return "", err
	}
	if _, err := checkUntracked(ctx, loc.root, paths); err != nil {
		return "", err
	}
	if _, err := g.Output(ctx, "add", "-A", "--", "."); err != nil {
		return "", disable("git add (CD-04): %v", err)
	}
	tree, err := g.Text(ctx, "write-tree")
	if err != nil {
		return "", disable("git write-tree (CD-04): %v", err)
	}
	return tree, nil
}

func abs(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// prepareIndex fills the temporary index: a copy of the workspace's index,
// whose stat data lets `git add -A` skip unchanged files, unless it has
// entries whose flags would hide changes from git add (assume-unchanged,
// skip-worktree) or unmerged entries; then, or if there is no index, the
// tree of HEAD is read into a fresh index. It reports whether the index
// has submodules (gitlinks).
func prepareIndex(ctx context.Context, g gitexec.Runner, real, tmpIndex string, fresh bool) (gitlinks bool, err error) {
	if !fresh {
		err := copyFile(real, tmpIndex)
		switch {
		case err == nil:
			sc, err := scanIndex(ctx, g)
			if err != nil {
				return false, err
			}
			if sc.plain {
				return sc.gitlinks, nil
			}
			if err := os.Remove(tmpIndex); err != nil {
				return false, err
			}
		case !isNotExist(err):
			return false, disable("copy the workspace index: %v", err)
		}
	}
	if _, err := g.Output(ctx, "read-tree", "HEAD"); err != nil {
		return false, disable("git read-tree HEAD (CD-02): %v", err)
	}
	sc, err := scanIndex(ctx, g)
	return sc.gitlinks, err
}

// indexScan is what scanIndex found.
type indexScan struct {
	plain    bool // every entry is an ordinary cached entry
	gitlinks bool // some entry is a submodule
}

// scanIndex reads the (temporary) index with `git ls-files -s -v`, which
// tags assume-unchanged entries in lower case, skip-worktree ones S and
// unmerged ones M, and gives each entry's mode (160000 for a gitlink).
func scanIndex(ctx context.Context, g gitexec.Runner) (indexScan, error) {
	out, err := g.Output(ctx, "ls-files", "-s", "-v", "-z")
	if err != nil {
		return indexScan{}, disable("git ls-files -s (CD-04): %v", err)
	}
	sc := indexScan{plain: true}
	for rec := range bytes.SplitSeq(out, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		if rec[0] != 'H' {
			sc.plain = false
		}
		if bytes.HasPrefix(rec[min(2, len(rec)):], []byte("160000 ")) {
			sc.gitlinks = true
		}
	}
	return sc, nil
}

// checkSubmodules disables caching for uninitialized, moved or conflicted
// submodules (CD-05) and for submodules with uncommitted changes (CD-06);
// a clean submodule at its recorded commit is covered by the gitlink in
// the tree.
func checkSubmodules(ctx context.Context, g gitexec.Runner, root string) error {
	out, err := g.Output(ctx, "submodule", "status", "--recursive")
	if err != nil {
		return disable("git submodule status (CD-05/CD-07): %v", err)
	}
	for line := range strings.SplitSeq(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		switch line[0] {
		case ' ':
		case '+':
			return disable("submodule checked out at a different commit than recorded (CD-05): %s", strings.TrimSpace(line))
		case '-':
			return disable("submodule not initialized (CD-05): %s", strings.TrimSpace(line))
		case 'U':
			return disable("submodule has merge conflicts (CD-05): %s", strings.TrimSpace(line))
		default:
			return disable("submodule in an unknown state (CD-05): %s", strings.TrimSpace(line))
		}
		path, ok := submodulePath(line)
		if !ok {
			return disable("cannot parse git submodule status line %q (CD-07)", line)
		}
		// Run in the submodule itself, with no superproject index, object
		// directory or git dir in the environment.
		sub := gitexec.Runner{Dir: filepath.Join(root, filepath.FromSlash(path))}
		st, err := sub.Output(ctx, "status", "--porcelain=v1", "-z", "--ignore-submodules=none")
		if err != nil {
			return disable("git status in submodule %s (CD-07): %v", path, err)
		}
		if len(st) > 0 {
			return disable("submodule %s has uncommitted changes (CD-06)", path)
		}
	}
	return nil
}

// submodulePath extracts the path from a `git submodule status` line:
// "<flag><sha1> <path>[ (<describe>)]".
func submodulePath(line string) (string, bool) {
	rest := line[1:]
	sp := strings.IndexByte(rest, ' ')
	if sp < 0 {
		return "", false
	}
	path := rest[sp+1:]
	if strings.HasSuffix(path, ")") {
		if i := strings.LastIndex(path, " ("); i >= 0 {
			path = path[:i]
		}
	}
	return path, path != ""
}

// untrackedList is the outcome of listUntracked.
type untrackedList struct {
	paths []string
	err   error
}

// listUntracked lists the untracked, not ignored files with `git ls-files
// -o --exclude-standard` (a nested repository is listed as "dir/").
func listUntracked(ctx context.Context, g gitexec.Runner) ([]string, error) {
	out, err := g.Output(ctx, "ls-files", "-o", "--exclude-standard", "-z")
	if err != nil {
		return nil, disable("git ls-files -o (CD-04): %v", err)
	}
	var paths []string
	for rec := range bytes.SplitSeq(out, []byte{0}) {
		if len(rec) > 0 {
			paths = append(paths, string(rec))
		}
	}
	return paths, nil
}

// untrackedFile is an untracked file checkUntracked accepted.
type untrackedFile struct {
	path string
	mode fs.FileMode
}

// checkUntracked applies the limits on untracked, not ignored files
// (CD-10, CD-11, CD-13) and returns them. A nested git repository (listed
// as "dir/") would enter the tree as a bare gitlink, without its content:
// it disables caching too.
func checkUntracked(ctx context.Context, root string, paths []string) ([]untrackedFile, error) {
	if len(paths) > MaxUntrackedFiles {
		return nil, disable("%d untracked files, more than %d (CD-10); commit them or add them to .gitignore", len(paths), MaxUntrackedFiles)
	}
	files := make([]untrackedFile, 0, len(paths))
	for i, p := range paths {
		if i%64 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if strings.HasSuffix(p, "/") {
			return nil, disable("untracked nested git repository %s", p)
		}
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, disable("untracked file %s: %v", p, err)
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			return nil, disable("untracked file %s is a symlink (CD-11)", p)
		case !info.Mode().IsRegular():
			return nil, disable("untracked file %s is not a regular file", p)
		case info.Size() >= MaxUntrackedFileSize:
			return nil, disable("untracked file %s is %d bytes, at least %d (CD-13)", p, info.Size(), MaxUntrackedFileSize)
		}
		files = append(files, untrackedFile{path: p, mode: info.Mode()})
	}
	return files, nil
}
