// Package gaterunner runs gate jobs: it pulls them from its pools, takes
// each job's lease, materializes the base commit plus the node's patches in
// a fresh, disposable workspace of the job's own (so nothing is ever reset
// or cleaned), and executes the gate:
//
//  1. The gate's definition is the job's Definition (older jobs: its
//     Command, Env, WorkingDir and TimeoutSeconds).
//  2. Unless the gate says cache: false, the content-addressed cache key is
//     computed over the prepared workspace and the gate runs through the
//     fleet-wide cache: a hit reports the stored passing result without
//     running anything, and identical keys in flight at once run once
//     across the fleet. NoCache skips the lookup but still stores a
//     passing result.
//  3. The workspace is captured before the gate and checked after it: any
//     change outside allowed_writes fails the gate as an integrity
//     violation, whatever its exit code, and is never cached.
//  4. The status follows the exit (0 passed, 75 pending, killed by the
//     timeout timeout, anything else failed; a command that cannot start
//     fails too); a sandbox that reports an out-of-memory kill gives status
//     error. The report carries the output, redacted then tail-truncated to
//     protocol.OutputMaxChars, and the full log is uploaded as an artifact.
//
// A pending gate is reported and acknowledged like any other result: the
// coordinator schedules the next poll as a new gate job (Round + 1).
package gaterunner

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/gatecache"
	"github.com/supervisorhq/supervisor/shared/integrity"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// DefaultResources are the default limits of a gate container (the gate
// runner's --sandbox-memory, --sandbox-cpus, --sandbox-pids); a gate's
// resources field overrides them.
var DefaultResources = sandbox.Resources{MemoryBytes: 2 << 30, CPUs: 2, Pids: 256}

// Config is a gate runner's own configuration.
type Config struct {
	// Pools the runner consumes gate jobs from (default ["default"]).
	Pools []string
	// Concurrency is how many gates run at once (default 1).
	Concurrency int
	// DrainTimeout bounds how long running gates may finish after a stop
	// signal before they are interrupted and their jobs handed back.
	DrainTimeout time.Duration
	// CacheTTL is how long a passing result stays in the gate cache
	// (default gatecache.DefaultTTL, 24 h).
	CacheTTL time.Duration
	// Credentials lists, per adapter, the variables holding its CLI's
	// provider keys that a review gate's reviewers get (nil: each
	// adapter's own, see agentcli.Credentials). Their values come from
	// SecretsFile, else from the runner's environment.
	Credentials map[string][]string
	// SecretsFile, if set, is a KEY=VALUE file (mode 0600 or stricter)
	// of provider keys.
	SecretsFile string
}

// Runner pulls and runs gate jobs.
type Runner struct {
	deps    jobrun.Deps
	cfg     Config
	cancels jobrun.Cancels
	cache   *gatecache.Cache
	// keys hand reviewers their provider keys; keysErr is why they could
	// not be loaded (Run fails with it).
	keys    *agentcli.Keys
	keysErr error
}

// New creates a gate runner. Its gate cache lives in deps.Store, shared by
// every runner of the fleet.
func New(deps jobrun.Deps, cfg Config) *Runner {
	if len(cfg.Pools) == 0 {
		cfg.Pools = []string{protocol.DefaultPool}
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = gatecache.DefaultTTL
	}
	cache := gatecache.New(deps.Store, gatecache.Options{TTL: cfg.CacheTTL, Host: deps.Host, Logger: deps.Log})
	keys, keysErr := agentcli.NewKeys(cfg.Credentials, cfg.SecretsFile)
	return &Runner{deps: deps, cfg: cfg, cache: cache, keys: keys, keysErr: keysErr}
}

// Run pulls gate jobs until ctx ends, then drains like the worker does.
func (r *Runner) Run(ctx context.Context) error {
	if r.keysErr != nil {
		return r.keysErr
	}
	return jobrun.Serve(ctx, r.deps, &r.cancels, bus.PullOptions{
		Kind: protocol.KindGate, Pools: r.cfg.Pools, Concurrency: r.cfg.Concurrency, DrainTimeout: r.cfg.DrainTimeout,
	}, r.handle)
}

