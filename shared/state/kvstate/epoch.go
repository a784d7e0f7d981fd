package kvstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

func epochKey(name string) string { return "epoch." + encodeKey(name) }

// NextEpoch increments the durable counter called name (stored under
// epoch.<name> in the bucket) and returns its new value, 1 the first time.
// It is a compare-and-swap, so concurrent callers each get a distinct
// value. A Redis store draws its fencing epochs from it (see
// redisstate.WithEpochs).
func (s *Store) NextEpoch(ctx context.Context, name string) (uint64, error) {
	op := "next epoch " + strconv.Quote(name)
	key := epochKey(name)
	for attempt := 1; attempt <= maxCASAttempts; attempt++ {
		e, err := s.kv.Get(ctx, key)
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = s.kv.Create(ctx, key, []byte("1"))
			rev = 1
		case err != nil:
			return 0, fail(ctx, op, err)
		default:
			cur, perr := strconv.ParseUint(string(e.Value()), 10, 64)
			if perr != nil {
				return 0, fmt.Errorf("kvstate: %s: stored value %q: %w", op, e.Value(), perr)
			}
			rev = cur + 1
			_, err = s.kv.Update(ctx, key, []byte(strconv.FormatUint(rev, 10)), e.Revision())
		}
		if err == nil {
			return rev, nil
		}
		if !conflict(err) {
			return 0, fail(ctx, op, err)
		}
	}
	return 0, fmt.Errorf("kvstate: %s: still conflicting after %d attempts", op, maxCASAttempts)
}
