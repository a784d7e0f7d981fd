package gaterunner

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestGateRunnerPresence runs a real gate runner (its Deps built as the
// binary builds them) and checks its entry in the runners bucket: what it
// takes, the job it runs while it runs it, its jobs' outcomes and gate
// cache lookups counted (a miss, a hit, a failure), and the entry's
// removal when the runner stops cleanly.
func TestGateRunnerPresence(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	host := "presence-gaterunner"
	ctx := testkit.Context(t, time.Minute)
	rb, err := bus.Open(ctx, h.URL, host, busConfig, h.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rb.Close)
	store, err := kvstate.New(ctx, rb.JS)
	if err != nil {
		t.Fatal(err)
	}
	deps, closeDeps, err := jobrun.NewDeps(ctx, jobrun.Settings{DataDir: t.TempDir(), SandboxPath: sandbox.BasePath, Host: host,
		Labels: map[string]string{"zone": "eu"}, ProcessUser: jobrun.ProcessUserOff}, rb, store, h.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDeps)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := Config{Pools: []string{protocol.DefaultPool, "big"}, Concurrency: 2}
	go func() { done <- New(deps, cfg).Run(runCtx) }()
	// stopRunner stops the runner and returns what Run returned.
	stopRunner := func() error {
		stop()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("the gate runner did not stop within 30s")
		}
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stopRunner()
		}
	})

	idle := h.WaitRunner(protocol.KindGate, host, 20*time.Second, "the gate runner's entry", func(protocol.RunnerInfo) bool { return true })
	if idle.Host != host || len(idle.Pools) != 2 || idle.Pools[0] != protocol.DefaultPool || idle.Pools[1] != "big" ||
		idle.Slots != 2 || idle.Busy != 0 || idle.Sandbox != "process" || idle.Labels["zone"] != "eu" || idle.Version == "" ||
		!slices.Contains(idle.SandboxOff, sandbox.ProtectUser) { // SBX-15: the protections off are in the entry
		t.Fatalf("idle entry = %+v", idle)
	}

	// A slow gate: the entry names it while it runs.
	slow := h.gateJob("slow", 1, "sh", "-c", "sleep 2")
	h.publish(slow)
	started := h.expectStarted(slow)
	busy := h.WaitRunner(protocol.KindGate, host, 10*time.Second, "the running gate in the entry", func(i protocol.RunnerInfo) bool {
		return i.Busy == 1
	})
	if len(busy.Jobs) != 1 || busy.Jobs[0].JobID != slow.JobID || busy.Jobs[0].Gate != "slow" || busy.Jobs[0].NodeID != "node" ||
		busy.Jobs[0].WorkflowID != "wf" {
		t.Fatalf("busy entry's jobs = %+v", busy.Jobs)
	}
	if g := h.expectResult(slow, started); g.Status != protocol.GatePassed {
		t.Fatalf("slow gate %s", g.Status)
	}

	// The same gate twice (a miss, then a hit), and a failing one (a miss).
	def := protocol.GateSpec{Name: "same", Pool: protocol.DefaultPool, TimeoutSeconds: 60, Command: []string{"true"}}
	if g := h.run(h.defJob(def, 1)); g.Status != protocol.GatePassed || g.Cached {
		t.Fatalf("first run: %s cached %v", g.Status, g.Cached)
	}
	if g := h.run(h.defJob(def, 2)); !g.Cached {
		t.Fatalf("second run not cached: %+v", g)
	}
	if g := h.run(h.gateJob("bad", 1, "false")); g.Status != protocol.GateFailed {
		t.Fatalf("bad gate %s", g.Status)
	}
	after := h.WaitRunner(protocol.KindGate, host, 10*time.Second, "the outcomes in the entry", func(i protocol.RunnerInfo) bool {
		return i.Stats.Succeeded == 3 && i.Stats.Failed == 1
	})
	// The slow gate and the failing one missed; the second "same" hit.
	if after.Stats.CacheHits != 1 || after.Stats.CacheMisses != 3 || after.Busy != 0 || len(after.Jobs) != 0 {
		t.Fatalf("entry after the gates = %+v", after)
	}

	stopped = true
	if err := stopRunner(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if info, ok := h.Runner(protocol.KindGate, host); ok {
		t.Fatalf("entry still there after the runner stopped: %+v", info)
	}
}
