package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// The coordinator writes branches only into repositories under its repo
// roots (TRUST-REPO): a raw sup.api.submit naming a repository elsewhere is
// refused with 403 and a message naming the roots; the CLI's submission
// from such a repository runs with the path left out (it says so, and
// fetches the branch itself), merge is refused with the reason, an
// auto_merge workflow is refused at once; a repository under a root is
// delivered into by the coordinator.
func TestRepoRoots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	allowedDir := t.TempDir()
	roots, err := reporoots.New([]string{allowedDir})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fleet.Start(ctx, fleet.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tick: 200 * time.Millisecond,
		RepoRoots: roots, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	empty := t.TempDir()
	run := func(args ...string) cliResult {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--nats=" + st.URL(), "--builtin-gates=" + empty, "--user-gates=", "--timeout=90s"}, args...),
			&out, &errOut)
		return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
	}
	dir := t.TempDir()
	write := func(name, extra, file string) string {
		p := filepath.Join(dir, name)
		testkit.WriteFile(t, p, "name: "+strings.TrimSuffix(name, ".yaml")+"\n"+extra+
			"defaults:\n  agent: {command: [touch, "+file+"]}\ntasks:\n  - {id: a, prompt: a, gates: []}\n")
		return p
	}

	// A repository outside the roots (t.TempDir() is not under allowedDir).
	outside, base := testkit.Repo(t, map[string]string{"README.md": "outside\n"})
	r := run("submit", write("out.yaml", "", "out.txt"), "--repo", outside, "--wait")
	wantCode(t, r, 0, "the coordinator will not write into this repository", "not under any of the coordinator's repo roots")
	id := strings.Fields(r.stdout)[0]
	var s api.WorkflowSummary
	decodeJSON(t, run("status", id, "-o", "json"), &s)
	if s.RepoPath != "" {
		t.Fatalf("the workflow recorded repo path %q outside the roots", s.RepoPath)
	}
	// The CLI fetched the branch itself; the coordinator cannot merge.
	testkit.Git(t, outside, "rev-parse", "supervisor/"+id)
	wantCode(t, run("merge", id, "--as", "ada"), ExitMergeFailed, "no repository path", "repo roots")
	if tip := testkit.Git(t, outside, "rev-parse", "main"); tip != base {
		t.Fatalf("main of the outside repository moved to %s", tip)
	}
	wantCode(t, run("submit", write("auto.yaml", "auto_merge: true\n", "auto.txt"), "--repo", outside), ExitFault,
		"writes branches only into repositories its configuration allows", "auto_merge")

	// A raw submission naming the outside repository is refused.
	nc, err := nats.Connect(st.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	repoID, err := workspace.RepoID(ctx, outside)
	if err != nil {
		t.Fatal(err)
	}
	yaml := "name: raw\ndefaults:\n  agent: {command: [touch, raw.txt]}\ntasks:\n  - {id: a, prompt: a, gates: []}\n"
	req := api.SubmitRequest{Filename: "raw.yaml", YAML: yaml, RepoPath: outside,
		Repo: protocol.RepoRef{ID: repoID, BaseCommit: base, Bundle: fmt.Sprintf("%s/%s.bundle", repoID, base)}}
	client := &api.Client{NC: nc}
	_, err = client.Submit(ctx, req)
	if !errors.Is(err, api.ErrForbidden) || !strings.Contains(err.Error(), allowedDir) {
		t.Fatalf("raw submit with repo_path %s: %v, want 403 naming the roots", outside, err)
	}
	for _, bad := range []string{"relative/repo", filepath.Join(allowedDir, "..", filepath.Base(outside))} {
		req.RepoPath = bad
		if _, err := client.Submit(ctx, req); err == nil {
			t.Fatalf("raw submit with repo_path %q was accepted", bad)
		}
	}
	list, err := client.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Workflows) != 1 {
		t.Fatalf("%d workflows after the refused submissions, want 1", len(list.Workflows))
	}

	// A repository under a root: the coordinator delivers and merges.
	inside := filepath.Join(allowedDir, "proj")
	testkit.Git(t, allowedDir, "clone", "-q", outside, inside)
	r = run("submit", write("in.yaml", "", "in.txt"), "--repo", inside)
	wantCode(t, r, 0)
	if strings.Contains(r.stderr, "will not write") {
		t.Fatalf("a repository under the roots was dropped: %s", r.stderr)
	}
	in := strings.Fields(r.stdout)[0]
	wantCode(t, run("watch", in), 0)
	wantCode(t, run("merge", in, "--as", "ada"), 0, "merged supervisor/"+in+" into main")
	if tip, head := testkit.Git(t, inside, "rev-parse", "main"), testkit.Git(t, inside, "rev-parse", "supervisor/"+in); tip != head {
		t.Fatalf("main of the repository under the roots = %s, want the merged %s", tip, head)
	}
}
