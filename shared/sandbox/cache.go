package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Warm caches that the code under test cannot poison (PERF-20…PERF-26).
//
// A Spec's Caches are directories a command's tools keep caches in (Go's
// build and module caches, npm's, pip's, cargo's). Each one the command
// sees is two layers:
//
//   - a trusted layer, read-only to every command: what the sandbox's
//     warm-up (CacheOptions.Warmup: commands of the runner's own
//     configuration, run once per image in a workspace holding only the
//     runner's own files, so no code under test) wrote, above what an
//     operator put in the seed directory. Nothing a gate does ever
//     reaches it;
//   - a throw-away layer of the run, where everything the command writes
//     lands (new files, replaced or deleted ones), removed after the run.
//
// The Docker sandbox stacks them with an overlay mount (a local volume of
// type overlay, mounted by the engine): the trusted layers are lower
// layers, never mounted writable into a gate's container. The process
// sandbox builds a farm of hard links to the trusted files in the run's
// scratch directory: the files belong to the runner and are read-only, so
// a command running as another user (ProcessOptions.RunAs) can replace
// them in its farm but not change them; one running as the runner's own
// user could (the process sandbox is no isolation boundary then).
//
// Layout under CacheOptions.Dir:
//
//	trusted/<env>/<cache>/   the warm-up's layer of one environment (image)
//	trusted/<env>/.complete  written once the warm-up ended with every command
//	                         done: when, and a digest of the warm-up's
//	                         configuration (warmDigest)
//	trusted/<env>/.partial   instead of .complete when a command failed: the
//	                         layer keeps what the warm-up wrote, and the next
//	                         sandbox to start warms up again
//	trusted/<env>.old-<n>/   a layer a later warm-up replaced, or of an image
//	                         the engine no longer has (Docker.pruneCaches),
//	                         removed once no run can still have it mounted
//	                         (staleLayers)
//	seed/<cache>/            the operator's layer, for every environment
//	runs/<run>/<cache>/      a Docker run's throw-away layers (upper, work)
//	runs/warm-<n>/           a warm-up's workspace
//
// <env> is a hash of the image's ID (Docker) or "process", so different
// images never share entries; <cache> names the directory (CacheKey).

// Cache is a directory a command may keep a cache in (Spec.Caches).
type Cache struct {
	// Path is where the command finds it: relative to its HOME (/tmp in a
	// container, the run's scratch directory in the process sandbox), or
	// absolute in a container (the process sandbox skips those). It
	// follows protocol.CheckCacheDir.
	Path string
	// Env, if set, names a variable set to the directory as the command
	// sees it, unless Spec.Env sets that variable itself (then the
	// command uses its own directory, and this cache goes unused).
	Env string
}

// CacheOptions configure a sandbox's caches.
type CacheOptions struct {
	// Dir holds the trusted layers, the operator's seeds and the runs'
	// throw-away layers; it must be on one file system. "" means no
	// persistent caches: each cache is an empty directory of the run.
	Dir string
	// Warmup are the commands (argv) run once per environment, in order,
	// in one workspace that starts with WarmFiles (and nothing else),
	// with the caches of WarmCaches writable, no network and the
	// sandbox's usual limits; what they leave in those caches becomes the
	// trusted layer, and the workspace is removed. A command that fails or
	// cannot start (the image has no such program) ends the warm-up: what
	// was written so far is kept as a partial layer, and the next sandbox
	// started on this directory warms up again. A completed warm-up is
	// redone when these commands, WarmFiles, WarmCaches or WarmEnv change.
	Warmup [][]string
	// WarmFiles are the files of the warm-up's workspace: a
	// slash-separated path within it (filepath.IsLocal) to the file's
	// content. A later command sees what an earlier one wrote there.
	WarmFiles map[string]string
	// WarmCaches are the caches the warm-up writes.
	WarmCaches []Cache
	// WarmEnv is added to the warm-up's environment.
	WarmEnv map[string]string
	// WarmTimeout bounds each warm-up command (0 = DefaultWarmTimeout).
	WarmTimeout time.Duration
	// Log receives what the warm-up did (nil = slog.Default()).
	Log *slog.Logger
}

