package jobrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

func TestLogWriterCap(t *testing.T) {
	var l LogWriter
	l.Printf("job %s", "j1")
	if got := string(l.Bytes()); got != "[supervisor] job j1\n" {
		t.Fatalf("uncapped log = %q", got)
	}

	l = LogWriter{}
	if n, err := l.Write(bytes.Repeat([]byte("a"), MaxLogBytes-10)); n != MaxLogBytes-10 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	// A write straddling the cap keeps what fits and still reports
	// success, so the writer (the sandbox's output tee) keeps going.
	if n, err := l.Write(bytes.Repeat([]byte("b"), 30)); n != 30 || err != nil {
		t.Fatalf("straddling Write = %d, %v", n, err)
	}
	if n, err := l.Write([]byte("ccccc")); n != 5 || err != nil {
		t.Fatalf("Write past the cap = %d, %v", n, err)
	}
	l.Printf("dropped too")
	out := l.Bytes()
	if !bytes.Equal(out[:MaxLogBytes], append(bytes.Repeat([]byte("a"), MaxLogBytes-10), bytes.Repeat([]byte("b"), 10)...)) {
		t.Fatal("the first MaxLogBytes bytes are not what was written before the cap")
	}
	dropped := 20 + 5 + len("[supervisor] dropped too\n")
	marker := fmt.Sprintf("\n[supervisor] log capped at %d bytes; %d bytes dropped\n", MaxLogBytes, dropped)
	if got := string(out[MaxLogBytes:]); got != marker {
		t.Fatalf("after the cap: %q, want marker %q", got, marker)
	}
	if MaxLogBytes != 10<<20 {
		t.Fatalf("MaxLogBytes = %d, want 10 MB", MaxLogBytes)
	}
}

// docs/protocol.md: infrastructure errors are handed back with
// NakWithDelay 1 s, 2 s, 4 s … 32 s.
func TestBackoff(t *testing.T) {
	want := []time.Duration{1, 2, 4, 8, 16, 32, 32, 32}
	for i, w := range want {
		delivery := uint64(i + 1)
		if got := backoff(delivery); got != w*time.Second {
			t.Errorf("backoff(%d) = %s, want %s", delivery, got, w*time.Second)
		}
	}
	if got := backoff(0); got != time.Second {
		t.Errorf("backoff(0) = %s, want 1s", got)
	}
	if got := backoff(1 << 40); got != 32*time.Second {
		t.Errorf("backoff(huge) = %s, want 32s", got)
	}
}

// runEnv is a real bus and state store for jobrun.Run, and the reports
// it sends.
type runEnv struct {
	*jobruntest.Fleet
	t    *testing.T
	deps Deps
	seq  atomic.Int64
}

const ackWait = 900 * time.Millisecond

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	return newRunEnvAckWait(t, ackWait)
}

// newRunEnvAckWait is newRunEnv with another ack wait, for a test whose
// point is not the lease's timing: with the default's 600 ms lease, a
// renewal late on a loaded machine abandons the job.
func newRunEnvAckWait(t *testing.T, ackWait time.Duration) *runEnv {
	t.Helper()
	f := jobruntest.OpenFleet(t, "jobrun-test", bus.Config{AckWait: ackWait})
	f.ConsumeReports()
	return &runEnv{Fleet: f, t: t, deps: Deps{Bus: f.Bus, Store: f.Store, Host: "test-host", Log: slog.New(slog.DiscardHandler)}}
}

func (e *runEnv) meta() Meta {
	n := e.seq.Add(1)
	return Meta{Kind: protocol.KindGate, JobID: fmt.Sprintf("wf-%d.node.a1.g.vet.r1", n), WorkflowID: fmt.Sprintf("wf-%d", n),
		NodeID: "node", Gate: "vet", Attempt: 1, PublishedAt: time.Now().UTC()}
}

func result(m Meta, token uint64, st protocol.GateStatus, errText string) *protocol.Report {
	return &protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: m.JobID, WorkflowID: m.WorkflowID, NodeID: m.NodeID, Gate: m.Gate, Attempt: m.Attempt,
		LeaseToken: token, Host: "test-host", Status: st, Error: errText, FinishedAt: time.Now().UTC(),
	}}
}

func (e *runEnv) errReport(m Meta) ErrorReport {
	return func(token uint64, err error) *protocol.Report {
		return result(m, token, protocol.GateError, err.Error())
	}
}

func (e *runEnv) next() *protocol.Report {
	e.t.Helper()
	return e.Next(10 * time.Second)
}

func (e *runEnv) expectStarted(m Meta, delivery uint64) *protocol.Started {
	e.t.Helper()
	r := e.next()
	if r.Type != protocol.ReportStarted || r.Started.JobID != m.JobID || r.Started.Delivery != delivery ||
		r.Started.LeaseToken == 0 || r.Started.Host != "test-host" || r.Started.Gate != m.Gate || !r.Started.PublishedAt.Equal(m.PublishedAt) {
		e.t.Fatalf("got %s %+v, want started for %s delivery %d", r.Type, r.Started, m.JobID, delivery)
	}
	return r.Started
}

