// Package repogen generates synthetic git repositories for the gate
// cache's benchmarks (gatecache's BenchmarkKey and the cache-key scenario
// of supervisor-bench) to compute keys on; package gatecache itself does
// not import it.
package repogen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// generatedPerDir is how many generated files share a directory.
const generatedPerDir = 100

// File is the slash-separated path, relative to the repository, of the
// i-th file Generate writes.
func File(i int) string {
	return fmt.Sprintf("src/d%03d/f%05d.txt", i/generatedPerDir, i)
}

// Generate creates a git repository in dir (created if needed) with files
// small text files (a few hundred bytes each, 100 per directory, see File)
// plus a .gitignore ignoring build/, all committed on branch
// main. The content is deterministic, so two repositories generated with
// the same count have the same tree.
func Generate(dir string, files int) error {
	if files < 0 {
		return fmt.Errorf("repogen: Generate: negative file count %d", files)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx := context.Background()
	g := gitexec.Runner{Dir: dir}
	if _, err := g.Output(ctx, "-c", "init.defaultBranch=main", "init", "-q"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("build/\n"), 0o644); err != nil {
		return err
	}
	made := map[string]bool{}
	for i := range files {
		rel := File(i)
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if d := filepath.Dir(path); !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			made[d] = true
		}
		if err := os.WriteFile(path, generatedContent(i), 0o644); err != nil {
			return err
		}
	}
	if _, err := g.Output(ctx, "add", "-A"); err != nil {
		return err
	}
	if _, err := g.Output(ctx, "commit", "-q", "--no-gpg-sign", "-m", "generated"); err != nil {
		return err
	}
	return nil
}

// Modify appends salt to the first n files of a repository made by
// Generate, leaving the changes uncommitted.
func Modify(dir string, n int, salt string) error {
	for i := range n {
		path := filepath.Join(dir, filepath.FromSlash(File(i)))
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, werr := f.WriteString(salt + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
	}
	return nil
}

func generatedContent(i int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "// generated file %d\n", i)
	for l := range 4 + i%8 {
		fmt.Fprintf(&b, "line %d of file %d: the quick brown fox jumps over the lazy dog\n", l, i)
	}
	return []byte(b.String())
}
