package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

const (
	// rawBatch is the batched consumer's prefetch (nats.go's default).
	rawBatch = 500
	// asyncWindow bounds the publishes awaiting their acknowledgement.
	asyncWindow = 1024
	// serialGap separates serial round trips, so the consumer's next pull
	// request is waiting at the server when a message is published, as an
	// idle runner's is.
	serialGap = time.Millisecond
	// rawFetchWait is the pull requests' wait when the queue is empty.
	rawFetchWait = 500 * time.Millisecond
)

// runRaw measures the bus alone on an embedded NATS of its own, whose
// streams are created by bus.Open exactly as the fleet's are: each
// scenario uses its own pool (subject and durable consumer) of the
// file-store work-queue jobs stream.
func (r *runner) runRaw(ctx context.Context, want map[string]bool) ([]Result, error) {
	srv, err := embedded.Start(embedded.Options{Host: "127.0.0.1", StoreDir: filepath.Join(r.dir, "raw", "jetstream"),
		ServerName: "supervisor-bench-raw"})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	b, err := bus.Open(ctx, srv.URL(), "supervisor-bench-raw", bus.Config{}, r.cfg.Log, bus.InProcess(srv))
	if err != nil {
		return nil, err
	}
	defer b.Close()

	var out []Result
	for _, s := range []string{ScenarioRaw, ScenarioRawFetch1, ScenarioRawSerial} {
		if !want[s] {
			continue
		}
		var res Result
		var err error
		if s == ScenarioRawSerial {
			res, err = r.rawSerial(ctx, b)
		} else {
			res, err = r.rawBurst(ctx, b, s)
		}
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s, err)
		}
		r.progress("%s: %d msgs in %.2fs", s, res.Count, res.WallSeconds)
		out = append(out, res)
	}
	return out, nil
}

// stamp returns a payload carrying the time since the epoch.
func (r *runner) stamp() []byte {
	data := make([]byte, r.cfg.PayloadBytes)
	binary.BigEndian.PutUint64(data, uint64(time.Since(r.epoch)))
	return data
}

// since returns how long ago a payload was stamped.
func (r *runner) since(data []byte) time.Duration {
	if len(data) < 8 {
		return 0
	}
	return time.Since(r.epoch) - time.Duration(binary.BigEndian.Uint64(data))
}

// rawBurst publishes RawMessages asynchronously while a consumer takes
// them: with Consume and Ack for the baseline, or with the runners' own
// pull loop (bus.Pull) for raw-fetch1. The clock runs from the first
// publish to the last message received.
func (r *runner) rawBurst(ctx context.Context, b *bus.Bus, scenario string) (Result, error) {
	n := r.cfg.RawMessages
	pool := scenario
	fetch1 := scenario == ScenarioRawFetch1
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	r.progress("%s: %d messages of %d bytes", scenario, n, r.cfg.PayloadBytes)
	cons, err := b.JobConsumer(ctx, protocol.KindAgent, pool)
	if err != nil {
		return Result{}, err
	}
	lat := newSamples(n)
	done := make(chan struct{})

	mem := startMem()
	var stopConsumer func() error
	if fetch1 {
		stop, stopPull := context.WithCancel(ctx)
		pulled := make(chan error, 1)
		go func() {
			pulled <- b.Pull(stop, bus.PullOptions{
				Kind: protocol.KindAgent, Pools: []string{pool}, Concurrency: r.cfg.Concurrency,
				FetchWait: rawFetchWait, DrainTimeout: 10 * time.Second, Log: r.cfg.Log,
			}, func(_ context.Context, d *bus.Delivery) bus.Disposition {
				if lat.add(r.since(d.Msg.Data())) {
					close(done)
				}
				return bus.Ack()
			})
		}()
		stopConsumer = func() error { stopPull(); return <-pulled }
	} else {
		cc, err := cons.Consume(func(m jetstream.Msg) {
			d := r.since(m.Data())
			_ = m.Ack()
			if lat.add(d) {
				close(done)
			}
		}, jetstream.PullMaxMessages(rawBatch))
		if err != nil {
			return Result{}, err
		}
		stopConsumer = func() error { cc.Stop(); return nil }
	}

	start := time.Now()
	published := make(chan error, 1)
	go func() { published <- r.publishBurst(ctx, b, pool, n) }()
	pubDone := false
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case err := <-published:
			pubDone = true
			published = nil
			if err != nil {
				_ = stopConsumer()
				return Result{}, err
			}
		case <-ctx.Done():
			_ = stopConsumer()
			return Result{}, fmt.Errorf("%d of %d messages consumed before %w", lat.count(), n, ctx.Err())
		}
	}
	wall := time.Since(start)
	if !pubDone {
		if err := <-published; err != nil {
			_ = stopConsumer()
			return Result{}, err
		}
	}
	memory := mem.stop(n)
	if err := stopConsumer(); err != nil {
		return Result{}, err
	}
	if err := drained(ctx, cons); err != nil {
		return Result{}, err
	}

	p50, p99 := quantiles(lat.recorded())
	res := Result{
		Scenario: scenario, Unit: "msg", Count: n, WallSeconds: wall.Seconds(), Throughput: float64(n) / wall.Seconds(),
		Latency: "publish→consume", LatencyP50Micros: p50, LatencyP99Micros: p99, Memory: memory,
	}
	if fetch1 {
		res.Description = fmt.Sprintf("the same burst consumed like the runners: bus.Pull, Fetch(1) per free slot (%d slots), DoubleAck", r.cfg.Concurrency)
	} else {
		res.Description = fmt.Sprintf("burst of %d-byte messages, async publish, file-store work-queue stream; Consume (batch %d) + Ack", r.cfg.PayloadBytes, rawBatch)
	}
	return res, nil
}

