package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// stores are real JetStream object stores on an embedded NATS server.
type stores struct {
	bundles, patches jetstream.ObjectStore
}

func newStores(t *testing.T) stores {
	t.Helper()
	js := testkit.JetStream(t, testkit.NATS(t))
	ctx := testkit.Context(t, 30*time.Second)
	var s stores
	var err error
	if s.bundles, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: protocol.BucketBundles}); err != nil {
		t.Fatalf("create bundles bucket: %v", err)
	}
	if s.patches, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: protocol.BucketPatches}); err != nil {
		t.Fatalf("create patches bucket: %v", err)
	}
	return s
}

// counting counts downloads through an Objects.
type counting struct {
	Objects
	n atomic.Int64
}

func (c *counting) GetFile(ctx context.Context, name, file string, opts ...jetstream.GetObjectOpt) error {
	c.n.Add(1)
	return c.Objects.GetFile(ctx, name, file, opts...)
}

// gitBare runs git against a bare repository.
func gitBare(t *testing.T, gitDir string, args ...string) string {
	t.Helper()
	return testkit.Git(t, "", append([]string{"--git-dir=" + gitDir}, args...)...)
}

// binaryData is content git treats as binary.
func binaryData(seed byte) []byte {
	b := make([]byte, 600)
	for i := range b {
		b[i] = byte(i)*7 + seed
	}
	b[10] = 0
	return b
}

// userRepo is a user's repository with a base commit on main and, on
// branch deps, two commits whose diffs serve as dependency patches.
type userRepo struct {
	dir, base  string
	p1, p2     []byte // base→c1, c1→c2
	c1, c2     string
	baseFiles  map[string][]byte
	afterFiles map[string][]byte // tree of c2
}

func newUserRepo(t *testing.T) *userRepo {
	t.Helper()
	files := map[string][]byte{
		"README.md":  []byte("hello\n"),
		"src/a.txt":  []byte("a1\na2\na3\n"),
		"data.bin":   binaryData(1),
		".gitignore": []byte("*.log\n"),
	}
	dir, base := testkit.Repo(t, files)
	r := &userRepo{dir: dir, base: base, baseFiles: files}

	testkit.Git(t, dir, "checkout", "--quiet", "-b", "deps")
	testkit.WriteFile(t, filepath.Join(dir, "src/a.txt"), []byte("a1\na2 from p1\na3\n"))
	testkit.Git(t, dir, "commit", "--quiet", "-am", "p1")
	r.c1 = testkit.Git(t, dir, "rev-parse", "HEAD")
	testkit.WriteFile(t, filepath.Join(dir, "src/p2.txt"), []byte("added by p2\n"))
	testkit.WriteFile(t, filepath.Join(dir, "data.bin"), binaryData(2))
	testkit.Git(t, dir, "add", "--all")
	testkit.Git(t, dir, "commit", "--quiet", "-m", "p2")
	r.c2 = testkit.Git(t, dir, "rev-parse", "HEAD")
	testkit.Git(t, dir, "checkout", "--quiet", "main")

	r.p1 = diffBytes(t, dir, r.base, r.c1)
	r.p2 = diffBytes(t, dir, r.c1, r.c2)
	r.afterFiles = map[string][]byte{
		"README.md":  files["README.md"],
		"src/a.txt":  []byte("a1\na2 from p1\na3\n"),
		"src/p2.txt": []byte("added by p2\n"),
		"data.bin":   binaryData(2),
		".gitignore": files[".gitignore"],
	}
	return r
}

func diffBytes(t *testing.T, dir, from, to string) []byte {
	t.Helper()
	return []byte(testkit.GitOutput(t, dir, "diff", "--no-ext-diff", "--no-textconv", "--binary", "--full-index", from, to))
}

// integration is a bare clone of the repository: an integration
// repository like the coordinator's, for ApplyToBranch.
func (r *userRepo) integration(t *testing.T) string {
	t.Helper()
	bare := filepath.Join(t.TempDir(), "integration.git")
	testkit.Git(t, "", "clone", "--quiet", "--bare", r.dir, bare)
	return bare
}

// upload puts the repository's bundle at rev into the bundles store.
func (r *userRepo) upload(t *testing.T, s stores, rev string) protocol.RepoRef {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	commit, err := ResolveCommit(ctx, r.dir, rev)
	if err != nil {
		t.Fatal(err)
	}
	id, err := RepoID(ctx, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "repo.bundle")
	if err := CreateBundle(ctx, r.dir, commit, file); err != nil {
		t.Fatal(err)
	}
	name := id + "/" + commit + ".bundle"
	if _, err := s.bundles.PutBytes(ctx, name, testkit.ReadFile(t, file)); err != nil {
		t.Fatalf("put bundle: %v", err)
	}
	return protocol.RepoRef{ID: id, BaseCommit: commit, Bundle: name}
}