func (r *Runner) handle(ctx context.Context, d *bus.Delivery) bus.Disposition {
	var job protocol.GateJob
	if err := protocol.Decode(d.Msg.Data(), &job); err != nil {
		r.deps.Log.ErrorContext(ctx, "dropping malformed gate job", "seq", d.StreamSeq, "err", err)
		return bus.Term("malformed gate job: " + err.Error())
	}
	meta := jobrun.Meta{Kind: protocol.KindGate, JobID: job.JobID, WorkflowID: job.WorkflowID,
		NodeID: job.NodeID, Gate: job.Gate, Attempt: job.Attempt, Round: job.Round, PublishedAt: job.PublishedAt, Pool: job.Pool,
		Scopes: jobrun.JobScopes{Work: protocol.GateScope(job.Gate, definition(&job).scopeArgv()), Repo: protocol.RepoScope(job.Repo.ID)}}
	began := time.Now()
	return jobrun.Run(ctx, r.deps, &r.cancels, d, meta,
		func(ctx context.Context, token uint64) jobrun.Outcome {
			out := r.run(ctx, &job, token)
			if out.Report != nil {
				observeGate(out.Report.Gate)
			}
			return out
		},
		func(token uint64, err error) *protocol.Report {
			g := r.result(&job, token, began)
			g.Status, g.Error = protocol.GateError, err.Error()
			g.Output = truncateOutput(r.keys.Scrub(err.Error()))
			observeGate(g)
			return gateReport(g)
		})
}

// result returns a GateResult with the job's fields filled in.
func (r *Runner) result(job *protocol.GateJob, token uint64, began time.Time) *protocol.GateResult {
	return &protocol.GateResult{
		JobID: job.JobID, WorkflowID: job.WorkflowID, NodeID: job.NodeID, Gate: job.Gate, Attempt: job.Attempt,
		LeaseToken: token, Host: r.deps.Host, Round: job.Round,
		StartedAt: began.UTC(), FinishedAt: time.Now().UTC(),
	}
}

func gateReport(g *protocol.GateResult) *protocol.Report {
	return &protocol.Report{Type: protocol.ReportGateResult, Gate: g}
}

// gateDef is the definition a gate job runs with.
type gateDef struct {
	command        []string
	env            map[string]string
	workingDir     string
	timeoutSeconds int
	cache          bool
	cacheInputs    []string
	forceHashLarge bool
	allowedWrites  []string
	image          string
	resources      *protocol.GateResources
	cacheDirs      []string
	// review is a review gate's reviewers and quorum (nil: a command gate).
	review *protocol.ReviewSpec
}

// scopeArgv is what names the gate's work for its breaker: its command,
// or a review gate's reviewers' adapters and models.
func (d gateDef) scopeArgv() []string {
	if d.review == nil {
		return d.command
	}
	argv := []string{"review"}
	for _, a := range d.review.Reviewers {
		argv = append(argv, a.Adapter, a.Model)
	}
	return argv
}

// definition returns the job's gate definition: its Definition when the
// coordinator sent one, each execution field falling back to the job's
// copy; a job without a Definition (an older coordinator) runs its Command,
// Env, WorkingDir and TimeoutSeconds with the defaults (cache on, nothing
// allowed to be written).
func definition(job *protocol.GateJob) gateDef {
	d := gateDef{command: job.Command, env: job.Env, workingDir: job.WorkingDir, timeoutSeconds: job.TimeoutSeconds, cache: true}
	s := job.Definition
	if s == nil {
		return d
	}
	if len(s.Command) > 0 {
		d.command = s.Command
	}
	if s.Env != nil {
		d.env = s.Env
	}
	if s.WorkingDir != "" {
		d.workingDir = s.WorkingDir
	}
	if s.TimeoutSeconds > 0 {
		d.timeoutSeconds = s.TimeoutSeconds
	}
	d.cache = s.UsesCache()
	d.cacheInputs = s.CacheInputs
	d.forceHashLarge = s.ForceHashLargeCacheInputs
	d.allowedWrites = s.AllowedWrites
	d.image = s.Image
	d.resources = s.Resources
	d.cacheDirs = s.CacheDirs
	if s.IsReview() && s.Review != nil {
		d.review, d.cache = s.Review, false
	}
	return d
}

