package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/lease"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// watchdogAfter is the tests' Options.LostJobAfter.
const watchdogAfter = time.Second

// stores runs fn with the env's JetStream KV store and with a Redis one
// (a real redis-server), the engine's state store either way.
func stores(t *testing.T, fn func(t *testing.T, e *env, store state.Store)) {
	t.Run("jetstream-kv", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, bus.Config{})
		fn(t, e, e.store)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, bus.Config{})
		s, err := redisstate.Open(context.Background(), testkit.Redis(t),
			redisstate.WithPrefix(strings.ReplaceAll(t.Name(), "/", ".")+fmt.Sprint(time.Now().UnixNano())+":"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		fn(t, e, s)
	})
}

// take acquires a job's lease as its runner does.
func take(t *testing.T, store state.Store, j *taken) *lease.Held {
	t.Helper()
	h, _, err := lease.Hold(testkit.Context(t, 30*time.Second), store, "lease/"+j.id(), "test-runner", 3*time.Second, nil)
	if err != nil {
		t.Fatalf("take the lease of %s: %v", j.id(), err)
	}
	return h
}

// A job whose runner reported it started and then vanished with the job
// (its message acked, its lease given up, no result: as when the leader
// that consumed its report had stopped leading) is run again by the
// watchdog: an agent job in a new round that uses no attempt, a gate job
// in a new round. The workflow then finishes on the new jobs' results.
func TestWatchdogRunsLostJobsAgain(t *testing.T) {
	stores(t, func(t *testing.T, e *env, store state.Store) {
		e.start(startOptions{store: store, lostJobAfter: watchdogAfter})
		wf := e.submit("name: lost\ndefaults:\n  " + agentCmd + "gates:\n  - {name: vet, command: [vet]}\n" +
			"tasks:\n  - {id: a, prompt: a, gates: [vet]}\n")

		j := e.next(protocol.KindAgent, "default", 5*time.Second)
		h := take(t, store, j)
		e.started(j, h.Token())
		e.waitNode(wf, "a", protocol.NodeRunning)
		if err := j.msg.Ack(); err != nil {
			t.Fatal(err)
		}
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		again := e.next(protocol.KindAgent, "default", 10*watchdogAfter)
		if again.agent.NodeID != "a" || again.agent.Attempt != 2 {
			t.Fatalf("job after the loss = %s attempt %d, want a's attempt 2", again.agent.NodeID, again.agent.Attempt)
		}
		h = take(t, store, again)
		e.started(again, h.Token())
		e.agentDone(again, h.Token(), protocol.AgentSucceeded, e.makePatch(again, "a.txt", "a\n"))
		_ = h.Release(context.Background())

		vet := e.next(protocol.KindGate, "default", 5*time.Second)
		h = take(t, store, vet)
		e.started(vet, h.Token())
		if err := vet.msg.Ack(); err != nil {
			t.Fatal(err)
		}
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		vet2 := e.next(protocol.KindGate, "default", 10*watchdogAfter)
		if vet2.gate.Gate != "vet" || vet2.gate.Round <= vet.gate.Round {
			t.Fatalf("gate job after the loss = %s round %d, want vet after round %d", vet2.gate.Gate, vet2.gate.Round, vet.gate.Round)
		}
		h = take(t, store, vet2)
		e.started(vet2, h.Token())
		e.gateDone(vet2, h.Token(), protocol.GatePassed)
		_ = h.Release(context.Background())
		e.waitWorkflow(wf, protocol.WorkflowSucceeded)

		evs := e.events(wf)
		lost := 0
		for _, ev := range evs {
			switch b := ev.Body.(type) {
			case eventlog.NodeRetryScheduled:
				if !strings.Contains(b.Reason, "job lost") || b.Class != "transient" {
					t.Errorf("retry %+v: want a transient one for a lost job", b)
				}
				lost++
			case eventlog.GateDispatched:
				if b.Rerun != "" {
					if !strings.Contains(b.Rerun, "job lost") {
						t.Errorf("gate rerun for %q, want a lost job", b.Rerun)
					}
					lost++
				}
			}
		}
		if lost != 2 {
			t.Errorf("%d lost jobs run again, want 2 (the agent's and the gate's)", lost)
		}
		if n := e.node(wf, "a"); n.Budget != n.Task.Attempts()+1 {
			t.Errorf("a's attempt budget = %d, want %d: a lost job's round uses no attempt", n.Budget, n.Task.Attempts()+1)
		}
	})
}

// A job whose runner holds its lease is left alone however long it runs,
// and its result counts.
func TestWatchdogLeavesLiveJobsAlone(t *testing.T) {
	stores(t, func(t *testing.T, e *env, store state.Store) {
		e.start(startOptions{store: store, lostJobAfter: watchdogAfter})
		wf := e.submit("name: live\ndefaults:\n  " + agentCmd + "tasks:\n  - {id: a, prompt: a, gates: []}\n")
		j := e.next(protocol.KindAgent, "default", 5*time.Second)
		h := take(t, store, j)
		e.started(j, h.Token())
		e.noJob(protocol.KindAgent, "default", 4*watchdogAfter, "a job whose lease is held was run again")
		e.agentDone(j, h.Token(), protocol.AgentSucceeded, nil)
		_ = h.Release(context.Background())
		e.waitWorkflow(wf, protocol.WorkflowSucceeded)
		if got := countEvents(e.events(wf), eventlog.TypeNodeRetry, "a"); got != 0 {
			t.Errorf("%d retries of a, want none", got)
		}
	})
}
