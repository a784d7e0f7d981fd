package service

import (
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/state"
)

// breakerInfo counts only the failures within the window and says until
// when a breaker holds jobs back, and whether an open one's probe is due.
func TestBreakerInfo(t *testing.T) {
	p := state.BreakerPolicy{Failures: 5, Window: time.Minute, CoolDown: 30 * time.Second}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }

	closed := breakerInfo("repo:r", state.Breaker{State: state.BreakerClosed,
		FailureTimes: []time.Time{ago(2 * time.Minute), ago(50 * time.Second), ago(10 * time.Second)}}, p, now)
	if closed.State != "closed" || closed.Failures != 2 || closed.LastFailure == nil || !closed.LastFailure.Equal(ago(10*time.Second)) ||
		closed.Until != nil || closed.OpenedAt != nil || closed.ProbeDue {
		t.Errorf("closed: %+v", closed)
	}

	open := breakerInfo("agent:x", state.Breaker{State: state.BreakerOpen, OpenedAt: ago(10 * time.Second)}, p, now)
	if open.State != "open" || open.Failures != 0 || open.Until == nil || !open.Until.Equal(now.Add(20*time.Second)) || open.ProbeDue {
		t.Errorf("open: %+v", open)
	}
	due := breakerInfo("agent:x", state.Breaker{State: state.BreakerOpen, OpenedAt: ago(time.Minute)}, p, now)
	if !due.ProbeDue || !due.Until.Equal(ago(30*time.Second)) {
		t.Errorf("open past its cool-down: %+v", due)
	}

	half := breakerInfo("gate:vet:00", state.Breaker{State: state.BreakerHalfOpen, OpenedAt: ago(time.Minute),
		ProbeStartedAt: ago(5 * time.Second)}, p, now)
	if half.State != "half_open" || half.ProbeStartedAt == nil || !half.Until.Equal(now.Add(25*time.Second)) || half.ProbeDue {
		t.Errorf("half-open: %+v", half)
	}
}