// resourcesKey is the canonical form of resource limits in the cache key
// ("" when the runner's defaults apply).
func resourcesKey(r *protocol.GateResources) string {
	if r == nil || *r == (protocol.GateResources{}) {
		return ""
	}
	return fmt.Sprintf("memory_bytes=%d cpus=%s pids=%d", r.MemoryBytes, strconv.FormatFloat(r.CPUs, 'g', -1, 64), r.PIDs)
}

// run runs the gate job. For the breakers, a workspace that cannot be
// materialized is the repository's failure (but patches that do not apply
// together fail the gate: patchesConflict); once it is, the repository
// worked. The gate's own verdict is execute's: a gate that could not run
// (did not start, or ran out of memory) broke; one that ran worked,
// whatever it found, since a failing test is the code's fault, not the
// gate's. A cache hit says nothing about the gate today: unjudged.
func (r *Runner) run(ctx context.Context, job *protocol.GateJob, token uint64) (out jobrun.Outcome) {
	began := time.Now()
	def := definition(job)
	if def.review != nil {
		return r.runReview(ctx, job, token, def)
	}
	logw := &jobrun.LogWriter{}
	logw.Printf("gate %s for %s/%s attempt %d round %d on %s (lease %d): %s", job.Gate, job.WorkflowID, job.NodeID,
		job.Attempt, job.Round, r.deps.Host, token, strings.Join(def.command, " "))
	pctx, span := telemetry.Start(ctx, jobrun.SpanWorkspace)
	ws, err := r.deps.Workspaces.Prepare(pctx, job.Repo, job.Patches, job.JobID)
	telemetry.End(span, err)
	if errors.Is(err, workspace.ErrConflict) {
		return r.patchesConflict(ctx, job, token, began, err)
	}
	if err != nil {
		return jobrun.Outcome{Err: fmt.Errorf("prepare workspace: %w", err), Repo: jobrun.Broke}
	}
	// Emptied once the result is reported.
	defer func() { out.After = jobrun.CloseAfter(ws, r.deps.Log) }()
	out = r.runIn(ctx, job, token, began, def, logw, ws)
	out.Repo = jobrun.Worked
	return out
}

// patchesConflict reports a gate job whose patches do not apply together
// (a speculative integration run testing a node on top of others whose
// changes clash with it): the code under test cannot exist, so the gate
// fails at once, saying which patch did not apply and git's reason, for
// the node's feedback. Nothing is wrong with the runner or the
// repository, and a redelivery would fail alike.
func (r *Runner) patchesConflict(ctx context.Context, job *protocol.GateJob, token uint64, began time.Time, err error) jobrun.Outcome {
	g := r.result(job, token, began)
	g.Status = protocol.GateFailed
	g.Error = "the patches under test do not apply together"
	var pc *workspace.PatchConflictError
	if errors.As(err, &pc) {
		g.Error += ": " + pc.Clash()
		g.Stderr = pc.Detail
	}
	g.Output = strings.TrimSpace(g.Error + "\n" + g.Stderr)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	name := fmt.Sprintf("%s/%s/a%d/gate-%s-%d.log", job.WorkflowID, job.NodeID, job.Attempt, job.Gate, token)
	if uerr := jobrun.UploadLog(uctx, r.deps.Bus, name, []byte(g.Output+"\n")); uerr == nil {
		g.Log = name
	}
	r.deps.Log.InfoContext(ctx, "gate job's patches conflict", "job", job.JobID, "err", err)
	return jobrun.Outcome{Report: gateReport(g), Repo: jobrun.Worked}
}

