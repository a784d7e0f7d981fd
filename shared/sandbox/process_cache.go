package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// processCacheDirs returns where a process sandbox run whose scratch
// directory (HOME) is scratch sees each of spec's caches: HOME/<path>
// for a relative one; absolute ones are skipped (host paths are not the
// sandbox's to give out).
func processCacheDirs(spec Spec, scratch string) func(Cache) (string, bool) {
	return func(c Cache) (string, bool) {
		if path.IsAbs(c.Path) {
			return "", false
		}
		return filepath.Join(scratch, filepath.FromSlash(c.Path)), true
	}
}

// prepareCaches gives a run of the process sandbox its caches, in its
// scratch directory: with warm set (a warm-up run) nothing, the caches'
// variables name the warm-up's directories; otherwise, when runs get
// private caches, each relative cache is a farm of hard links to the
// files of its trusted layers (see cache.go), in directories of the run's
// own user. The first such run starts the warm-up in the background.
func (p *Process) prepareCaches(ctx context.Context, spec Spec, scratch string, warm map[string]string) (map[string]string, error) {
	if len(spec.Caches) == 0 {
		return nil, nil
	}
	if warm != nil {
		return cacheEnv(spec, func(c Cache) (string, bool) { d, ok := warm[c.Path]; return d, ok }), nil
	}
	if !p.privateCaches() {
		return nil, nil
	}
	where := processCacheDirs(spec, scratch)
	if p.caches.warms() {
		p.caches.startWarm(processEnvKey, p.runWarmup)
	}
	for _, c := range spec.Caches {
		dst, ok := where(c)
		if !ok {
			continue
		}
		if err := p.mkdirOwned(scratch, dst); err != nil {
			return nil, fmt.Errorf("%w: cache %s: %w", ErrStart, c.Path, err)
		}
		lowers := p.caches.lowers(processEnvKey, c)
		// The operator's seed first, so that the warm-up's layer wins.
		for i := len(lowers) - 1; i >= 0; i-- {
			if err := p.linkFarm(lowers[i], dst); err != nil {
				return nil, fmt.Errorf("%w: cache %s: %w", ErrStart, c.Path, err)
			}
		}
	}
	return cacheEnv(spec, where), nil
}

// privateCaches reports whether runs get Spec.Caches as trusted and
// throw-away layers: with a cache directory and a sandbox user other than
// the runner's (ProcessOptions.RunAs). A command running as the runner's
// own user can write every file of the runner, trusted layers included,
// so there is nothing to protect them with: its Spec.Caches are ignored,
// and its tools keep their caches where they would anyway (Go's build
// cache in the shared XDG_CACHE_HOME of ProcessOptions.CacheDir).
func (p *Process) privateCaches() bool { return p.caches.dir != "" && p.runAs != nil }

// WarmCaches runs the caches' warm-up (CacheOptions.Warmup) unless it ran
// already, and waits for it to end or for ctx. Runs never wait for it
// (see Docker.WarmCaches). It does nothing when runs get no private
// caches (privateCaches) or there is no warm-up.
func (p *Process) WarmCaches(ctx context.Context) error {
	if !p.privateCaches() {
		return nil
	}
	return p.caches.warm(ctx, processEnvKey, p.runWarmup)
}

// Close stops a cache warm-up still running: its command is killed and
// nothing it wrote is kept. Runs still work afterwards, with the caches
// as they are; no warm-up starts any more.
func (p *Process) Close() error {
	if p.caches != nil {
		p.caches.stop()
	}
	return nil
}

// mkdirOwned creates dir and its missing parents below scratch, owned by
// the sandbox user if there is one.
func (p *Process) mkdirOwned(scratch, dir string) error {
	rel, err := filepath.Rel(scratch, dir)
	if err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("%s is not inside the run's directory", dir)
	}
	cur := scratch
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		err := os.Mkdir(cur, 0o755)
		switch {
		case errors.Is(err, fs.ErrExist):
			fi, lerr := os.Lstat(cur)
			if lerr != nil || !fi.IsDir() {
				return fmt.Errorf("%s exists and is not a directory", cur)
			}
			continue
		case err != nil:
			return err
		}
		if p.runAs != nil {
			if err := os.Lchown(cur, int(p.runAs.UID), int(p.runAs.GID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// linkFarm mirrors the tree src into dst: directories are created (owned
// by the sandbox user, if any, so it can add and replace entries),
// regular files become hard links to src's (copies if linking fails),
// symbolic links are recreated; an entry of dst already there is
// replaced. The linked files stay the runner's, read-only: the command
// can replace them in its farm, not change them.
func (p *Process) linkFarm(src, dst string) error {
	return filepath.WalkDir(src, func(sp string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, sp)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		dp := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			if err := os.Mkdir(dp, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if p.runAs != nil {
				return os.Lchown(dp, int(p.runAs.UID), int(p.runAs.GID))
			}
			return nil
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(sp)
			if err != nil {
				return err
			}
			_ = os.Remove(dp)
			return os.Symlink(target, dp)
		case e.Type().IsRegular():
			_ = os.Remove(dp)
			if os.Link(sp, dp) == nil {
				return nil
			}
			return copyFile(sp, dp)
		}
		return nil // devices, sockets, pipes: not a cache's
	})
}

// copyFile copies the regular file src to a new file dst, read-only.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// runWarmup runs one warm-up command of the process sandbox: the
// warm-up's workspace ws, its caches at the directories dirs.
func (p *Process) runWarmup(ctx context.Context, argv []string, ws string, dirs map[string]string) (Result, error) {
	timeout := p.caches.opts.WarmTimeout
	if timeout <= 0 {
		timeout = DefaultWarmTimeout
	}
	spec := Spec{Argv: argv, Workspace: ws, Env: p.caches.opts.WarmEnv, Timeout: timeout, Caches: p.caches.opts.WarmCaches}
	return p.runSpec(ctx, spec, dirs)
}