// uploadedRepo is how most tests start: stores on a new NATS server and
// the user's repository (newUserRepo) uploaded at main.
func uploadedRepo(t *testing.T) (stores, *userRepo, protocol.RepoRef) {
	t.Helper()
	s := newStores(t)
	r := newUserRepo(t)
	return s, r, r.upload(t, s, "main")
}

// putPatch stores a patch and returns its reference.
func putPatch(t *testing.T, s stores, node string, data []byte) protocol.PatchRef {
	t.Helper()
	name := "wf1/" + node + ".patch"
	if _, err := s.patches.PutBytes(testkit.Context(t, 30*time.Second), name, data); err != nil {
		t.Fatalf("put patch: %v", err)
	}
	sum := sha256.Sum256(data)
	return protocol.PatchRef{NodeID: node, Object: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// checkTree fails unless dir holds exactly files (ignoring .git).
func checkTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		want, ok := files[rel]
		if !ok {
			t.Errorf("unexpected file %s", rel)
			return nil
		}
		if got := testkit.ReadFile(t, path); !bytes.Equal(got, want) {
			t.Errorf("%s = %q, want %q", rel, trunc(got), trunc(want))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if !seen[name] {
			t.Errorf("missing file %s", name)
		}
	}
}

func trunc(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// worktrees lists the worktree paths registered in a bare mirror.
func worktrees(t *testing.T, gitDir string) []string {
	t.Helper()
	var paths []string
	for _, line := range strings.Split(gitBare(t, gitDir, "worktree", "list", "--porcelain"), "\n") {
		if p, ok := strings.CutPrefix(line, "worktree "); ok && p != gitDir {
			paths = append(paths, p)
		}
	}
	return paths
}

func newManager(t *testing.T, root string, bundles, patches Objects) *Manager {
	t.Helper()
	m, err := NewManager(root, bundles, patches, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkKeptSlot fails unless the closed workspace's slot went back to the
// pool as Prepare left it (PERF-55): kept with its record, holding files.
func checkKeptSlot(t *testing.T, w *Workspace, files map[string][]byte) {
	t.Helper()
	if w.slot.kept == nil {
		t.Fatalf("slot %s was emptied; want it kept as prepared", w.Dir)
	}
	checkTree(t, w.Dir, files)
}

// checkEmptySlot fails unless the pool slot dir holds nothing but its .git
// file, and its registration nothing but gitdir, commondir and locked.
func checkEmptySlot(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("slot %s: %v", dir, err)
	}
	for _, e := range entries {
		if e.Name() != ".git" || !e.Type().IsRegular() {
			t.Errorf("slot %s still holds %s (%v)", dir, e.Name(), e.Type())
		}
	}
	link, err := os.ReadFile(filepath.Join(dir, ".git"))
	if err != nil {
		t.Fatalf("slot %s: %v", dir, err)
	}
	admin := strings.TrimSpace(strings.TrimPrefix(string(link), "gitdir: "))
	entries, err = os.ReadDir(admin)
	if err != nil {
		t.Fatalf("slot %s: registration: %v", dir, err)
	}
	for _, e := range entries {
		if n := e.Name(); n != "gitdir" && n != "commondir" && n != "locked" {
			t.Errorf("registration %s of slot %s still holds %s", admin, dir, n)
		}
	}
}

// stat returns path's Lstat information.
func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// setTimes sets path's access and modification times to mtime.
func setTimes(t *testing.T, path string, mtime time.Time) {
	t.Helper()
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// crash stands for the death of the process holding slot s: its flock is
// let go. A child being forked by another goroutine's exec at that moment
// holds the lock's open file description until its exec closes it, so
// crash waits until the lock can be taken, as it can once a dead
// process's descriptors are all closed. Its own probe of the lock holds
// syscall.ForkLock, which every fork waits for: else a fork at that moment
// would hold the probe's lock in turn, and the next Prepare, finding the
// slot taken, would go to another.
func crash(t *testing.T, s *slot) {
	t.Helper()
	s.release()
	deadline := time.Now().Add(5 * time.Second)
	for {
		syscall.ForkLock.RLock()
		f, ok, err := tryLockFile(s.lockPath)
		if ok {
			f.Close()
		}
		syscall.ForkLock.RUnlock()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s still locked 5 s after its holder let go", s.dir)
		}
		time.Sleep(time.Millisecond)
	}
}
