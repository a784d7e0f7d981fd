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

// A trusted project's .supervisor/context/ strategies are loaded over the
// built-in and user ones, read at the commit like project roles: a
// workflow may name them, and a broken one is reported at its file:line.
func TestProjectContextStrategies(t *testing.T) {
	configs := filepath.Join("..", "..", "..", "configs")
	empty := t.TempDir()
	repo := t.TempDir()
	git(t, repo, "init", "-q")
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "x\n")
	write(".supervisor/context/narrow.yaml", "name: narrow\ntoken_budget: 4000\nparts:\n  - {name: targets, kind: files, include: [$TARGET]}\npriority_order: [targets]\n")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-qm", "project strategy")
	feature := filepath.Join(t.TempDir(), "f.md")
	if err := os.WriteFile(feature, []byte("---\nsteps:\n  plan:\n    expand: {context: narrow}\n---\n# F\n\nDo it.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		args = append([]string{"plan", "--template", "mvp", feature, "--repo", repo,
			"--builtin-gates", filepath.Join(configs, "gates"), "--user-gates", "",
			"--builtin-context", filepath.Join(configs, "context"), "--user-context", empty,
			"--builtin-roles", filepath.Join(configs, "roles"), "--user-roles", empty,
			"--builtin-templates", filepath.Join(configs, "templates"), "--user-templates", empty}, args...)
		code := Main(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, stderr := run("--trust-project-gates"); code != ExitOK {
		t.Fatalf("trusted: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := run(); code != ExitInvalid || !strings.Contains(stderr, `unknown context strategy "narrow"`) {
		t.Fatalf("untrusted: exit %d, want %d naming the unknown strategy\n%s", code, ExitInvalid, stderr)
	}
	write(".supervisor/context/narrow.yaml", "name: narrow\nparts: []\ncolour: red\n")
	git(t, repo, "commit", "-qam", "broken")
	code, _, stderr := run("--trust-project-gates")
	if code != ExitInvalid || !strings.Contains(stderr, filepath.Join(repo, ".supervisor/context/narrow.yaml")+":3:1") {
		t.Fatalf("broken project strategy: exit %d\n%s", code, stderr)
	}
}
