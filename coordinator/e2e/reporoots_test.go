package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// TestRepoRootsServe (TRUST-REPO) on separate processes: `coordinator
// serve --repo-roots DIR` runs a submission from a repository outside DIR
// without writing into it (submit says so; --wait fetches the branch
// itself), and refuses a raw sup.api.submit naming that repository with a
// 403 that names the roots.
func TestRepoRootsServe(t *testing.T) {
	f := newFleet(t, 30*time.Second)
	allowed := filepath.Join(t.TempDir(), "allowed")
	f.coordArgs = []string{"--repo-roots", allowed}
	f.coordinator("coordinator", "coordinator")
	f.worker("worker")
	f.gaterunner("gaterunner")

	repo, base := testkit.Repo(t, map[string]string{"README.md": "roots\n"})
	wf := writeFile(t, t.TempDir(), "wf.yaml",
		"name: roots\ndefaults:\n  agent: {command: [touch, out.txt]}\ntasks:\n  - {id: a, prompt: a, gates: []}\n")
	r := f.cli(3*time.Minute, "submit", wf, "--repo", repo, "--wait")
	if r.code != 0 || !strings.Contains(r.stderr, "will not write into this repository") ||
		!strings.Contains(r.stderr, allowed) {
		t.Fatalf("submit from outside the roots:\n%s", r)
	}
	id := wfID(t, r)
	testkit.Git(t, repo, "rev-parse", "--verify", "supervisor/"+id) // fetched by the CLI
	if s := f.detail(id); s.RepoPath != "" {
		t.Fatalf("the workflow recorded repo_path %q outside the roots", s.RepoPath)
	}

	nc, err := nats.Connect(f.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	repoID, err := workspace.RepoID(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&api.Client{NC: nc}).Submit(ctx, api.SubmitRequest{Filename: "raw.yaml",
		YAML: "name: raw\ndefaults:\n  agent: {command: [touch, raw.txt]}\ntasks:\n  - {id: a, prompt: a, gates: []}\n",
		Repo: protocol.RepoRef{ID: repoID, BaseCommit: base, Bundle: fmt.Sprintf("%s/%s.bundle", repoID, base)}, RepoPath: repo})
	if !errors.Is(err, api.ErrForbidden) || !strings.Contains(err.Error(), allowed) {
		t.Fatalf("raw submit naming %s: %v, want a 403 naming the roots", repo, err)
	}
}
