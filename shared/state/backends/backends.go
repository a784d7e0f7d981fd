// Package backends opens the state store a binary was configured for:
// Redis when a URL is given, JetStream KV (the embedded default) otherwise.
package backends

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

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
func Open(ctx context.Context, redisURL string, js jetstream.JetStream, replicas int, opts ...redisstate.Option) (state.Store, error) {
	if redisURL != "" {
		if js == nil {
			return redisstate.Open(ctx, redisURL, opts...)
		}
		kv, err := kvstate.New(ctx, js, kvstate.WithReplicas(max(replicas, 1)))
		if err != nil {
			return nil, fmt.Errorf("state: the bucket of fencing epochs: %w", err)
		}
		return redisstate.Open(ctx, redisURL, append(append([]redisstate.Option(nil), opts...), redisstate.WithEpochs(kv))...)
	}
	return kvstate.New(ctx, js, kvstate.WithReplicas(max(replicas, 1)))
}

// Attach is Open for a client that may not create buckets (a worker or
// gate runner with NATS credentials): it binds the state bucket the
// coordinator created, and fails with jetstream.ErrBucketNotFound while
// there is none yet.
func Attach(ctx context.Context, redisURL string, js jetstream.JetStream, opts ...redisstate.Option) (state.Store, error) {
	kv, err := kvstate.Attach(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if redisURL != "" {
		return redisstate.Open(ctx, redisURL, append(opts, redisstate.WithEpochs(kv))...)
	}
	return kv, nil
}
