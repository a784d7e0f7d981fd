package api

import (
	"context"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// BreakerWait is a job a runner holds back, unrun, because the circuit
// breaker of Scope is open; it runs when the breaker lets it through, at
// Until at the earliest.
type BreakerWait struct {
	Scope string    `json:"scope"`
	Until time.Time `json:"until"`
	// Host is the runner holding the job.
	Host string `json:"host,omitempty"`
}

// BreakerInfo is one circuit breaker as the breakers API reports it.
type BreakerInfo struct {
	// Scope names what the breaker guards: agent:COMMAND[:MODEL],
	// gate:NAME:DIGEST or repo:ID.
	Scope string `json:"scope"`
	// State is closed, open or half_open. An open breaker whose cool-down
	// is over turns half-open when a job next asks it (ProbeDue).
	State string `json:"state"`
	// Failures counts the failures within the policy's window; an open
	// breaker keeps none (it opened on them).
	Failures int `json:"failures"`
	// LastFailure is the latest of them.
	LastFailure *time.Time `json:"last_failure,omitempty"`
	// OpenedAt is when the breaker last opened.
	OpenedAt *time.Time `json:"opened_at,omitempty"`
	// ProbeStartedAt is when a half-open breaker let its probe through.
	ProbeStartedAt *time.Time `json:"probe_started_at,omitempty"`
	// Until is when an open breaker lets a probe through, or when a
	// half-open one hands its probe out again if it has not reported.
	Until *time.Time `json:"until,omitempty"`
	// ProbeDue is true for an open breaker whose cool-down is over.
	ProbeDue bool `json:"probe_due,omitempty"`
}

// BreakerPolicy is the policy the coordinator reads the breakers with
// (its --breaker-* flags; the runners should have the same).
type BreakerPolicy struct {
	Failures        int     `json:"failures"`
	WindowSeconds   float64 `json:"window_seconds"`
	CoolDownSeconds float64 `json:"cool_down_seconds"`
}

// BreakersResponse lists the breakers with something on record, by scope.
type BreakersResponse struct {
	Breakers []BreakerInfo `json:"breakers"`
	Policy   BreakerPolicy `json:"policy"`
}

// BreakerResetRequest asks for a breaker to be closed and its failures
// forgotten; By names who asks (for the coordinator's log).
type BreakerResetRequest struct {
	Scope string `json:"scope"`
	By    string `json:"by,omitempty"`
}

// BreakerResetResponse is the breaker as it was before the reset.
type BreakerResetResponse struct {
	Was BreakerInfo `json:"was"`
}

// Breakers lists the circuit breakers with something on record.
func (c *Client) Breakers(ctx context.Context) (BreakersResponse, error) {
	return call[BreakersResponse](ctx, c, protocol.APIBreakers, IDRequest{})
}

// BreakerReset closes a circuit breaker; a scope with nothing on record is
// a 404.
func (c *Client) BreakerReset(ctx context.Context, req BreakerResetRequest) (BreakerResetResponse, error) {
	return call[BreakerResetResponse](ctx, c, protocol.APIBreakerReset, req)
}
