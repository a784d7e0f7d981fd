package sandbox

import (
	"archive/tar"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/strslice"
)

// LabelImageTrees is the image label naming, separated by spaces, the
// directories of the image that the Docker sandbox serves from a copy on
// the host, bind-mounted read-only, instead of from the image's layers
// (for example "/usr/lib /usr/share": a toolchain read file by file by
// every command; see ParseTreeLabel for what cannot be named).
//
// The copy is made once per image ID, from the image itself, under the
// cache directory (CacheOptions.Dir); runs of the image mount it once it
// is complete and use the image's layers until then. It pays off where the
// engine's storage driver reads image layers slowly (fuse-overlayfs, as
// rootless engines and engines in containers use): there, each fresh
// container reads its toolchain cold through a FUSE process of its own.
const LabelImageTrees = "supervisor.sandbox.trees"

// LabelImageCopy labels the container, created and never started, that
// the directories an image names in its LabelImageTrees are copied out of.
const LabelImageCopy = "supervisor.image-copy"

// treeDirsMax bounds the directories one image may name.
const treeDirsMax = 8

// treeStore is where the Docker sandbox keeps the copies of images'
// directories: <cache dir>/trees/<image ID hex>/<CacheKey(dir)>, each
// image's directory renamed into place once every copy in it is complete.
type treeStore struct {
	dir string // "" = no copies
	log *slog.Logger

	running sync.WaitGroup // copies started in the background

	mu       sync.Mutex
	inflight map[string]chan struct{} // image ID → copy under way
	failed   map[string]time.Time     // image ID → when its copy last failed
	warned   map[string]bool          // image ID → its label was refused
}

// treeRetry is how long after a failed copy runs of that image go on
// without one before the next attempt.
const treeRetry = 10 * time.Minute

func newTreeStore(cacheDir string, log *slog.Logger) (*treeStore, error) {
	t := &treeStore{log: log, inflight: map[string]chan struct{}{}, failed: map[string]time.Time{}, warned: map[string]bool{}}
	if t.log == nil {
		t.log = slog.Default()
	}
	if cacheDir == "" {
		return t, nil
	}
	t.dir = filepath.Join(cacheDir, "trees")
	if err := os.MkdirAll(t.dir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: image trees: %w", err)
	}
	// Copies a crashed process left unfinished.
	if ents, err := os.ReadDir(t.dir); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), ".new-") {
				continue
			}
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleLayers {
				removeScratch(filepath.Join(t.dir, e.Name()))
			}
		}
	}
	return t, nil
}

