package service

// The fleet: the workers and gate runners that announced themselves in
// the runners bucket recently (their entries expire when not renewed).

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// fleet lists the runners seen recently, sorted by kind then host, with
// their gate cache lookups summed. An entry that does not decode is
// logged and left out.
func (s *Service) fleet(ctx context.Context, _ api.IDRequest) (api.FleetResponse, error) {
	kv := s.bus.Runners
	if kv == nil {
		return api.FleetResponse{}, api.Internal("this coordinator has no %s bucket", protocol.BucketRunners)
	}
	runners, err := s.listRunners(ctx, kv)
	if err != nil {
		return api.FleetResponse{}, err
	}
	out := api.FleetResponse{Runners: []protocol.RunnerInfo{}}
	for _, r := range runners {
		out.Runners = append(out.Runners, r)
		out.CacheHits += r.Stats.CacheHits
		out.CacheMisses += r.Stats.CacheMisses
	}
	return out, nil
}

// listRunners reads every current entry of the runners bucket kv, sorted
// by kind then host.
func (s *Service) listRunners(ctx context.Context, kv jetstream.KeyValue) ([]protocol.RunnerInfo, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("fleet: read the %s bucket: %w", protocol.BucketRunners, err)
	}
	defer w.Stop() //nolint:errcheck // nothing to do about it
	var out []protocol.RunnerInfo
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				sortRunners(out)
				return out, nil
			}
			var info protocol.RunnerInfo
			if err := json.Unmarshal(e.Value(), &info); err != nil {
				s.log.Warn("fleet: an entry of the runners bucket does not decode; left out", "key", e.Key(), "err", err)
				continue
			}
			out = append(out, info)
		}
	}
}

func sortRunners(rs []protocol.RunnerInfo) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Kind != rs[j].Kind {
			return rs[i].Kind < rs[j].Kind
		}
		return rs[i].Host < rs[j].Host
	})
}
