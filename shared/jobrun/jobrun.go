// Package jobrun is the job lifecycle workers and gate runners share: wait
// while a circuit breaker of the job's scopes is open, take the job's
// lease (a fencing token), report that it started, do the work with
// heartbeats, upload the log, tell the breakers how it went, report the
// result, and only then ack.
// Infrastructure failures are handed back for redelivery and reported as
// errors only on the last delivery; a lost lease abandons the job to the
// runner that now holds it; a drain interruption hands it back.
package jobrun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/patchstat"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

// MaxLogBytes caps one uploaded log artifact (10 MiB); the tail
// beyond it is dropped and a marker says so.
const MaxLogBytes = 10 << 20

// Deps are what a runner needs.
type Deps struct {
	Bus        *bus.Bus
	Store      state.Store
	Workspaces *workspace.Manager
	Sandbox    sandbox.Sandbox
	// Host identifies this runner in leases and reports (RunnerHost).
	Host string
	// Labels describe the runner (the worker's --labels, detected GPUs);
	// started reports carry them.
	Labels map[string]string
	// Network is the allow-list a runner gives commands that need the
	// network (agents) as Spec.Network: the egress proxy's allow-list when
	// the Docker sandbox runs one, empty otherwise (no network).
	Network []string
	// FileLockWait bounds the pause between two tries to take a job's
	// file locks (0: DefaultFileLockWait).
	FileLockWait time.Duration
	// Breakers is the circuit breakers' policy (zero fields: the
	// defaults); every runner of a fleet should have the same.
	Breakers state.BreakerPolicy
	// Presence announces the runner in the fleet's runners bucket while
	// Serve runs (nil: not announced).
	Presence *Presence
	Log      *slog.Logger
}

// Meta identifies a job.
type Meta struct {
	Kind       protocol.JobKind
	JobID      string
	WorkflowID string
	NodeID     string
	Gate       string
	Attempt    int
	// Round is a gate job's round.
	Round       int
	PublishedAt time.Time
	// Scopes are the circuit breakers the job asks before it runs.
	Scopes JobScopes
	// FileLocks are state-store keys held, besides the job's lease, from
	// before the job reports started until it ends (an agent job's file
	// locks: DAG-07; see HoldFileLocks).
	FileLocks []string
	// Pool is the pool the job was published to (a metrics label).
	Pool string
}

// Outcome is what a job's work produced.
type Outcome struct {
	// Report is the result to send (agent or gate); nil with Err set means
	// the work failed for infrastructure reasons.
	Report *protocol.Report
	// Err is an infrastructure error: the job is handed back while
	// deliveries remain, and reported through ErrorReport on the last one.
	Err error
	// Retry, when positive, hands the job back after this delay even though
	// a report was sent (a pending gate waiting to be polled again).
	Retry time.Duration
	// Work and Repo say how the outcome counts for the breakers of
	// Meta.Scopes: Work for what the job ran, Repo for its repository.
	// They are reported with an infrastructure error too, unless the job
	// is interrupted, loses its lease or its workflow is cancelled.
	Work, Repo Verdict
	// After, if set, runs once the result is reported or the job handed
	// back, whatever the disposition: the work releases its workspace
	// there, off the path between the work and its report.
	After func()
}

// CloseAfter returns an Outcome.After that closes ws, logging a failure.
func CloseAfter(ws *workspace.Workspace, log *slog.Logger) func() {
	return func() {
		if err := ws.Close(); err != nil {
			log.Warn("cannot empty the job's workspace", "dir", ws.Dir, "err", err)
		}
	}
}

// Work does a job under a held lease whose fencing token is given.
type Work func(ctx context.Context, token uint64) Outcome

// ErrorReport builds the report of a job that failed for infrastructure
// reasons on its last delivery.
type ErrorReport func(token uint64, err error) *protocol.Report

// ErrWorkflowCancelled is the cause of a job's context cancelled because
// the coordinator announced that the job's workflow was cancelled.
var ErrWorkflowCancelled = errors.New("workflow cancelled")

// LeaseTTL is the lease lifetime for a job with the given AckWait.
func LeaseTTL(ackWait time.Duration) time.Duration { return ackWait * 2 / 3 }

// Cancels tracks in-flight jobs per workflow so a cancellation announcement
// can stop them.
type Cancels struct {
	mu   sync.Mutex
	jobs map[string]map[*context.CancelFunc]struct{}
}

