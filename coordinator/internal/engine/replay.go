package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// Replay's patience.
const (
	// replayIdle is how long replay waits for the next event it knows is
	// in the log before it starts over.
	replayIdle = 15 * time.Second
	// replayAttempts bounds the starts over before Run gives up.
	replayAttempts = 5
)

// replay folds every event in the log into a fresh state. A transient
// failure (a cluster electing a stream leader, a consumer moved) starts it
// over, with back-off, a few times before it gives up.
func (e *Engine) replay(ctx context.Context) error {
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		began := time.Now()
		st, count, si, err := e.restore(ctx)
		if err == nil {
			e.mu.Lock()
			e.st = st
			e.mu.Unlock()
			if si.Seq > 0 {
				e.log.Info("state rebuilt from a snapshot and the events after it", "snapshot", si.Name, "events", count,
					"workflows", st.Len(), "retired", st.RetiredLen(), "took", time.Since(began))
			} else if count > 0 {
				e.log.Info("state rebuilt from the event log", "events", count, "workflows", st.Len(), "took", time.Since(began))
			}
			return nil
		}
		if ctx.Err() != nil || attempt == replayAttempts {
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

// reload rebuilds workflow wf from its events in the log, replacing what
// the state holds for it.
func (e *Engine) reload(ctx context.Context, wf string) error {
	st, _, err := e.fold(ctx, protocol.EventSubject(wf))
	if err != nil {
		return err
	}
	if wf == statemachine.FleetID {
		e.mu.Lock()
		e.st.SetPause(st.Fleet())
		e.mu.Unlock()
		return nil
	}
	w, ok := st.Workflow(wf)
	if !ok {
		return fmt.Errorf("workflow %s has no submission in the log", wf)
	}
	e.mu.Lock()
	e.st.Put(w)
	e.mu.Unlock()
	return nil
}

// fold reads the events on subject (every event, or one workflow's) from
// the start of the log into a new state. Events that do not decode or fold
// are logged and skipped.
func (e *Engine) fold(ctx context.Context, subject string) (*statemachine.State, int, error) {
	st := statemachine.New()
	st.SetPromptSource(e.prompts, e.leavePrompts)
	count, err := e.foldLog(ctx, subject, 1, st, st.Apply)
	if err != nil {
		return nil, 0, err
	}
	return st, count, nil
}

// foldLog reads the events on subject from sequence from on, folding each
// with apply into st (st.Skip records those that do not decode; a message
// holding a batch gives its events in order, all at its sequence). It
// returns the number of events folded.
func (e *Engine) foldLog(ctx context.Context, subject string, from uint64, st *statemachine.State,
	apply func(eventlog.Event) error) (int, error) {
	stream, err := e.bus.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		return 0, fmt.Errorf("engine: replay events: %w", err)
	}
	var opts []jetstream.StreamInfoOpt
	if subject != protocol.SubjectEvents {
		opts = append(opts, jetstream.WithSubjectFilter(subject))
	}
	info, err := stream.Info(ctx, opts...)
	if err != nil {
		return 0, fmt.Errorf("engine: replay events: %w", err)
	}
	if info.State.Msgs == 0 || (subject != protocol.SubjectEvents && info.State.Subjects[subject] == 0) {
		return 0, nil // empty, purged or aged out: LastSeq names a message that is gone
	}
	last := info.State.LastSeq
	if from > 1 {
		// The last message there is: the log's last sequence may be a
		// deleted one, and from past every message left.
		lm, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return 0, fmt.Errorf("engine: replay events: %w", err)
		}
		last = lm.Sequence
	}
	if from > last {
		return 0, nil // nothing from there on
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := e.bus.JS.OrderedConsumer(ctx, protocol.StreamEvents, cfg)
	if err != nil {
		return 0, fmt.Errorf("engine: replay events: %w", err)
	}
	// The iterator (unlike Next on an ordered consumer, which fails with
	// "no responders" while the consumer is being recreated in a cluster)
	// rides out the ordered consumer's resets. Its Next blocks: stop it
	// when ctx ends or the log goes quiet before its last event.
	it, err := cons.Messages()
	if err != nil {
		return 0, fmt.Errorf("engine: replay events: %w", err)
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
				return 0, ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return 0, fmt.Errorf("engine: replay events at seq %d of %d: no event for %s", seq, last, replayIdle)
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
			return 0, fmt.Errorf("engine: replay events: %w", err)
		}
		seq = md.Sequence.Stream
		evs, err := eventlog.DecodeAll(msg.Data())
		if err != nil {
			e.log.Error("skipping undecodable event", "seq", seq, "subject", msg.Subject(), "err", err)
			// Appends to the workflow are fenced on its last event, this one.
			st.Skip(strings.TrimPrefix(msg.Subject(), protocol.EventSubject("")), seq)
		}
		for i, ev := range evs {
			ev.Seq, ev.Index = seq, i
			if err := apply(ev); err != nil {
				e.log.Error("skipping event that does not fold", "seq", seq, "index", i, "err", err)
			} else {
				count++
			}
		}
		if md.NumPending == 0 {
			break // the log's last message may have been deleted
		}
	}
	return count, nil
}
