package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// bundleRef is the ref under which CreateBundle records the commit.
const bundleRef = "refs/supervisor/base"

// openRepo checks that repoPath is a git repository and returns a runner
// for git in it.
func openRepo(ctx context.Context, repoPath string) (gitexec.Runner, error) {
	abs, err := filepath.Abs(repoPath)
	if err != nil {
		return gitexec.Runner{}, fmt.Errorf("workspace: repository %s: %w", repoPath, err)
	}
	if info, err := os.Stat(abs); err != nil {
		return gitexec.Runner{}, fmt.Errorf("workspace: repository %s: %w", repoPath, err)
	} else if !info.IsDir() {
		return gitexec.Runner{}, fmt.Errorf("workspace: repository %s: not a directory", repoPath)
	}
	g := gitexec.Runner{Dir: abs}
	if _, err := g.Text(ctx, "rev-parse", "--git-dir"); err != nil {
		return gitexec.Runner{}, fmt.Errorf("workspace: %s is not a git repository: %w", repoPath, err)
	}
	return g, nil
}

// resolveCommit returns the full id of rev^{commit} in the repository g
// runs in.
func resolveCommit(ctx context.Context, g gitexec.Runner, rev string) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") {
		return "", fmt.Errorf("invalid revision %q", rev)
	}
	sha, err := g.Text(ctx, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		if gitexec.ExitCode(err) == 1 {
			return "", fmt.Errorf("revision %q is not a commit in the repository", rev)
		}
		return "", err
	}
	return sha, nil
}

// ResolveCommit returns the full id of the commit rev names in the
// repository at repoPath (rev^{commit}: tags are peeled).
func ResolveCommit(ctx context.Context, repoPath, rev string) (string, error) {
	g, err := openRepo(ctx, repoPath)
	if err != nil {
		return "", err
	}
	sha, err := resolveCommit(ctx, g, rev)
	if err != nil {
		return "", fmt.Errorf("workspace: resolve %q in %s: %w", rev, repoPath, err)
	}
	return sha, nil
}

// RepoID returns a stable identifier of the repository at repoPath:
// "r-" and 16 hex digits of a SHA-256 over the root commits of HEAD. Clones
// of the same project get the same id, so hosts share one mirror for them.
func RepoID(ctx context.Context, repoPath string) (string, error) {
	g, err := openRepo(ctx, repoPath)
	if err != nil {
		return "", err
	}
	out, err := g.Text(ctx, "rev-list", "--max-parents=0", "HEAD", "--")
	if err != nil {
		return "", fmt.Errorf("workspace: root commits of HEAD in %s: %w", repoPath, err)
	}
	roots := strings.Fields(out)
	if len(roots) == 0 {
		return "", fmt.Errorf("workspace: repository %s: HEAD has no root commit", repoPath)
	}
	slices.Sort(roots)
	sum := sha256.Sum256([]byte(strings.Join(roots, "\n")))
	return "r-" + hex.EncodeToString(sum[:8]), nil
}

// CreateBundle writes to outFile a git bundle of commit (any revision
// naming a commit) and its whole history, under the single ref
// refs/supervisor/base, and verifies it. The repository at repoPath is only
// read: the bundle is cut from a temporary repository that borrows its
// objects through objects/info/alternates. Shallow repositories are refused
// since their history is incomplete.
func CreateBundle(ctx context.Context, repoPath, commit, outFile string) error {
	g, err := openRepo(ctx, repoPath)
	if err != nil {
		return err
	}
	sha, err := resolveCommit(ctx, g, commit)
	if err != nil {
		return fmt.Errorf("workspace: bundle %s: %w", repoPath, err)
	}
	if shallow, err := g.Text(ctx, "rev-parse", "--is-shallow-repository"); err != nil {
		return fmt.Errorf("workspace: bundle %s: %w", repoPath, err)
	} else if shallow == "true" {
		return fmt.Errorf("workspace: bundle %s: shallow repositories cannot be bundled; fetch the full history first (git fetch --unshallow)", repoPath)
	}
	objects, err := g.Text(ctx, "rev-parse", "--git-path", "objects")
	if err != nil {
		return fmt.Errorf("workspace: bundle %s: %w", repoPath, err)
	}
	if !filepath.IsAbs(objects) {
		objects = filepath.Join(g.Dir, objects)
	}
	format, err := g.Text(ctx, "rev-parse", "--show-object-format")
	if err != nil {
		return fmt.Errorf("workspace: bundle %s: %w", repoPath, err)
	}
	out, err := filepath.Abs(outFile)
	if err != nil {
		return fmt.Errorf("workspace: bundle %s: output %s: %w", repoPath, outFile, err)
	}

	tmp, err := os.MkdirTemp("", "supervisor-bundle-")
	if err != nil {
		return fmt.Errorf("workspace: bundle %s: %w", repoPath, err)
	}
	defer os.RemoveAll(tmp)
	if _, err := (gitexec.Runner{}).Text(ctx, "init", "--quiet", "--bare", "--template=", "--object-format="+format, tmp); err != nil {
		return fmt.Errorf("workspace: bundle %s: temporary repository: %w", repoPath, err)
	}
	alternates := filepath.Join(tmp, "objects", "info", "alternates")
	if err := os.MkdirAll(filepath.Dir(alternates), 0o755); err != nil {
		return fmt.Errorf("workspace: bundle %s: %w", repoPath, err)
	}
	if err := os.WriteFile(alternates, []byte(objects+"\n"), 0o644); err != nil {
		return fmt.Errorf("workspace: bundle %s: %w", repoPath, err)
	}
	t := gitexec.Runner{GitDir: tmp}
	if _, err := t.Text(ctx, "update-ref", bundleRef, sha); err != nil {
		return fmt.Errorf("workspace: bundle %s at %s: %w", repoPath, sha, err)
	}
	if _, err := t.Text(ctx, "bundle", "create", "--quiet", out, bundleRef); err != nil {
		return fmt.Errorf("workspace: bundle %s at %s: %w", repoPath, sha, err)
	}
	if _, err := t.Text(ctx, "bundle", "verify", "--quiet", out); err != nil {
		return fmt.Errorf("workspace: bundle %s at %s: verify %s: %w", repoPath, sha, out, err)
	}
	return nil
}