// Watch subscribes to cancellation announcements on nc.
func (c *Cancels) Watch(nc *nats.Conn) (*nats.Subscription, error) {
	return nc.Subscribe(protocol.SubjectCancelAll, func(m *nats.Msg) {
		wf := m.Subject[len(protocol.CancelSubject("")):]
		c.mu.Lock()
		defer c.mu.Unlock()
		for f := range c.jobs[wf] {
			(*f)()
		}
	})
}

func (c *Cancels) add(wf string, f *context.CancelFunc) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[string]map[*context.CancelFunc]struct{}{}
	}
	if c.jobs[wf] == nil {
		c.jobs[wf] = map[*context.CancelFunc]struct{}{}
	}
	c.jobs[wf][f] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.jobs[wf], f)
		if len(c.jobs[wf]) == 0 {
			delete(c.jobs, wf)
		}
	}
}

// Run carries one delivered job through its lifecycle and returns what to
// do with the message.
func Run(ctx context.Context, deps Deps, cancels *Cancels, d *bus.Delivery, m Meta, work Work, errReport ErrorReport) (disp bus.Disposition) {
	ctx, span := startJobSpan(ctx, d, m, deps.Host)
	var out Outcome
	defer func() { endJobSpan(span, disp, &out) }()
	// sent is the result reported for this delivery (nil: none was).
	var sent *protocol.Report
	defer func() { observeJob(m, disp, sent) }()
	log := deps.Log.With("job", m.JobID, "delivery", d.Number)
	ackWait := deps.Bus.Cfg.AckWait
	if disp, done := finished(ctx, deps, m, log); done {
		return disp
	}
	if disp, ok := awaitBreakers(ctx, deps, d, m, log); !ok {
		return disp
	}
	defer busySlot(m)()
	// The lease lives two thirds of AckWait and is renewed every third of
	// that, so a dead runner's lease has lapsed by the time JetStream
	// redelivers its job (AckWait after the last heartbeat).
	held, jctx, err := lease.Hold(ctx, deps.Store, "lease/"+m.JobID, deps.Host, LeaseTTL(ackWait), log)
	if errors.Is(err, state.ErrLocked) {
		log.InfoContext(ctx, "job is leased by another runner; handing it back")
		return bus.Nak(ackWait / 3)
	}
	if err != nil {
		log.WarnContext(ctx, "cannot take the job's lease", "err", err)
		return bus.Nak(backoff(d.Number))
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = held.Release(rctx)
	}()
	token := held.Token()

	jctx, cancelJob := context.WithCancelCause(jctx)
	defer cancelJob(nil)
	if cancels != nil {
		stop := context.CancelFunc(func() { cancelJob(ErrWorkflowCancelled) })
		defer cancels.add(m.WorkflowID, &stop)()
	}

	locks, jctx, err := HoldFileLocks(jctx, deps.Store, m.FileLocks, FileLockOwner(deps.Host, m.JobID, token),
		LeaseTTL(ackWait), deps.FileLockWait, log, func(key string) {
			log.InfoContext(ctx, "waiting for a file lock another job holds", "lock", key)
		})
	if err != nil {
		return lockFailed(ctx, jctx, d, err, log)
	}
	defer locks.Release()
	if len(m.FileLocks) > 0 {
		log.InfoContext(ctx, "file locks held", "locks", locks.Tokens(m.FileLocks))
	}

	started := &protocol.Report{Type: protocol.ReportStarted, Started: &protocol.Started{
		Kind: m.Kind, JobID: m.JobID, WorkflowID: m.WorkflowID, NodeID: m.NodeID, Gate: m.Gate,
		Attempt: m.Attempt, LeaseToken: token, Host: deps.Host, Labels: deps.Labels, Delivery: d.Number,
		PublishedAt: m.PublishedAt, StartedAt: time.Now().UTC(),
	}}
	if err := deps.Bus.PublishReport(jctx, started, fmt.Sprintf("%s.started.%d", m.JobID, token)); err != nil {
		log.WarnContext(ctx, "cannot report start; handing the job back", "err", err)
		return bus.Nak(backoff(d.Number))
	}
	observeStarted(m, started.Started.StartedAt)
	log.InfoContext(jctx, "job started", "kind", m.Kind, "workflow", m.WorkflowID, "node", m.NodeID, "gate", m.Gate, "token", token)
	deps.Presence.jobStarted(m, started.Started.StartedAt)
	// sent is the result this runner reported, counted in its stats.
	defer func() { deps.Presence.jobEnded(m, sent) }()

	out = work(jctx, token)
	if out.After != nil {
		defer out.After()
	}

	switch {
	case lease.Lost(jctx):
		log.WarnContext(ctx, "lease lost during the job; abandoning it to the runner that holds it now")
		return bus.Abandon()
	case ctx.Err() != nil:
		log.InfoContext(ctx, "job interrupted by shutdown; handing it back")
		return bus.Nak(0)
	}
	// A job stopped by its workflow's cancellation is never handed back:
	// that would only run it again for a workflow that is over.
	cancelled := errors.Is(context.Cause(jctx), ErrWorkflowCancelled)
	// A full disk is this runner's failure: it counts against no breaker
	// (the repository, agent or gate did nothing wrong), and says so.
	diskFull := DiskFull(out.Err)
	if diskFull {
		out.Work, out.Repo = Unjudged, Unjudged
		out.Err = fmt.Errorf("runner %s's disk is full: %w", deps.Host, out.Err)
	}
	if !cancelled {
		reportBreakers(ctx, deps, m, out, log)
	}
	report := out.Report
	if out.Err != nil {
		if cancelled {
			log.InfoContext(ctx, "workflow cancelled; dropping the job", "err", out.Err)
			return bus.Term("workflow " + m.WorkflowID + " cancelled")
		}
		// Not ours to hand back if the lease went meanwhile (a runner
		// cut off the network whose job was taken over): a Nak would have
		// JetStream deliver it again while its new runner runs it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		cerr := held.Confirm(cctx)
		cancel()
		if errors.Is(cerr, lease.ErrLost) {
			log.WarnContext(ctx, "job failed and its lease is gone; abandoning it to the runner that holds it now", "err", out.Err)
			return bus.Abandon()
		}
		if !d.Last() {
			if diskFull {
				log.ErrorContext(ctx, "no space left in the runner's data directory; handing the job back", "err", out.Err)
			} else {
				log.WarnContext(ctx, "job failed for infrastructure reasons; handing it back", "err", out.Err)
			}
			return bus.Nak(backoff(d.Number))
		}
		log.ErrorContext(ctx, "job failed on its last delivery", "err", out.Err)
		report = errReport(token, out.Err)
	}
	// Not the job's context (it may be cancelled): a fresh deadline that
	// keeps the job's span, so the report carries its trace context.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := deps.Bus.PublishReport(pctx, report, fmt.Sprintf("%s.result.%d.%d", m.JobID, token, d.Number)); err != nil {
		log.WarnContext(ctx, "cannot report the result; handing the job back", "err", err)
		return bus.Nak(backoff(d.Number))
	}
	sent = report
	if out.Retry > 0 && !cancelled {
		return bus.Nak(out.Retry)
	}
	return bus.Ack()
}