// runIn runs the gate job in the workspace Prepare has just written,
// through the gate cache.
func (r *Runner) runIn(ctx context.Context, job *protocol.GateJob, token uint64, began time.Time, def gateDef,
	logw *jobrun.LogWriter, ws *workspace.Workspace) jobrun.Outcome {
	dir := ws.Dir

	// The SUPERVISOR_* metadata differs per job; it is not part of the
	// cache key, which takes the definition's env only.
	env := jobrun.Env(def.env, job.WorkflowID, job.NodeID, job.Attempt)
	env["SUPERVISOR_TASK_ID"] = job.NodeID
	env["SUPERVISOR_GATE_NAME"] = job.Gate
	env["SUPERVISOR_REPO_ID"] = job.Repo.ID
	// A review is one agent round of one node under test: every
	// gate and poll of that round sees the same id.
	env["SUPERVISOR_REVIEW_ID"] = fmt.Sprintf("%s.%s.a%d", job.WorkflowID, job.NodeID, job.Attempt)

	spec := sandbox.Spec{
		Argv: def.command, Workspace: dir, WorkingDir: def.workingDir, Env: env,
		// The workspace as the gate sees it: /workspace in a container.
		WorkspaceEnv: "SUPERVISOR_REPO_PATH",
		Timeout:      time.Duration(def.timeoutSeconds) * time.Second, Stdout: logw, Stderr: logw,
		Image:  def.image,
		Caches: gateCaches(def.cacheDirs),
		Labels: map[string]string{"workflow": job.WorkflowID, "node": job.NodeID, "gate": job.Gate,
			"attempt": strconv.Itoa(job.Attempt), "round": strconv.Itoa(job.Round)},
	}
	if rs := def.resources; rs != nil {
		spec.Resources = sandbox.Resources{MemoryBytes: rs.MemoryBytes, CPUs: rs.CPUs, Pids: rs.PIDs}
	}

	kctx, span := telemetry.Start(ctx, jobrun.SpanCacheLookup)
	key, err := r.cacheKey(kctx, job, def, spec, ws)
	span.SetAttributes(attribute.String("supervisor.cache_key", key.ID), attribute.String("supervisor.cache_disabled", key.Disabled))
	telemetry.End(span, err)
	if err != nil {
		return jobrun.Outcome{Err: fmt.Errorf("gate cache key: %w", err)}
	}
	switch {
	case key.ID == "":
		logw.Printf("gate cache disabled: %s", key.Disabled)
	case job.NoCache:
		logw.Printf("gate cache key %s (tree %s); lookup skipped (no_cache), a passing result is still stored", key.ID, key.Tree)
	default:
		logw.Printf("gate cache key %s (tree %s, computed in %s)", key.ID, key.Tree, key.Took.Round(time.Millisecond))
	}

	logName := fmt.Sprintf("%s/%s/a%d/gate-%s-%d.log", job.WorkflowID, job.NodeID, job.Attempt, job.Gate, token)
	verdict := jobrun.Unjudged
	execute := func(rctx context.Context) (gatecache.Entry, bool, error) {
		g, v, err := r.execute(ctx, rctx, job, token, began, def, spec, dir, logw, logName)
		if err != nil {
			return gatecache.Entry{}, false, err
		}
		verdict = v
		g.CacheKey, g.CacheDisabled = key.ID, key.Disabled
		cacheable := key.ID != "" && g.Status == protocol.GatePassed && !g.IntegrityViolation && rctx.Err() == nil
		return gatecache.Entry{Tree: key.Tree, Result: *g}, cacheable, nil
	}

	var entry gatecache.Entry
	hit := false
	switch {
	case key.ID == "":
		entry, _, err = execute(ctx)
	case job.NoCache:
		var cacheable bool
		if entry, cacheable, err = execute(ctx); err == nil && cacheable {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if perr := r.cache.Put(pctx, key.ID, entry); perr != nil {
				r.deps.Log.WarnContext(ctx, "gate cache: cannot store the result", "job", job.JobID, "key", key.ID, "err", perr)
			}
			cancel()
		}
	default:
		entry, hit, err = r.cache.Do(ctx, key.ID, execute)
		if err == nil {
			r.deps.Presence.CacheLookup(hit)
			observeCacheLookup(job.Gate, hit)
		}
	}
	if err != nil {
		return jobrun.Outcome{Err: err}
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Bool("supervisor.cache_hit", hit))
	if !hit {
		g := entry.Result
		return jobrun.Outcome{Report: gateReport(&g), Work: verdict}
	}

	// A hit: the stored passing result, as this job's, with this runner's
	// host and times and the original run's log.
	stored := entry.Result
	g := r.result(job, token, began)
	g.Status, g.ExitCode = stored.Status, stored.ExitCode
	g.Stdout, g.Stderr, g.Output, g.Log = stored.Stdout, stored.Stderr, stored.Output, stored.Log
	g.Cached, g.CacheKey = true, key.ID
	r.deps.Log.InfoContext(ctx, "gate cache hit", "job", job.JobID, "gate", job.Gate, "key", key.ID,
		"cached_at", entry.CachedAt, "cached_by", entry.Host, "log", stored.Log)
	return jobrun.Outcome{Report: gateReport(g)}
}

