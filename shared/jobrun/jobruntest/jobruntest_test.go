package jobruntest_test

import (
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

func TestFleet(t *testing.T) {
	f := jobruntest.NewFleet(t, "jobruntest", bus.Config{}, map[string]string{"README.md": "hi\n"})
	if f.Repo.ID == "" || f.Repo.BaseCommit == "" || f.Repo.Bundle != f.Repo.ID+"/"+f.Repo.BaseCommit+".bundle" {
		t.Fatalf("repo %+v", f.Repo)
	}
	data, err := f.Bus.Bundles.GetBytes(testkit.Context(t, time.Minute), f.Repo.Bundle)
	if err != nil || len(data) == 0 {
		t.Fatalf("bundle %s: %d bytes, %v", f.Repo.Bundle, len(data), err)
	}
	head := testkit.Git(t, f.RepoDir, "rev-parse", "HEAD")
	if head != f.Repo.BaseCommit {
		t.Errorf("HEAD %s, want %s", head, f.Repo.BaseCommit)
	}
	f.NoReports(100 * time.Millisecond)
}
