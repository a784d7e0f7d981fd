package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// NoopCommand is the agent and gate command of the full-path scenarios:
// coreutils' true, on the sandbox's base PATH.
var NoopCommand = []string{"true"}

// submitTimeout bounds one submit request (the coordinator publishes the
// workflow's ready nodes before it answers).
const submitTimeout = 2 * time.Minute

// benchRepo is the tiny git repository the workflows work on.
type benchRepo struct {
	path string
	ref  protocol.RepoRef
	// bundle is the base commit's bundle, uploaded to each fleet.
	bundle string
}

// prepareRepo creates the repository and its bundle once per run.
func (r *runner) prepareRepo(ctx context.Context) (*benchRepo, error) {
	if r.repo != nil {
		return r.repo, nil
	}
	path := filepath.Join(r.dir, "repo")
	if err := os.RemoveAll(path); err != nil { // a kept --dir from an earlier run
		return nil, err
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(path, "README.md"), []byte("# bench\n\nThe repository `supervisor-bench` works on.\n"), 0o644); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=Bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "bench: base"},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = path
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	commit, err := workspace.ResolveCommit(ctx, path, "HEAD")
	if err != nil {
		return nil, err
	}
	if r.repo, err = bundleRepo(ctx, path, commit, filepath.Join(r.dir, "base.bundle")); err != nil {
		return nil, err
	}
	return r.repo, nil
}

// bundleRepo bundles commit of the repository at path into bundle and
// returns the repository as workflows name it.
func bundleRepo(ctx context.Context, path, commit, bundle string) (*benchRepo, error) {
	id, err := workspace.RepoID(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := workspace.CreateBundle(ctx, path, commit, bundle); err != nil {
		return nil, err
	}
	return &benchRepo{path: path, bundle: bundle,
		ref: protocol.RepoRef{ID: id, BaseCommit: commit, Bundle: fmt.Sprintf("%s/%s.bundle", id, commit)}}, nil
}

// uploadBundle puts the base bundle in the fleet's object store, as
// `coordinator submit` does, unless it is there already.
func uploadBundle(ctx context.Context, b *bus.Bus, repo *benchRepo) error {
	if _, err := b.Bundles.GetInfo(ctx, repo.ref.Bundle); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("look up bundle %s: %w", repo.ref.Bundle, err)
	}
	f, err := os.Open(repo.bundle)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := b.Bundles.Put(ctx, jetstream.ObjectMeta{Name: repo.ref.Bundle}, f); err != nil {
		return fmt.Errorf("upload bundle %s: %w", repo.ref.Bundle, err)
	}
	return nil
}

// workflowYAML writes a workflow of no-op tasks: independent, or each
// depending on the previous one (chain), with one no-op gate each (gated).
func workflowYAML(name string, tasks int, chain, gated bool) []byte {
	var b strings.Builder
	cmd := `["` + strings.Join(NoopCommand, `", "`) + `"]`
	fmt.Fprintf(&b, "name: %s\ndefaults:\n  agent:\n    command: %s\n  timeout: 1m\n  allow_empty: true\n", name, cmd)
	if gated {
		fmt.Fprintf(&b, "gates:\n  - name: ok\n    command: %s\n    timeout: 1m\n", cmd)
	}
	b.WriteString("tasks:\n")
	for i := 0; i < tasks; i++ {
		fmt.Fprintf(&b, "  - id: t%04d\n    prompt: no-op\n", i)
		if chain && i > 0 {
			fmt.Fprintf(&b, "    depends_on: [t%04d]\n", i-1)
		}
	}
	return []byte(b.String())
}

// split divides n tasks into the fewest workflows the schema allows, of
// near-equal sizes.
func split(n int) []int {
	parts := (n + MaxTasksPerWorkflow - 1) / MaxTasksPerWorkflow
	sizes := make([]int, parts)
	for i := range sizes {
		sizes[i] = n / parts
		if i < n%parts {
			sizes[i]++
		}
	}
	return sizes
}