// GoCaches are the caches every gate gets: Go's build cache (GOCACHE) and
// module cache (GOMODCACHE), at Go's own default places under HOME.
var GoCaches = []sandbox.Cache{{Path: ".cache/go-build", Env: "GOCACHE"}, {Path: "go/pkg/mod", Env: "GOMODCACHE"}}

// The warm-up vets the standard library the way gates do (PERF-64,
// PERF-79): as the dependencies of a package of the warm-up's own module,
// stdimports' imports package, which imports every public standard
// package. From Go 1.26.11 on, the go command keeps a package's vet facts
// under a cache key that tells whether it was vetted for its own sake or
// as a dependency, and a gate's go vet or go test vets the standard
// library only as a dependency: a warm-up of go vet std would serve it
// nothing. The key also holds the vet flags, which go test chooses for
// itself (a standard package is vetted with -unsafeptr=false
// -unreachable=false there, and any flag on go vet's command line makes a
// key of its own), hence a go test of the imports package beside its go
// vet.
var (
	// GoVetWarmup vets every public standard package as go vet does.
	GoVetWarmup = []string{"go", "vet", "./imports"}
	// GoTestVetWarmup vets them as go test does, running no test.
	GoTestVetWarmup = []string{"go", "test", "-count=1", "-run=^$", "./imports"}
)

// stdimportsSource is the source of the command that writes the imports
// package, copied into the warm-up's workspace.
//
//go:embed internal/stdimports/main.go
var stdimportsSource string

// warmupGoMod is the go.mod of the warm-up's module. Its go line is low
// enough for any toolchain a gate image may have (GOTOOLCHAIN=local).
const warmupGoMod = "module supervisor.invalid/warmup\n\ngo 1.21\n"

// gateCaches are a gate's caches: GoCaches and its cache_dirs.
func gateCaches(dirs []string) []sandbox.Cache {
	out := append([]sandbox.Cache{}, GoCaches...)
	for _, d := range dirs {
		out = append(out, sandbox.Cache{Path: d})
	}
	return out
}

// CacheWarmup is the warm-up of a gate runner's caches (--cache-warmup):
// CacheWarmupOf("std").
func CacheWarmup() sandbox.CacheOptions { return CacheWarmupOf("std") }