// publishBurst publishes n stamped messages asynchronously, at most
// asyncWindow awaiting acknowledgement, and waits for every acknowledgement.
func (r *runner) publishBurst(ctx context.Context, b *bus.Bus, pool string, n int) error {
	var mu sync.Mutex
	failed, firstErr := 0, error(nil)
	js, err := jetstream.New(b.NC, jetstream.WithPublishAsyncMaxPending(asyncWindow),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			mu.Lock()
			defer mu.Unlock()
			if failed++; firstErr == nil {
				firstErr = err
			}
		}))
	if err != nil {
		return err
	}
	subject := protocol.AgentJobSubject(pool)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: r.stamp()}, jetstream.WithStallWait(10*time.Second)); err != nil {
			return fmt.Errorf("publish message %d of %d: %w", i+1, n, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return fmt.Errorf("waiting for publish acknowledgements: %w", ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	if failed > 0 {
		return fmt.Errorf("%d of %d publishes failed: %w", failed, n, firstErr)
	}
	return nil
}

// drained waits until the consumer has nothing pending or unacknowledged:
// every message was taken and acked (and so removed from the work queue).
func drained(ctx context.Context, cons jetstream.Consumer) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consumer %s: %d messages pending and %d unacknowledged after the run",
				info.Name, info.NumPending, info.NumAckPending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rawSerial sends messages one at a time, published like the coordinator
// publishes a job (bus.PublishJob: synchronous, with a de-duplication id),
// to a consumer idling in Fetch(1) that double-acks each one, as a runner
// does. Latency is publish→receipt; the wall time is the sum of the round
// trips (publish until the ack is confirmed), without the gaps between them.
func (r *runner) rawSerial(ctx context.Context, b *bus.Bus) (Result, error) {
	n := min(r.cfg.RawMessages, MaxSerialMessages)
	pool := ScenarioRawSerial
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	r.progress("%s: %d messages one at a time", ScenarioRawSerial, n)
	cons, err := b.JobConsumer(ctx, protocol.KindAgent, pool)
	if err != nil {
		return Result{}, err
	}
	lat := newSamples(n)
	type receipt struct {
		at  time.Time
		err error
	}
	got := make(chan receipt, 1)
	stop, stopFetch := context.WithCancel(ctx)
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		send := func(rc receipt) bool {
			select {
			case got <- rc:
				return true
			case <-stop.Done():
				return false
			}
		}
		for stop.Err() == nil {
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(rawFetchWait))
			if err != nil {
				send(receipt{err: err})
				return
			}
			for m := range batch.Messages() {
				lat.add(r.since(m.Data()))
				err := m.DoubleAck(stop)
				if !send(receipt{at: time.Now(), err: err}) {
					return
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				send(receipt{err: err})
				return
			}
		}
	}()
	defer func() { stopFetch(); <-fetched }()

	mem := startMem()
	var busy time.Duration
	for i := 0; i < n; i++ {
		time.Sleep(serialGap)
		t := time.Now()
		if err := b.PublishJob(ctx, protocol.KindAgent, pool, fmt.Sprintf("serial-%d", i), r.stamp()); err != nil {
			return Result{}, err
		}
		select {
		case rc := <-got:
			if rc.err != nil {
				return Result{}, fmt.Errorf("consume message %d of %d: %w", i+1, n, rc.err)
			}
			busy += rc.at.Sub(t)
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%d of %d messages consumed before %w", i, n, ctx.Err())
		}
	}
	memory := mem.stop(n)
	p50, p99 := quantiles(lat.recorded())
	return Result{
		Scenario: ScenarioRawSerial, Unit: "msg", Count: n, WallSeconds: busy.Seconds(), Throughput: float64(n) / busy.Seconds(),
		Description: "one at a time: bus.PublishJob (sync, msg id) to an idle Fetch(1) consumer, DoubleAck; wall = sum of round trips",
		Latency:     "publish→consume, unloaded", LatencyP50Micros: p50, LatencyP99Micros: p99, Memory: memory,
	}, nil
}
