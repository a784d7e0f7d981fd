package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// TestFetchResultWaitsForTheBundle: a result bundle that a lookup does not
// find at first (in a cluster, a replica behind the coordinator's write)
// is asked for again, and the branch arrives in the repository.
func TestFetchResultWaitsForTheBundle(t *testing.T) {
	ctx := testkit.Context(t, time.Minute)
	nc, err := nats.Connect(testkit.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(ctx, nc, bus.Config{}, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	// The coordinator's side: a branch with one commit more, as a bundle.
	src, _ := testkit.Repo(t, map[string]string{"README.md": "base\n"})
	repo := filepath.Join(t.TempDir(), "repo")
	testkit.Git(t, "", "clone", "-q", src, repo)
	testkit.Git(t, src, "checkout", "-q", "-b", "supervisor/wf-1")
	testkit.WriteFile(t, filepath.Join(src, "new.txt"), "new\n")
	testkit.Git(t, src, "add", "new.txt")
	testkit.Git(t, src, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "new")
	commit := testkit.GitOutput(t, src, "rev-parse", "HEAD")
	bundle := filepath.Join(t.TempDir(), "result.bundle")
	if err := workspace.ExportBranch(ctx, filepath.Join(src, ".git"), "supervisor/wf-1", bundle); err != nil {
		t.Fatal(err)
	}
	// Stored a moment after the lookup starts.
	go func() {
		time.Sleep(700 * time.Millisecond)
		f, err := os.Open(bundle)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if _, err := b.Bundles.Put(context.Background(), jetstream.ObjectMeta{Name: "results/wf-1.bundle"}, f); err != nil {
			t.Error(err)
		}
	}()
	if err := fetchResult(ctx, b, repo, "wf-1", "supervisor/wf-1", commit); err != nil {
		t.Fatalf("fetchResult: %v", err)
	}
	if got := testkit.GitOutput(t, repo, "rev-parse", "refs/heads/supervisor/wf-1"); got != commit {
		t.Errorf("branch at %s, want %s", got, commit)
	}
}
