package testkit

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// gitIdentity is the author and committer of every commit Git makes.
var gitIdentity = []string{
	"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
	"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com",
}

// Git runs git in dir (args without the leading "git"; dir "" is the
// current directory) and returns its standard output with surrounding
// white space trimmed. It fails the test if git fails. Git is hardened as
// package gitexec runs it (no host GIT_* variables, no system or global
// configuration, no hooks), commits as Test <test@example.com> unsigned,
// and git init makes branch main.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return strings.TrimSpace(GitOutput(t, dir, args...))
}

// GitOutput is Git returning standard output as is (a diff keeps its last
// newline).
func GitOutput(t testing.TB, dir string, args ...string) string {
	t.Helper()
	argv := append([]string{"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)
	out, err := gitexec.Runner{Dir: dir, Env: gitIdentity}.Output(context.Background(), argv...)
	if err != nil {
		t.Fatalf("git %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return string(out)
}

// Repo creates a git repository in a new temporary directory with files
// (slash-separated paths relative to the repository, and their contents)
// committed on branch main, and returns its directory and that commit.
func Repo[D string | []byte](t testing.TB, files map[string]D) (dir, commit string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "repo")
	Git(t, "", "init", "--quiet", dir)
	for path, data := range files {
		WriteFile(t, filepath.Join(dir, filepath.FromSlash(path)), data)
	}
	Git(t, dir, "add", "--all")
	Git(t, dir, "commit", "--quiet", "-m", "base")
	return dir, Git(t, dir, "rev-parse", "HEAD")
}
