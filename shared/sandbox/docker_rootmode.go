package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/docker/docker/api/types/container"
)

// fuseOverlayDriver is the storage driver whose containers' root directory
// rootMode adjusts.
const fuseOverlayDriver = "fuse-overlayfs"

// rootMode removes the group permissions from the root directory of a
// container just created, when the engine stores containers with
// fuse-overlayfs, the container's user is neither root nor in group root,
// and the runner can reach the container's writable layer on the engine's
// host (PERF-74).
//
// Why: a FUSE file system that supports POSIX ACLs makes the kernel ask its
// process for the ACL of every directory a path lookup goes through, unless
// the caller owns the directory or the directory has no group permissions;
// the answer is not kept for the container's root, so every absolute path a
// job's process resolves costs a round trip to fuse-overlayfs (20–50 µs
// against 1 µs). The root of the container's file system is the root of
// that writable layer, which the engine creates with mode 0755; with 0705
// the kernel goes straight to the "others" bits, r-x, which is what the
// job's user had through them before. Nothing else changes: the layer
// belongs to this container alone and is removed with it, and its root
// stays root's.
//
// Only a directory named like a layer's root (LAYERS/ID/diff) in the
// engine's own directory of fuse-overlayfs layers, on an engine reached
// through its local socket, is changed, whatever path the engine names.
// Best effort: an engine that is not on this host, a runner without access
// to the engine's directory, or anything unexpected leaves the root as it
// is, and the job runs as it would have; a directory the runner cannot
// change is logged, once, and the runner stops trying.
type rootMode struct {
	// enabled is set by Docker.engineInfo when the engine's storage driver
	// is fuse-overlayfs, and cleared when the runner cannot change the
	// directory.
	enabled atomic.Bool
	// layers is the engine's directory of fuse-overlayfs layers: a
	// container's writable layer is changed only if it is in there.
	layers string
	warned sync.Once
}

// adjustRoot applies rootMode to container id, created with cfg and
// hostCfg. It is called before the container starts: fuse-overlayfs reads
// the root's mode when it mounts the layers.
func (d *Docker) adjustRoot(ctx context.Context, id string, cfg *container.Config, hostCfg *container.HostConfig) {
	d.engineInfo(ctx)
	if !d.root.enabled.Load() || !unprivilegedUser(cfg.User, hostCfg.GroupAdd) {
		return
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	info, err := d.cli.ContainerInspect(c, id)
	cancel()
	if err != nil {
		return // the start that follows reports an engine in trouble
	}
	if info.GraphDriver.Name != fuseOverlayDriver {
		return
	}
	if err := dropGroupPerms(d.root.layers, info.GraphDriver.Data["UpperDir"]); err != nil {
		// Not in reach, not root's, or not the runner's to change: the
		// next container's is not either.
		d.root.enabled.Store(false)
		d.root.warned.Do(func() {
			d.caches.log.Info("sandbox: the root directory of containers keeps its group permissions; "+
				"on fuse-overlayfs every path a job looks up then costs a round trip to the storage driver",
				"err", err)
		})
	}
}

// dropGroupPerms removes the group permissions of dir, the root of a
// container's writable layer (layers/ID/diff), if it is a directory of
// root's that has any.
func dropGroupPerms(layers, dir string) error {
	rel, err := filepath.Rel(layers, dir)
	id := filepath.Dir(rel)
	if layers == "" || !filepath.IsAbs(dir) || err != nil || filepath.Base(rel) != "diff" ||
		id == "." || id != filepath.Base(id) || strings.HasPrefix(rel, "..") {
		return &os.PathError{Op: "inspect", Path: dir, Err: syscall.EINVAL}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != 0 {
		return &os.PathError{Op: "lstat", Path: dir, Err: syscall.ENOTDIR}
	}
	perm := fi.Mode().Perm()
	if perm&0o070 == 0 {
		return nil
	}
	return os.Chmod(dir, perm&^0o070)
}

// unprivilegedUser reports whether a container user, given by number as
// "uid:gid" (as the sandbox gives it), with the supplementary groups
// groups, is neither root nor in group root: only such a user goes through
// a directory by its "others" permissions whatever its group permissions
// are. A user or group given by name is the image's to resolve: false.
func unprivilegedUser(user string, groups []string) bool {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		return false
	}
	for _, id := range append([]string{u, g}, groups...) {
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil || n == 0 {
			return false
		}
	}
	return true
}
