package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/gatecache"
	"github.com/supervisorhq/supervisor/shared/gatecache/repogen"
	"github.com/supervisorhq/supervisor/shared/integrity"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
)

// The cache-key scenario's operations, in the order they are reported.
const (
	// OpGitStatus is the reference: `git status --porcelain` on the tree.
	OpGitStatus = "git-status"
	// OpComputeKey is gatecache.ComputeKey on the tree.
	OpComputeKey = "compute-key"
	// OpCacheHitKV is gatecache.Cache.Get of a stored entry from the
	// fleet's state store, JetStream KV.
	OpCacheHitKV = "cache-hit-kv"
	// OpCacheHitRedis is the same against Redis (only with a Redis URL).
	OpCacheHitRedis = "cache-hit-redis"
	// OpIntegrity is integrity.Capture then Baseline.Check on the tree.
	OpIntegrity = "integrity"
)

// keyEnvironmentID stands for the process sandbox's identity of the
// executable and PATH in the cache-key scenario's key.
const keyEnvironmentID = "process:bench:/usr/local/bin:/usr/bin:/bin"

// CacheKeyReport is the cache-key scenario's figures: the gate cache's
// operations on a generated repository, each against `git status` on the
// same tree. Its inline figures (CacheKeySize) are the first, smallest
// repository's, as when one size ran; with several sizes (--repo-sizes)
// Sizes holds every size's and Growth how each operation grew.
type CacheKeyReport struct {
	CacheKeySize
	// Iterations is how many times each operation was measured (after one
	// unmeasured warm-up run).
	Iterations int `json:"iterations"`
	// EntryBytes is the size of the cached entry the hits read (measured
	// on the first size only: a hit does not depend on the repository).
	EntryBytes int `json:"entry_bytes"`
	// Reference is the operation each ratio is relative to (git-status).
	Reference string `json:"reference"`
	// Sizes is every size's figures, the first included, when more than
	// one size ran.
	Sizes []CacheKeySize `json:"sizes,omitempty"`
	// Growth compares each larger size with the first, per operation.
	Growth []KeyGrowth `json:"growth,omitempty"`
}

// CacheKeySize is the cache-key scenario's figures on one repository.
type CacheKeySize struct {
	// Files is the generated repository's size; ChangedFiles of them are
	// modified and staged, left uncommitted.
	Files        int `json:"files"`
	ChangedFiles int `json:"changed_files"`
	// GenerateSeconds is how long writing and committing the repository
	// took (not part of any figure).
	GenerateSeconds float64 `json:"generate_seconds"`
	// Key and Tree are the computed cache key and the tree id it covers.
	Key  string `json:"key"`
	Tree string `json:"tree"`
	// KeyGitPath is why the key's tree was computed by git rather than in
	// Go (gatecache.Key.GitPath); "" when it was computed in Go.
	KeyGitPath string  `json:"key_git_path,omitempty"`
	Ops        []KeyOp `json:"ops"`
	// IntegrityCaptureP50Micros and IntegrityCheckP50Micros split the
	// integrity operation in its two halves.
	IntegrityCaptureP50Micros float64 `json:"integrity_capture_p50_us"`
	IntegrityCheckP50Micros   float64 `json:"integrity_check_p50_us"`
	// IntegrityFiles and IntegrityHashed are what one capture recorded:
	// paths, and files whose content it hashed; IntegrityStatFromIndex
	// the files whose stat data it took from the index without
	// examining them, IntegrityStatCalls the stat calls it made on the
	// work tree's entries (integrity.Stats, PERF-53).
	IntegrityFiles         int `json:"integrity_files"`
	IntegrityHashed        int `json:"integrity_hashed"`
	IntegrityStatFromIndex int `json:"integrity_stat_from_index"`
	IntegrityStatCalls     int `json:"integrity_stat_calls"`
}

// KeyGrowth is how one operation grew from the first repository size to a
// larger one, beside git status's growth.
type KeyGrowth struct {
	Op        string `json:"op"`
	FromFiles int    `json:"from_files"`
	ToFiles   int    `json:"to_files"`
	// P50 and CPU are the larger size's p50 and CPU per operation over
	// the first size's.
	P50 float64 `json:"p50_growth"`
	CPU float64 `json:"cpu_growth"`
	// RatioFrom and RatioTo are the operation's p50 ratio to git status at
	// each size.
	RatioFrom float64 `json:"ratio_from"`
	RatioTo   float64 `json:"ratio_to"`
}

