package engine

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// inboxReport is a runner's report waiting to be folded, with the message
// to settle once it has been and the context (the runner's job span) it
// came with.
type inboxReport struct {
	ctx context.Context
	r   protocol.Report
	msg jetstream.Msg
}

// inbox holds the reports received for each workflow and not yet folded.
// The first report to arrive for a workflow with an empty inbox queues
// one fold in the workflow's queue; reports arriving before that fold runs
// join it, so a workflow with many jobs finishing at once folds them
// together and decides once.
type inbox struct {
	mu      sync.Mutex
	waiting map[string][]inboxReport
}

func newInbox() *inbox { return &inbox{waiting: map[string][]inboxReport{}} }

// put adds a report to wf's inbox and, if the inbox was empty, queues
// fold(wf) in q. It returns false, keeping nothing, once q is closed.
func (b *inbox) put(wf string, p inboxReport, q *serial, fold func(wf string)) bool {
	b.mu.Lock()
	list := b.waiting[wf]
	b.waiting[wf] = append(list, p)
	b.mu.Unlock()
	if len(list) > 0 {
		return true // a fold is queued and has not taken the inbox yet
	}
	if q.Go(wf, func() { fold(wf) }) {
		return true
	}
	b.mu.Lock()
	delete(b.waiting, wf)
	b.mu.Unlock()
	return false
}

// take empties wf's inbox and returns what it held, oldest first.
func (b *inbox) take(wf string) []inboxReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := b.waiting[wf]
	delete(b.waiting, wf)
	return list
}
