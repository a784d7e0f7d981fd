package engine

import (
	"context"
	"errors"
	"sync"
)

// errStopped is returned by serial.Do once the engine is stopping.
var errStopped = errors.New("engine: stopping")

// serial runs functions one at a time per key, in the order they were
// given; functions of different keys run concurrently. The engine keys by
// workflow: every change to a workflow runs in its queue, so a slow
// integration holds up that workflow alone.
type serial struct {
	mu     sync.Mutex
	queues map[string][]func()
	closed bool
	wg     sync.WaitGroup
}

func newSerial() *serial { return &serial{queues: map[string][]func(){}} }

// Go queues fn behind key's earlier functions and returns at once. After
// Close it drops fn and returns false.
func (s *serial) Go(key string, fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	q, running := s.queues[key]
	s.queues[key] = append(q, fn)
	if !running {
		s.wg.Add(1)
		go s.drain(key)
	}
	return true
}

// Do queues fn behind key's earlier functions and waits until it has run,
// or ctx ends (fn then still runs in its turn).
func (s *serial) Do(ctx context.Context, key string, fn func() error) error {
	done := make(chan error, 1)
	if !s.Go(key, func() { done <- fn() }) {
		return errStopped
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *serial) drain(key string) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		q := s.queues[key]
		if len(q) == 0 {
			delete(s.queues, key)
			s.mu.Unlock()
			return
		}
		fn := q[0]
		q[0] = nil
		s.queues[key] = q[1:]
		s.mu.Unlock()
		fn()
	}
}

// Close refuses new functions and waits until every queued one has run.
func (s *serial) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}