// ParseTreeLabel returns the directories a LabelImageTrees value names,
// cleaned, or an error naming the first one the sandbox cannot serve that
// way: relative, the root, or overlapping another or one of the places the
// sandbox mounts itself (/workspace, /tmp, the files of a spec), the
// engine mounts its init at (/sbin/docker-init, which is /usr/sbin on a
// merged-/usr system such as Debian's) or the kernel provides (/proc,
// /sys, /dev). So "/usr" is refused; "/usr/lib /usr/share" is not.
func ParseTreeLabel(v string) ([]string, error) {
	fields := strings.Fields(v)
	if len(fields) > treeDirsMax {
		return nil, fmt.Errorf("%d directories, at most %d", len(fields), treeDirsMax)
	}
	reserved := []string{ContainerWorkspace, "/tmp", ContainerFiles, "/proc", "/sys", "/dev", "/sbin", "/usr/sbin"}
	var dirs []string
	for _, f := range fields {
		if !path.IsAbs(f) {
			return nil, fmt.Errorf("%q is not absolute", f)
		}
		d := path.Clean(f)
		if d == "/" {
			return nil, errors.New(`"/" cannot be served from a copy`)
		}
		for _, r := range reserved {
			if overlaps(d, r) {
				return nil, fmt.Errorf("%q overlaps %s, which the sandbox, the engine or the kernel mounts", f, r)
			}
		}
		for _, o := range dirs {
			if overlaps(d, o) {
				return nil, fmt.Errorf("%q overlaps %q", f, o)
			}
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}

// overlaps reports whether one of two clean absolute paths is the other
// or within it.
func overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// treeMounts returns image's ID ("" without a cache directory: it is not
// asked then) and the read-only mounts of its copied directories when
// their copy is complete. Otherwise it returns no mount, and starts the
// copy in the background unless one is under way or failed recently: runs
// never wait for a copy.
func (d *Docker) treeMounts(ctx context.Context, image string) (string, []mount.Mount, error) {
	t := d.trees
	if t.dir == "" {
		return "", nil, nil
	}
	id, dirs, err := d.imageTrees(ctx, image)
	if cerrdefs.IsNotFound(err) {
		return "", nil, nil // the create says so, with a hint
	}
	if err != nil || len(dirs) == 0 {
		return id, nil, err
	}
	final := filepath.Join(t.dir, imageHex(id))
	if _, err := os.Stat(final); err == nil {
		return id, d.treeMountsAt(final, dirs), nil
	}
	t.mu.Lock()
	_, running := t.inflight[id]
	failedAt, failed := t.failed[id]
	t.mu.Unlock()
	if !running && (!failed || time.Since(failedAt) > treeRetry) && t.begin(d.caches.stopCtx) {
		go func() {
			defer t.running.Done()
			_ = d.copyTrees(d.caches.stopCtx, id, dirs)
		}()
	}
	return id, nil, nil
}

// treeMountsAt returns the mounts of the copies in final.
func (d *Docker) treeMountsAt(final string, dirs []string) []mount.Mount {
	ms := make([]mount.Mount, len(dirs))
	for i, dir := range dirs {
		ms[i] = mount.Mount{Type: mount.TypeBind, Source: d.HostPath(filepath.Join(final, CacheKey(dir))), Target: dir, ReadOnly: true}
	}
	return ms
}

// WarmTrees copies the directories image ("" = the default image) names
// in its LabelImageTrees, unless the copy exists, and waits for it or for
// ctx. It does nothing without a cache directory or the label. Close
// stops it, as it stops a warm-up.
func (d *Docker) WarmTrees(ctx context.Context, image string) error {
	if d.trees.dir == "" {
		return nil
	}
	if image == "" {
		image = d.image
	}
	if !d.trees.begin(d.caches.stopCtx) {
		return fmt.Errorf("sandbox: closed: %w", context.Canceled)
	}
	defer d.trees.running.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.caches.stopCtx, cancel)()
	id, dirs, err := d.imageTrees(ctx, image)
	if err != nil || len(dirs) == 0 {
		return err
	}
	return d.copyTrees(ctx, id, dirs)
}

// begin counts a copy in running unless the sandbox is closing (stop
// ended); the caller calls running.Done when it returns.
func (t *treeStore) begin(stop context.Context) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if stop.Err() != nil {
		return false
	}
	t.running.Add(1)
	return true
}

// imageTrees returns image's ID and the directories its label names (none,
// with a warning logged once per image, if the label is invalid).
func (d *Docker) imageTrees(ctx context.Context, image string) (string, []string, error) {
	info, err := d.cli.ImageInspect(ctx, image)
	if err != nil {
		return "", nil, fmt.Errorf("%w: image %q: %w", ErrEngine, image, err)
	}
	if info.Config == nil || info.Config.Labels[LabelImageTrees] == "" {
		return info.ID, nil, nil
	}
	dirs, err := ParseTreeLabel(info.Config.Labels[LabelImageTrees])
	if err != nil {
		t := d.trees
		t.mu.Lock()
		warn := !t.warned[info.ID]
		t.warned[info.ID] = true
		t.mu.Unlock()
		if warn {
			t.log.Warn("sandbox: the image's directories are served from its layers", "image", image,
				"label", LabelImageTrees, "err", err)
		}
		return info.ID, nil, nil
	}
	return info.ID, dirs, nil
}

// imageHex is an image ID without its algorithm, as a file name.
func imageHex(id string) string {
	_, h, ok := strings.Cut(id, ":")
	if !ok {
		h = id
	}
	if _, err := hex.DecodeString(h); err != nil || h == "" {
		return hex.EncodeToString([]byte(id))
	}
	return h
}

