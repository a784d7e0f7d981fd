package state

import (
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func testPolicy() BreakerPolicy {
	return BreakerPolicy{Failures: 3, Window: time.Minute, CoolDown: 30 * time.Second}
}

func TestBreakerAllow(t *testing.T) {
	p := testPolicy()
	tests := []struct {
		name string
		in   Breaker
		now  time.Time
		want Breaker
		dec  Decision
	}{
		{
			name: "zero breaker is closed and allows",
			in:   Breaker{},
			now:  at(0),
			want: Breaker{State: BreakerClosed},
			dec:  Decision{Allowed: true, State: BreakerClosed},
		},
		{
			name: "closed with failures allows and keeps them",
			in:   Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(time.Second)}},
			now:  at(2 * time.Second),
			want: Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(time.Second)}},
			dec:  Decision{Allowed: true, State: BreakerClosed},
		},
		{
			name: "open refuses during cool-down",
			in:   Breaker{State: BreakerOpen, OpenedAt: at(0)},
			now:  at(29 * time.Second),
			want: Breaker{State: BreakerOpen, OpenedAt: at(0)},
			dec:  Decision{RetryAt: at(30 * time.Second), State: BreakerOpen},
		},
		{
			name: "open after cool-down hands out the probe",
			in:   Breaker{State: BreakerOpen, OpenedAt: at(0)},
			now:  at(30 * time.Second),
			want: Breaker{State: BreakerHalfOpen, OpenedAt: at(0), ProbeStartedAt: at(30 * time.Second)},
			dec:  Decision{Allowed: true, Probe: true, State: BreakerHalfOpen},
		},
		{
			name: "half-open refuses while the probe runs",
			in:   Breaker{State: BreakerHalfOpen, OpenedAt: at(0), ProbeStartedAt: at(30 * time.Second)},
			now:  at(40 * time.Second),
			want: Breaker{State: BreakerHalfOpen, OpenedAt: at(0), ProbeStartedAt: at(30 * time.Second)},
			dec:  Decision{RetryAt: at(60 * time.Second), State: BreakerHalfOpen},
		},
		{
			name: "half-open re-issues a probe that never reported",
			in:   Breaker{State: BreakerHalfOpen, OpenedAt: at(0), ProbeStartedAt: at(30 * time.Second)},
			now:  at(60 * time.Second),
			want: Breaker{State: BreakerHalfOpen, OpenedAt: at(0), ProbeStartedAt: at(60 * time.Second)},
			dec:  Decision{Allowed: true, Probe: true, State: BreakerHalfOpen},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dec := tt.in.Allow(tt.now, p)
			if !got.Equal(tt.want) || got.State != tt.want.State {
				t.Errorf("breaker = %+v, want %+v", got, tt.want)
			}
			if dec.Allowed != tt.dec.Allowed || dec.Probe != tt.dec.Probe ||
				dec.State != tt.dec.State || !dec.RetryAt.Equal(tt.dec.RetryAt) {
				t.Errorf("decision = %+v, want %+v", dec, tt.dec)
			}
		})
	}
}