// DefaultWarmTimeout bounds each warm-up command.
const DefaultWarmTimeout = 15 * time.Minute

// staleLayers is the age past which a run's throw-away layers or an
// unfinished warm-up are a crashed runner's leftovers: longer than any
// gate's timeout, and than a warm-up.
const staleLayers = 3 * time.Hour

// processEnvKey is the environment key of the process sandbox's layers.
const processEnvKey = "process"

// CacheKey names a cache's directories in the store: its path with '/'
// as '~', under "home~" for a path relative to HOME and "abs~" for an
// absolute one ('~' cannot appear in a cache path, so keys never clash).
// An operator seeds the cache .npm in seed/home~.npm.
func CacheKey(p string) string {
	if path.IsAbs(p) {
		return "abs" + strings.ReplaceAll(p, "/", "~")
	}
	return "home~" + strings.ReplaceAll(p, "/", "~")
}

// validateCaches checks spec.Caches: each path (protocol.CheckCacheDir),
// each variable, and that no two overlap.
func validateCaches(caches []Cache) error {
	if len(caches) > protocol.MaxCacheDirs+8 {
		return fmt.Errorf("%w: %d caches: too many", ErrInvalidSpec, len(caches))
	}
	seen := make([]string, 0, len(caches))
	for _, c := range caches {
		p, err := protocol.CheckCacheDir(c.Path)
		if err != nil {
			return fmt.Errorf("%w: cache %q %v", ErrInvalidSpec, c.Path, err)
		}
		if p != c.Path {
			return fmt.Errorf("%w: cache %q is not a clean path (%q)", ErrInvalidSpec, c.Path, p)
		}
		if c.Env != "" && (strings.ContainsAny(c.Env, "=\x00") || deniedEnv(c.Env)) {
			return fmt.Errorf("%w: cache %q: invalid variable name %q", ErrInvalidSpec, c.Path, c.Env)
		}
		for _, q := range seen {
			if protocol.CacheDirsOverlap(p, q) {
				return fmt.Errorf("%w: caches %q and %q overlap", ErrInvalidSpec, q, p)
			}
		}
		seen = append(seen, p)
	}
	return nil
}

// cacheEnv returns the variables of caches whose Env spec.Env does not
// set, given where the command sees each one.
func cacheEnv(spec Spec, seen func(Cache) (string, bool)) map[string]string {
	out := map[string]string{}
	for _, c := range spec.Caches {
		if c.Env == "" {
			continue
		}
		if _, own := spec.Env[c.Env]; own {
			continue
		}
		if p, ok := seen(c); ok {
			out[c.Env] = p
		}
	}
	return out
}

// cacheStore is the directory of CacheOptions.Dir and the warm-up state of
// each environment.
type cacheStore struct {
	opts CacheOptions
	dir  string // absolute; "" = no persistent caches
	log  *slog.Logger
	// own: trusted layers become the runner's (when it is root), for the
	// process sandbox's hard links; the Docker sandbox's stay the
	// warm-up's user's, who is the gates' too, so that the directories
	// an overlay copies up stay writable for them.
	own bool

	mu   sync.Mutex
	envs map[string]*warmState
	// stopCtx ends with stop: a warm-up still running is cancelled (its
	// command killed, its container removed) and publishes nothing.
	stopCtx context.Context
	stopFn  context.CancelFunc
	running sync.WaitGroup
}

// warmState is one environment's warm-up: done is closed once it ended.
type warmState struct {
	done chan struct{}
}

func newCacheStore(opts CacheOptions) (*cacheStore, error) {
	s := &cacheStore{opts: opts, log: opts.Log, envs: map[string]*warmState{}}
	s.stopCtx, s.stopFn = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.Dir == "" {
		return s, nil
	}
	abs, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	s.dir = abs
	if err := validateCaches(opts.WarmCaches); err != nil {
		return nil, fmt.Errorf("sandbox: warm-up caches: %w", err)
	}
	for _, d := range []string{"trusted", "seed", "runs"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("sandbox: cache directory: %w", err)
		}
	}
	s.removeStale()
	return s, nil
}

