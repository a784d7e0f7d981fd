package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// An agent's circuit breaker is the fleet's, kept in the state store, on
// either backend (RETRY-11, CB-01, CB-13): worker A's agent fails twice
// (the policy opens on two), and worker B — another connection, another
// store client — holds the agent's next jobs back without running them.
// They wait parked on B, whose one slot stays free for the second, past
// AckWait and without spending a delivery (MaxDeliver is 2); B reports
// them waiting. After the cool-down one probes, its success closes the
// breaker, and the other runs too.
func TestBreakerSharedByTheFleet(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"jetstream-kv", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, bus.Config{AckWait: 1500 * time.Millisecond, MaxDeliver: 2})
			h.breakers = state.BreakerPolicy{Failures: 2, Window: time.Minute, CoolDown: 3 * time.Second}
			store := state.Store(h.Store)
			if backend == "redis" {
				url, prefix := testkit.Redis(t), fmt.Sprintf("suptest:breaker:%d:", time.Now().UnixNano())
				h.openStore = func(*bus.Bus) state.Store {
					s, err := redisstate.Open(context.Background(), url, redisstate.WithPrefix(prefix))
					if err != nil {
						t.Fatalf("redis: %v", err)
					}
					t.Cleanup(func() { _ = s.Close() })
					return s
				}
				store = h.openStore(h.Bus)
			}
			model := "model-" + backend
			scope := protocol.AgentScope([]string{agentName, "-p", "--model", model})
			job := func(node, prompt string) *protocol.AgentJob {
				j := h.agentJob(node, 1, prompt)
				j.Command = append(j.Command, "--model", model)
				return j
			}
			breaker := func() state.Breaker {
				b, err := store.BreakerGet(testkit.Context(t, 10*time.Second), scope)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}

			_, stopA := h.startWorker(Config{})
			for i := range 2 {
				if res := h.run(job(fmt.Sprintf("fails-%d", i), "@exit 4\n")); res.Status != protocol.AgentFailed {
					t.Fatalf("failing agent: status %s", res.Status)
				}
			}
			b := breaker()
			if b.State != state.BreakerOpen {
				t.Fatalf("after two failures the breaker of %s is %+v, want open", scope, b)
			}
			until := b.OpenedAt.Add(h.breakers.CoolDown)
			stopA()

			hostB, _ := h.startWorker(Config{})
			first, second := job("ok-1", "@write one.txt\n1\n@end\n"), job("ok-2", "@write two.txt\n2\n@end\n")
			h.publish(first)
			h.publish(second)
			for range 2 {
				r := h.Next(20 * time.Second)
				if r.Type != protocol.ReportWaiting {
					t.Fatalf("got a %s report %+v, want both jobs waiting before either runs", r.Type, r)
				}
				w := r.Waiting
				if w.Scope != scope || w.State != string(state.BreakerOpen) || w.Host != hostB || w.Delivery != 1 ||
					!w.Until.Equal(until.UTC()) || w.Kind != protocol.KindAgent || w.Attempt != 1 {
					t.Errorf("waiting %+v, want on %s (open until %v) on %s", w, scope, until, hostB)
				}
			}

			results := map[string]*protocol.AgentResult{}
			for len(results) < 2 {
				r := h.Next(30 * time.Second)
				switch r.Type {
				case protocol.ReportWaiting: // half-open while the other probes
				case protocol.ReportStarted:
					if s := r.Started; s.Delivery != 1 || s.Host != hostB || s.Attempt != 1 {
						t.Errorf("started %+v, want delivery 1 of attempt 1 on %s", s, hostB)
					}
					if now := time.Now(); now.Before(until.Add(-500 * time.Millisecond)) {
						t.Errorf("%s started at %v, before the cool-down's end %v", r.Started.JobID, now, until)
					}
				case protocol.ReportAgentResult:
					results[r.Agent.JobID] = r.Agent
				default:
					t.Fatalf("unexpected %s report", r.Type)
				}
			}
			for _, j := range []*protocol.AgentJob{first, second} {
				if res := results[j.JobID]; res == nil || res.Status != protocol.AgentSucceeded || res.Patch == nil {
					t.Errorf("%s: %+v, want succeeded with a patch", j.JobID, res)
				}
			}
			if b := breaker(); !b.Idle() {
				t.Errorf("after the probe's success the breaker is %+v, want closed", b)
			}
			if info := h.Settled(protocol.KindAgent); info.NumRedelivered != 0 {
				t.Errorf("%d jobs redelivered: waiting spent deliveries", info.NumRedelivered)
			}
		})
	}
}
