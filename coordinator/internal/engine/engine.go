// Package engine is the coordinator's core: it folds the event log into
// workflow state, schedules ready DAG nodes as agent jobs, fans each node's
// gates out as gate jobs and folds their results back in, integrates
// accepted patches onto the workflow's branch, and serves the sup.api.*
// micro service.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
)

// Options configures an Engine.
type Options struct {
	// DataDir holds the coordinator's integration mirrors.
	DataDir string
	// ID names this coordinator instance (for the leader lock).
	ID string
	// LeaderTTL is the leader lease's time to live (default 15 s).
	LeaderTTL time.Duration
	// Tick is how often the scheduler re-checks every running workflow and
	// republishes anything unpublished (default 2 s).
	Tick time.Duration
	Log  *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Gates are the gate definitions below the project in precedence: the
	// built-in sets and the user's file, merged (DESIGN decision 5).
	// Workflows may refer to them by name.
	Gates *gates.Set
}

// Engine is the coordinator.
type Engine struct {
	bus   *bus.Bus
	store state.Store
	opts  Options
	log   *slog.Logger
	integ *integrator

	mu    sync.Mutex
	wfs   map[string]*Workflow
	order []string
	// ready is closed when the engine has replayed the log and leads.
	ready chan struct{}
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
		opts.LeaderTTL = 15 * time.Second
	}
	if opts.Tick <= 0 {
		opts.Tick = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	integ, err := newIntegrator(b, opts.DataDir, opts.Log)
	if err != nil {
		return nil, err
	}
	return &Engine{
		bus: b, store: store, opts: opts, log: opts.Log, integ: integ,
		wfs: map[string]*Workflow{}, ready: make(chan struct{}),
	}, nil
}

// Ready is closed once the engine leads and has rebuilt its state.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// leaderKey is the state-store key of the coordinator leader lock.
const leaderKey = "coordinator/leader"

// Run waits to become the leader, rebuilds state from the event log,
// resumes in-flight workflows, then serves until ctx ends. It returns an
// error if leadership is lost (the process should exit and restart).
func (e *Engine) Run(ctx context.Context) error {
	lead, err := e.acquireLeadership(ctx)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.store.Release(rctx, lead)
	}()
	leaderCtx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go e.keepLeadership(leaderCtx, lead, lost)

	if err := e.replay(leaderCtx); err != nil {
		return err
	}
	e.mu.Lock()
	for _, id := range e.order {
		e.advance(leaderCtx, e.wfs[id])
	}
	known := len(e.wfs)
	e.mu.Unlock()

	svc, err := e.serveAPI()
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	// Make sure the server has the API's subscriptions before announcing
	// readiness, so a request sent right after Ready finds a responder.
	if err := e.bus.NC.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("engine: flush API subscriptions: %w", err)
	}

	errs := make(chan error, 2)
	go func() { errs <- e.consumeReports(leaderCtx) }()
	go func() { errs <- e.consumeDeadLetters(leaderCtx) }()
	close(e.ready)
	e.log.Info("coordinator ready", "id", e.opts.ID, "workflows", known)

	t := time.NewTicker(e.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-leaderCtx.Done():
			if c := context.Cause(leaderCtx); c != nil && !errors.Is(c, context.Canceled) {
				return c
			}
			return nil
		case err := <-errs:
			if err != nil && leaderCtx.Err() == nil {
				return err
			}
		case <-t.C:
			e.mu.Lock()
			for _, id := range e.order {
				if w := e.wfs[id]; !w.Status.Terminal() {
					e.advance(leaderCtx, w)
				}
			}
			e.mu.Unlock()
		}
	}
}

func (e *Engine) acquireLeadership(ctx context.Context) (state.Lease, error) {
	logged := false
	for {
		l, err := e.store.Acquire(ctx, leaderKey, e.opts.ID, e.opts.LeaderTTL)
		if err == nil {
			e.log.Info("leading", "id", e.opts.ID, "token", l.Token)
			return l, nil
		}
		if !errors.Is(err, state.ErrLocked) {
			e.log.Warn("cannot take the leader lock; retrying", "err", err)
		} else if !logged {
			e.log.Info("another coordinator leads; standing by", "id", e.opts.ID)
			logged = true
		}
		select {
		case <-ctx.Done():
			return state.Lease{}, ctx.Err()
		case <-time.After(e.opts.LeaderTTL / 3):
		}
	}
}