// removeStale removes the throw-away layers and unfinished warm-ups a
// crashed runner left, and the trusted layers set aside (replaced, or of
// an image the engine no longer has): old enough that no run of a sandbox
// sharing the directory can still use them.
func (s *cacheStore) removeStale() {
	for _, d := range []string{"runs", "trusted"} {
		ents, err := os.ReadDir(filepath.Join(s.dir, d))
		if err != nil {
			continue
		}
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil || time.Since(fi.ModTime()) < staleLayers ||
				(d == "trusted" && !strings.Contains(e.Name(), ".warming-") && !strings.Contains(e.Name(), ".old-")) {
				continue
			}
			removeScratch(filepath.Join(s.dir, d, e.Name()))
		}
	}
}

// setAside renames the trusted layer of environment env to an .old-
// name dated now, which removeStale removes once no run can still have it
// mounted.
func (s *cacheStore) setAside(env string) (string, error) {
	final := filepath.Join(s.dir, "trusted", env)
	old := final + ".old-" + randomHex(6)
	if err := os.Rename(final, old); err != nil {
		return "", err
	}
	now := time.Now()
	_ = os.Chtimes(old, now, now)
	return old, nil
}

// envKey is the store's name of a Docker image, by its ID.
func envKey(imageID string) string {
	sum := sha256.Sum256([]byte(imageID))
	return "image-" + hex.EncodeToString(sum[:])[:24]
}

// trusted returns the trusted layer of cache c in environment env.
func (s *cacheStore) trusted(env string, c Cache) string {
	return filepath.Join(s.dir, "trusted", env, CacheKey(c.Path))
}

// seed returns the operator's layer of cache c.
func (s *cacheStore) seed(c Cache) string {
	return filepath.Join(s.dir, "seed", CacheKey(c.Path))
}

// lowers returns the layers of cache c in environment env that exist,
// the upper-most first: the warm-up's, then the operator's seed.
func (s *cacheStore) lowers(env string, c Cache) []string {
	var out []string
	for _, d := range []string{s.trusted(env, c), s.seed(c)} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// warmFunc runs one warm-up command in the workspace ws with the given
// caches writable at the given host directories.
type warmFunc func(ctx context.Context, argv []string, ws string, dirs map[string]string) (Result, error)

// startWarm starts environment env's warm-up in the background unless it
// has started already, and returns its state. Runs never wait for it:
// until it has ended they get the trusted layers as they were (none, the
// first time).
func (s *cacheStore) startWarm(env string, run warmFunc) *warmState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.envs[env]
	if !ok {
		st = &warmState{done: make(chan struct{})}
		s.envs[env] = st
		if s.stopCtx.Err() != nil {
			close(st.done) // stopped: no warm-up starts any more
			return st
		}
		s.running.Add(1)
		go func() {
			defer s.running.Done()
			defer close(st.done)
			s.runWarm(env, run)
		}()
	}
	return st
}

// stop cancels the warm-ups still running and waits for them to end:
// their commands are killed (a Docker warm-up's container removed), and
// nothing they wrote becomes a trusted layer, so that the next runner
// warms up again. No warm-up starts afterwards.
func (s *cacheStore) stop() {
	s.mu.Lock()
	s.stopFn()
	s.mu.Unlock()
	s.running.Wait()
}