// lockFailed is the disposition of a job whose file locks could not be
// taken: jctx is the job's context (its lease, its workflow's
// cancellation), ctx the runner's.
func lockFailed(ctx, jctx context.Context, d *bus.Delivery, err error, log *slog.Logger) bus.Disposition {
	switch {
	case lease.Lost(jctx):
		log.WarnContext(ctx, "lease lost while waiting for file locks; abandoning the job to the runner that holds it now")
		return bus.Abandon()
	case errors.Is(context.Cause(jctx), ErrWorkflowCancelled):
		return bus.Term("workflow cancelled")
	case ctx.Err() != nil:
		log.InfoContext(ctx, "interrupted by shutdown while waiting for file locks; handing the job back")
		return bus.Nak(0)
	}
	log.WarnContext(ctx, "cannot take the job's file locks; handing it back", "err", err)
	return bus.Nak(backoff(d.Number))
}

// finished reports whether the job's workflow has finished (the
// coordinator's marker in the state store), with the disposition that
// drops the job.
func finished(ctx context.Context, deps Deps, m Meta, log *slog.Logger) (bus.Disposition, bool) {
	v, err := deps.Store.CacheGet(ctx, protocol.WorkflowFinishedKey(m.WorkflowID))
	if err != nil {
		return bus.Disposition{}, false
	}
	log.InfoContext(ctx, "workflow already finished; dropping its queued job", "workflow", m.WorkflowID, "status", string(v))
	return bus.Term("workflow " + m.WorkflowID + " already " + string(v)), true
}

// backoff is the redelivery delay after a failed delivery (numbered from
// 1): 1 s, 2 s, 4 s … capped at 32 s (docs/protocol.md, Dispositions).
func backoff(delivery uint64) time.Duration {
	return time.Second << (min(max(delivery, 1), 6) - 1)
}