// copyTrees copies dirs out of the image id into the store, or waits for
// a copy under way in this process. Another process sharing the store may
// copy at the same time: the first complete copy renamed into place wins.
func (d *Docker) copyTrees(ctx context.Context, id string, dirs []string) error {
	t := d.trees
	final := filepath.Join(t.dir, imageHex(id))
	t.mu.Lock()
	if ch, ok := t.inflight[id]; ok {
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := os.Stat(final); err != nil {
			return fmt.Errorf("sandbox: the image's directories were not copied")
		}
		return nil
	}
	if _, err := os.Stat(final); err == nil {
		t.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	t.inflight[id] = ch
	t.mu.Unlock()

	start := time.Now()
	err := d.extractTrees(ctx, id, dirs, final)
	t.mu.Lock()
	delete(t.inflight, id)
	if err != nil {
		t.failed[id] = time.Now()
	} else {
		delete(t.failed, id)
	}
	t.mu.Unlock()
	close(ch)
	if err != nil {
		t.log.Warn("sandbox: copying the image's directories; its runs read them from its layers", "image", id,
			"dirs", strings.Join(dirs, " "), "err", err)
		return err
	}
	t.log.Info("sandbox: the image's directories are served from a copy", "image", id,
		"dirs", strings.Join(dirs, " "), "took", time.Since(start).Round(time.Millisecond))
	d.pruneTrees(ctx, id)
	return nil
}

// extractTrees copies dirs out of a container of image id, created and
// never started, into a new directory renamed to final.
func (d *Docker) extractTrees(ctx context.Context, id string, dirs []string, final string) error {
	bg := context.WithoutCancel(ctx)
	tmp, err := os.MkdirTemp(d.trees.dir, ".new-")
	if err != nil {
		return err
	}
	defer removeScratch(tmp)
	cfg := &container.Config{
		Image: id, Cmd: strslice.StrSlice{"true"}, Entrypoint: strslice.StrSlice{},
		Labels: map[string]string{LabelSandbox: "1", LabelHost: d.host, LabelImageCopy: "1"},
	}
	hostCfg := &container.HostConfig{NetworkMode: "none", LogConfig: container.LogConfig{Type: "none"}}
	cid, err := d.create(ctx, cfg, hostCfg)
	if err != nil {
		return fmt.Errorf("%w: create container: %w", ErrEngine, err)
	}
	defer d.remove(bg, cid)
	if err := ctx.Err(); err != nil {
		return err // a Close during the create
	}
	for _, dir := range dirs {
		rc, _, err := d.cli.CopyFromContainer(ctx, cid, dir)
		if err != nil {
			return fmt.Errorf("%w: copy %s out of the image: %w", ErrEngine, dir, err)
		}
		err = untarTree(rc, filepath.Join(tmp, CacheKey(dir)), path.Base(dir), os.Geteuid() == 0)
		rc.Close()
		if err != nil {
			return fmt.Errorf("copy %s out of the image: %w", dir, err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return nil // another process's copy won
		}
		return err
	}
	return nil
}

// pruneTrees removes the copies of images the engine no longer has, other
// than keep's.
func (d *Docker) pruneTrees(ctx context.Context, keep string) {
	ents, err := os.ReadDir(d.trees.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || name == imageHex(keep) {
			continue
		}
		c, cancel := context.WithTimeout(ctx, engineTimeout)
		_, err := d.cli.ImageInspect(c, "sha256:"+name)
		cancel()
		if cerrdefs.IsNotFound(err) {
			removeScratch(filepath.Join(d.trees.dir, name))
		}
	}
}

// relTo returns the archive path name relative to top ("." for top
// itself); ok is false when it is outside top.
func relTo(name, top string) (rel string, ok bool) {
	name = path.Clean(name)
	if name == top {
		return ".", true
	}
	rel, ok = strings.CutPrefix(name, top+"/")
	return rel, ok && filepath.IsLocal(rel)
}

// untarTree writes the tar stream r, whose entries are top and what is
// under it (as the engine's copy of a directory gives them), into the new
// directory dest: directories, regular files, symbolic and hard links,
// with their modes and modification times and, when owners is set, their
// owners. Nothing is written outside dest, whatever the stream holds.
func untarTree(r io.Reader, dest, top string, owners bool) error {
	if err := os.Mkdir(dest, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMeta struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMeta
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name, ok := relTo(hdr.Name, top)
		if !ok {
			return fmt.Errorf("entry %q is outside %s", hdr.Name, top)
		}
		mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
			}
			dirs = append(dirs, dirMeta{name, mode, hdr.ModTime})
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			// The owner first: a change of owner clears set-id bits.
			if owners {
				if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
					return err
				}
			}
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
			if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
				return err
			}
			continue
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			target, ok := relTo(hdr.Linkname, top)
			if !ok || target == "." {
				return fmt.Errorf("hard link %q to %q, outside %s", hdr.Name, hdr.Linkname, top)
			}
			if err := root.Link(target, name); err != nil {
				return err
			}
			continue // shares its target's owner
		default:
			continue // devices and fifos are not served from a copy
		}
		if owners {
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
	}
	// Directories last, deepest first, so that a read-only one was still
	// writable while its entries were written.
	for i := len(dirs) - 1; i >= 0; i-- {
		m := dirs[i]
		if err := root.Chmod(m.name, m.mode); err != nil {
			return err
		}
		if err := root.Chtimes(m.name, m.mtime, m.mtime); err != nil {
			return err
		}
	}
	return nil
}
