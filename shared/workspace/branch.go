package workspace

import (
	"context"
	"fmt"

	"github.com/supervisorhq/supervisor/shared/gitexec"
)

// SetBranch points refs/heads/<branch> of the repository at gitDir at
// commit, creating the branch if needed. The coordinator uses it to reset a
// workflow branch to the tip its event log records before integrating, so
// an integration interrupted by a crash is never applied twice.
func SetBranch(ctx context.Context, gitDir, branch, commit string) error {
	ref, err := checkBranch(ctx, branch)
	if err != nil {
		return err
	}
	if _, err := (gitexec.Runner{GitDir: gitDir}).Text(ctx, "update-ref", ref, commit); err != nil {
		return fmt.Errorf("workspace: set branch %s of %s to %s: %w", branch, gitDir, commit, err)
	}
	return nil
}

// HasCommit reports whether the repository at gitDir has commit.
func HasCommit(ctx context.Context, gitDir, commit string) (bool, error) {
	_, err := (gitexec.Runner{GitDir: gitDir}).Text(ctx, "cat-file", "-e", commit+"^{commit}")
	switch {
	case err == nil:
		return true, nil
	case gitexec.ExitCode(err) == 128 || gitexec.ExitCode(err) == 1:
		return false, nil
	}
	return false, fmt.Errorf("workspace: look for commit %s in %s: %w", commit, gitDir, err)
}