func (e *runEnv) expectResult(m Meta, token uint64, st protocol.GateStatus) *protocol.GateResult {
	e.t.Helper()
	r := e.next()
	if r.Type != protocol.ReportGateResult || r.Gate.JobID != m.JobID || r.Gate.LeaseToken != token || r.Gate.Status != st {
		e.t.Fatalf("got %s %+v, want %s result for %s token %d", r.Type, r.Gate, st, m.JobID, token)
	}
	return r.Gate
}

// leaseFree checks that the job's lease was released.
func (e *runEnv) leaseFree(m Meta) {
	e.t.Helper()
	l, err := e.Store.Acquire(testkit.Context(e.t, 30*time.Second), "lease/"+m.JobID, "checker", time.Second)
	if err != nil {
		e.t.Fatalf("lease of %s not released: %v", m.JobID, err)
	}
	_ = e.Store.Release(testkit.Context(e.t, 30*time.Second), l)
}

// run runs work as delivery n (of at most 3) of job m, as a runner
// calls Run, and fails t unless the disposition is want.
func (e *runEnv) run(t *testing.T, ctx context.Context, cancels *Cancels, n uint64, m Meta, want string, work Work) {
	t.Helper()
	disp := Run(ctx, e.deps, cancels, &bus.Delivery{Number: n, MaxDeliver: 3}, m, work, e.errReport(m))
	if disp.String() != want {
		t.Fatalf("delivery %d: disposition %s, want %s", n, disp, want)
	}
}

// doneWithin reports whether ctx ends within d.
func doneWithin(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(d):
		return false
	}
}