// warm runs environment env's warm-up unless it ran already, and waits for
// it to end (or for ctx).
func (s *cacheStore) warm(ctx context.Context, env string, run warmFunc) error {
	if !s.warms() {
		return nil
	}
	st := s.startWarm(env, run)
	select {
	case <-st.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// warms reports whether the store has a warm-up to run.
func (s *cacheStore) warms() bool {
	return s.dir != "" && len(s.opts.Warmup) > 0 && len(s.opts.WarmCaches) > 0
}

// runWarm runs environment env's warm-up with run, unless a previous
// runner completed the same warm-up (trusted/<env>/.complete with this
// configuration's digest), and publishes what it wrote as the
// environment's trusted layers. A failed command ends it: the layer then
// holds what the warm-up wrote so far, marked partial, and the next
// sandbox to start (a runner's restart) warms up again; this one does not
// retry.
func (s *cacheStore) runWarm(env string, run warmFunc) {
	ctx := s.stopCtx
	final := filepath.Join(s.dir, "trusted", env)
	digest := s.warmDigest()
	if warmedWith(final) == digest {
		return
	}
	began := time.Now()
	staging, err := os.MkdirTemp(filepath.Join(s.dir, "trusted"), env+".warming-")
	if err != nil {
		s.log.Warn("sandbox: cache warm-up: cannot make its directory", "env", env, "err", err)
		return
	}
	defer removeScratch(staging)
	if err := os.Chmod(staging, 0o755); err != nil { // for a sandbox user to reach its caches
		s.log.Warn("sandbox: cache warm-up: cannot make its directory", "env", env, "err", err)
		return
	}
	dirs := map[string]string{}
	for _, c := range s.opts.WarmCaches {
		d := filepath.Join(staging, CacheKey(c.Path))
		// Writable by whichever user the warm-up runs as; closed again
		// before it becomes a trusted layer.
		err := os.Mkdir(d, 0o777)
		if err == nil {
			err = os.Chmod(d, 0o777) // past the umask
		}
		if err != nil {
			s.log.Warn("sandbox: cache warm-up: cannot make its directory", "env", env, "err", err)
			return
		}
		dirs[c.Path] = d
	}
	ws, err := s.warmWorkspace()
	if err != nil {
		s.log.Warn("sandbox: cache warm-up: cannot make its workspace", "env", env, "err", err)
		return
	}
	defer removeScratch(ws)
	failed := false
	for _, argv := range s.opts.Warmup {
		res, err := run(ctx, argv, ws, dirs)
		if ctx.Err() != nil {
			s.log.Info("sandbox: cache warm-up stopped with its runner; nothing kept", "env", env,
				"command", strings.Join(argv, " "))
			return
		}
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d (timed out: %v): %s", res.ExitCode, res.TimedOut, strings.TrimSpace(string(res.Stderr)))
		}
		if err != nil {
			s.log.Warn("sandbox: cache warm-up command failed; the caches keep what it wrote so far, and the next start warms up again",
				"env", env, "command", strings.Join(argv, " "), "err", err)
			failed = true
			break
		}
	}
	for _, d := range dirs {
		if err := sealTrusted(d, s.own); err != nil {
			s.log.Warn("sandbox: cache warm-up: cannot make its layer read-only; not used", "env", env, "err", err)
			return
		}
	}
	record := ".complete"
	if failed {
		record = ".partial"
	}
	if err := os.WriteFile(filepath.Join(staging, record), []byte(time.Now().UTC().Format(time.RFC3339)+"\nwarm-up "+digest+"\n"), 0o444); err != nil {
		s.log.Warn("sandbox: cache warm-up: cannot record it", "env", env, "err", err)
		return
	}
	// Another runner sharing the directory may have published meanwhile:
	// a layer of this configuration, or a complete one where this warm-up
	// failed, stays.
	if d := warmedWith(final); d == digest || (failed && d != "") {
		s.log.Info("sandbox: cache warm-up: another runner's layer is kept", "env", env, "dir", final)
		return
	}
	// The layer this one replaces (a partial one, or an earlier
	// configuration's) may be mounted by runs still going: it is set
	// aside, dated now, and removed once stale (removeStale).
	old := ""
	if _, err := os.Stat(final); err == nil {
		if old, err = s.setAside(env); err != nil {
			s.log.Warn("sandbox: cache warm-up: cannot replace the earlier layer", "env", env, "err", err)
			return
		}
	}
	if err := os.Rename(staging, final); err != nil {
		if old != "" {
			_ = os.Rename(old, final) // the earlier layer back
		}
		s.log.Warn("sandbox: cache warm-up: cannot publish its layer", "env", env, "err", err)
		return
	}
	if failed {
		s.log.Warn("sandbox: cache warm-up ended early; its layer is partial", "env", env,
			"took", time.Since(began).Round(time.Millisecond), "dir", final)
		return
	}
	s.log.Info("sandbox: caches warmed", "env", env, "took", time.Since(began).Round(time.Millisecond), "dir", final)
}

// warmWorkspace makes the warm-up's workspace under runs/ (so that a
// crashed runner's is removed once stale), holding WarmFiles.
func (s *cacheStore) warmWorkspace() (string, error) {
	ws, err := os.MkdirTemp(filepath.Join(s.dir, "runs"), "warm-")
	if err != nil {
		return "", err
	}
	if err := writeWarmFiles(ws, s.opts.WarmFiles); err != nil {
		removeScratch(ws)
		return "", err
	}
	return ws, nil
}

// writeWarmFiles writes files (CacheOptions.WarmFiles) into ws, readable
// by everyone, as is ws itself (for a sandbox user to reach them).
func writeWarmFiles(ws string, files map[string]string) error {
	if err := os.Chmod(ws, 0o755); err != nil {
		return err
	}
	for name, body := range files {
		rel := filepath.FromSlash(name)
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("warm-up file %q is not a path within the workspace", name)
		}
		p := filepath.Join(ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("warm-up file %q: %w", name, err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return fmt.Errorf("warm-up file %q: %w", name, err)
		}
	}
	return nil
}

// warmDigest identifies the warm-up's configuration (its commands, files,
// caches and environment): a completed warm-up counts only for the
// configuration it ran with.
func (s *cacheStore) warmDigest() string {
	b, err := json.Marshal(struct {
		Warmup [][]string
		Caches []Cache
		Env    map[string]string
		Files  map[string]string `json:",omitempty"`
	}{s.opts.Warmup, s.opts.WarmCaches, s.opts.WarmEnv, s.opts.WarmFiles})
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// warmedWith returns the configuration digest of the completed warm-up
// whose layer is dir, "" if it has none (never warmed, partial, or
// recorded before digests were).
func warmedWith(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, ".complete"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "warm-up "); ok {
			return d
		}
	}
	return ""
}

