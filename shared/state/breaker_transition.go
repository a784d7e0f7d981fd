package state

import "time"

// This file holds the pure circuit-breaker transitions. A breaker is meant
// to track repeated failures of one scope (an agent model, a gate, a
// repository) so that work waits instead of burning attempts against
// something that is down; the coordinator does not consult breakers yet.
// Backends read a Breaker, apply Allow or Report, and write the result back
// atomically, so every backend behaves the same way.
//
// Semantics:
//
//   - Closed: everything is allowed. Failures are kept as a sliding window of
//     timestamps; those older than Window are pruned on each report. When
//     Failures of them fall inside Window the breaker opens. A success while
//     closed prunes the window but does not clear it: a scope failing often
//     with successes in between (a flapping model, a flaky gate) still trips
//     the breaker, which a reset-on-success counter would never do.
//   - Open: everything is refused until OpenedAt+CoolDown. The first Allow
//     after that turns the breaker half-open and is handed the single probe.
//     Reports while open (stragglers started before it opened) are ignored:
//     only a probe closes a breaker.
//   - Half-open: everyone but the probe is refused. If the probe does not
//     report within CoolDown (its worker crashed), the next Allow is handed
//     the probe again, so a lost probe cannot wedge the breaker. Any success
//     report closes the breaker and clears its failures; any failure report
//     reopens it with OpenedAt=now. Reports do not say who sent them, so a
//     straggler's report while half-open counts as the probe's.

// CurrentTime returns p.Now(), or time.Now() when p.Now is nil.
func (p BreakerPolicy) CurrentTime() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// WithDefaults returns p with non-positive fields set from
// DefaultBreakerPolicy: the policy Allow and Report apply.
func (p BreakerPolicy) WithDefaults() BreakerPolicy {
	d := DefaultBreakerPolicy()
	if p.Failures <= 0 {
		p.Failures = d.Failures
	}
	if p.Window <= 0 {
		p.Window = d.Window
	}
	if p.CoolDown <= 0 {
		p.CoolDown = d.CoolDown
	}
	return p
}

// Normalized returns b with the zero State spelled out as BreakerClosed.
// A zero Breaker is a closed one.
func (b Breaker) Normalized() Breaker {
	if b.State == "" {
		b.State = BreakerClosed
	}
	return b
}

// Idle reports whether b is closed with no failures on record, which is
// equivalent to the zero Breaker; backends need not store an idle breaker.
func (b Breaker) Idle() bool {
	return b.Normalized().State == BreakerClosed && len(b.FailureTimes) == 0 &&
		b.OpenedAt.IsZero() && b.ProbeStartedAt.IsZero()
}

// Equal reports whether b and o describe the same state (times compared with
// time.Time.Equal, an empty State equal to BreakerClosed). Backends use it to
// skip writes that would change nothing.
func (b Breaker) Equal(o Breaker) bool {
	b, o = b.Normalized(), o.Normalized()
	if b.State != o.State || !b.OpenedAt.Equal(o.OpenedAt) ||
		!b.ProbeStartedAt.Equal(o.ProbeStartedAt) || len(b.FailureTimes) != len(o.FailureTimes) {
		return false
	}
	for i := range b.FailureTimes {
		if !b.FailureTimes[i].Equal(o.FailureTimes[i]) {
			return false
		}
	}
	return true
}

// Allow decides whether work may start at now and returns the breaker's next
// state with the decision. Non-positive policy fields take
// DefaultBreakerPolicy's values. b is not modified.
func (b Breaker) Allow(now time.Time, p BreakerPolicy) (Breaker, Decision) {
	p = p.WithDefaults()
	b = b.clone().Normalized()
	switch b.State {
	case BreakerOpen:
		if until := b.OpenedAt.Add(p.CoolDown); now.Before(until) {
			return b, Decision{RetryAt: until, State: BreakerOpen}
		}
		return b.handOutProbe(now)
	case BreakerHalfOpen:
		if until := b.ProbeStartedAt.Add(p.CoolDown); now.Before(until) {
			return b, Decision{RetryAt: until, State: BreakerHalfOpen}
		}
		// The probe never reported: hand it out again.
		return b.handOutProbe(now)
	default:
		return b, Decision{Allowed: true, State: BreakerClosed}
	}
}

func (b Breaker) handOutProbe(now time.Time) (Breaker, Decision) {
	b.State = BreakerHalfOpen
	b.ProbeStartedAt = now
	return b, Decision{Allowed: true, Probe: true, State: BreakerHalfOpen}
}

// Report records the outcome of work finishing at now and returns the
// breaker's next state. Non-positive policy fields take
// DefaultBreakerPolicy's values. b is not modified.
func (b Breaker) Report(now time.Time, p BreakerPolicy, success bool) Breaker {
	p = p.WithDefaults()
	b = b.clone().Normalized()
	switch b.State {
	case BreakerOpen:
		return b
	case BreakerHalfOpen:
		if success {
			return Breaker{State: BreakerClosed}
		}
		return Breaker{State: BreakerOpen, OpenedAt: now}
	default:
		b.FailureTimes = pruneFailures(b.FailureTimes, now.Add(-p.Window))
		if success {
			return b
		}
		b.FailureTimes = append(b.FailureTimes, now)
		if len(b.FailureTimes) >= p.Failures {
			return Breaker{State: BreakerOpen, OpenedAt: now}
		}
		return b
	}
}

// pruneFailures drops failures at or before cutoff, keeping order.
func pruneFailures(times []time.Time, cutoff time.Time) []time.Time {
	kept := times[:0]
	for _, t := range times {
		if t.After(cutoff) {
			kept = append(kept, t)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// clone copies b so transitions never alias the caller's FailureTimes.
func (b Breaker) clone() Breaker {
	if b.FailureTimes != nil {
		b.FailureTimes = append([]time.Time(nil), b.FailureTimes...)
	}
	return b
}
