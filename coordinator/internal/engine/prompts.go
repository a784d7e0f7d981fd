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

	mu     sync.Mutex
	stream jetstream.Stream
	// cache holds the prompts of recently read events, by sequence, up to
	// promptCacheBytes of prompt text (golang-lru bounds entries, not
	// bytes: the oldest are removed until the bytes fit).
	cache *simplelru.LRU[uint64, map[string]string]
	bytes int
}

// newLogPrompts reads prompts from the event log through js.
func newLogPrompts(js jetstream.JetStream) *logPrompts {
	p := &logPrompts{js: js}
	// Entries are bounded by bytes below, not by count.
	p.cache, _ = simplelru.NewLRU[uint64, map[string]string](1<<30, func(_ uint64, m map[string]string) {
		p.bytes -= promptBytes(m)
	})
	return p
}

// Prompts returns the task prompts of the event at seq (a workflow's
// submission or the nodes a plan added) if they have been read, and a
// *statemachine.PromptsNotRead otherwise: deciding runs with the state
// locked and never waits on the log; the engine reads them (read) and
// decides again.
func (p *logPrompts) Prompts(seq uint64) (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.cache.Get(seq); ok {
		return m, nil
	}
	return nil, &statemachine.PromptsNotRead{Seq: seq}
}

// read reads the task prompts of the event at seq from the log and keeps
// them for Prompts.
func (p *logPrompts) read(ctx context.Context, seq uint64) error {
	p.mu.Lock()
	ok := p.cache.Contains(seq)
	p.mu.Unlock()
	if ok {
		return nil
	}
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
	ev, err := eventlog.Decode(raw.Data)
	if err != nil {
		return fmt.Errorf("engine: event %d of the log: %w", seq, err)
	}
	tasks, ok := taskBodies(ev.Body)
	if !ok {
		return fmt.Errorf("engine: event %d of the log is a %s event, which brings no task in", seq, ev.Type())
	}
	p.keep(seq, tasks)
	return nil
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

// keep keeps the prompts of tasks, those of the event at seq, for Prompts:
// read from the log, or appended by this engine (whose new nodes would
// otherwise read back at once what it just wrote).
func (p *logPrompts) keep(seq uint64, tasks []protocol.TaskSpec) {
	m := make(map[string]string, len(tasks))
	for _, t := range tasks {
		m[t.ID] = t.Prompt
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cache.Contains(seq) {
		p.cache.Add(seq, m)
		p.bytes += promptBytes(m)
		for p.bytes > promptCacheBytes && p.cache.Len() > 1 {
			p.cache.RemoveOldest()
		}
	}
}

// eventStream is the event log's stream handle, looked up once.
func (p *logPrompts) eventStream(ctx context.Context) (jetstream.Stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
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

// promptBytes is the text the prompts of m hold.
func promptBytes(m map[string]string) int {
	n := 0
	for id, p := range m {
		n += len(id) + len(p)
	}
	return n
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

// readDeferred reads the task prompts the postponed jobs of a decision of
// workflow wf wait for, outside the state's lock, and reports whether it
// read any (the workflow is then decided again at once). What cannot be
// read is logged; the decision's wake-up tries again.
func (e *Engine) readDeferred(ctx context.Context, wf string, deferred []error) bool {
	read := false
	for _, err := range deferred {
		var nr *statemachine.PromptsNotRead
		if errors.As(err, &nr) {
			if rerr := e.prompts.read(ctx, nr.Seq); rerr == nil {
				read = true
				continue
			} else {
				err = rerr
			}
		}
		if ctx.Err() == nil {
			e.log.WarnContext(ctx, "job postponed: its task prompt cannot be read now; will retry", "workflow", wf, "err", err)
		}
	}
	return read
}