// CacheWarmupOf is a warm-up of GoCaches for the standard packages
// patterns match, run once per image to fill their trusted layers, so
// that a gate compiles and vets only its own module's packages: go build
// of the patterns, then, in a workspace holding only the warm-up's module
// (its go.mod and stdimports' source), go run ./stdimports with the
// patterns (writing the imports package), GoVetWarmup and
// GoTestVetWarmup. In an image without Go, the first command cannot start
// and the warm-up ends there.
func CacheWarmupOf(patterns ...string) sandbox.CacheOptions {
	return sandbox.CacheOptions{
		Warmup: [][]string{
			append([]string{"go", "build"}, patterns...),
			append([]string{"go", "run", "./stdimports"}, patterns...),
			slices.Clone(GoVetWarmup), slices.Clone(GoTestVetWarmup),
		},
		WarmFiles:  map[string]string{"go.mod": warmupGoMod, "stdimports/main.go": stdimportsSource},
		WarmCaches: GoCaches,
		WarmEnv:    map[string]string{"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "GOPROXY": "off"},
	}
}

// environmentIdentifier is a sandbox that can identify the environment a
// spec would run in (the process sandbox: its PATH and the program's
// identity).
type environmentIdentifier interface {
	EnvironmentID(ctx context.Context, spec sandbox.Spec) (string, error)
}

// imageDigester is a container sandbox that can name an image's digest.
type imageDigester interface {
	ImageDigest(ctx context.Context, image string) (string, error)
}

// environmentID identifies the execution environment for the cache key.
func (r *Runner) environmentID(ctx context.Context, spec sandbox.Spec) (string, error) {
	switch sb := r.deps.Sandbox.(type) {
	case environmentIdentifier:
		return sb.EnvironmentID(ctx, spec)
	case imageDigester:
		digest, err := sb.ImageDigest(ctx, spec.Image)
		if err != nil {
			return "", err
		}
		return r.deps.Sandbox.Name() + ":" + digest, nil
	default:
		return "", fmt.Errorf("the %s sandbox cannot identify its execution environment", r.deps.Sandbox.Name())
	}
}

// cacheKey computes the gate's cache key over the workspace Prepare has
// just written, or a Key with Disabled set saying why caching is off. The
// error is non-nil only when ctx ended. Nothing has run in the workspace
// yet, so the key takes its layout from the workspace and knows it has no
// untracked file (KeyInput.Fresh, PERF-54): no git process starts.
func (r *Runner) cacheKey(ctx context.Context, job *protocol.GateJob, def gateDef, spec sandbox.Spec, ws *workspace.Workspace) (gatecache.Key, error) {
	if !def.cache {
		return gatecache.Key{Disabled: "cache: false in the gate's definition"}, nil
	}
	envID, err := r.environmentID(ctx, spec)
	if err != nil {
		if ctx.Err() != nil {
			return gatecache.Key{}, ctx.Err()
		}
		return gatecache.Key{Disabled: "no execution environment id (CD-19): " + err.Error()}, nil
	}
	return gatecache.ComputeKey(ctx, gatecache.KeyInput{
		Dir:            ws.Dir,
		Fresh:          &gatecache.Layout{GitDir: ws.GitDir(), CommonDir: ws.CommonDir(), Format: gatecache.FormatOf(ws.Base)},
		Gate:           job.Gate,
		Command:        def.command,
		Env:            def.env,
		WorkingDir:     def.workingDir,
		TimeoutSeconds: def.timeoutSeconds,
		EnvironmentID:  envID,
		Resources:      resourcesKey(def.resources),
		AllowedWrites:  def.allowedWrites,
		CacheInputs:    def.cacheInputs,
		ForceHashLarge: def.forceHashLarge,
	})
}

// execute runs the gate once in the workspace, between an integrity
// capture and check, uploads its log and returns its result with how it
// counts for the gate's breaker. jobCtx is the job's context; ctx may be
// shorter-lived (the gate cache's single-flight lock). An error is an
// infrastructure failure: the job is handed back.
func (r *Runner) execute(jobCtx, ctx context.Context, job *protocol.GateJob, token uint64, began time.Time,
	def gateDef, spec sandbox.Spec, dir string, logw *jobrun.LogWriter, logName string) (*protocol.GateResult, jobrun.Verdict, error) {
	// dir is the workspace Prepare has just written, files and index
	// together (`git read-tree -u`, `git apply --index`), and nothing but
	// the cache key (which only reads) has run in it since: its index
	// holds every tracked file's stat data (PERF-53).
	ictx, span := telemetry.Start(ctx, jobrun.SpanIntegrity, attribute.String("supervisor.phase", "capture"))
	base, err := integrity.Capture(ictx, dir, integrity.Options{AllowedWrites: def.allowedWrites, IndexFresh: true})
	telemetry.End(span, err)
	if err != nil {
		return nil, jobrun.Unjudged, fmt.Errorf("integrity: capture the workspace before the gate: %w", err)
	}

	// The gate's command may join the trace as a child of its run.
	sctx, span := telemetry.Start(ctx, jobrun.SpanSandboxRun)
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, telemetry.ProcessEnv(sctx))
	spec.Env = env
	res, err := r.deps.Sandbox.Run(sctx, spec)
	span.SetAttributes(attribute.Int("supervisor.exit_code", res.ExitCode), attribute.Bool("supervisor.timed_out", res.TimedOut))
	telemetry.End(span, err)
	ran := err == nil
	g := r.result(job, token, began)
	verdict := jobrun.Worked
	var notes []string
	switch {
	case errors.Is(err, sandbox.ErrStart) || errors.Is(err, sandbox.ErrInvalidSpec):
		// A gate whose command cannot run fails: that is the gate's
		// definition, not an infrastructure fault a redelivery would fix.
		// The gate did not work: a failure for its breaker.
		g.Status, g.Error = protocol.GateFailed, err.Error()
		notes = append(notes, err.Error())
		logw.Printf("cannot start the gate: %v", err)
		verdict = jobrun.Broke
	case err != nil:
		return nil, jobrun.Unjudged, fmt.Errorf("run gate: %w", err)
	default:
		g.Status = protocol.GateStatusFromExit(res.ExitCode, res.TimedOut)
		if !res.TimedOut && res.Signal == "" && !res.OOMKilled {
			code := res.ExitCode
			g.ExitCode = &code
		}
		g.TimedOut = res.TimedOut
		g.DurationMillis = res.Duration.Milliseconds()
		g.Sandbox = res.Environment
	}
	if ctx.Err() != nil && jobCtx.Err() == nil {
		// Only the cache's single-flight lock was lost: another runner
		// may be running the same gate; run it again later.
		return nil, jobrun.Unjudged, errors.New("gate cache: lost the single-flight lock while the gate ran")
	}

	// The sandbox has ended every process of the gate: the workspace is
	// final.
	ictx, span = telemetry.Start(ctx, jobrun.SpanIntegrity, attribute.String("supervisor.phase", "check"))
	rep, err := base.Check(ictx)
	if err == nil {
		span.SetAttributes(attribute.Bool("supervisor.clean", rep.Clean()))
	}
	telemetry.End(span, err)
	if err != nil {
		return nil, jobrun.Unjudged, fmt.Errorf("integrity: check the workspace after the gate: %w", err)
	}
	for _, p := range rep.Ignored {
		logw.Printf("ignored path written by the gate (not a violation): %s", p)
	}
	switch {
	case !rep.Clean():
		summary := (&integrity.Report{Violations: rep.Violations}).Summary()
		g.Status, g.IntegrityViolation, g.Violations = protocol.GateFailed, true, rep.Strings()
		g.Error = joinNonEmpty("; ", g.Error, summary)
		notes = append(notes, summary)
		logw.Printf("%s", summary)
	case res.OOMKilled:
		g.Status, g.Error, g.OOMKilled = protocol.GateError, "resource limit: out of memory", true
		notes = append(notes, g.Error)
		verdict = jobrun.Broke
		logw.Printf("the sandbox killed the gate: it ran out of memory")
	}
	if ran {
		logw.Printf("gate %s after %s: exit %d, status %s", job.Gate, res.Duration.Round(time.Millisecond), res.ExitCode, g.Status)
	} else {
		logw.Printf("gate %s: status %s", job.Gate, g.Status)
	}

	g.Stdout, g.Stderr = r.keys.Scrub(string(res.Stdout)), r.keys.Scrub(string(res.Stderr))
	output := strings.TrimSpace(r.keys.Scrub(string(res.Stdout) + "\n" + string(res.Stderr)))
	for _, n := range notes {
		output = joinNonEmpty("\n\n", output, r.keys.Scrub(n))
	}
	g.Output = truncateOutput(output)

	uctx, span := telemetry.Start(ctx, jobrun.SpanUpload, attribute.String("supervisor.object", logName))
	err = jobrun.UploadLog(uctx, r.deps.Bus, logName, []byte(r.keys.Scrub(string(logw.Bytes()))))
	telemetry.End(span, err)
	if err != nil {
		return nil, jobrun.Unjudged, err
	}
	g.Log = logName
	g.FinishedAt = time.Now().UTC()
	return g, verdict, nil
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}

// truncateOutput keeps the last protocol.OutputMaxChars characters of s
// behind a marker saying how many were dropped (OT-03). Callers
// redact first, so no secret is cut in a way that hides it from the
// redaction.
func truncateOutput(s string) string {
	n := utf8.RuneCountInString(s)
	if n <= protocol.OutputMaxChars {
		return s
	}
	drop := n - protocol.OutputMaxChars
	i := 0
	for k := 0; k < drop; k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return fmt.Sprintf("...[truncated %d chars]...\n", drop) + s[i:]
}
