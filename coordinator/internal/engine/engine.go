// Package engine runs the coordinator's workflow state machine
// (statemachine) for real: while this coordinator leads, it rebuilds the
// state from the event log, feeds it runners' reports and operators'
// commands, and carries out the effects the state machine decides —
// appending events, publishing jobs, integrating patches, delivering
// branches. Every change to one workflow runs in that workflow's own queue,
// and the lock on the state is held only to read or fold it, never across
// I/O, so a slow integration holds up its own workflow alone.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/notify"
	"github.com/supervisorhq/supervisor/coordinator/internal/pricing"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/state"
)

// Options configures an Engine.
type Options struct {
	// DataDir holds the coordinator's integration mirrors.
	DataDir string
	// ID names this coordinator instance (for the leader lease).
	ID string
	// LeaderTTL is the leader lease's time to live (default
	// DefaultLeaderTTL). A standby takes over at most about LeaderTTL plus
	// a tenth of it after the leader dies (lease.Elect).
	LeaderTTL time.Duration
	// Tick is how often every running workflow is decided again, which
	// republishes anything unpublished (default 2 s).
	Tick time.Duration
	Log  *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Notify, if set, is told of escalations and of humans' decisions.
	Notify Notifier
	// MaxFailuresPerHour pauses new agent rounds fleet-wide past this many
	// failed rounds within an hour (0: the default, 10; negative: never).
	MaxFailuresPerHour int
	// MergeLockWait is how long a merge waits for another merge of the
	// same branch to release the lock before it is left to the next
	// decision (default 20 s, so an API request waiting for the merge
	// is answered within the CLI's default 30 s timeout).
	MergeLockWait time.Duration
	// LostJobAfter is how long a job a runner reported started may go
	// with nobody holding its lease before the watchdog runs it again
	// (0: four times the bus's ack wait; negative: never).
	LostJobAfter time.Duration
	// Prices estimate the cost of agent runs whose CLI reported none, when
	// their reports come in (before they become events).
	Prices pricing.Table
	// SnapshotInterval is how often the leader writes a snapshot of its
	// state when the log has moved since the last one; it also writes one
	// when it stops cleanly (0: DefaultSnapshotInterval; negative: never,
	// and none is read on start either).
	SnapshotInterval time.Duration
	// RetainFinished is how long a finished workflow, with nothing left to
	// do for it, stays in memory before it is retired to a summary
	// (0: DefaultRetainFinished; negative: never).
	RetainFinished time.Duration
	// SnapshotListWait bounds how long listing the snapshots may wait for
	// the store's next record (0 or less: DefaultSnapshotListWait). A
	// listing that waits longer fails: on start the whole log is folded
	// instead.
	SnapshotListWait time.Duration
	// RepoRoots are where the coordinator may write a workflow's branch
	// and merges (its submitting repository, when under one); the zero
	// value: nowhere. Checked again at every write, so a workflow
	// submitted under other settings writes only where these allow.
	RepoRoots reporoots.Roots
}

// Notifier takes notifications and delivers them without blocking.
type Notifier interface {
	Send(notify.Notification)
}

// ServeFunc starts what the coordinator serves while it leads (the API),
// with the leader's context; stop ends it.
type ServeFunc func(leaderCtx context.Context) (stop func() error, err error)

// Engine is the coordinator's effect runner.
type Engine struct {
	bus   *bus.Bus
	store state.Store
	opts  Options
	log   *slog.Logger
	integ *integrator

	// mu guards st. It is held to read or fold the state, never across I/O.
	mu sync.RWMutex
	st *statemachine.State

	// queues serializes the changes to each workflow.
	queues *serial
	// kicked marks workflows with a decision queued and not yet started.
	kicked sync.Map
	// inbox holds reports not yet folded, by workflow.
	inbox *inbox
	out   *outbox
	wakes *wakeups
	// ctx is the leader's context while Run leads.
	ctx context.Context
	// prompts reads task prompts back from the log; leavePrompts, set
	// before the replay when the log keeps every event for good, keeps
	// them out of the state's memory (PERF-50).
	prompts      *logPrompts
	leavePrompts bool

	// ready is closed when the engine has replayed the log and leads.
	ready chan struct{}

	// appendGate is read-held by every append from before it is written
	// to the log until it is folded; a snapshot write-holds it to take the
	// sequence its state covers.
	appendGate sync.RWMutex
	// snapMu guards snaps, the snapshots object store once bound;
	// snapWrite serializes snapshot writes, and snapSeq is the sequence
	// the newest snapshot written or read covers.
	snapMu    sync.Mutex
	snaps     jetstream.ObjectStore
	snapWrite sync.Mutex
	snapSeq   atomic.Uint64
}

