package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/sandbox/sandboxtest"
)

// Tests of image directories served from a copy on the host (PERF-56).

func TestParseTreeLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		label string
		want  []string
		err   string
	}{
		{label: "/opt/tool", want: []string{"/opt/tool"}},
		{label: " /usr/lib/go/  /opt/tool ", want: []string{"/usr/lib/go", "/opt/tool"}},
		{label: "", want: nil},
		{label: "usr", err: "not absolute"},
		{label: "/", err: `"/" cannot`},
		{label: "/tmp/x", err: "overlaps /tmp"},
		{label: "/workspace", err: "overlaps /workspace"},
		{label: "/proc", err: "overlaps /proc"},
		{label: "/usr", err: "overlaps /usr/sbin"},
		{label: "/sbin/x", err: "overlaps /sbin"},
		{label: "/usr/lib /usr/share", want: []string{"/usr/lib", "/usr/share"}},
		{label: "/usr/lib /usr/lib/go", err: `"/usr/lib/go" overlaps "/usr/lib"`},
		{label: "/a /b /c /d /e /f /g /h /i", err: "at most 8"},
	} {
		got, err := ParseTreeLabel(tc.label)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTreeLabel(%q) = %q, %v; want an error with %q", tc.label, got, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParseTreeLabel(%q) = %q, %v; want %q", tc.label, got, err, tc.want)
		}
	}
}

// entry is one tar entry of the untarTree tests.
type entry struct {
	name, link string
	flag       byte
	mode       int64
	data       string
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.flag, Mode: e.mode, Size: int64(len(e.data)), ModTime: mtime}
		if e.flag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func TestUntarTree(t *testing.T) {
	t.Parallel()
	dest := filepath.Join(t.TempDir(), "tree")
	err := untarTree(tarOf(t,
		entry{name: "usr/", flag: tar.TypeDir, mode: 0o755},
		entry{name: "usr/bin/", flag: tar.TypeDir, mode: 0o755},
		entry{name: "usr/bin/tool", flag: tar.TypeReg, mode: 0o755, data: "#!tool"},
		entry{name: "usr/bin/alias", flag: tar.TypeSymlink, link: "tool"},
		entry{name: "usr/bin/abs", flag: tar.TypeSymlink, link: "/etc/passwd"},
		entry{name: "usr/bin/hard", flag: tar.TypeLink, link: "usr/bin/tool"},
		entry{name: "usr/share/", flag: tar.TypeDir, mode: 0o555},
		entry{name: "usr/share/doc", flag: tar.TypeReg, mode: 0o444, data: "read me"},
		entry{name: "usr/share/fifo", flag: tar.TypeFifo, mode: 0o644},
	), dest, "usr", false)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "bin/tool")); err != nil || string(b) != "#!tool" {
		t.Errorf("bin/tool: %q, %v", b, err)
	}
	for name, want := range map[string]os.FileMode{"bin/tool": 0o755, "share/doc": 0o444, "share": 0o555 | os.ModeDir, ".": 0o755 | os.ModeDir} {
		fi, err := os.Lstat(filepath.Join(dest, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode(), err, want)
		}
		if err == nil && !fi.ModTime().Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("%s: modified %v, want the archive's time", name, fi.ModTime())
		}
	}
	for name, want := range map[string]string{"bin/alias": "tool", "bin/abs": "/etc/passwd"} {
		if got, err := os.Readlink(filepath.Join(dest, name)); err != nil || got != want {
			t.Errorf("%s → %q, %v; want → %q", name, got, err, want)
		}
	}
	a, errA := os.Stat(filepath.Join(dest, "bin/tool"))
	b, errB := os.Stat(filepath.Join(dest, "bin/hard"))
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		t.Errorf("bin/hard is not a hard link of bin/tool (%v, %v)", errA, errB)
	}
	if _, err := os.Lstat(filepath.Join(dest, "share/fifo")); !os.IsNotExist(err) {
		t.Errorf("a fifo was written: %v", err)
	}
}

