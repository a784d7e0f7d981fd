package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// integrate carries out an Integrate effect outside the state's lock: the
// node's patch lands on the branch, and the outcome is appended.
func (e *Engine) integrate(ctx context.Context, wf string, x statemachine.Integrate) (bool, error) {
	ev, err := e.integration(ctx, wf, x)
	if err != nil {
		return false, err
	}
	return e.append(ctx, ev.Event, ev.MsgID)
}

// patchless reports whether node of workflow wf has no patch to land:
// integrating it runs no git and changes no branch.
func (e *Engine) patchless(wf, node string) bool {
	none := false
	e.Read(func(s *statemachine.State) {
		if w, ok := s.Workflow(wf); ok {
			if n := w.Nodes[node]; n != nil {
				none = n.Patch == nil
			}
		}
	})
	return none
}

// integration lands the node's patch of an Integrate effect on the branch
// and returns the event that records the outcome, without appending it.
func (e *Engine) integration(ctx context.Context, wf string, x statemachine.Integrate) (statemachine.Append, error) {
	var in integration
	e.Read(func(s *statemachine.State) {
		w, _ := s.Workflow(wf)
		in = snapshot(w, x.Node)
	})
	in.history = e.history(wf)
	in.commitTime = x.CommitTime
	sctx, span := e.startSpan(ctx, wf, SpanIntegration, attribute.String("supervisor.node_id", x.Node))
	commit, err := e.integ.apply(sctx, in)
	telemetry.End(span, err)
	var ev statemachine.Append
	e.Read(func(s *statemachine.State) {
		w, _ := s.Workflow(wf)
		switch {
		case errors.Is(err, errConflict):
			ev = statemachine.IntegrationConflictEvent(w, x.Node, err.Error(), e.opts.Now())
		case errors.Is(err, bus.ErrPatchRefused):
			ev = statemachine.IntegrationRefusedEvent(w, x.Node, err.Error(), e.opts.Now())
		case err == nil:
			ev = statemachine.IntegratedEvent(w, x.Node, x, commit, e.opts.Now())
		}
	})
	if err != nil && !errors.Is(err, errConflict) && !errors.Is(err, bus.ErrPatchRefused) {
		return statemachine.Append{}, err
	}
	return ev, nil
}

// errConflict marks a patch that no longer applies to the workflow branch.
var errConflict = errors.New("patch does not apply to the workflow branch")

// landed is one patch on a workflow's branch, as the log records it.
type landed struct {
	node, message, commit string
	patch                 *protocol.PatchRef
	time                  time.Time
}

// integration is what integrating or delivering needs of a workflow,
// copied out of the state so the work happens without its lock.
type integration struct {
	wf, branch, repoPath string
	repo                 protocol.RepoRef
	// head is the branch's tip as the log records it ("" = the base).
	head string
	// history returns every patch on the branch, in order. It is read
	// only when the mirror lacks the branch's commits, which is rare.
	history func() []landed
	// The node to integrate, if any: its patch, commit message and date.
	node       string
	patch      *protocol.PatchRef
	message    string
	commitTime time.Time
}

func commitMessage(w *statemachine.Workflow, n *statemachine.Node) string {
	return fmt.Sprintf("%s: %s\n\nSupervisor-Workflow: %s\nSupervisor-Node: %s\nSupervisor-Attempt: %d\n",
		w.Spec.Name, n.ID, w.ID, n.ID, n.Attempt)
}

// snapshot copies what integrating node (or, with "", delivering) needs
// of w out of the state, but for the history.
func snapshot(w *statemachine.Workflow, node string) integration {
	in := integration{wf: w.ID, branch: w.Branch, repoPath: w.RepoPath, repo: w.Repo, head: w.Head}
	if n := w.Nodes[node]; n != nil {
		in.node, in.patch, in.message = n.ID, n.Patch, commitMessage(w, n)
	}
	return in
}

// history returns a function that reads workflow wf's integrated patches
// from the state when called. Called in wf's queue, it sees the state the
// snapshot was taken from: only that queue changes the workflow.
func (e *Engine) history(wf string) func() []landed {
	return func() []landed {
		var out []landed
		e.Read(func(s *statemachine.State) {
			w, ok := s.Workflow(wf)
			if !ok {
				return
			}
			for _, id := range w.Integrated {
				n := w.Nodes[id]
				out = append(out, landed{node: id, message: commitMessage(w, n), commit: n.Commit(),
					patch: n.Patch, time: n.CommitTime()})
			}
		})
		return out
	}
}