// New creates an engine; Run starts it.
func New(b *bus.Bus, store state.Store, opts Options) (*Engine, error) {
	if opts.DataDir == "" {
		return nil, errors.New("engine: DataDir is required")
	}
	if opts.ID == "" {
		opts.ID = "coordinator"
	}
	if opts.LeaderTTL <= 0 {
		opts.LeaderTTL = DefaultLeaderTTL
	}
	if opts.Tick <= 0 {
		opts.Tick = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MergeLockWait <= 0 {
		opts.MergeLockWait = mergeLockWait
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.SnapshotInterval == 0 {
		opts.SnapshotInterval = DefaultSnapshotInterval
	}
	if opts.RetainFinished == 0 {
		opts.RetainFinished = DefaultRetainFinished
	}
	if opts.SnapshotListWait <= 0 {
		opts.SnapshotListWait = DefaultSnapshotListWait
	}
	integ, err := newIntegrator(b, opts.DataDir, opts.RepoRoots, opts.Log)
	if err != nil {
		return nil, err
	}
	return &Engine{
		bus: b, store: store, opts: opts, log: opts.Log, integ: integ,
		st: statemachine.New(), queues: newSerial(), inbox: newInbox(), out: newOutbox(), wakes: newWakeups(),
		ready: make(chan struct{}), prompts: newLogPrompts(b.JS),
	}, nil
}

// Ready is closed once the engine leads and has rebuilt its state.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// DefaultLeaderTTL is the leader lease's default time to live: the leader
// renews it every third of it and steps down after half of it without a
// renewal; a standby takes over within about 1.1 times it of the leader's
// death (CHAOS-04).
const DefaultLeaderTTL = 10 * time.Second

// leaderKey is the state-store key of the coordinator leader lease.
const leaderKey = "coordinator/leader"

// Run waits to become the leader, rebuilds state from the event log,
// resumes in-flight workflows, starts serve, then runs until ctx ends. It
// returns an error if leadership is lost (the process should exit and
// restart) or the log cannot be read.
func (e *Engine) Run(ctx context.Context, serve ServeFunc) error {
	held, leaderCtx, err := lease.Elect(ctx, e.store, leaderKey, e.opts.ID, e.opts.LeaderTTL, e.log)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = held.Release(rctx)
	}()
	leaderCtx, stopLeading := context.WithCancelCause(leaderCtx)
	defer stopLeading(nil)
	e.ctx = leaderCtx
	err = e.lead(leaderCtx, stopLeading, serve)
	// Shut down in order: nothing new is queued, then what is queued
	// finishes (its context is done, so I/O ends quickly).
	stopLeading(err)
	e.wakes.stop()
	e.queues.Close()
	if err == nil && e.ready != nil && isClosed(e.ready) {
		e.snapshotOnStop() // still holding the lease
	}
	return err
}

// lead serves while this engine leads, until leaderCtx ends.
func (e *Engine) lead(leaderCtx context.Context, stopLeading context.CancelCauseFunc, serve ServeFunc) error {
	e.leavePrompts = e.logKeepsEverything(leaderCtx)
	if err := e.replay(leaderCtx); err != nil {
		return err
	}
	known := 0
	e.Read(func(s *statemachine.State) { known = s.Len() })
	e.kickAll()
	e.kickFleet() // failures counted in the replay may call for a pause

	if serve != nil {
		stop, err := serve(leaderCtx)
		if err != nil {
			return err
		}
		defer func() { _ = stop() }()
	}

	var consumers sync.WaitGroup
	defer consumers.Wait()
	errs := make(chan error, 2)
	for _, consume := range []func(context.Context) error{e.consumeReports, e.consumeDeadLetters} {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			errs <- consume(leaderCtx)
		}()
	}
	consumers.Add(1)
	go func() {
		defer consumers.Done()
		e.watchJobs(leaderCtx)
	}()
	consumers.Add(1)
	go func() {
		defer consumers.Done()
		e.housekeep(leaderCtx)
	}()
	close(e.ready)
	e.log.Info("coordinator ready", "id", e.opts.ID, "workflows", known)

	t := time.NewTicker(e.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-leaderCtx.Done():
			if c := context.Cause(leaderCtx); c != nil && !errors.Is(c, context.Canceled) {
				return fmt.Errorf("engine: leadership lost: %w", c)
			}
			return nil
		case err := <-errs:
			if err != nil && leaderCtx.Err() == nil {
				stopLeading(err)
				return err
			}
		case <-t.C:
			e.kickAll()
		}
	}
}

