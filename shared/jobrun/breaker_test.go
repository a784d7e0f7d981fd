package jobrun

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// breakerEnv is a runEnv whose jobs have breaker scopes of their own, with
// a short policy: one failure opens, the cool-down is a second.
type breakerEnv struct {
	*runEnv
	work, repo string
}

var breakerPolicy = state.BreakerPolicy{Failures: 1, Window: time.Minute, CoolDown: time.Second}

func newBreakerEnv(t *testing.T) *breakerEnv {
	t.Helper()
	e := newRunEnv(t)
	e.deps.Breakers = breakerPolicy
	return &breakerEnv{runEnv: e, work: "gate:vet:" + t.Name(), repo: "repo:" + t.Name()}
}

func (e *breakerEnv) meta() Meta {
	m := e.runEnv.meta()
	m.Scopes = JobScopes{Work: e.work, Repo: e.repo}
	return m
}

func (e *breakerEnv) breaker(scope string) state.Breaker {
	e.t.Helper()
	b, err := e.Store.BreakerGet(testkit.Context(e.t, 10*time.Second), scope)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *breakerEnv) fail(scope string) {
	e.t.Helper()
	if _, err := e.Store.BreakerReport(testkit.Context(e.t, 10*time.Second), scope, breakerPolicy, false); err != nil {
		e.t.Fatal(err)
	}
}

func (e *breakerEnv) expectWaiting(m Meta, scope string, st state.BreakerState) *protocol.Waiting {
	e.t.Helper()
	r := e.next()
	if r.Type != protocol.ReportWaiting || r.Waiting.JobID != m.JobID || r.Waiting.Scope != scope ||
		r.Waiting.State != string(st) || r.Waiting.Kind != m.Kind || r.Waiting.Gate != m.Gate || r.Waiting.Until.IsZero() {
		e.t.Fatalf("got %s %+v, want waiting on %s (%s) for %s", r.Type, r.Waiting, scope, st, m.JobID)
	}
	return r.Waiting
}

// runAsync runs Run in the background and returns its disposition.
func (e *breakerEnv) runAsync(ctx context.Context, m Meta, work Work) <-chan bus.Disposition {
	out := make(chan bus.Disposition, 1)
	go func() { out <- Run(ctx, e.deps, nil, &bus.Delivery{Number: 1, MaxDeliver: 3}, m, work, e.errReport(m)) }()
	return out
}

// An open breaker holds the job without taking its lease or spending its
// delivery; it is reported waiting once, then runs after the cool-down as
// the breaker's probe, and its success closes the breaker.
func TestBreakerHoldsJobUntilCoolDown(t *testing.T) {
	t.Parallel()
	e := newBreakerEnv(t)
	e.fail(e.work)
	opened := e.breaker(e.work).OpenedAt
	m := e.meta()
	var ran atomic.Int32
	start := time.Now()
	disp := e.runAsync(context.Background(), m, func(ctx context.Context, token uint64) Outcome {
		ran.Add(1)
		return Outcome{Report: result(m, token, protocol.GatePassed, ""), Work: Worked, Repo: Worked}
	})
	w := e.expectWaiting(m, e.work, state.BreakerOpen)
	if want := opened.Add(breakerPolicy.CoolDown); !w.Until.Equal(want.UTC()) || w.Delivery != 1 || w.Host != "test-host" {
		t.Errorf("waiting %+v, want until the cool-down's end %v", w, want)
	}
	s := e.expectStarted(m, 1)
	if took := time.Since(start); took < 800*time.Millisecond {
		t.Errorf("the job started %s after it came, before the cool-down ended", took)
	}
	e.expectResult(m, s.LeaseToken, protocol.GatePassed)
	if d := testkit.Receive(t, disp, 10*time.Second, "Run did not return"); d.String() != "ack" {
		t.Errorf("disposition %s, want ack", d)
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("work ran %d times", n)
	}
	if b := e.breaker(e.work); !b.Idle() {
		t.Errorf("after the probe's success the breaker is %+v, want closed", b)
	}
	e.NoReports(200 * time.Millisecond)
}

