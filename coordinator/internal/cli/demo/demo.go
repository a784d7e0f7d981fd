// Package demo holds the sample repository and workflow of `coordinator demo`.
package demo

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed repo workflow.yaml
var files embed.FS

// Workflow is the demo workflow file.
func Workflow() []byte {
	b, _ := files.ReadFile("workflow.yaml")
	return b
}

// Repo is the sample repository's files; each name carries a ".txt" suffix
// (so the Go tool does not treat them as code here) that is dropped on write.
func Repo() fs.FS {
	sub, _ := fs.Sub(files, "repo")
	return sub
}

// sampleCommitDate is the author and committer date of the sample
// repository's commit.
const sampleCommitDate = "2026-01-01T00:00:00Z"

// WriteRepo creates the sample repository in dir (made if missing): its
// files and one commit on branch main, the same commit every time.
func WriteRepo(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err := fs.WalkDir(Repo(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Repo(), p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, strings.TrimSuffix(p, ".txt"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("write sample repository: %w", err)
	}
	// A fixed date makes the commit, so the repository's id, the same in
	// every demo: a fleet sees repeated demos as repeated workflows on one
	// project, with its mirror and workspace slots already there.
	dates := []string{"GIT_AUTHOR_DATE=" + sampleCommitDate, "GIT_COMMITTER_DATE=" + sampleCommitDate}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=Demo", "-c", "user.email=demo@example.com", "commit", "-q", "-m", "greet: Hello"},
	} {
		if err := Git(ctx, dir, dates, args...); err != nil {
			return err
		}
	}
	return nil
}

// Git runs git with args in dir, env added to its environment, without
// the user's git configuration (hooks, signing, encodings have no say in
// the sample repository's commits).
func Git(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, out)
	}
	return nil
}