// Read calls fn with the state, read-locked: fn must not keep what it
// reads past its return, nor change it.
func (e *Engine) Read(fn func(*statemachine.State)) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	fn(e.st)
}

// Command runs cmd in workflow wf's queue, with the workflow read-locked,
// carries out the effects it returns, then decides the workflow again.
// An unknown workflow is a statemachine.ErrNotFound refusal; cmd's error
// is returned as is, and nothing is done.
func (e *Engine) Command(ctx context.Context, wf string,
	cmd func(w *statemachine.Workflow, now time.Time) ([]statemachine.Effect, error)) error {
	return e.queues.Do(ctx, wf, func() error {
		var (
			effects []statemachine.Effect
			err     error
		)
		if err := e.bringBack(ctx, wf); err != nil {
			return err
		}
		e.Read(func(s *statemachine.State) {
			w, ok := s.Workflow(wf)
			if !ok {
				err = statemachine.WorkflowNotFound(wf)
				return
			}
			effects, err = cmd(w, e.opts.Now())
		})
		if err != nil {
			return err
		}
		if _, err := e.execute(ctx, wf, effects); err != nil {
			return err
		}
		e.advance(ctx, wf)
		return nil
	})
}

// Submit starts a validated workflow and returns its id.
func (e *Engine) Submit(ctx context.Context, s statemachine.Submission) (string, error) {
	id, err := newWorkflowID()
	if err != nil {
		return "", err
	}
	err = e.queues.Do(ctx, id, func() error {
		if _, err := e.execute(ctx, id, []statemachine.Effect{statemachine.Submit(id, s, e.opts.Now())}); err != nil {
			return err
		}
		e.log.InfoContext(ctx, "workflow submitted", "workflow", id, "name", s.Spec.Name, "tasks", len(s.Spec.Tasks), "source", s.Source)
		e.advance(ctx, id)
		return nil
	})
	return id, err
}

// fleetQueue is the queue of the fleet's own decisions and commands; no
// workflow id takes this form.
const fleetQueue = statemachine.FleetID

// kickFleet queues a decision on pausing the fleet.
func (e *Engine) kickFleet() {
	if _, queued := e.kicked.LoadOrStore(fleetQueue, true); queued {
		return
	}
	e.queues.Go(fleetQueue, func() {
		e.kicked.Delete(fleetQueue)
		if e.ctx.Err() != nil {
			return
		}
		var effects []statemachine.Effect
		e.Read(func(s *statemachine.State) {
			effects = statemachine.DecideFleet(s, e.opts.Now(), e.opts.MaxFailuresPerHour)
		})
		if len(effects) == 0 {
			return
		}
		if _, err := e.execute(e.ctx, fleetQueue, effects); err != nil {
			e.log.Warn("cannot pause the fleet now; will retry on the next failure", "err", err)
			return
		}
		e.log.Warn("the fleet is paused: no new agent round starts until an operator resumes it (coordinator resume)")
	})
}

// FleetCommand runs cmd in the fleet's queue, with the state read-locked,
// and carries out the effects it returns.
func (e *Engine) FleetCommand(ctx context.Context, cmd func(s *statemachine.State, now time.Time) ([]statemachine.Effect, error)) error {
	return e.queues.Do(ctx, fleetQueue, func() error {
		var (
			effects []statemachine.Effect
			err     error
		)
		e.Read(func(s *statemachine.State) { effects, err = cmd(s, e.opts.Now()) })
		if err != nil {
			return err
		}
		_, err = e.execute(ctx, fleetQueue, effects)
		return err
	})
}

// kickAll queues a decision for every running workflow, and every
// finished one with a merge to carry out.
func (e *Engine) kickAll() {
	var ids []string
	e.Read(func(s *statemachine.State) {
		for _, w := range s.Workflows() {
			if !w.Status.Terminal() || w.MergePending() {
				ids = append(ids, w.ID)
			}
		}
	})
	for _, id := range ids {
		e.kick(id)
	}
}

// kick queues a decision for workflow wf, unless one is queued already.
func (e *Engine) kick(wf string) {
	if _, queued := e.kicked.LoadOrStore(wf, true); queued {
		return
	}
	e.queues.Go(wf, func() {
		e.kicked.Delete(wf)
		if e.ctx.Err() == nil {
			e.advance(e.ctx, wf)
		}
	})
}
