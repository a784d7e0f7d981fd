package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// Disposition is a handler's decision about a delivered job.
type Disposition struct {
	action action
	delay  time.Duration
	reason string
}

type action int

const (
	actAck action = iota
	actNak
	actTerm
	actAbandon
)

// Ack removes the job from the queue: it is done (its report is published).
func Ack() Disposition { return Disposition{action: actAck} }

// Nak hands the job back for redelivery after delay.
func Nak(delay time.Duration) Disposition { return Disposition{action: actNak, delay: delay} }

// Term drops a job that can never succeed (malformed), with a reason.
func Term(reason string) Disposition { return Disposition{action: actTerm, reason: reason} }

// Abandon neither acks nor naks: the job's lease was lost to another runner,
// which now owns the message.
func Abandon() Disposition { return Disposition{action: actAbandon} }

func (d Disposition) String() string {
	switch d.action {
	case actAck:
		return "ack"
	case actNak:
		return fmt.Sprintf("nak(%s)", d.delay)
	case actTerm:
		return "term(" + d.reason + ")"
	default:
		return "abandon"
	}
}

// Delivery is one delivered job.
type Delivery struct {
	Msg  jetstream.Msg
	Kind protocol.JobKind
	Pool string
	// Number counts deliveries of this job, from 1.
	Number uint64
	// MaxDeliver is the consumer's delivery cap; Number == MaxDeliver means
	// this is the last chance and a failure must be reported, not retried.
	MaxDeliver int
	// StreamSeq is the job's sequence in the jobs stream.
	StreamSeq uint64

	// slots is Pull's pool of concurrency slots (nil outside Pull), stop
	// Pull's stop signal, and holding whether this job holds a slot.
	slots   chan struct{}
	stop    context.Context
	holding bool
}

// Errors of Delivery.Park.
var (
	// ErrStopping means the runner began to stop while the job waited.
	ErrStopping = errors.New("bus: the runner is stopping")
	// ErrNoSlot means no concurrency slot came free in time after the wait.
	ErrNoSlot = errors.New("bus: no free slot for the job")
)

// Park holds the job for wait without running it: it gives the job's
// concurrency slot back, so the runner takes and runs other jobs
// meanwhile, while the heartbeats go on keeping the message in progress.
// Unlike a Nak this spends no delivery: JetStream counts a delivery each
// time it sends the message, and an InProgress ack only pushes the ack
// deadline back, so a job can wait as long as it must without nearing
// MaxDeliver. After wait, Park takes a slot again, waiting for one up to
// grace (as long as it takes if grace is not positive), and returns nil.
// It returns ErrStopping if the runner begins to stop meanwhile (a parked
// job has nothing to finish, so it does not wait for the drain),
// ErrNoSlot if no slot came free within grace, or ctx's error; the job
// then holds no slot and its handler hands it back.
func (d *Delivery) Park(ctx context.Context, wait, grace time.Duration) error {
	stop := d.stop
	if stop == nil {
		stop = context.Background()
	}
	if d.holding {
		<-d.slots
		d.holding = false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-stop.Done():
		return ErrStopping
	case <-t.C:
	}
	if d.slots == nil {
		return nil
	}
	var expired <-chan time.Time
	if grace > 0 {
		g := time.NewTimer(grace)
		defer g.Stop()
		expired = g.C
	}
	select {
	case d.slots <- struct{}{}:
		d.holding = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop.Done():
		return ErrStopping
	case <-expired:
		return ErrNoSlot
	}
}

// Last reports whether no further redelivery will happen.
func (d *Delivery) Last() bool { return d.MaxDeliver > 0 && d.Number >= uint64(d.MaxDeliver) }

// Handler processes one job. ctx carries the span context the job message
// carries (the coordinator's dispatch), and is cancelled when the job must
// stop: the drain deadline passed during shutdown, or the caller's cancel. A handler
// whose work was interrupted returns Nak so another runner takes the job.
type Handler func(ctx context.Context, d *Delivery) Disposition

// PullOptions configures Pull.
type PullOptions struct {
	Kind  protocol.JobKind
	Pools []string
	// Concurrency is the number of jobs run at once (default 1).
	Concurrency int
	// DrainTimeout bounds how long in-flight jobs may run after the stop
	// signal before they are interrupted and handed back (default 30 s).
	DrainTimeout time.Duration
	// FetchWait is how long one pull request waits for a job (default 2 s).
	FetchWait time.Duration
	Log       *slog.Logger
}

// Pull consumes jobs of one kind from the given pools until stop ends, with
// at most Concurrency jobs in flight. It only asks for a job when a slot is
// free, so a busy runner never sits on jobs another could run. While a job
// runs, Pull sends InProgress heartbeats every AckWait/3. When stop ends it
// fetches nothing more, lets in-flight jobs finish for up to DrainTimeout,
// then cancels them; it returns when every job has been acked or handed back.
func (b *Bus) Pull(stop context.Context, opts PullOptions, h Handler) error {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.FetchWait <= 0 {
		opts.FetchWait = 2 * time.Second
	}
	if len(opts.Pools) == 0 {
		opts.Pools = []string{protocol.DefaultPool}
	}
	log := opts.Log
	if log == nil {
		log = b.log
	}
	consumers := make([]jetstream.Consumer, len(opts.Pools))
	for i, pool := range opts.Pools {
		c, err := b.JobConsumer(stop, opts.Kind, pool)
		if err != nil {
			return err
		}
		consumers[i] = c
	}

	// jobCtx outlives stop by DrainTimeout so in-flight work can finish.
	jobCtx, cancelJobs := context.WithCancel(context.Background())
	defer cancelJobs()
	go func() {
		<-stop.Done()
		t := time.NewTimer(opts.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn("drain timeout passed; interrupting in-flight jobs", "kind", opts.Kind, "timeout", opts.DrainTimeout)
			cancelJobs()
		case <-jobCtx.Done():
		}
	}()

	slots := make(chan struct{}, opts.Concurrency)
	var running sync.WaitGroup
	var fetchers sync.WaitGroup
	for i, c := range consumers {
		fetchers.Add(1)
		go func(pool string, c jetstream.Consumer) {
			defer fetchers.Done()
			b.fetchLoop(stop, jobCtx, opts, pool, c, slots, &running, h, log)
		}(opts.Pools[i], c)
	}
	fetchers.Wait()
	running.Wait()
	return nil
}