// parent is the commit the next patch lands on.
func (in integration) parent() string {
	if in.head == "" {
		return in.repo.BaseCommit
	}
	return in.head
}

// integrator lands accepted patches on a workflow's branch. It keeps its
// own mirror of each repository under the coordinator's data dir, so it
// works whether or not the submitting host's repository is visible here.
// The branch's commits are a function of the log (patch, parent, message,
// date), so a coordinator whose mirror lacks them — a standby taking over
// on another host — makes them again.
type integrator struct {
	bus *bus.Bus
	ws  *workspace.Manager
	dir string
	log *slog.Logger
	// roots are where deliver and merge may write.
	roots reporoots.Roots
	// tips holds, per workflow branch (gitDir + "\x00" + branch), the
	// last tip this integrator made or found in the mirror: mirrors only
	// grow, so the next integration need not look for it. Delivering the
	// branch drops its entry.
	tips sync.Map
}

func tipKey(gitDir, branch string) string { return gitDir + "\x00" + branch }

func newIntegrator(b *bus.Bus, dataDir string, roots reporoots.Roots, log *slog.Logger) (*integrator, error) {
	dir := filepath.Join(dataDir, "integration")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: integration dir: %w", err)
	}
	ws, err := workspace.NewManager(dir, b.Bundles, b.Patches, log)
	if err != nil {
		return nil, err
	}
	return &integrator{bus: b, ws: ws, dir: dir, log: log, roots: roots}, nil
}

// apply lands the node's patch on the workflow branch and returns the new
// tip. The patch is always applied on top of the tip recorded in the log,
// so re-integrating after a crash cannot apply it twice.
func (in *integrator) apply(ctx context.Context, x integration) (string, error) {
	parent := x.parent()
	if x.patch == nil {
		return parent, nil // nothing to land; deliver sets the branch
	}
	gitDir, err := in.ready(ctx, x)
	if err != nil {
		return "", err
	}
	if err := workspace.SetBranch(ctx, gitDir, x.branch, parent); err != nil {
		return "", err
	}
	commit, err := in.land(ctx, gitDir, x, parent, *x.patch, x.message, x.commitTime)
	if errors.Is(err, workspace.ErrConflict) {
		return "", fmt.Errorf("%w: node %s: %v", errConflict, x.node, err)
	}
	if err == nil {
		in.tips.Store(tipKey(gitDir, x.branch), commit)
	}
	return commit, err
}

// land applies one patch on parent with message and date.
func (in *integrator) land(ctx context.Context, gitDir string, x integration, parent string, p protocol.PatchRef, message string, date time.Time) (string, error) {
	// Bounded: an oversized or altered patch is refused unread.
	patch, err := in.bus.PatchBytes(ctx, p)
	if err != nil {
		return "", fmt.Errorf("engine: fetch patch %s of %s: %w", p.Object, x.wf, err)
	}
	var opts []workspace.CommitOption
	if !date.IsZero() {
		opts = append(opts, workspace.CommitDate(date))
	}
	return workspace.ApplyToBranch(ctx, gitDir, x.branch, parent, patch, message, opts...)
}

// ready returns the repository's mirror with the branch's recorded tip in
// it, making the branch's commits again from the log's patches if the
// mirror lacks them (it was made on another coordinator's host).
func (in *integrator) ready(ctx context.Context, x integration) (string, error) {
	gitDir, err := in.ws.Mirror(ctx, x.repo)
	if err != nil {
		return "", err
	}
	if x.head == "" {
		return gitDir, nil
	}
	if tip, ok := in.tips.Load(tipKey(gitDir, x.branch)); ok && tip == x.head {
		return gitDir, nil
	}
	if x.head == x.repo.BaseCommit {
		// Nothing landed: Mirror has just made sure the mirror holds the
		// base commit, so no git process looks for it (PERF-67).
		return gitDir, nil
	}
	if ok, err := workspace.HasCommit(ctx, gitDir, x.head); err != nil || ok {
		if ok {
			in.tips.Store(tipKey(gitDir, x.branch), x.head)
		}
		return gitDir, err
	}
	in.log.InfoContext(ctx, "rebuilding the workflow's branch from the patches in its event log", "workflow", x.wf,
		"branch", x.branch, "head", x.head)
	tip := x.repo.BaseCommit
	if err := workspace.SetBranch(ctx, gitDir, x.branch, tip); err != nil {
		return "", err
	}
	for _, l := range x.history() {
		if l.patch != nil {
			next, err := in.land(ctx, gitDir, x, tip, *l.patch, l.message, l.time)
			if err != nil {
				return "", fmt.Errorf("engine: rebuild branch %s of %s at node %s: %w", x.branch, x.wf, l.node, err)
			}
			tip = next
		}
		if tip != l.commit {
			return "", fmt.Errorf("engine: rebuild branch %s of %s: node %s makes commit %s, but the log records %s "+
				"(integrated before commits were reproducible, or the patch changed)", x.branch, x.wf, l.node, tip, l.commit)
		}
	}
	return gitDir, nil
}

