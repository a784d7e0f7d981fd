package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Snapshots creates or updates, and returns, the object store of the
// coordinator's snapshots (protocol.BucketSnapshots), with the bus's
// replicas (never fewer than it has) and file storage. Its objects do not
// expire: the coordinator deletes the old ones itself. Only the
// coordinator calls it; runners never see the bucket.
func (b *Bus) Snapshots(ctx context.Context) (jetstream.ObjectStore, error) {
	var os jetstream.ObjectStore
	err := b.retryJS(ctx, "create object store "+protocol.BucketSnapshots, func(ctx context.Context) error {
		replicas := b.Cfg.Replicas
		if s, err := b.JS.Stream(ctx, "OBJ_"+protocol.BucketSnapshots); err == nil && s.CachedInfo().Config.Replicas > replicas {
			replicas = s.CachedInfo().Config.Replicas
		}
		var err error
		os, err = b.JS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      protocol.BucketSnapshots,
			Description: "Supervisor coordinator's snapshots of its fold of the event log",
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		return err
	})
	return os, err
}
