// Package backends opens the state store a binary was configured for:
// Redis when a URL is given, JetStream KV (the embedded default) otherwise.
package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
)

// Open returns a Redis-backed store when redisURL is set, else a store in
// the JetStream KV bucket reached through js. A Redis store draws its
// fencing epochs from that bucket (redisstate.WithEpochs), so its tokens
// keep increasing if Redis loses its data. With Redis and a nil js the
// tokens restart at 1 after such a loss. opts are the Redis connection's
// TLS and password settings (redisstate.WithTLS, WithPasswordFile).
// While JetStream cannot answer yet (a cluster forming or electing a
// leader), creating the bucket is retried with back-off, and said so on
// log, until ctx ends; its errors are marked ErrBucket.
func Open(ctx context.Context, redisURL string, js jetstream.JetStream, replicas int, log *slog.Logger, opts ...redisstate.Option) (state.Store, error) {
	if redisURL != "" {
		if js == nil {
			return redisstate.Open(ctx, redisURL, opts...)
		}
		kv, err := newBucket(ctx, js, replicas, log)
		if err != nil {
			return nil, fmt.Errorf("state: the bucket of fencing epochs: %w", err)
		}
		return redisstate.Open(ctx, redisURL, append(append([]redisstate.Option(nil), opts...), redisstate.WithEpochs(kv))...)
	}
	return newBucket(ctx, js, replicas, log)
}

// bucketAttempt bounds one attempt at creating the state bucket: a
// cluster without a quorum may not answer at all.
const bucketAttempt = 10 * time.Second

// ErrBucket marks the errors of Open and Attach that concern the state
// bucket in JetStream, as opposed to reaching Redis.
var ErrBucket = errors.New("the state bucket")

// transient reports whether err, from a JetStream request, may clear by
// waiting: no answer in time (a cluster without a quorum, or a request
// the server dropped; Denied tells the latter), no responder yet, no meta
// leader yet, or the connection reconnecting. A refusal that names its
// reason, JetStream not enabled, or a closed connection is not.
func transient(err error) bool {
	if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) {
		return apiErr.ErrorCode == bus.ErrCodeClusterNotAvailable
	}
	for _, target := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		jetstream.ErrNoStreamResponse, nats.ErrDisconnected, nats.ErrConnectionReconnecting} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// Waitable reports whether err, from Open or Attach, concerns the state
// bucket and may clear by waiting: the bucket not created yet
// (jetstream.ErrBucketNotFound), or JetStream not answering yet.
func Waitable(err error) bool {
	return errors.Is(err, ErrBucket) && (errors.Is(err, jetstream.ErrBucketNotFound) || transient(err))
}

// newBucket creates (or binds) the state bucket, retrying while JetStream
// cannot answer yet (transient), unless the connection's permissions
// refused the request (bus.Denied).
func newBucket(ctx context.Context, js jetstream.JetStream, replicas int, log *slog.Logger) (*kvstate.Store, error) {
	if log == nil {
		log = slog.Default()
	}
	delay := time.Duration(0)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, bucketAttempt)
		kv, err := kvstate.New(actx, js, kvstate.WithReplicas(max(replicas, 1)))
		cancel()
		if err == nil {
			return kv, nil
		}
		err = fmt.Errorf("%w: %w", ErrBucket, err)
		if d := bus.Denied(js.Conn()); d != nil {
			return nil, fmt.Errorf("%w: %w", ErrBucket, d)
		}
		if ctx.Err() != nil || !transient(err) {
			return nil, err
		}
		delay = bus.DefaultBackoff.Next(delay)
		log.Warn("state: JetStream cannot create the state bucket yet; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
}

// Attach is Open for a client that may not create buckets (a worker or
// gate runner with NATS credentials): it binds the state bucket the
// coordinator created, and fails with jetstream.ErrBucketNotFound while
// there is none yet.
func Attach(ctx context.Context, redisURL string, js jetstream.JetStream, opts ...redisstate.Option) (state.Store, error) {
	kv, err := kvstate.Attach(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("state: %w: %w", ErrBucket, err)
	}
	if redisURL != "" {
		return redisstate.Open(ctx, redisURL, append(opts, redisstate.WithEpochs(kv))...)
	}
	return kv, nil
}