func (b *Bus) fetchLoop(stop, jobCtx context.Context, opts PullOptions, pool string, c jetstream.Consumer,
	slots chan struct{}, running *sync.WaitGroup, h Handler, log *slog.Logger) {
	delay := time.Duration(0)
	for {
		select {
		case <-stop.Done():
			return
		case slots <- struct{}{}:
		}
		msg, err := fetchOne(stop, c, opts.FetchWait)
		if err != nil {
			<-slots
			if stop.Err() != nil {
				return
			}
			delay = DefaultBackoff.Next(delay)
			log.Warn("fetch failed; retrying", "kind", opts.Kind, "pool", pool, "retry_in", delay, "err", err)
			select {
			case <-stop.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		if msg == nil {
			<-slots
			continue
		}
		if stop.Err() != nil {
			// Stopped while the pull was in flight: hand the job straight back.
			_ = msg.Nak()
			<-slots
			return
		}
		running.Add(1)
		go func() {
			defer running.Done()
			b.handle(stop, jobCtx, opts, pool, msg, slots, h, log)
		}()
	}
}

// fetchOne pulls at most one message, returning nil when none arrived.
func fetchOne(stop context.Context, c jetstream.Consumer, wait time.Duration) (jetstream.Msg, error) {
	// The pull request expires with ctx, and stop ends it early, so a
	// stopping runner does not wait out an idle fetch.
	ctx, cancel := context.WithTimeout(stop, wait)
	defer cancel()
	batch, err := c.Fetch(1, jetstream.FetchContext(ctx))
	if err != nil {
		return nil, err
	}
	for m := range batch.Messages() {
		return m, nil
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	return nil, nil
}

// handle runs h on a job that holds a slot, settles the message as h
// says and gives the slot back (unless the job gave it up in Park).
func (b *Bus) handle(stop, jobCtx context.Context, opts PullOptions, pool string, msg jetstream.Msg,
	slots chan struct{}, h Handler, log *slog.Logger) {
	d := &Delivery{Msg: msg, Kind: opts.Kind, Pool: pool, MaxDeliver: b.Cfg.MaxDeliver,
		slots: slots, stop: stop, holding: true}
	defer func() {
		if d.holding {
			<-slots
		}
	}()
	if md, err := msg.Metadata(); err == nil {
		d.Number = md.NumDelivered
		d.StreamSeq = md.Sequence.Stream
	}
	// The job message carries the span context of its dispatch: the
	// handler's context, and this delivery's log records, are in the
	// workflow's trace.
	ctx, cancel := context.WithCancel(telemetry.Extract(jobCtx, nats.Header(msg.Headers())))
	defer cancel()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(b.Cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					log.WarnContext(ctx, "heartbeat failed", "kind", opts.Kind, "seq", d.StreamSeq, "err", err)
				}
			}
		}
	}()
	disp := h(ctx, d)
	cancel()
	<-hbDone
	var err error
	switch disp.action {
	case actAck:
		// Wait for the server to confirm, so a lost ack cannot make a
		// finished job run again unnoticed.
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = msg.DoubleAck(actx)
		acancel()
	case actNak:
		if disp.delay > 0 {
			err = msg.NakWithDelay(disp.delay)
		} else {
			err = msg.Nak()
		}
	case actTerm:
		err = msg.TermWithReason(disp.reason)
	}
	if err != nil {
		log.WarnContext(ctx, "cannot settle job; it will be redelivered", "kind", opts.Kind, "seq", d.StreamSeq, "disposition", disp.String(), "err", err)
	}
}

// DeadLetterFromJob builds the dead letter for a job that exhausted its
// deliveries, from the job message's Sup-Kind header and payload.
func DeadLetterFromJob(kind string, data []byte, deliveries uint64) (*protocol.DeadLetter, error) {
	d := &protocol.DeadLetter{Kind: protocol.JobKind(kind), Deliveries: deliveries,
		Reason: "no runner completed it (crashed, timed out or failed on every delivery)"}
	switch d.Kind {
	case protocol.KindAgent:
		var j protocol.AgentJob
		if err := protocol.Decode(data, &j); err != nil {
			return nil, err
		}
		d.JobID, d.WorkflowID, d.NodeID, d.Attempt = j.JobID, j.WorkflowID, j.NodeID, j.Attempt
	case protocol.KindGate:
		var j protocol.GateJob
		if err := protocol.Decode(data, &j); err != nil {
			return nil, err
		}
		d.JobID, d.WorkflowID, d.NodeID, d.Attempt, d.Gate = j.JobID, j.WorkflowID, j.NodeID, j.Attempt, j.Gate
	default:
		return nil, fmt.Errorf("bus: dead letter of unknown job kind %q", kind)
	}
	return d, nil
}
