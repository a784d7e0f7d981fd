package jobruntest_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
)

func TestGitAndWriteFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	jobruntest.Git(t, "", "init", "--quiet", "--initial-branch=main", dir)
	jobruntest.WriteFile(t, filepath.Join(dir, "a/b/c.txt"), "c\n")
	jobruntest.Git(t, dir, "add", "--all")
	jobruntest.Git(t, dir, "commit", "--quiet", "-m", "one")
	if got := jobruntest.Git(t, dir, "log", "--format=%an <%ae> %s"); got != "Test <test@example.com> one\n" {
		t.Errorf("git log = %q, want the fixed identity, untrimmed", got)
	}
}

func TestFleet(t *testing.T) {
	f := jobruntest.NewFleet(t, "jobruntest", bus.Config{}, map[string]string{"README.md": "hi\n"})
	if f.Repo.ID == "" || f.Repo.BaseCommit == "" || f.Repo.Bundle != f.Repo.ID+"/"+f.Repo.BaseCommit+".bundle" {
		t.Fatalf("repo %+v", f.Repo)
	}
	data, err := f.Bus.Bundles.GetBytes(jobruntest.Context(t), f.Repo.Bundle)
	if err != nil || len(data) == 0 {
		t.Fatalf("bundle %s: %d bytes, %v", f.Repo.Bundle, len(data), err)
	}
	head := jobruntest.Git(t, f.RepoDir, "rev-parse", "HEAD")
	if strings.TrimSpace(head) != f.Repo.BaseCommit {
		t.Errorf("HEAD %s, want %s", head, f.Repo.BaseCommit)
	}
	f.NoReports(100 * time.Millisecond)
}
