// Package backends opens the state store a binary was configured for:
// Redis when a URL is given, JetStream KV (the embedded default) otherwise.
package backends

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
)

// Open returns a Redis-backed store when redisURL is set, else a store in
// the JetStream KV bucket reached through js.
func Open(ctx context.Context, redisURL string, js jetstream.JetStream, replicas int) (state.Store, error) {
	if redisURL != "" {
		return redisstate.Open(ctx, redisURL)
	}
	return kvstate.New(ctx, js, kvstate.WithReplicas(max(replicas, 1)))
}