func TestRunDispositions(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	bg := context.Background()

	t.Run("success acks after the result", func(t *testing.T) {
		m := e.meta()
		var workToken uint64
		e.run(t, bg, nil, 1, m, "ack", func(ctx context.Context, token uint64) Outcome {
			workToken = token
			return Outcome{Report: result(m, token, protocol.GatePassed, "")}
		})
		s := e.expectStarted(m, 1)
		if s.LeaseToken != workToken {
			t.Errorf("started token %d, work got %d", s.LeaseToken, workToken)
		}
		e.expectResult(m, s.LeaseToken, protocol.GatePassed)
		e.leaseFree(m)
	})

	t.Run("retry hands back after the report", func(t *testing.T) {
		m := e.meta()
		e.run(t, bg, nil, 1, m, "nak(700ms)", func(ctx context.Context, token uint64) Outcome {
			return Outcome{Report: result(m, token, protocol.GatePending, ""), Retry: 700 * time.Millisecond}
		})
		s := e.expectStarted(m, 1)
		e.expectResult(m, s.LeaseToken, protocol.GatePending)
		e.leaseFree(m)
	})

	t.Run("infrastructure error is handed back with backoff", func(t *testing.T) {
		m := e.meta()
		for n := uint64(1); n <= 2; n++ {
			e.run(t, bg, nil, n, m, fmt.Sprintf("nak(%s)", backoff(n)), func(ctx context.Context, token uint64) Outcome {
				return Outcome{Err: errors.New("mirror unavailable")}
			})
			e.expectStarted(m, n)
		}
		e.NoReports(200 * time.Millisecond)
		e.leaseFree(m)
	})

	t.Run("infrastructure error on the last delivery is reported", func(t *testing.T) {
		m := e.meta()
		e.run(t, bg, nil, 3, m, "ack", func(ctx context.Context, token uint64) Outcome {
			return Outcome{Err: errors.New("mirror unavailable")}
		})
		s := e.expectStarted(m, 3)
		if g := e.expectResult(m, s.LeaseToken, protocol.GateError); !strings.Contains(g.Error, "mirror unavailable") {
			t.Errorf("error report %q", g.Error)
		}
	})

	// A runner cut off the network fails to upload its work while its
	// lease lapses and another runner takes the job over: it must not hand
	// the job back, which would have it delivered once more (CHAOS-03).
	t.Run("infrastructure error after the lease went elsewhere abandons", func(t *testing.T) {
		m := e.meta()
		e.run(t, bg, nil, 1, m, "abandon", func(ctx context.Context, token uint64) Outcome {
			tctx := testkit.Context(t, 30*time.Second)
			if err := e.Store.Release(tctx, state.Lease{Key: "lease/" + m.JobID, Owner: e.deps.Host, Token: token}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Store.Acquire(tctx, "lease/"+m.JobID, "other-runner", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			return Outcome{Err: errors.New("upload patch: context deadline exceeded")}
		})
		e.expectStarted(m, 1)
		e.NoReports(200 * time.Millisecond)
	})

	t.Run("lease held elsewhere is handed back for a third of AckWait", func(t *testing.T) {
		m := e.meta()
		l, err := e.Store.Acquire(testkit.Context(t, 30*time.Second), "lease/"+m.JobID, "other-runner", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		called := false
		e.run(t, bg, nil, 2, m, fmt.Sprintf("nak(%s)", ackWait/3), func(ctx context.Context, token uint64) Outcome {
			called = true
			return Outcome{}
		})
		if called {
			t.Error("work ran without the lease")
		}
		e.NoReports(200 * time.Millisecond)
		if _, err := e.Store.Renew(testkit.Context(t, 30*time.Second), l, time.Second); err != nil {
			t.Errorf("the other runner's lease was disturbed: %v", err)
		}
	})

	t.Run("shutdown hands the job straight back", func(t *testing.T) {
		m := e.meta()
		ctx, cancel := context.WithCancel(context.Background())
		e.run(t, ctx, nil, 1, m, "nak(0s)", func(jctx context.Context, token uint64) Outcome {
			cancel()
			<-jctx.Done()
			return Outcome{Report: result(m, token, protocol.GateFailed, "killed")}
		})
		e.expectStarted(m, 1)
		e.NoReports(200 * time.Millisecond)
		e.leaseFree(m)
	})

	t.Run("lost lease abandons the job", func(t *testing.T) {
		m := e.meta()
		e.run(t, bg, nil, 1, m, "abandon", func(jctx context.Context, token uint64) Outcome {
			// Another runner takes over: the lease vanishes underneath.
			if err := e.Store.Release(bg, state.Lease{Key: "lease/" + m.JobID, Owner: "test-host", Token: token}); err != nil {
				t.Errorf("release underneath: %v", err)
			}
			if !doneWithin(jctx, 5*time.Second) {
				t.Error("job context not cancelled after the lease was lost")
			}
			return Outcome{Report: result(m, token, protocol.GatePassed, "")}
		})
		e.expectStarted(m, 1)
		e.NoReports(200 * time.Millisecond)
	})

	// The work's After (a runner empties its workspace there) runs once,
	// after the result is out, whatever the disposition.
	t.Run("After runs once the result is reported", func(t *testing.T) {
		m := e.meta()
		calls := 0
		var seen []*protocol.Report
		e.run(t, bg, nil, 1, m, "ack", func(ctx context.Context, token uint64) Outcome {
			return Outcome{Report: result(m, token, protocol.GatePassed, ""), After: func() {
				calls++
				// Both reports were published before: no waiting here.
				seen = append(seen, e.Next(time.Second), e.Next(time.Second))
			}}
		})
		if calls != 1 {
			t.Fatalf("After ran %d times, want once", calls)
		}
		if seen[0].Type != protocol.ReportStarted || seen[1].Type != protocol.ReportGateResult || seen[1].Gate.JobID != m.JobID {
			t.Fatalf("when After ran, the reports were %s, %s; want started and the result", seen[0].Type, seen[1].Type)
		}
		e.leaseFree(m)
	})
	for _, c := range []struct {
		name, want string
		cancel     bool
	}{{"handed back", fmt.Sprintf("nak(%s)", backoff(1)), false}, {"shutdown", "nak(0s)", true}} {
		t.Run("After runs when the job is "+c.name, func(t *testing.T) {
			m := e.meta()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			e.run(t, ctx, nil, 1, m, c.want, func(jctx context.Context, token uint64) Outcome {
				if c.cancel {
					cancel()
				}
				return Outcome{Err: errors.New("mirror unavailable"), After: func() { calls++ }}
			})
			if calls != 1 {
				t.Fatalf("After ran %d times, want once", calls)
			}
			e.expectStarted(m, 1)
			e.NoReports(200 * time.Millisecond)
		})
	}

	t.Run("cancellation announcement stops the workflow's job", func(t *testing.T) {
		var cancels Cancels
		sub, err := cancels.Watch(e.deps.Bus.NC)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe() //nolint:errcheck
		m := e.meta()
		e.run(t, bg, &cancels, 1, m, "ack", func(jctx context.Context, token uint64) Outcome {
			// Another workflow's cancellation does not touch this job.
			if err := e.deps.Bus.NC.Publish(protocol.CancelSubject("wf-other"), nil); err != nil {
				t.Error(err)
			}
			_ = e.deps.Bus.NC.Flush()
			if doneWithin(jctx, 200*time.Millisecond) {
				t.Error("job cancelled by another workflow's announcement")
			}
			if err := e.deps.Bus.NC.Publish(protocol.CancelSubject(m.WorkflowID), nil); err != nil {
				t.Error(err)
			}
			if !doneWithin(jctx, 5*time.Second) {
				t.Error("job not cancelled by its workflow's announcement")
			}
			return Outcome{Report: result(m, token, protocol.GateFailed, "cancelled")}
		})
		s := e.expectStarted(m, 1)
		e.expectResult(m, s.LeaseToken, protocol.GateFailed)
		e.leaseFree(m)
	})
}
