package gatecache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// This file is for benchmarks (BenchmarkKey here, `supervisor-bench`): it
// builds synthetic repositories to compute keys on.

// generatedPerDir is how many generated files share a directory.
const generatedPerDir = 100

// GeneratedFile is the slash-separated path, relative to the repository,
// of the i-th file GenerateRepo writes.
func GeneratedFile(i int) string {
	return fmt.Sprintf("src/d%03d/f%05d.txt", i/generatedPerDir, i)
}

// GenerateRepo creates a git repository in dir (created if needed) with
// files small text files (a few hundred bytes each, 100 per directory, see
// GeneratedFile) plus a .gitignore ignoring build/, all committed on branch
// main. The content is deterministic, so two repositories generated with
// the same count have the same tree. For benchmarks.
func GenerateRepo(dir string, files int) error {
	if files < 0 {
		return fmt.Errorf("gatecache: GenerateRepo: negative file count %d", files)
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
		rel := GeneratedFile(i)
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

// ModifyRepo appends salt to the first n files of a repository made by
// GenerateRepo, leaving the changes uncommitted. For benchmarks.
func ModifyRepo(dir string, n int, salt string) error {
	for i := range n {
		path := filepath.Join(dir, filepath.FromSlash(GeneratedFile(i)))
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
