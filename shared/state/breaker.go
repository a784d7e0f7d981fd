package state

import "time"

// BreakerState is the position of a circuit breaker.
type BreakerState string

// Breaker positions.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half_open"
)

// BreakerPolicy sets when a breaker opens and when it may probe again. The
// default opens after 5 failures within 300 s and lets one probe through
// 300 s after opening.
type BreakerPolicy struct {
	// Failures within Window that open the breaker.
	Failures int
	// Window over which failures are counted.
	Window time.Duration
	// CoolDown is how long an open breaker refuses work before one probe.
	CoolDown time.Duration
	// Now returns the current time; nil means time.Now. Tests set it.
	Now func() time.Time
}

// DefaultBreakerPolicy is the default: 5 failures in 300 s, 300 s cool-down.
func DefaultBreakerPolicy() BreakerPolicy {
	return BreakerPolicy{Failures: 5, Window: 300 * time.Second, CoolDown: 300 * time.Second}
}

// Breaker is the stored state of one circuit breaker. Backends persist it as
// JSON and change it only through the pure transitions below, so both
// backends behave identically.
type Breaker struct {
	State BreakerState `json:"state"`
	// FailureTimes are the failures inside the current window, oldest first.
	FailureTimes []time.Time `json:"failure_times,omitempty"`
	// OpenedAt is when the breaker last opened.
	OpenedAt time.Time `json:"opened_at,omitempty"`
	// ProbeStartedAt is when the half-open probe was handed out.
	ProbeStartedAt time.Time `json:"probe_started_at,omitempty"`
}

// Decision is BreakerAllow's answer.
type Decision struct {
	Allowed bool
	// Probe is true for the single caller allowed through a half-open breaker.
	Probe bool
	// RetryAt is when a refused caller may ask again.
	RetryAt time.Time
	State   BreakerState
}

// ScopedBreaker is a breaker with the scope it guards, as BreakerList
// returns it.
type ScopedBreaker struct {
	Scope string
	Breaker
}
