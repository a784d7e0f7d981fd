package engine

// Task prompts read back from the event log (PERF-50): the state keeps
// none in memory when the log keeps every event for good (no age limit,
// no deletes or purges), and the engine gives it this reader.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// Bounds of the prompts read back.
const (
	// promptCacheBytes bounds the prompts kept once read: a workflow's
	// nodes become ready together, and each would otherwise read and
	// decode the same submission again.
	promptCacheBytes = 8 << 20
	// promptReadTimeout bounds one read of the log.
	promptReadTimeout = 10 * time.Second
)

// logPrompts is a statemachine.PromptSource reading the event log. It is
// safe for concurrent use.
type logPrompts struct {
	js jetstream.JetStream

	// streamMu guards stream, the event log's handle once looked up.
	streamMu sync.Mutex
	stream   jetstream.Stream

	// mu guards the cache: the prompts of recently read or appended
	// events, by event and task, up to promptCacheBytes of text (golang-lru
	// bounds entries, not bytes: the oldest are removed until the bytes
	// fit). Per task, so that the few prompts one job needs fit even when
	// the events that hold them are large.
	mu    sync.Mutex
	cache *simplelru.LRU[promptKey, string]
	bytes int
}

// promptKey names a task's prompt: the event that brought the task in,
// and the task.
type promptKey struct {
	seq  uint64
	task string
}

// newLogPrompts reads prompts from the event log through js.
func newLogPrompts(js jetstream.JetStream) *logPrompts {
	p := &logPrompts{js: js}
	// Entries are bounded by bytes in keep, not by count.
	p.cache, _ = simplelru.NewLRU[promptKey, string](1<<30, func(k promptKey, v string) {
		p.bytes -= len(k.task) + len(v)
	})
	return p
}

// Prompt returns the prompt of task, brought in by the event at seq (a
// workflow's submission or the nodes a plan added), if it has been read,
// and a *statemachine.PromptsNotRead otherwise: deciding runs with the
// state locked and never waits on the log; the engine reads the event
// (read) and decides again.
func (p *logPrompts) Prompt(seq uint64, task string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.cache.Get(promptKey{seq, task}); ok {
		return v, nil
	}
	return "", &statemachine.PromptsNotRead{Seq: seq}
}

// read reads the task prompts of the event at seq from the log and keeps
// them for Prompt.
func (p *logPrompts) read(ctx context.Context, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, promptReadTimeout)
	defer cancel()
	stream, err := p.eventStream(ctx)
	if err != nil {
		return err
	}
	raw, err := stream.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("engine: read event %d of the log: %w", seq, err)
	}
	// An event that brings tasks in is appended alone (execute), so its
	// message holds nothing else; a batch is read all the same.
	evs, err := eventlog.DecodeAll(raw.Data)
	if err != nil {
		return fmt.Errorf("engine: event %d of the log: %w", seq, err)
	}
	for _, ev := range evs {
		if tasks, ok := taskBodies(ev.Body); ok {
			p.keep(seq, tasks)
			return nil
		}
	}
	return fmt.Errorf("engine: event %d of the log is a %s event, which brings no task in", seq, evs[0].Type())
}

// taskBodies are the tasks an event brings in: a workflow's submission or
// the nodes a plan added; ok is false for other events.
func taskBodies(body eventlog.Body) (tasks []protocol.TaskSpec, ok bool) {
	switch b := body.(type) {
	case eventlog.WorkflowSubmitted:
		if b.Workflow != nil {
			return b.Workflow.Tasks, true
		}
		return nil, true
	case eventlog.NodesAdded:
		return b.Tasks, true
	}
	return nil, false
}

// keep keeps the prompts of tasks, those of the event at seq, for Prompt:
// read from the log, or appended by this engine (whose new nodes would
// otherwise read back at once what it just wrote).
func (p *logPrompts) keep(seq uint64, tasks []protocol.TaskSpec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range tasks {
		k := promptKey{seq, t.ID}
		if p.cache.Contains(k) {
			continue
		}
		p.cache.Add(k, t.Prompt)
		p.bytes += len(k.task) + len(t.Prompt)
	}
	for p.bytes > promptCacheBytes && p.cache.Len() > 1 {
		p.cache.RemoveOldest()
	}
}

// eventStream is the event log's stream handle, looked up once (not under
// the cache's lock, which deciding takes).
func (p *logPrompts) eventStream(ctx context.Context) (jetstream.Stream, error) {
	p.streamMu.Lock()
	defer p.streamMu.Unlock()
	if p.stream != nil {
		return p.stream, nil
	}
	s, err := p.js.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("engine: the event log: %w", err)
	}
	p.stream = s
	return s, nil
}

// logKeepsEverything reports whether the event log keeps every event for
// good, so that a prompt left in it can always be read back: no age limit,
// and no client may delete or purge. A log it cannot ask about keeps the
// prompts in memory.
func (e *Engine) logKeepsEverything(ctx context.Context) bool {
	s, err := e.bus.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		e.log.Warn("cannot read the event log's settings; task prompts stay in memory", "err", err)
		return false
	}
	cfg := s.CachedInfo().Config
	return cfg.MaxAge == 0 && cfg.DenyDelete && cfg.DenyPurge
}

// readDeferred reads the events the postponed jobs of a decision of
// workflow wf wait for, each once and outside the state's lock, and
// reports whether it read any not read before in this pass (readInPass):
// the workflow is then decided again at once. An event read already in
// the pass, or one that cannot be read, is logged once and left to the
// decision's wake-up, so that a pass never spins on reads.
func (e *Engine) readDeferred(ctx context.Context, wf string, deferred []error, readInPass map[uint64]bool) bool {
	read := false
	tried := map[uint64]bool{}
	for _, err := range deferred {
		var nr *statemachine.PromptsNotRead
		if !errors.As(err, &nr) {
			e.logDeferred(ctx, wf, err)
			continue
		}
		if tried[nr.Seq] {
			continue
		}
		tried[nr.Seq] = true
		if readInPass[nr.Seq] {
			e.logDeferred(ctx, wf, fmt.Errorf("%w (read already in this pass)", err))
			continue
		}
		readInPass[nr.Seq] = true
		if rerr := e.prompts.read(ctx, nr.Seq); rerr != nil {
			e.logDeferred(ctx, wf, rerr)
			continue
		}
		read = true
	}
	return read
}

// logDeferred logs a job postponed for want of its task prompt.
func (e *Engine) logDeferred(ctx context.Context, wf string, err error) {
	if ctx.Err() == nil {
		e.log.WarnContext(ctx, "job postponed: its task prompt cannot be read now; will retry", "workflow", wf, "err", err)
	}
}
