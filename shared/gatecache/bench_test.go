package gatecache

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/gatecache/repogen"
	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// benchRepo is a generated repository of 10,000 files with 5 uncommitted
// changes and an index written after them, shared by the benchmarks of one
// test binary.
var benchRepo = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gatecache-bench-")
	if err != nil {
		return "", err
	}
	benchDir = dir
	if err := repogen.Generate(dir, 10_000); err != nil {
		return "", err
	}
	if err := repogen.Modify(dir, 5, "changed"); err != nil {
		return "", err
	}
	// Rewrite the index more than a second after the files were written,
	// as in a workspace not touched this instant: no entry is racily
	// clean, so neither git status nor the key re-reads unchanged files.
	time.Sleep(1100 * time.Millisecond)
	_, err = gitexec.Runner{Dir: dir}.Output(context.Background(), "update-index", "-q", "--refresh", "--force-write-index")
	return dir, err
})

// benchDir is the generated repository, once made, removed by TestMain.
var benchDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func benchKey(b *testing.B, mode treeMode) {
	dir, err := benchRepo()
	if err != nil {
		b.Fatal(err)
	}
	in := baseInput(dir)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		k, err := computeKey(ctx, in, mode)
		if err != nil || k.Disabled != "" {
			b.Fatalf("key: %+v, %v", k, err)
		}
	}
}

// BenchmarkKey computes the cache key of a 10,000-file repository with 5
// changed files (the tree computed in Go from the index's stat data).
func BenchmarkKey(b *testing.B) { benchKey(b, treeAuto) }

// BenchmarkKeyGit is BenchmarkKey on the git path: `git add -A` into a
// copy of the index (whose stat data spares unchanged files) and `git
// write-tree`.
func BenchmarkKeyGit(b *testing.B) { benchKey(b, treeGit) }

// BenchmarkKeyFreshIndex is the git path with the index read fresh from
// HEAD, so every file is hashed.
func BenchmarkKeyFreshIndex(b *testing.B) { benchKey(b, treeGitFresh) }

// BenchmarkGitStatus runs `git status --porcelain` on the same repository,
// for comparison.
func BenchmarkGitStatus(b *testing.B) {
	dir, err := benchRepo()
	if err != nil {
		b.Fatal(err)
	}
	g := gitexec.Runner{Dir: dir}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := g.Output(ctx, "status", "--porcelain=v1", "-z"); err != nil {
			b.Fatal(err)
		}
	}
}
