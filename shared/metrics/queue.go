package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// scrapeTimeout bounds what one scrape asks JetStream or the coordinator.
const scrapeTimeout = 5 * time.Second

// queueCollector reports the job queue per kind and pool from JetStream at
// scrape time: the SUP_JOBS stream's subjects and its pull consumers.
type queueCollector struct {
	mu  sync.Mutex
	js  jetstream.JetStream
	now func() time.Time

	depth, inProgress, oldest *prometheus.Desc
}

var queues = &queueCollector{
	now: time.Now,
	depth: prometheus.NewDesc(Namespace+"_job_queue_depth",
		"Jobs waiting for their first delivery, by kind and pool (JetStream consumer info at scrape time).",
		[]string{"kind", "pool"}, nil),
	inProgress: prometheus.NewDesc(Namespace+"_job_queue_in_progress",
		"Jobs delivered and not yet acknowledged (running, parked on a breaker, or waiting for redelivery), by kind and pool.",
		[]string{"kind", "pool"}, nil),
	oldest: prometheus.NewDesc(Namespace+"_job_queue_oldest_age_seconds",
		"Age of the oldest job waiting for its first delivery, by kind and pool (0 when none waits).",
		[]string{"kind", "pool"}, nil),
}

// SetJobQueue makes this process report the job queue read through js
// (the coordinator does; runners do not, so a fleet reports it once per
// coordinator). The returned function stops it, unless another js was
// set since.
func SetJobQueue(js jetstream.JetStream) (unset func()) {
	queues.mu.Lock()
	queues.js = js
	queues.mu.Unlock()
	return func() {
		queues.mu.Lock()
		if queues.js == js {
			queues.js = nil
		}
		queues.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.inProgress
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	js := c.js
	c.mu.Unlock()
	if js == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	stats, err := readQueues(ctx, js, c.now())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.depth, err)
		return
	}
	for _, q := range stats {
		kind, pool := q.Kind, Bounded("pool", q.Pool)
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(q.Waiting), kind, pool)
		ch <- prometheus.MustNewConstMetric(c.inProgress, prometheus.GaugeValue, float64(q.InProgress), kind, pool)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, Seconds(q.OldestAge), kind, pool)
	}
}

// QueueStats is one pool's job queue.
type QueueStats struct {
	Kind, Pool string
	// Waiting jobs have not been delivered yet; InProgress ones were and
	// are not acknowledged.
	Waiting, InProgress uint64
	// OldestAge is the age of the oldest waiting job (0: none waits).
	OldestAge time.Duration
}

// jobsPrefix is what every job subject starts with (sup.job.<kind>.<pool>).
const jobsPrefix = "sup.job."

// readQueues reads every pool's queue: from its consumer where a runner
// created one, from the stream's subject counts where none did yet.
func readQueues(ctx context.Context, js jetstream.JetStream, now time.Time) ([]QueueStats, error) {
	stream, err := js.Stream(ctx, protocol.StreamJobs)
	if err != nil {
		return nil, fmt.Errorf("job queue: stream %s: %w", protocol.StreamJobs, err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(jobsPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("job queue: stream info: %w", err)
	}
	bySubject := map[string]*QueueStats{}
	var order []string
	add := func(subject string) *QueueStats {
		if q, ok := bySubject[subject]; ok {
			return q
		}
		kind, pool, ok := strings.Cut(strings.TrimPrefix(subject, jobsPrefix), ".")
		if !ok || !strings.HasPrefix(subject, jobsPrefix) {
			return nil
		}
		q := &QueueStats{Kind: kind, Pool: pool}
		bySubject[subject] = q
		order = append(order, subject)
		return q
	}
	withConsumer := map[string]bool{}
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		q := add(ci.Config.FilterSubject)
		if q == nil {
			continue
		}
		withConsumer[ci.Config.FilterSubject] = true
		q.Waiting, q.InProgress = ci.NumPending, uint64(max(ci.NumAckPending, 0))
		if q.Waiting > 0 {
			q.OldestAge = oldestAge(ctx, stream, ci.Config.FilterSubject, ci.Delivered.Stream+1, now)
		}
	}
	if err := lister.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("job queue: list consumers: %w", err)
	}
	for subject, n := range info.State.Subjects {
		if withConsumer[subject] {
			continue
		}
		if q := add(subject); q != nil {
			q.Waiting = n
			if n > 0 {
				q.OldestAge = oldestAge(ctx, stream, subject, 1, now)
			}
		}
	}
	out := make([]QueueStats, 0, len(order))
	for _, s := range order {
		out = append(out, *bySubject[s])
	}
	return out, nil
}

// oldestAge is the age of the first message on subject from sequence seq
// on (0 if there is none or it cannot be read).
func oldestAge(ctx context.Context, stream jetstream.Stream, subject string, seq uint64, now time.Time) time.Duration {
	m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		return 0
	}
	return max(now.Sub(m.Time), 0)
}
