package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestProjectConfigFiles(t *testing.T) {
	repo := t.TempDir()
	git(t, repo, "init", "-q")
	if err := os.MkdirAll(filepath.Join(repo, ".supervisor", "roles"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"trader.yaml": "extends: implementer\n", "notes.md": "not a role\n"} {
		if err := os.WriteFile(filepath.Join(repo, ".supervisor", "roles", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-qm", "roles")
	commit := git(t, repo, "rev-parse", "HEAD")
	// A file only in the work tree is not part of the commit.
	if err := os.WriteFile(filepath.Join(repo, ".supervisor", "roles", "later.yaml"), []byte("x: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	var warn bytes.Buffer
	files, err := projectConfigFiles(ctx, repo, commit, "roles", false, &warn)
	if err != nil || files != nil {
		t.Fatalf("untrusted: %v %v", files, err)
	}
	if !strings.Contains(warn.String(), "ignoring .supervisor/roles/") || !strings.Contains(warn.String(), "--trust-project-gates") {
		t.Errorf("untrusted warning: %q", warn.String())
	}

	files, err = projectConfigFiles(ctx, repo, commit, "roles", true, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Filename != filepath.Join(repo, ".supervisor/roles/trader.yaml") || files[0].Content != "extends: implementer\n" {
		t.Errorf("trusted: %+v", files)
	}

	files, err = projectConfigFiles(ctx, repo, commit, "templates", true, &warn)
	if err != nil || files != nil {
		t.Errorf("no templates directory: %v %v", files, err)
	}
}
