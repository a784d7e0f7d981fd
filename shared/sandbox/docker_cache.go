package sandbox

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
)

// cacheTarget is where a container sees cache c: its absolute path, or
// its path under HOME (/tmp).
func cacheTarget(c Cache) string {
	if path.IsAbs(c.Path) {
		return c.Path
	}
	return path.Join("/tmp", c.Path)
}

// cacheRun is what a container run's caches need cleaned up afterwards.
type cacheRun struct {
	dir string // the run's throw-away layers ("" = none)
}

func (r cacheRun) cleanup() {
	if r.dir != "" {
		removeScratch(r.dir)
	}
}

// addCaches gives the container of spec its caches (see cache.go):
//
//   - with warm set (a warm-up run), each cache of the warm-up is the
//     host directory warm names for it, mounted writable;
//   - with no cache directory configured, each cache is an empty tmpfs;
//   - otherwise each cache is an anonymous local volume of type overlay,
//     mounted by the engine, whose lower layers are the trusted layers of
//     the image (the warm-up's, then the operator's seed) and whose upper
//     layer is a fresh directory of the run, removed afterwards (a cache
//     with no trusted layer at all is that directory alone, bind-mounted).
//
// It sets each cache's variable (Cache.Env) in cfg.Env unless spec.Env
// sets it.
func (d *Docker) addCaches(ctx context.Context, spec Spec, cfg *container.Config, hostCfg *container.HostConfig,
	warm map[string]string, imageID string) (cacheRun, error) {
	if len(spec.Caches) == 0 {
		return cacheRun{}, nil
	}
	env := cacheEnv(spec, func(c Cache) (string, bool) { return cacheTarget(c), true })
	for k, v := range env {
		cfg.Env = setEnv(cfg.Env, k, v)
	}
	if warm != nil {
		for _, c := range spec.Caches {
			hostCfg.Mounts = append(hostCfg.Mounts, mount.Mount{Type: mount.TypeBind, Source: d.HostPath(warm[c.Path]), Target: cacheTarget(c)})
		}
		return cacheRun{}, nil
	}
	if d.caches.dir == "" {
		d.tmpfsCaches(spec, hostCfg)
		return cacheRun{}, nil
	}
	if imageID == "" {
		id, err := d.ImageDigest(ctx, cfg.Image)
		if err != nil {
			return cacheRun{}, err
		}
		imageID = id
	}
	env0 := envKey(imageID)
	if d.caches.warms() {
		d.caches.startWarm(env0, d.warmFunc(cfg.Image))
	}
	runDir, err := os.MkdirTemp(filepath.Join(d.caches.dir, "runs"), "run-")
	if err != nil {
		return cacheRun{}, fmt.Errorf("%w: cache layers: %w", ErrStart, err)
	}
	run := cacheRun{dir: runDir}
	uid, gid, chown := parseUser(cfg.User)
	chown = chown && os.Geteuid() == 0
	var mounts []mount.Mount
	for _, c := range spec.Caches {
		base := filepath.Join(runDir, CacheKey(c.Path))
		upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
		for _, dir := range []string{upper, work} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				run.cleanup()
				return cacheRun{}, fmt.Errorf("%w: cache layers: %w", ErrStart, err)
			}
		}
		if chown {
			if err := os.Chown(upper, uid, gid); err != nil {
				run.cleanup()
				return cacheRun{}, fmt.Errorf("%w: cache layers: %w", ErrStart, err)
			}
		}
		lowers := d.caches.lowers(env0, c)
		if len(lowers) == 0 {
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: d.HostPath(upper), Target: cacheTarget(c)})
			continue
		}
		hl := make([]string, len(lowers))
		for i, l := range lowers {
			hl[i] = d.HostPath(l)
		}
		hu, hw := d.HostPath(upper), d.HostPath(work)
		if strings.ContainsAny(strings.Join(hl, "")+hu+hw, ",:") {
			run.cleanup()
			d.caches.log.Warn("sandbox: caches are empty for this run", "err", errNoOverlay, "dir", d.caches.dir)
			d.tmpfsCaches(spec, hostCfg)
			return cacheRun{}, nil
		}
		mounts = append(mounts, mount.Mount{
			Type:   mount.TypeVolume,
			Target: cacheTarget(c),
			VolumeOptions: &mount.VolumeOptions{DriverConfig: &mount.Driver{Name: "local", Options: map[string]string{
				"type":   "overlay",
				"device": "overlay",
				"o":      "lowerdir=" + strings.Join(hl, ":") + ",upperdir=" + hu + ",workdir=" + hw,
			}}},
		})
	}
	hostCfg.Mounts = append(hostCfg.Mounts, mounts...)
	return run, nil
}