// TestUntarTreeStaysInside: entries outside the directory, or written
// through a symbolic link leading out of it, fail the copy and write
// nothing outside.
func TestUntarTreeStaysInside(t *testing.T) {
	t.Parallel()
	for name, entries := range map[string][]entry{
		"sibling":             {{name: "usr/", flag: tar.TypeDir, mode: 0o755}, {name: "etc/passwd", flag: tar.TypeReg, mode: 0o644, data: "x"}},
		"dot-dot":             {{name: "usr/../../escaped", flag: tar.TypeReg, mode: 0o644, data: "x"}},
		"through a symlink":   {{name: "usr/out", flag: tar.TypeSymlink, link: "OUTSIDE"}, {name: "usr/out/escaped", flag: tar.TypeReg, mode: 0o644, data: "x"}},
		"relative symlink":    {{name: "usr/out", flag: tar.TypeSymlink, link: "../../outside"}, {name: "usr/out/escaped", flag: tar.TypeReg, mode: 0o644, data: "x"}},
		"hard link outside":   {{name: "usr/h", flag: tar.TypeLink, link: "OUTSIDE/victim"}},
		"hard link dot-dot":   {{name: "usr/h", flag: tar.TypeLink, link: "usr/../../outside/victim"}},
		"directory over link": {{name: "usr/out", flag: tar.TypeSymlink, link: "OUTSIDE"}, {name: "usr/out/sub/", flag: tar.TypeDir, mode: 0o755}},
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			if err := os.Mkdir(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("victim"), 0o644); err != nil {
				t.Fatal(err)
			}
			for i := range entries {
				entries[i].link = strings.ReplaceAll(entries[i].link, "OUTSIDE", outside)
			}
			dest := filepath.Join(base, "a", "tree")
			if err := os.Mkdir(filepath.Dir(dest), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := untarTree(tarOf(t, entries...), dest, "usr", false); err == nil {
				t.Error("no error")
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 {
				t.Errorf("outside holds %d entries, want the victim alone", len(ents))
			}
			if _, err := os.Lstat(filepath.Join(base, "escaped")); err == nil {
				t.Error("a file was written outside")
			}
		})
	}
}

// treeImage builds an image from the probe image with /opt/tool/sub/data
// and the label naming /opt/tool, removed when the test ends.
func treeImage(t *testing.T, probe, data string) string {
	t.Helper()
	tag := fmt.Sprintf("supervisor-test/trees:%d-%s", os.Getpid(), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	return sandboxtest.Image(t, tag,
		sandboxtest.File{Name: "Dockerfile", Mode: 0o644, Data: []byte(fmt.Sprintf(
			"FROM %s\nLABEL %s=/opt/tool\nCOPY data /opt/tool/sub/data\nCOPY data /opt/tool/other\n", probe, LabelImageTrees))},
		sandboxtest.File{Name: "data", Mode: 0o644, Data: []byte(data)})
}

// mountedAt returns the options of the mount at target in a container's
// /proc/self/mountinfo ("" if nothing is mounted there).
func mountedAt(mountinfo, target string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == target {
			return f[5]
		}
	}
	return ""
}

// TestDockerTreesServedReadOnly: once WarmTrees has copied the labelled
// directory, runs mount the copy read-only at its place; a run that tries
// to change it fails and the next run reads the image's content.
func TestDockerTreesServedReadOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, probe := dockerTest(t, DockerOptions{Caches: CacheOptions{Dir: dir}})
	img := treeImage(t, probe, "pristine")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := d.WarmTrees(ctx, img); err != nil {
		t.Fatal(err)
	}
	id, err := d.ImageDigest(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(dir, "trees", imageHex(id), CacheKey("/opt/tool"))
	if got := readFile(t, filepath.Join(copyDir, "sub", "data")); got != "pristine" {
		t.Fatalf("the copy holds %q", got)
	}

	run := func(args ...string) Result {
		t.Helper()
		return runDocker(t, d, Spec{Argv: append([]string{"probe"}, args...), Workspace: newWorkspace(t), Image: img})
	}
	res := run("cat", "/proc/self/mountinfo")
	if opts := mountedAt(string(res.Stdout), "/opt/tool"); !strings.HasPrefix(opts, "ro") {
		t.Fatalf("/opt/tool mounted with %q, want a read-only mount:\n%s", opts, res.Stdout)
	}
	for _, poison := range [][]string{
		{"write-text", "/opt/tool/sub/data", "poisoned"},
		{"append", "/opt/tool/other", " poisoned"},
		{"write-text", "/opt/tool/new", "poisoned"},
		{"remove", "/opt/tool/other"},
		{"chmod", "/opt/tool/sub/data", "777"},
	} {
		if res := run(poison...); res.ExitCode == 0 {
			t.Errorf("%q succeeded in the copy: %s", poison, res.Stdout)
		}
	}
	res = run("cat", "/opt/tool/sub/data", "/opt/tool/other", "/opt/tool/new")
	want := "/opt/tool/sub/data: pristine\n/opt/tool/other: pristine\n/opt/tool/new: <missing>\n"
	if got := string(res.Stdout); got != want {
		t.Errorf("after the poisoners the next run reads %q, want %q", got, want)
	}
	if fi, err := os.Stat(filepath.Join(copyDir, "sub", "data")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the copy's data: %v, %v", fi, err)
	}
}

