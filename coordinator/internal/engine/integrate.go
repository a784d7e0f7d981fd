package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// errConflict marks a patch that no longer applies to the branch.
var errConflict = errors.New("patch does not apply to the workflow branch")

// integrator lands accepted patches on a workflow's branch. It keeps its
// own mirror of each repository under the coordinator's data dir, so it
// works whether or not the submitting host's repository is visible here.
type integrator struct {
	bus *bus.Bus
	ws  *workspace.Manager
	dir string
	log *slog.Logger
}

func newIntegrator(b *bus.Bus, dataDir string, log *slog.Logger) (*integrator, error) {
	dir := filepath.Join(dataDir, "integration")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: integration dir: %w", err)
	}
	ws, err := workspace.NewManager(dir, b.Bundles, b.Patches, log)
	if err != nil {
		return nil, err
	}
	return &integrator{bus: b, ws: ws, dir: dir, log: log}, nil
}

// apply lands node n's patch on the workflow branch and returns the new
// tip. The patch is always applied on top of the tip recorded in the event
// log (w.Head), so re-integrating after a crash cannot apply it twice.
func (in *integrator) apply(ctx context.Context, w *Workflow, n *Node) (string, error) {
	parent := w.Head
	if parent == "" {
		parent = w.Repo.BaseCommit
	}
	if n.Patch == nil {
		return parent, nil // nothing to land; deliver sets the branch
	}
	gitDir, err := in.ws.Mirror(ctx, w.Repo)
	if err != nil {
		return "", err
	}
	if err := workspace.SetBranch(ctx, gitDir, w.Branch, parent); err != nil {
		return "", err
	}
	patch, err := in.bus.Patches.GetBytes(ctx, n.Patch.Object)
	if err != nil {
		return "", fmt.Errorf("engine: fetch patch %s of %s/%s: %w", n.Patch.Object, w.ID, n.ID, err)
	}
	msg := fmt.Sprintf("%s: %s\n\nSupervisor-Workflow: %s\nSupervisor-Node: %s\nSupervisor-Attempt: %d\n",
		w.Spec.Name, n.ID, w.ID, n.ID, n.Attempt)
	commit, err := workspace.ApplyToBranch(ctx, gitDir, w.Branch, parent, patch, msg)
	if errors.Is(err, workspace.ErrConflict) {
		return "", fmt.Errorf("%w: node %s: %v", errConflict, n.ID, err)
	}
	return commit, err
}

// deliver publishes the finished branch as a bundle in the object store
// and, when the submitting repository is visible on this host, writes the
// branch into it.
func (in *integrator) deliver(ctx context.Context, w *Workflow) error {
	gitDir, err := in.ws.Mirror(ctx, w.Repo)
	if err != nil {
		return err
	}
	head := w.Head
	if head == "" {
		head = w.Repo.BaseCommit
	}
	if err := workspace.SetBranch(ctx, gitDir, w.Branch, head); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(in.dir, "result-*.bundle")
	if err != nil {
		return fmt.Errorf("engine: result bundle: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := workspace.ExportBranch(ctx, gitDir, w.Branch, tmp.Name()); err != nil {
		return err
	}
	if err := putFile(ctx, in.bus.Bundles, ResultBundleName(w.ID), tmp.Name()); err != nil {
		return fmt.Errorf("engine: upload result bundle of %s: %w", w.ID, err)
	}
	if w.RepoPath == "" {
		return nil
	}
	if fi, err := os.Stat(filepath.Join(w.RepoPath, ".git")); err != nil || fi == nil {
		in.log.Info("submitting repository not visible here; the branch is in the result bundle",
			"workflow", w.ID, "repo", w.RepoPath, "bundle", ResultBundleName(w.ID))
		return nil
	}
	if err := workspace.ImportBranch(ctx, w.RepoPath, tmp.Name(), w.Branch); err != nil {
		in.log.Warn("cannot write the branch into the submitting repository; the branch is in the result bundle",
			"workflow", w.ID, "repo", w.RepoPath, "err", err)
		return nil
	}
	in.log.Info("branch delivered", "workflow", w.ID, "repo", w.RepoPath, "branch", w.Branch, "head", head)
	return nil
}

func putFile(ctx context.Context, store jetstream.ObjectStore, name, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = store.Put(ctx, jetstream.ObjectMeta{Name: name}, f)
	return err
}