// KeyOp is one operation's figures in the cache-key scenario.
type KeyOp struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Count       int     `json:"count"`
	WallSeconds float64 `json:"wall_seconds"`
	MeanMicros  float64 `json:"mean_us"`
	P50Micros   float64 `json:"p50_us"`
	P99Micros   float64 `json:"p99_us"`
	// Ratio is P50 over the reference operation's P50.
	Ratio float64 `json:"ratio_to_reference"`
	// Memory is what the whole process allocated and the CPU it and its
	// children (git) used, per operation.
	Memory Memory `json:"memory"`
}

// Op returns the named operation's figures, or nil.
func (c *CacheKeySize) Op(name string) *KeyOp {
	return named(c.Ops, name, func(o *KeyOp) string { return o.Name })
}

// computeRatios fills in each operation's ratio to the reference.
func (c *CacheKeySize) computeRatios(reference string) {
	var ref float64
	if r := c.Op(reference); r != nil {
		ref = r.P50Micros
	}
	for i := range c.Ops {
		c.Ops[i].Ratio = ratioTo(c.Ops[i].P50Micros, ref)
	}
}

// computeGrowth compares every larger size with the first, for each
// operation measured at both.
func (c *CacheKeyReport) computeGrowth() {
	c.Growth = nil
	if len(c.Sizes) < 2 {
		return
	}
	first := &c.Sizes[0]
	for i := 1; i < len(c.Sizes); i++ {
		big := &c.Sizes[i]
		for _, op := range first.Ops {
			b := big.Op(op.Name)
			if b == nil {
				continue
			}
			c.Growth = append(c.Growth, KeyGrowth{Op: op.Name, FromFiles: first.Files, ToFiles: big.Files,
				P50: ratioTo(b.P50Micros, op.P50Micros), CPU: ratioTo(b.Memory.CPUPerOpMicros, op.Memory.CPUPerOpMicros),
				RatioFrom: op.Ratio, RatioTo: b.Ratio})
		}
	}
}

// runGateEngine runs the gate engine's scenarios on a fleet of their own:
// the cache-key scenario uses its state store, gate-scale its coordinator
// and worker with gate runner processes of its own.
func (r *runner) runGateEngine(ctx context.Context, want map[string]bool, rep *Report) error {
	fs, closeFleet, err := r.openFleet(ctx, "gate-fleet", "")
	if err != nil {
		return err
	}
	defer closeFleet()
	if want[ScenarioCacheKey] {
		ck, err := r.runCacheKey(ctx, fs)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", ScenarioCacheKey, err)
		}
		rep.CacheKey = ck
	}
	if want[ScenarioGateScale] {
		gs, err := r.runScaleOut(ctx, fs, r.gateScaleSpec())
		if err != nil {
			return fmt.Errorf("scenario %s: %w", ScenarioGateScale, err)
		}
		rep.GateScale = gs
	}
	if want[ScenarioWorkerScale] {
		ws, err := r.runScaleOut(ctx, fs, r.workerScaleSpec())
		if err != nil {
			return fmt.Errorf("scenario %s: %w", ScenarioWorkerScale, err)
		}
		rep.WorkerScale = ws
	}
	return nil
}

// runCacheKey measures the scenario's operations on a generated repository
// of each size in turn; the cache hits, which do not depend on the
// repository, on the first only.
func (r *runner) runCacheKey(ctx context.Context, fs *fleetSession) (*CacheKeyReport, error) {
	rep := &CacheKeyReport{Iterations: r.cfg.KeyIterations, Reference: OpGitStatus}
	sizes := r.cfg.repoSizes()
	for i, files := range sizes {
		sz, err := r.runCacheKeySize(ctx, fs, files, i == 0, rep)
		if err != nil {
			return nil, fmt.Errorf("%s files: %w", thousands(int64(files)), err)
		}
		if i == 0 {
			rep.CacheKeySize = *sz
		}
		if len(sizes) > 1 {
			rep.Sizes = append(rep.Sizes, *sz)
		}
	}
	rep.computeGrowth()
	return rep, nil
}