type workflowFile struct {
	name string
	yaml []byte
}

// fleetSession is a running fleet with the bench's client attached.
type fleetSession struct {
	url     string
	bus     *bus.Bus
	client  *api.Client
	repo    *benchRepo
	watcher *watcher
}

// openFleet starts a fleet whose files live in r.dir/name, attaches the
// bench's client, uploads the base bundle, follows the event log and waits
// until the API answers. closeFleet stops it all. sandboxPath is the PATH
// of its runners' process sandbox ("" = the fleet's default).
func (r *runner) openFleet(ctx context.Context, name, sandboxPath string) (fs *fleetSession, closeFleet func(), err error) {
	return r.openFleetWith(ctx, name, sandboxPath, false)
}

// openFleetWith is openFleet; with noRunners the fleet has no worker and
// no gate runner, only NATS and the coordinator.
func (r *runner) openFleetWith(ctx context.Context, name, sandboxPath string, noRunners bool) (fs *fleetSession, closeFleet func(), err error) {
	repo, err := r.prepareRepo(ctx)
	if err != nil {
		return nil, nil, err
	}
	if noRunners {
		r.progress("%s: starting (NATS and the coordinator only)", name)
	} else {
		r.progress("%s: starting (in-process worker and gate runner concurrency %d)", name, r.cfg.Concurrency)
	}
	flog := r.cfg.FleetLog
	if flog == nil {
		flog = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// The embedded default on a free port, with the sandbox's default PATH
	// (where `true` lives) unless told otherwise.
	// The coordinator delivers into the bench's repositories, as it does
	// into a user's under its repo roots.
	roots, err := reporoots.New([]string{filepath.Join(r.dir, "repo"), r.demoRepoPath()})
	if err != nil {
		return nil, nil, err
	}
	// A kept --dir's earlier fleet would resume its unfinished workflows.
	if err := os.RemoveAll(filepath.Join(r.dir, name)); err != nil {
		return nil, nil, err
	}
	f, err := fleet.Start(ctx, fleet.Options{DataDir: filepath.Join(r.dir, name), Listen: "127.0.0.1:0",
		WorkerConcurrency: r.cfg.Concurrency, GateConcurrency: r.cfg.Concurrency, SandboxPath: sandboxPath, Log: flog,
		RepoRoots: roots, NoRunners: noRunners,
		// The feedback scenario fails every task's first round on purpose
		// (20 by default): the fleet-wide pause after 10 failed rounds an
		// hour would stop it half-way.
		MaxFailuresPerHour: -1})
	if err != nil {
		return nil, nil, fmt.Errorf("start fleet: %w", err)
	}
	var closers []func()
	closeFleet = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	closers = append(closers, func() {
		r.progress("%s: stopping", name)
		if cerr := f.Close(); cerr != nil {
			r.progress("%s: shut down with errors: %v", name, cerr)
		}
	})
	defer func() {
		if err != nil {
			closeFleet()
		}
	}()
	nc, err := bus.Connect(ctx, f.URL(), "supervisor-bench", r.cfg.Log, bus.InProcess(f))
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, nc.Close)
	b, err := bus.Attach(ctx, nc, r.cfg.Log)
	if err != nil {
		return nil, nil, err
	}
	if err := uploadBundle(ctx, b, repo); err != nil {
		return nil, nil, err
	}
	client := &api.Client{NC: nc}
	fs = &fleetSession{url: f.URL(), bus: b, client: client, repo: repo, watcher: newWatcher(b, client)}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	if err := waitAPI(wctx, fs.client); err != nil {
		return nil, nil, err
	}
	return fs, closeFleet, nil
}

// run submits one workflow and waits until it has finished.
func (fs *fleetSession) run(ctx context.Context, file string, yaml []byte) (string, error) {
	id, err := submit(ctx, fs.client, fs.repo, file, yaml)
	if err == nil {
		_, err = fs.watcher.wait(ctx, []string{id})
	}
	return id, err
}