// Verdicts are reported to the job's scopes: a broken piece of work opens
// its breaker (the policy opens on one failure) and the next job waits;
// a repository failure with an infrastructure error counts though the job
// is handed back; unjudged outcomes and interrupted jobs count for nothing.
func TestBreakerVerdicts(t *testing.T) {
	t.Parallel()
	e := newBreakerEnv(t)
	bg := context.Background()

	m := e.meta()
	e.run(t, bg, nil, 1, m, "nak(1s)", func(ctx context.Context, token uint64) Outcome {
		return Outcome{Err: errors.New("bundle missing"), Repo: Broke}
	})
	e.expectStarted(m, 1)
	if b := e.breaker(e.repo); b.State != state.BreakerOpen {
		t.Fatalf("repository breaker %+v after its failure, want open", b)
	}
	if b := e.breaker(e.work); !b.Idle() {
		t.Fatalf("the work's breaker %+v, want untouched", b)
	}
	if _, err := e.Store.BreakerReset(testkit.Context(t, 10*time.Second), e.repo); err != nil {
		t.Fatal(err)
	}

	m = e.meta()
	e.run(t, bg, nil, 1, m, "ack", func(ctx context.Context, token uint64) Outcome {
		return Outcome{Report: result(m, token, protocol.GateError, "out of memory"), Work: Unjudged, Repo: Worked}
	})
	s := e.expectStarted(m, 1)
	e.expectResult(m, s.LeaseToken, protocol.GateError)
	if b := e.breaker(e.work); !b.Idle() {
		t.Fatalf("an unjudged outcome changed the breaker: %+v", b)
	}

	m = e.meta()
	ctx, cancel := context.WithCancel(bg)
	e.run(t, ctx, nil, 1, m, "nak(0s)", func(jctx context.Context, token uint64) Outcome {
		cancel()
		return Outcome{Report: result(m, token, protocol.GateError, "killed"), Work: Broke}
	})
	e.expectStarted(m, 1)
	if b := e.breaker(e.work); !b.Idle() {
		t.Fatalf("an interrupted job's verdict counted: %+v", b)
	}

	m = e.meta()
	e.run(t, bg, nil, 1, m, "ack", func(ctx context.Context, token uint64) Outcome {
		return Outcome{Report: result(m, token, protocol.GateError, "out of memory"), Work: Broke, Repo: Worked}
	})
	s = e.expectStarted(m, 1)
	e.expectResult(m, s.LeaseToken, protocol.GateError)
	if b := e.breaker(e.work); b.State != state.BreakerOpen {
		t.Fatalf("the work's breaker %+v after it broke, want open", b)
	}
	next := e.meta()
	disp := e.runAsync(bg, next, func(ctx context.Context, token uint64) Outcome {
		return Outcome{Report: result(next, token, protocol.GatePassed, ""), Work: Worked, Repo: Worked}
	})
	e.expectWaiting(next, e.work, state.BreakerOpen)
	s = e.expectStarted(next, 1)
	e.expectResult(next, s.LeaseToken, protocol.GatePassed)
	testkit.Receive(t, disp, 10*time.Second, "Run did not return")
}

// While the probe of a half-open breaker runs, other jobs of the scope
// wait (half-open); once it succeeds they run.
func TestBreakerHalfOpenOneProbe(t *testing.T) {
	t.Parallel()
	e := newBreakerEnv(t)
	e.fail(e.work)
	time.Sleep(breakerPolicy.CoolDown)
	probe, other := e.meta(), e.meta()
	release := make(chan struct{})
	probeDisp := e.runAsync(context.Background(), probe, func(ctx context.Context, token uint64) Outcome {
		<-release
		return Outcome{Report: result(probe, token, protocol.GateFailed, "the code's fault"), Work: Worked, Repo: Worked}
	})
	ps := e.expectStarted(probe, 1)
	if b := e.breaker(e.work); b.State != state.BreakerHalfOpen {
		t.Fatalf("breaker %+v while the probe runs, want half-open", b)
	}
	otherDisp := e.runAsync(context.Background(), other, func(ctx context.Context, token uint64) Outcome {
		return Outcome{Report: result(other, token, protocol.GatePassed, ""), Work: Worked, Repo: Worked}
	})
	e.expectWaiting(other, e.work, state.BreakerHalfOpen)
	close(release)
	// A gate that failed worked as a gate: the probe closes the breaker.
	e.expectResult(probe, ps.LeaseToken, protocol.GateFailed)
	testkit.Receive(t, probeDisp, 10*time.Second, "the probe's Run did not return")
	st := e.expectStarted(other, 1)
	e.expectResult(other, st.LeaseToken, protocol.GatePassed)
	testkit.Receive(t, otherDisp, 10*time.Second, "the other Run did not return")
	if b := e.breaker(e.work); !b.Idle() {
		t.Errorf("breaker %+v, want closed", b)
	}
}

// A job waiting on a breaker is dropped when its workflow finishes, and
// handed back at once when the runner shuts down; neither runs it.
func TestBreakerWaitEnds(t *testing.T) {
	t.Parallel()
	e := newBreakerEnv(t)
	e.fail(e.repo)
	never := func(ctx context.Context, token uint64) Outcome {
		t.Error("work ran while its breaker was open")
		return Outcome{}
	}

	m := e.meta()
	disp := e.runAsync(context.Background(), m, never)
	e.expectWaiting(m, e.repo, state.BreakerOpen)
	if err := e.Store.CachePut(testkit.Context(t, 10*time.Second), protocol.WorkflowFinishedKey(m.WorkflowID),
		[]byte("cancelled"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := testkit.Receive(t, disp, 10*time.Second, "Run did not return"); d.String() != fmt.Sprintf("term(workflow %s already cancelled)", m.WorkflowID) {
		t.Errorf("disposition %s, want the job dropped", d)
	}

	// Opened anew, so the shutdown comes during the wait.
	if _, err := e.Store.BreakerReset(testkit.Context(t, 10*time.Second), e.repo); err != nil {
		t.Fatal(err)
	}
	e.fail(e.repo)
	m = e.meta()
	ctx, cancel := context.WithCancel(context.Background())
	disp = e.runAsync(ctx, m, never)
	e.expectWaiting(m, e.repo, state.BreakerOpen)
	cancel()
	if d := testkit.Receive(t, disp, 5*time.Second, "Run did not return"); d.String() != "nak(0s)" {
		t.Errorf("disposition %s, want handed straight back", d)
	}
	e.NoReports(200 * time.Millisecond)
}
