package gaterunner

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// hungrySandbox kills the first kills runs of gate "hungry" for running
// out of memory.
type hungrySandbox struct {
	sandbox.Sandbox
	kills *atomic.Int32
}

func (s hungrySandbox) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	res, err := s.Sandbox.Run(ctx, spec)
	if spec.Labels["gate"] == "hungry" && s.kills.Add(-1) >= 0 {
		res.OOMKilled, res.ExitCode, res.Signal = true, -1, "killed"
	}
	return res, err
}

// A gate's breaker counts the runs the gate itself could not make (killed
// for memory, a command that cannot start), never the failures it finds
// in the code: a gate failing three times stays closed. Open, it holds
// that gate's next job back (a waiting report naming gate and round) while
// another gate of the same repository runs; after the cool-down the held
// job probes, and its passing run closes the breaker.
func TestGateBreaker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	policy := state.BreakerPolicy{Failures: 2, Window: time.Minute, CoolDown: 2 * time.Second}
	var kills atomic.Int32
	kills.Store(2)
	host := h.startRunnerOpts(Config{}, runnerOpts{
		settings: func(s *jobrun.Settings) { s.Breakers = policy },
		wrap:     func(sb sandbox.Sandbox) sandbox.Sandbox { return hungrySandbox{sb, &kills} },
	})
	breaker := func(scope string) state.Breaker {
		b, err := h.Store.BreakerGet(testkit.Context(t, 10*time.Second), scope)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	failing := []string{"sh", "-c", "echo wrong >&2; exit 1"}
	for round := 1; round <= 3; round++ {
		if g := h.run(h.gateJob("check", round, failing...)); g.Status != protocol.GateFailed {
			t.Fatalf("check round %d: %s", round, g.Status)
		}
	}
	if b := breaker(protocol.GateScope("check", failing)); !b.Idle() {
		t.Errorf("a gate that found failures: breaker %+v, want nothing on record", b)
	}
	missing := []string{"no-such-gate-tool"}
	h.run(h.gateJob("absent", 1, missing...))
	if b := breaker(protocol.GateScope("absent", missing)); len(b.FailureTimes) != 1 {
		t.Errorf("a gate that cannot start: breaker %+v, want one failure", b)
	}

	hungry := []string{"sh", "-c", "echo allocating"}
	scope := protocol.GateScope("hungry", hungry)
	for round := 1; round <= 2; round++ {
		if g := h.run(h.gateJob("hungry", round, hungry...)); g.Status != protocol.GateError {
			t.Fatalf("hungry round %d: %s", round, g.Status)
		}
	}
	b := breaker(scope)
	if b.State != state.BreakerOpen {
		t.Fatalf("after two out-of-memory kills: breaker %+v, want open", b)
	}
	held := h.gateJob("hungry", 3, hungry...)
	h.publish(held)
	r := h.Next(20 * time.Second)
	if r.Type != protocol.ReportWaiting {
		t.Fatalf("got %s, want the held job waiting", r.Type)
	}
	if w := r.Waiting; w.Scope != scope || w.Gate != "hungry" || w.Round != 3 || w.Kind != protocol.KindGate || w.Host != host ||
		!w.Until.Equal(b.OpenedAt.Add(policy.CoolDown).UTC()) {
		t.Errorf("waiting %+v, want gate hungry round 3 on %s until the cool-down's end", w, scope)
	}
	// The repository's other gates are not held back; the runner's one
	// slot is free for them while the held job waits.
	if g := h.run(h.gateJob("vet", 1, "true")); g.Status != protocol.GatePassed {
		t.Fatalf("vet: %s", g.Status)
	}
	s := h.expectStarted(held)
	if time.Now().Before(b.OpenedAt.Add(policy.CoolDown)) {
		t.Errorf("the held job started before the cool-down ended")
	}
	if g := h.expectResult(held, s); g.Status != protocol.GatePassed || s.Delivery != 1 {
		t.Fatalf("the probe: %s (delivery %d), want passed on its first delivery", g.Status, s.Delivery)
	}
	if b := breaker(scope); !b.Idle() {
		t.Errorf("after the probe passed: breaker %+v, want closed", b)
	}
	if b := breaker(protocol.RepoScope(h.Repo.ID)); !b.Idle() {
		t.Errorf("the repository's breaker %+v, want nothing on record", b)
	}
}