// WarmCaches runs the caches' warm-up (CacheOptions.Warmup) for image (""
// = the default image) unless it ran already, and waits for it to end or
// for ctx. Runs never wait for a warm-up: the first run of an image
// starts it in the background and runs with whatever trusted layers there
// are. It does nothing without a cache directory or a warm-up.
func (d *Docker) WarmCaches(ctx context.Context, image string) error {
	if !d.caches.warms() {
		return nil
	}
	if image == "" {
		image = d.image
	}
	// The warm-up's commands read the image's toolchain too.
	if err := d.WarmTrees(ctx, image); err != nil && ctx.Err() != nil {
		return err
	}
	id, err := d.ImageDigest(ctx, image)
	if err != nil {
		return err
	}
	if err := d.caches.warm(ctx, envKey(id), d.warmFunc(image)); err != nil {
		return err
	}
	d.pruneCaches(ctx)
	return nil
}

// pruneCaches sets aside the trusted layers of images the engine no longer
// has (a layer's directory is named for its image's ID, envKey), and
// removes the layers set aside long enough ago (staleLayers): without it
// every rebuilt image would leave its warm-up's caches on disk for good.
// The store's directory is read before the engine's images are listed, so
// that a layer published meanwhile, whose warm-up ran on an image the
// engine has, is never taken for an orphan. Like pruneTrees, it assumes
// that the runners sharing the directory share this engine. It returns the
// names of the layers it set aside.
func (d *Docker) pruneCaches(ctx context.Context) []string {
	if d.caches.dir == "" {
		return nil
	}
	d.caches.removeStale()
	ents, err := os.ReadDir(filepath.Join(d.caches.dir, "trusted"))
	if err != nil {
		return nil
	}
	c, cancel := context.WithTimeout(ctx, engineTimeout)
	images, err := d.cli.ImageList(c, image.ListOptions{All: true})
	cancel()
	if err != nil {
		d.caches.log.Warn("sandbox: cannot list the engine's images; trusted cache layers kept", "err", err)
		return nil
	}
	have := make(map[string]bool, len(images))
	for _, im := range images {
		have[envKey(im.ID)] = true
	}
	var aside []string
	for _, e := range ents {
		env := e.Name()
		if !e.IsDir() || !strings.HasPrefix(env, "image-") || strings.Contains(env, ".") || have[env] {
			continue
		}
		if _, err := d.caches.setAside(env); err != nil {
			d.caches.log.Warn("sandbox: cannot set aside the trusted cache layer of a removed image", "env", env, "err", err)
			continue
		}
		aside = append(aside, env)
	}
	if len(aside) > 0 {
		d.caches.log.Info("sandbox: trusted cache layers of images the engine no longer has set aside, to be removed once stale",
			"layers", strings.Join(aside, " "), "after", staleLayers)
	}
	return aside
}

// DockerCachesWarmed reports whether a warm-up of the Docker sandbox's
// caches for the image whose ID is imageID has completed in dir, a
// runner's cache directory (CacheOptions.Dir), every command of it
// succeeding (whatever its configuration): from then on every run in that
// image gets its trusted layers.
func DockerCachesWarmed(dir, imageID string) bool {
	return warmedWith(filepath.Join(dir, "trusted", envKey(imageID))) != ""
}

// warmFunc runs warm-up commands in image.
func (d *Docker) warmFunc(image string) warmFunc {
	return func(ctx context.Context, argv []string, ws string, dirs map[string]string) (Result, error) {
		return d.runWarmup(ctx, image, argv, ws, dirs)
	}
}

// tmpfsCaches makes each cache of spec an empty tmpfs of the run.
func (d *Docker) tmpfsCaches(spec Spec, hostCfg *container.HostConfig) {
	for _, c := range spec.Caches {
		hostCfg.Tmpfs[cacheTarget(c)] = fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", d.tmpfsSize)
	}
}

// runWarmup runs one warm-up command in image: the warm-up's workspace
// ws, no network, the warm-up's caches writable at the host directories
// dirs.
func (d *Docker) runWarmup(ctx context.Context, image string, argv []string, ws string, dirs map[string]string) (Result, error) {
	timeout := d.caches.opts.WarmTimeout
	if timeout <= 0 {
		timeout = DefaultWarmTimeout
	}
	spec := Spec{
		Argv: argv, Workspace: ws, Env: d.caches.opts.WarmEnv, Image: image, Timeout: timeout,
		Caches: d.caches.opts.WarmCaches, Labels: map[string]string{"warmup": "1"},
	}
	return d.runSpec(ctx, spec, dirs)
}

// setEnv sets k=v in a sorted KEY=VALUE list, replacing an earlier value.
func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}