func TestBreakerReport(t *testing.T) {
	p := testPolicy()
	tests := []struct {
		name    string
		in      Breaker
		now     time.Time
		success bool
		want    Breaker
	}{
		{
			name: "first failure is recorded",
			in:   Breaker{},
			now:  at(0),
			want: Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0)}},
		},
		{
			name: "failures below the threshold keep it closed",
			in:   Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0)}},
			now:  at(time.Second),
			want: Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(time.Second)}},
		},
		{
			name: "threshold within the window opens",
			in:   Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(time.Second)}},
			now:  at(2 * time.Second),
			want: Breaker{State: BreakerOpen, OpenedAt: at(2 * time.Second)},
		},
		{
			name: "failures outside the window are pruned and do not count",
			in:   Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(30 * time.Second)}},
			now:  at(61 * time.Second),
			want: Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(30 * time.Second), at(61 * time.Second)}},
		},
		{
			name: "failure exactly one window old is outside it",
			in:   Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(time.Second)}},
			now:  at(time.Minute),
			want: Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(time.Second), at(time.Minute)}},
		},
		{
			name:    "success while closed prunes but does not clear the window",
			in:      Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(50 * time.Second)}},
			now:     at(70 * time.Second),
			success: true,
			want:    Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(50 * time.Second)}},
		},
		{
			name:    "success on a zero breaker stays idle",
			in:      Breaker{},
			now:     at(0),
			success: true,
			want:    Breaker{State: BreakerClosed},
		},
		{
			name:    "success while open is ignored",
			in:      Breaker{State: BreakerOpen, OpenedAt: at(0)},
			now:     at(time.Second),
			success: true,
			want:    Breaker{State: BreakerOpen, OpenedAt: at(0)},
		},
		{
			name: "failure while open is ignored",
			in:   Breaker{State: BreakerOpen, OpenedAt: at(0)},
			now:  at(time.Second),
			want: Breaker{State: BreakerOpen, OpenedAt: at(0)},
		},
		{
			name:    "probe success closes and clears",
			in:      Breaker{State: BreakerHalfOpen, OpenedAt: at(0), ProbeStartedAt: at(30 * time.Second)},
			now:     at(35 * time.Second),
			success: true,
			want:    Breaker{State: BreakerClosed},
		},
		{
			name: "probe failure reopens from now",
			in:   Breaker{State: BreakerHalfOpen, OpenedAt: at(0), ProbeStartedAt: at(30 * time.Second)},
			now:  at(35 * time.Second),
			want: Breaker{State: BreakerOpen, OpenedAt: at(35 * time.Second)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.Report(tt.now, p, tt.success)
			if !got.Equal(tt.want) || got.State != tt.want.State {
				t.Errorf("breaker = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBreakerTransitionsDoNotAlias(t *testing.T) {
	in := Breaker{State: BreakerClosed, FailureTimes: []time.Time{at(0), at(time.Second)}}
	_ = in.Report(at(2*time.Minute), testPolicy(), true) // prunes both
	if len(in.FailureTimes) != 2 || !in.FailureTimes[0].Equal(at(0)) {
		t.Fatalf("Report modified its receiver: %+v", in)
	}
}

func TestBreakerPolicyDefaults(t *testing.T) {
	// A zero policy behaves like DefaultBreakerPolicy: five failures open.
	var b Breaker
	for i := range 4 {
		b = b.Report(at(time.Duration(i)*time.Second), BreakerPolicy{}, false)
	}
	if b.State != BreakerClosed {
		t.Fatalf("opened after 4 failures: %+v", b)
	}
	b = b.Report(at(5*time.Second), BreakerPolicy{}, false)
	if b.State != BreakerOpen {
		t.Fatalf("not open after 5 failures: %+v", b)
	}
	if _, d := b.Allow(at(5*time.Second+299*time.Second), BreakerPolicy{}); d.Allowed {
		t.Fatalf("allowed before the default cool-down: %+v", d)
	}
	if _, d := b.Allow(at(5*time.Second+300*time.Second), BreakerPolicy{}); !d.Probe {
		t.Fatalf("no probe after the default cool-down: %+v", d)
	}
}

func TestBreakerPolicyCurrentTime(t *testing.T) {
	p := BreakerPolicy{Now: func() time.Time { return t0 }}
	if !p.CurrentTime().Equal(t0) {
		t.Fatalf("CurrentTime = %v, want %v", p.CurrentTime(), t0)
	}
	before := time.Now()
	if got := (BreakerPolicy{}).CurrentTime(); got.Before(before) {
		t.Fatalf("CurrentTime with nil Now = %v, before %v", got, before)
	}
}

func TestBreakerIdle(t *testing.T) {
	if !(Breaker{}).Idle() || !(Breaker{State: BreakerClosed}).Idle() {
		t.Fatal("zero/closed breaker not idle")
	}
	if (Breaker{FailureTimes: []time.Time{t0}}).Idle() || (Breaker{State: BreakerOpen, OpenedAt: t0}).Idle() {
		t.Fatal("breaker with state reported idle")
	}
}