func (e *Engine) keepLeadership(ctx context.Context, l state.Lease, lost context.CancelCauseFunc) {
	t := time.NewTicker(e.opts.LeaderTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			nl, err := e.store.Renew(ctx, l, e.opts.LeaderTTL)
			if errors.Is(err, state.ErrLockLost) {
				lost(fmt.Errorf("engine: leadership lost (token %d)", l.Token))
				return
			}
			if err != nil {
				e.log.Warn("cannot renew leadership; retrying", "err", err)
				continue
			}
			l = nl
		}
	}
}

// Replay's patience.
const (
	// replayIdle is how long replay waits for the next event it knows is
	// in the log before it starts over.
	replayIdle = 15 * time.Second
	// replayAttempts bounds the starts over before Run gives up.
	replayAttempts = 5
)

// replay folds every event in the log into state. A transient failure
// (a cluster electing a stream leader, a consumer moved) starts it over
// from an empty state, with back-off, a few times before it gives up.
func (e *Engine) replay(ctx context.Context) error {
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		err := e.replayOnce(ctx)
		if err == nil || ctx.Err() != nil || attempt == replayAttempts {
			return err
		}
		e.log.Warn("replaying the event log failed; starting over", "attempt", attempt, "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// replayOnce reads the event log from the start into a fresh state.
func (e *Engine) replayOnce(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wfs, e.order = map[string]*Workflow{}, nil

	info, err := e.bus.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		return fmt.Errorf("engine: replay events: %w", err)
	}
	last := info.CachedInfo().State.LastSeq
	if info.CachedInfo().State.Msgs == 0 {
		return nil // empty, purged or aged out: LastSeq names a message that is gone
	}
	cons, err := e.bus.JS.OrderedConsumer(ctx, protocol.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{protocol.SubjectEvents},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("engine: replay events: %w", err)
	}
	// The iterator (unlike Next on an ordered consumer, which fails with
	// "no responders" while the consumer is being recreated in a cluster)
	// rides out the ordered consumer's resets. Its Next blocks: stop it
	// when ctx ends or the log goes quiet before its last event.
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("engine: replay events: %w", err)
	}
	defer it.Stop()
	stopOnCancel := context.AfterFunc(ctx, it.Stop)
	defer stopOnCancel()
	idle := time.AfterFunc(replayIdle, it.Stop)
	defer idle.Stop()

	count := 0
	for seq := uint64(0); seq < last; {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return fmt.Errorf("engine: replay events at seq %d of %d: no event for %s", seq, last, replayIdle)
			}
			// A missed heartbeat and the like: the iterator carries on,
			// and the idle timer bounds how long.
			e.log.Debug("replaying the event log", "seq", seq, "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		idle.Reset(replayIdle)
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("engine: replay events: %w", err)
		}
		seq = md.Sequence.Stream
		var ev protocol.Event
		if err := protocol.Decode(msg.Data(), &ev); err != nil {
			e.log.Error("skipping undecodable event", "seq", seq, "err", err)
			continue
		}
		if err := e.apply(&ev, seq); err != nil {
			e.log.Error("skipping event that does not fold", "seq", seq, "err", err)
			continue
		}
		count++
		if md.NumPending == 0 {
			break // the log's last message may have been deleted
		}
	}
	if count > 0 {
		e.log.Info("state rebuilt from the event log", "events", count, "workflows", len(e.wfs))
	}
	return nil
}

// emit appends an event to the log and folds it in. Callers hold e.mu.
func (e *Engine) emit(ctx context.Context, ev *protocol.Event, msgID string) error {
	ev.Time = e.opts.Now().UTC()
	if w, ok := e.wfs[ev.WorkflowID]; ok && w.Generation > 0 && msgID != "" {
		// A reopened workflow repeats transitions (ready, finished …):
		// keep their de-duplication ids distinct from the first time.
		msgID = fmt.Sprintf("%s.g%d", msgID, w.Generation)
	}
	seq, err := e.bus.AppendEvent(ctx, ev, msgID)
	if err != nil {
		return err
	}
	return e.apply(ev, seq)
}

// lookup returns a workflow under e.mu.
func (e *Engine) lookup(id string) (*Workflow, bool) {
	w, ok := e.wfs[id]
	return w, ok
}