// runFull runs the selected full-path scenarios on one fleet, as a
// long-running `coordinator dev` would serve them: first a warm-up
// workflow of one gated task (so the mirrors exist on every host), then
// each scenario's workflows, submitted through the API like `coordinator
// submit` does and followed on the event log until each finishes. With
// the feedback scenario, the runners' sandbox PATH ends with BinDir, where
// its agent is: the default directories come first, so every other
// command resolves as without it.
func (r *runner) runFull(ctx context.Context, want map[string]bool) ([]Result, error) {
	sandboxPath := ""
	if want[ScenarioFeedback] {
		sandboxPath = jobrun.DefaultSandboxPath() + ":" + r.cfg.BinDir
	}
	fs, closeFleet, err := r.openFleet(ctx, "fleet", sandboxPath)
	if err != nil {
		return nil, err
	}
	defer closeFleet()

	wctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	if _, err := fs.run(wctx, "bench-warmup.yaml", workflowYAML("bench-warmup", 1, false, true)); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	var out []Result
	for _, s := range []string{ScenarioNodes, ScenarioGated, ScenarioChain} {
		if !want[s] {
			continue
		}
		res, err := r.runScenario(ctx, fs, s)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s, err)
		}
		out = append(out, res)
	}
	if want[ScenarioFeedback] {
		res, err := r.runFeedback(ctx, fs)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", ScenarioFeedback, err)
		}
		out = append(out, res)
	}
	return out, nil
}

// runScenario submits one full-path scenario's workflows and measures
// them from the first submit to the last workflow.finished.
func (r *runner) runScenario(ctx context.Context, fs *fleetSession, scenario string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	gated, chain := scenario == ScenarioGated, scenario == ScenarioChain
	var files []workflowFile
	count := 0
	if chain {
		count = r.cfg.ChainNodes
		files = append(files, workflowFile{"bench-chain.yaml", workflowYAML("bench-chain", count, true, false)})
	} else {
		count = r.cfg.Nodes
		for i, size := range split(count) {
			name := fmt.Sprintf("bench-%s-%d", scenario, i+1)
			files = append(files, workflowFile{name + ".yaml", workflowYAML(name, size, false, gated)})
		}
	}
	res, err := r.measureWorkflows(ctx, fs, scenario, count, files)
	if err != nil {
		return Result{}, err
	}
	noop := strings.Join(NoopCommand, " ")
	switch scenario {
	case ScenarioNodes:
		res.Description = fmt.Sprintf("independent no-op tasks (agent `%s`), no gates; %d agent slots", noop, r.cfg.Concurrency)
	case ScenarioGated:
		res.Description = fmt.Sprintf("independent no-op tasks, one no-op gate (`%s`) each; %d agent and %d gate slots", noop, r.cfg.Concurrency, r.cfg.Concurrency)
	case ScenarioChain:
		res.Description = "no-op tasks in a chain, each depending on the previous: one node in flight at a time"
		res.Latency = "ready→started, unloaded"
	}
	return res, nil
}

// waitAPI waits until the coordinator's API answers. The fleet reports
// ready once the engine has subscribed its endpoints, but the subscriptions
// may not have reached the server yet: a request sent then finds no
// responders.
func waitAPI(ctx context.Context, client *api.Client) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := client.List(rctx)
		cancel()
		if err == nil || !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// submit submits one workflow through the coordinator's API.
func submit(ctx context.Context, client *api.Client, repo *benchRepo, file string, yaml []byte) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, submitTimeout)
	defer cancel()
	resp, err := client.Submit(rctx, api.SubmitRequest{Filename: file, YAML: string(yaml), Repo: repo.ref, RepoPath: repo.path,
		RepoPathOptional: true})
	if err != nil {
		return "", fmt.Errorf("submit %s: %w", file, err)
	}
	return resp.WorkflowID, nil
}