// trustedMtime is the modification (and access) time of every file of a
// trusted layer. Go's build cache marks an entry it uses by setting its
// modification time to now when that is over an hour old; on a Docker
// sandbox's overlay that copies the whole entry up into the run's
// throw-away layer (tens of megabytes and half a second for a small
// package's first `go vet` on this project's bench machine, once the
// warm-up is an hour old). A time ahead of any run's clock keeps Go from
// touching them; the end of 2037 fits every file system's timestamps.
var trustedMtime = time.Date(2037, time.December, 31, 0, 0, 0, 0, time.UTC)

// sealTrusted turns what a warm-up wrote into a trusted layer: with own,
// owned by the runner when it is root (so that no sandbox user owns, and
// could change the mode of, a file it is given a hard link to); with no
// write permission on files and group/other write permission removed from
// directories; files dated trustedMtime. The top directory gets mode 0755.
func sealTrusted(dir string, own bool) error {
	root := own && os.Geteuid() == 0
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if root {
			if err := os.Lchown(p, 0, 0); err != nil {
				return err
			}
		}
		if e.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm()
		want := mode &^ 0o222
		if e.IsDir() {
			want = mode&^0o022 | 0o700
			if p == dir {
				want = 0o755
			}
		}
		if fi.Mode().IsRegular() {
			// Best effort: a file left with its own time costs a copy-up,
			// nothing else.
			_ = os.Chtimes(p, trustedMtime, trustedMtime)
		}
		if want != mode || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			return os.Chmod(p, want)
		}
		return nil
	})
}

// parseUser returns the uid and gid of a "uid:gid" user, ok false if it
// is not numeric.
func parseUser(user string) (uid, gid int, ok bool) {
	var u, g int
	if _, err := fmt.Sscanf(user, "%d:%d", &u, &g); err != nil {
		return 0, 0, false
	}
	return u, g, true
}

// errNoOverlay means the engine's host paths of the cache directory cannot
// be written into overlay mount options.
var errNoOverlay = errors.New("a cache path has a ',' or ':', which overlay mount options cannot carry")