// deliver publishes the finished branch as a bundle in the object store
// and, when the submitting repository is visible on this host, writes the
// branch into it.
func (in *integrator) deliver(ctx context.Context, x integration) error {
	gitDir, err := in.ready(ctx, x)
	if err != nil {
		return err
	}
	head := x.parent()
	in.tips.Delete(tipKey(gitDir, x.branch))
	if err := workspace.SetBranch(ctx, gitDir, x.branch, head); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(in.dir, "result-*.bundle")
	if err != nil {
		return fmt.Errorf("engine: result bundle: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := workspace.ExportBranch(ctx, gitDir, x.branch, tmp.Name()); err != nil {
		return err
	}
	bundle := statemachine.ResultBundleName(x.wf)
	where := "the branch is in the result bundle"
	if fi, err := os.Stat(tmp.Name()); err != nil {
		return fmt.Errorf("engine: result bundle of %s: %w", x.wf, err)
	} else if fi.Size() > protocol.MaxBundleBytes {
		// Not stored (SIZE-05); the branch still goes into the repository
		// when it can.
		where = "the result bundle was not stored (" + protocol.BundleTooLarge(bundle, fi.Size()) +
			"): the branch is only in the coordinator's integration mirror"
		in.log.WarnContext(ctx, "result bundle over the limit; not stored", "workflow", x.wf, "bundle", bundle,
			"bytes", fi.Size(), "max_bytes", int64(protocol.MaxBundleBytes))
	} else if err := putFile(ctx, in.bus.Bundles, bundle, tmp.Name()); err != nil {
		return fmt.Errorf("engine: upload result bundle of %s: %w", x.wf, err)
	}
	if x.repoPath == "" {
		return nil
	}
	if err := in.roots.Check(x.repoPath); err != nil {
		in.log.WarnContext(ctx, "not writing the branch into the submitting repository; "+where,
			"workflow", x.wf, "repo", x.repoPath, "bundle", bundle, "reason", err)
		return nil
	}
	if fi, err := os.Stat(filepath.Join(x.repoPath, ".git")); err != nil || fi == nil {
		in.log.InfoContext(ctx, "submitting repository not visible here; "+where,
			"workflow", x.wf, "repo", x.repoPath, "bundle", bundle)
		return nil
	}
	var known []workspace.ImportOption
	if head == x.repo.BaseCommit {
		// The repository it was submitted from has it: no bundle to
		// read. A commit landed here it cannot have (and asking a
		// partial clone for one would fetch from its remote).
		known = append(known, workspace.KnownTip(head))
	}
	if err := workspace.ImportBranch(ctx, x.repoPath, tmp.Name(), x.branch, known...); err != nil {
		in.log.WarnContext(ctx, "cannot write the branch into the submitting repository; "+where,
			"workflow", x.wf, "repo", x.repoPath, "err", err)
		return nil
	}
	in.log.InfoContext(ctx, "branch delivered", "workflow", x.wf, "repo", x.repoPath, "branch", x.branch, "head", head)
	return nil
}

// putFile puts file in the bundles bucket as name.
func putFile(ctx context.Context, store jetstream.ObjectStore, name, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err = store.Put(ctx, jetstream.ObjectMeta{Name: name}, f); err != nil {
		return bus.ObjectPutError(protocol.BucketBundles, name, err)
	}
	return nil
}