// runCacheKeySize generates a repository of files files, modifies a few
// and measures each operation in turn on the same tree; with hits, the
// cache hits too (their entry size goes to rep). The repository is removed
// afterwards unless the work directory is kept.
func (r *runner) runCacheKeySize(ctx context.Context, fs *fleetSession, files int, hits bool, rep *CacheKeyReport) (*CacheKeySize, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	dir := filepath.Join(r.dir, "cache-key", "repo")
	if len(r.cfg.RepoSizes) > 1 {
		dir = filepath.Join(r.dir, "cache-key", fmt.Sprintf("repo-%d", files))
	}
	if err := os.RemoveAll(dir); err != nil { // a kept --dir from an earlier run
		return nil, err
	}
	if len(r.cfg.RepoSizes) > 1 && r.cfg.WorkDir == "" {
		defer os.RemoveAll(dir) // the next size needs the disk more than this one
	}
	r.progress("%s: generating a repository of %d files, %d changed", ScenarioCacheKey, files, r.cfg.ChangedFiles)
	began := time.Now()
	if err := repogen.Generate(dir, files); err != nil {
		return nil, fmt.Errorf("generate the repository: %w", err)
	}
	if err := repogen.Modify(dir, r.cfg.ChangedFiles, "bench"); err != nil {
		return nil, fmt.Errorf("modify the repository: %w", err)
	}
	// The changes are staged, as a gate's workspace holds its patches
	// (`git apply --index`): the index then has every tracked file's stat
	// data, which the integrity capture is told (IndexFresh), as the gate
	// runner tells it.
	if err := stageChanges(ctx, dir); err != nil {
		return nil, fmt.Errorf("stage the changes: %w", err)
	}
	generated := time.Since(began)
	// Files written in the same second as the index are "racily clean":
	// git re-reads them on every status until it rewrites the index in a
	// later second. Wait for that second, so the warm-up status settles
	// the index as it would be in any workspace not touched this instant.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(1100 * time.Millisecond):
	}

	sz := &CacheKeySize{Files: files, ChangedFiles: r.cfg.ChangedFiles, GenerateSeconds: generated.Seconds()}
	n := r.cfg.KeyIterations

	status, err := r.measureOp(ctx, OpGitStatus, n, func(ctx context.Context) error {
		out, err := gitStatus(ctx, dir)
		if err != nil {
			return err
		}
		if lines := bytes.Count(out, []byte{'\n'}); lines != r.cfg.ChangedFiles {
			return fmt.Errorf("git status lists %d changes, want the %d modified files:\n%s", lines, r.cfg.ChangedFiles, out)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	status.Description = "`git status --porcelain` on the tree (the reference): the index's stat data spares unchanged files"
	sz.Ops = append(sz.Ops, status)

	in := gatecache.KeyInput{Dir: dir, Gate: "test", Command: []string{"go", "test", "./..."}, TimeoutSeconds: 300,
		EnvironmentID: keyEnvironmentID}
	keyOp, err := r.measureOp(ctx, OpComputeKey, n, func(ctx context.Context) error {
		k, err := gatecache.ComputeKey(ctx, in)
		if err != nil {
			return err
		}
		if k.Disabled != "" {
			return fmt.Errorf("caching disabled: %s", k.Disabled)
		}
		if sz.Key != "" && (k.ID != sz.Key || k.Tree != sz.Tree) {
			return fmt.Errorf("the key changed between runs on the same tree: %s (tree %s), then %s (tree %s)", sz.Key, sz.Tree, k.ID, k.Tree)
		}
		sz.Key, sz.Tree, sz.KeyGitPath = k.ID, k.Tree, k.GitPath
		return nil
	})
	if err != nil {
		return nil, err
	}
	keyOp.Description = "gatecache.ComputeKey: the index read in Go, the work tree's stat data compared, changed and untracked files hashed, `git ls-files -o`, the tree ids and the key document hashed"
	sz.Ops = append(sz.Ops, keyOp)

	if hits {
		hitOps, err := r.measureHits(ctx, fs, sz, rep)
		if err != nil {
			return nil, err
		}
		sz.Ops = append(sz.Ops, hitOps...)
	}

	var capture, check []time.Duration
	integ, err := r.measureOp(ctx, OpIntegrity, n, func(ctx context.Context) error {
		t0 := time.Now()
		base, err := integrity.Capture(ctx, dir, integrity.Options{IndexFresh: true})
		if err != nil {
			return err
		}
		t1 := time.Now()
		res, err := base.Check(ctx)
		if err != nil {
			return err
		}
		capture, check = append(capture, t1.Sub(t0)), append(check, time.Since(t1))
		if !res.Clean() {
			return fmt.Errorf("integrity check of an untouched tree: %s", res.Summary())
		}
		st := base.Stats()
		sz.IntegrityFiles, sz.IntegrityHashed = st.Files, st.Hashed
		sz.IntegrityStatFromIndex, sz.IntegrityStatCalls = st.StatFromIndex, st.StatCalls
		return nil
	})
	if err != nil {
		return nil, err
	}
	integ.Description = "integrity.Capture then Baseline.Check as the gate runner runs them (IndexFresh: the tree and its index just written): " +
		"the index read and every directory walked, each tracked file's stat data taken from the index (racily clean entries stat'ed and read), " +
		"every file stat'ed once by the check and read only where its stat data differs from the index"
	sz.Ops = append(sz.Ops, integ)
	// The first sample of each half is the warm-up's.
	sz.IntegrityCaptureP50Micros, _ = quantiles(capture[1:])
	sz.IntegrityCheckP50Micros, _ = quantiles(check[1:])

	sz.computeRatios(rep.Reference)
	return sz, nil
}

// measureHits measures cache hits of sz's key from the fleet's KV bucket
// and, with a Redis URL, from Redis.
func (r *runner) measureHits(ctx context.Context, fs *fleetSession, sz *CacheKeySize, rep *CacheKeyReport) ([]KeyOp, error) {
	n := r.cfg.KeyIterations
	entry := benchEntry(sz.Key, sz.Tree)
	if b, err := json.Marshal(entry); err == nil {
		rep.EntryBytes = len(b)
	}
	kv, err := kvstate.New(ctx, fs.bus.JS)
	if err != nil {
		return nil, fmt.Errorf("the fleet's KV state store: %w", err)
	}
	hit, err := r.measureHit(ctx, OpCacheHitKV, kv, entry, n)
	if err != nil {
		return nil, err
	}
	hit.Description = "gatecache.Cache.Get of a stored entry from the fleet's JetStream KV bucket, over a NATS client connection"
	ops := []KeyOp{hit}
	if r.cfg.RedisURL != "" {
		rs, err := redisstate.Open(ctx, r.cfg.RedisURL, append(append([]redisstate.Option(nil), r.cfg.Redis...), redisstate.WithPrefix("sup-bench-"+randomHex(6)+":"))...)
		if err != nil {
			return nil, err
		}
		hit, err := r.measureHit(ctx, OpCacheHitRedis, rs, entry, n)
		rs.Close()
		if err != nil {
			return nil, err
		}
		hit.Description = "the same Get from Redis (--redis-url)"
		ops = append(ops, hit)
	}
	return ops, nil
}

// measureOp runs fn once to warm up, then n times, and returns the
// figures of the n runs.
func (r *runner) measureOp(ctx context.Context, name string, n int, fn func(context.Context) error) (KeyOp, error) {
	if err := fn(ctx); err != nil {
		return KeyOp{}, fmt.Errorf("%s: %w", name, err)
	}
	ds := make([]time.Duration, 0, n)
	mem := startMem()
	start := time.Now()
	for range n {
		t := time.Now()
		if err := fn(ctx); err != nil {
			return KeyOp{}, fmt.Errorf("%s: %w", name, err)
		}
		ds = append(ds, time.Since(t))
	}
	wall := time.Since(start)
	op := KeyOp{Name: name, Count: n, WallSeconds: wall.Seconds(), Memory: mem.stop(n)}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	op.MeanMicros = micros(sum) / float64(n)
	op.P50Micros, op.P99Micros = quantiles(ds)
	r.progress("%s: %s ×%d, p50 %s", ScenarioCacheKey, name, n, dur(op.P50Micros))
	return op, nil
}

// measureHit stores entry in store and measures n cache hits on it; the
// entry is removed afterwards.
func (r *runner) measureHit(ctx context.Context, name string, store state.Store, entry gatecache.Entry, n int) (KeyOp, error) {
	cache := gatecache.New(store, gatecache.Options{Host: "bench"})
	if err := cache.Put(ctx, entry.Key, entry); err != nil {
		return KeyOp{}, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = cache.Delete(dctx, entry.Key)
	}()
	return r.measureOp(ctx, name, n, func(ctx context.Context) error {
		e, err := cache.Get(ctx, entry.Key)
		if err != nil {
			if errors.Is(err, gatecache.ErrMiss) {
				return errors.New("a miss on the stored entry")
			}
			return err
		}
		if e.Key != entry.Key || e.Result.Status != protocol.GatePassed {
			return fmt.Errorf("got entry %s (%s), want %s", e.Key, e.Result.Status, entry.Key)
		}
		return nil
	})
}

// benchEntry is a passing result as a gate runner stores it, with about
// a kilobyte of output.
func benchEntry(key, tree string) gatecache.Entry {
	code := 0
	now := time.Now().UTC()
	var out strings.Builder
	for i := range 24 {
		fmt.Fprintf(&out, "ok  \texample.com/bench/pkg%02d\t0.%03ds\n", i, 10+i)
	}
	return gatecache.Entry{Key: key, Tree: tree, Host: "bench", Result: protocol.GateResult{
		JobID: "bench-job", WorkflowID: "bench", NodeID: "t0000", Gate: "test", Attempt: 1, Host: "bench",
		Status: protocol.GatePassed, ExitCode: &code, Stdout: out.String(), Output: out.String(),
		Log: "bench/t0000/a1/gate-test-1.log", StartedAt: now.Add(-time.Second), FinishedAt: now, DurationMillis: 1000,
	}}
}

// stageChanges stages the tracked files modified in dir (`git add -u`).
func stageChanges(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "add", "-u")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git add -u: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// gitStatus runs `git status --porcelain` in dir.
func gitStatus(ctx context.Context, dir string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", "status", "--porcelain")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git status: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