// TestDockerTreesCopiedInTheBackground: without a warm-up, the first run
// reads the image's layers and starts the copy; runs after it is complete
// mount it. Copies of images the engine no longer has are removed then.
func TestDockerTreesCopiedInTheBackground(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, probe := dockerTest(t, DockerOptions{Caches: CacheOptions{Dir: dir}})
	img := treeImage(t, probe, "lazy")
	gone := filepath.Join(dir, "trees", strings.Repeat("0", 64))
	if err := os.MkdirAll(filepath.Join(gone, "abs~usr"), 0o555); err != nil {
		t.Fatal(err)
	}
	res := runDocker(t, d, Spec{Argv: []string{"probe", "cat", "/opt/tool/sub/data"}, Workspace: newWorkspace(t), Image: img})
	if string(res.Stdout) != "/opt/tool/sub/data: lazy\n" {
		t.Fatalf("first run: %q", res.Stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := d.ImageDigest(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, "trees", imageHex(id))
	for {
		if _, err := os.Stat(final); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the copy never completed")
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The prune runs right after the rename; WarmTrees waits for nothing
	// then, so wait for the prune the same way.
	for {
		if _, err := os.Stat(gone); os.IsNotExist(err) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the copy of an image the engine no longer has was kept")
		case <-time.After(50 * time.Millisecond):
		}
	}
	res = runDocker(t, d, Spec{Argv: []string{"probe", "cat", "/proc/self/mountinfo"}, Workspace: newWorkspace(t), Image: img})
	if opts := mountedAt(string(res.Stdout), "/opt/tool"); !strings.HasPrefix(opts, "ro") {
		t.Fatalf("after the copy, /opt/tool mounted with %q", opts)
	}
	// The copy is owned as the runner can make it: by the image's owners
	// when it runs as root, by itself otherwise.
	fi, err := os.Stat(filepath.Join(final, CacheKey("/opt/tool"), "sub", "data"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && st.Uid != 0 {
		t.Errorf("the copy's data belongs to uid %d, want the image's 0", st.Uid)
	}
}

// TestDockerTreesStopWithClose: Close during a copy waits for it, and
// leaves either the complete copy or none: no container, no half-written
// directory.
func TestDockerTreesStopWithClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, probe := dockerTest(t, DockerOptions{Caches: CacheOptions{Dir: dir}})
	img := treeImage(t, probe, strings.Repeat("large content ", 4<<20)) // 56 MiB, twice
	warmed := make(chan error, 1)
	go func() { warmed <- d.WarmTrees(context.Background(), img) }()
	// Close once the copy is under way (its directory exists), not after a
	// guess at how long that takes: on a loaded machine the copy may not
	// have begun 200 ms on, and a Close before it has nothing to wait for.
	deadline := time.Now().Add(60 * time.Second)
	for underWay := false; !underWay; {
		if len(warmed) > 0 {
			break
		}
		ents, _ := os.ReadDir(filepath.Join(dir, "trees"))
		for _, e := range ents {
			underWay = underWay || strings.HasPrefix(e.Name(), ".new-")
		}
		if time.Now().After(deadline) {
			t.Fatal("the copy did not begin within 60s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Close has waited for the copy: its scratch directory and its
	// container (checked when the test ends) are gone already.
	ents, err := os.ReadDir(filepath.Join(dir, "trees"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".new-") {
			t.Errorf("a half-written copy is left: %s", e.Name())
			continue
		}
		data := filepath.Join(dir, "trees", e.Name(), CacheKey("/opt/tool"), "sub", "data")
		if fi, err := os.Stat(data); err != nil || fi.Size() != int64(len("large content "))<<22 {
			t.Errorf("a copy in place is incomplete: %v, %v", fi, err)
		}
	}
	t.Logf("WarmTrees: %v", <-warmed)
}
