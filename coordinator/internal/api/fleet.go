package api

import (
	"context"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// FleetResponse lists the workers and gate runners seen recently, sorted
// by kind then host, and their gate cache lookups summed.
type FleetResponse struct {
	Runners     []protocol.RunnerInfo `json:"runners"`
	CacheHits   uint64                `json:"cache_hits"`
	CacheMisses uint64                `json:"cache_misses"`
}

// Fleet lists the runners seen recently.
func (c *Client) Fleet(ctx context.Context) (FleetResponse, error) {
	return call[FleetResponse](ctx, c, protocol.APIFleet, IDRequest{})
}