// LogWriter collects a job's full log for upload, capped at MaxLogBytes.
type LogWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	dropped int64
}

// Write appends p, dropping what exceeds the cap.
func (l *LogWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := MaxLogBytes - l.buf.Len()
	if room < len(p) {
		if room > 0 {
			l.buf.Write(p[:room])
		}
		l.dropped += int64(len(p) - max(room, 0))
		return len(p), nil
	}
	return l.buf.Write(p)
}

// Printf appends a runner's own line to the log.
func (l *LogWriter) Printf(format string, args ...any) {
	fmt.Fprintf(l, "[supervisor] "+format+"\n", args...)
}

// Bytes returns the log, with a marker if it was capped.
func (l *LogWriter) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]byte(nil), l.buf.Bytes()...)
	if l.dropped > 0 {
		out = append(out, fmt.Sprintf("\n[supervisor] log capped at %d bytes; %d bytes dropped\n", MaxLogBytes, l.dropped)...)
	}
	return out
}

// Env returns a copy of a job's own environment with the variables every
// job's command gets: SUPERVISOR_WORKFLOW_ID, SUPERVISOR_NODE_ID and
// SUPERVISOR_ATTEMPT. The runner adds its kind's own.
func Env(own map[string]string, workflow, node string, attempt int) map[string]string {
	env := make(map[string]string, len(own)+3)
	for k, v := range own {
		env[k] = v
	}
	env["SUPERVISOR_WORKFLOW_ID"] = workflow
	env["SUPERVISOR_NODE_ID"] = node
	env["SUPERVISOR_ATTEMPT"] = strconv.Itoa(attempt)
	return env
}

// UploadLog stores a log in the logs bucket under name, secrets redacted,
// capped at MaxLogBytes: past it the rest is dropped and a marker says so.
func UploadLog(ctx context.Context, b *bus.Bus, name string, data []byte) error {
	data = capLog(redact.Bytes(data))
	if err := putBytes(ctx, b.Logs, name, data); err != nil {
		return fmt.Errorf("upload log: %w", bus.ObjectPutError(protocol.BucketLogs, name, err))
	}
	return nil
}

// capLog keeps a log's first MaxLogBytes (less its marker) and says how
// much was dropped.
func capLog(data []byte) []byte {
	if len(data) <= MaxLogBytes {
		return data
	}
	keep := MaxLogBytes - 128 // room for the marker
	marker := fmt.Sprintf("\n[supervisor] log capped at %d bytes; %d bytes dropped\n", MaxLogBytes, len(data)-keep)
	out := make([]byte, 0, MaxLogBytes)
	return append(append(out, data[:keep]...), marker...)
}

// UploadPatch stores a patch in the patches bucket and returns its ref,
// with a summary of what it changes. A patch over protocol.MaxPatchBytes
// is refused.
func UploadPatch(ctx context.Context, b *bus.Bus, node, name string, patch []byte) (*protocol.PatchRef, error) {
	if len(patch) > protocol.MaxPatchBytes {
		return nil, fmt.Errorf("upload patch %s: %s", name, protocol.PatchTooLarge(int64(len(patch))))
	}
	sum := sha256.Sum256(patch)
	if err := putBytes(ctx, b.Patches, name, patch); err != nil {
		return nil, fmt.Errorf("upload patch: %w", bus.ObjectPutError(protocol.BucketPatches, name, err))
	}
	return &protocol.PatchRef{NodeID: node, Object: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(patch)),
		Stat: patchstat.Parse(patch).Summary()}, nil
}

// maxChunk is the object store's default chunk size.
const maxChunk = 128 << 10

// putBytes stores data as name with chunks no larger than data: the
// object store allocates a buffer of the chunk size for every Put, 128 KiB
// by default, which is most of the memory a small log's upload takes.
func putBytes(ctx context.Context, store jetstream.ObjectStore, name string, data []byte) error {
	chunk := uint32(min(max(len(data), 1), maxChunk))
	_, err := store.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunk}},
		bytes.NewReader(data))
	return err
}

// HostName returns an identity: the given one, or hostname-pid (the
// coordinator's). Runners use RunnerHost, which is stable across restarts.
func HostName(given string) string {
	if given != "" {
		return given
	}
	h, err := os.Hostname()
	if err != nil {
		h = "host"
	}
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}
