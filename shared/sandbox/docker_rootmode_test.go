package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PERF-74: who goes through a directory by its "others" permissions
// whatever its group permissions are.
func TestUnprivilegedUser(t *testing.T) {
	for _, c := range []struct {
		user   string
		groups []string
		want   bool
	}{
		{"65534:65534", nil, true},
		{"1000:1000", []string{"100"}, true},
		{"nobody:nogroup", nil, false}, // by name: the image's to say
		{"65534:00", nil, false},
		{"65534:65534", []string{"wheel"}, false},
		{"0:0", nil, false},
		{"root:65534", nil, false},
		{"65534:0", nil, false},
		{"65534:root", nil, false},
		{"65534:65534", []string{"0"}, false},
		{"65534:65534", []string{"root"}, false},
		{"65534", nil, false}, // the primary group is the image's to say
		{"", nil, false},
	} {
		if got := unprivilegedUser(c.user, c.groups); got != c.want {
			t.Errorf("unprivilegedUser(%q, %q) = %v, want %v", c.user, c.groups, got, c.want)
		}
	}
}

// PERF-74: only group permissions go, only from a directory of root's,
// and only from a layer's root in the engine's directory of layers;
// anything else is an error that leaves the path alone.
func TestDropGroupPerms(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "0123abcd", "diff")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, 0o775); err != nil {
		t.Fatal(err)
	}
	err := dropGroupPerms(dir, sub)
	fi, serr := os.Stat(sub)
	if serr != nil {
		t.Fatal(serr)
	}
	if os.Geteuid() == 0 {
		if err != nil || fi.Mode().Perm() != 0o705 {
			t.Errorf("dropGroupPerms(0775 dir of root's) = %v, mode %o; want nil, 705", err, fi.Mode().Perm())
		}
	} else if err == nil || fi.Mode().Perm() != 0o775 {
		t.Errorf("dropGroupPerms(a directory not root's) = %v, mode %o; want an error, 775 unchanged", err, fi.Mode().Perm())
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o664); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Chmod(outside, 0o775); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Join(dir, "missing", "diff"), "", "relative/diff",
		filepath.Join(dir, "diff"), filepath.Join(dir, "a", "b", "diff"), filepath.Join(dir, "0123abcd"), outside,
		filepath.Join(dir, "..", filepath.Base(outside))} {
		if err := dropGroupPerms(dir, p); err == nil {
			t.Errorf("dropGroupPerms(%q) = nil, want an error", p)
		}
	}
	if err := dropGroupPerms("", sub); err == nil {
		t.Error("dropGroupPerms with no directory of layers = nil, want an error")
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o775 {
		t.Errorf("a directory outside the layers changed: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o664 {
		t.Errorf("a file's mode changed: %v %v", fi.Mode(), err)
	}
}

// PERF-74: on an engine that stores containers with fuse-overlayfs, a
// non-root job's container has a root directory without group
// permissions (its user goes through it by the "others" bits, as before);
// a job run as root, or on another storage driver, keeps the engine's
// 755. Either way the job reaches its files.
func TestDockerRootMode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, user string
		fuseMode   string
	}{
		{"nobody", "65534:65534", "705"},
		{"root", "0:0", "755"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, img := dockerTest(t, DockerOptions{User: c.user})
			info, err := d.Client().Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The runner changes the directory when it can: as root, on
			// the engine's host.
			want := "755 0 /\n"
			if info.Driver == fuseOverlayDriver && os.Geteuid() == 0 && info.DockerRootDir != "" {
				if _, err := os.Stat(info.DockerRootDir); err == nil {
					want = c.fuseMode + " 0 /\n"
				}
			}
			spec := probeSpec(t, img, "stat", "/")
			res := runDocker(t, d, spec)
			if string(res.Stdout) != want {
				t.Errorf("the root directory on %s: %q (%q), want %q", info.Driver, res.Stdout, res.Stderr, want)
			}
			spec.Argv = []string{"probe", "write", "/tmp/out"}
			if res := runDocker(t, d, spec); res.ExitCode != 0 {
				t.Errorf("writing in /tmp: exit %d, %q", res.ExitCode, res.Stderr)
			}
		})
	}
}
