package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/sandbox"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

func TestPrintRunners(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	resp := api.FleetResponse{CacheHits: 3, CacheMisses: 1, Runners: []protocol.RunnerInfo{
		{Kind: protocol.KindAgent, Host: "gpu-1", Pools: []string{"gpu"}, Labels: map[string]string{"gpus": "2", "gpu": "a100"},
			Sandbox: "docker", Version: "abc123", Slots: 2, Busy: 1, Stats: protocol.RunnerStats{Succeeded: 4, Failed: 1},
			Jobs:      []protocol.RunnerJob{{JobID: "j", WorkflowID: "wf-1", NodeID: "train", Attempt: 2, StartedAt: now.Add(-90 * time.Second)}},
			StartedAt: now.Add(-time.Hour), SeenAt: now.Add(-3 * time.Second)},
		{Kind: protocol.KindGate, Host: "gates-1", Pools: []string{"default"}, Sandbox: "process", SandboxOff: []string{"sandbox-user"}, Slots: 1,
			Stats:     protocol.RunnerStats{Succeeded: 4, CacheHits: 3, CacheMisses: 1},
			StartedAt: now.Add(-time.Minute), SeenAt: now},
	}}
	var out bytes.Buffer
	printRunners(&out, resp, now)
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a header, two runners, a blank line and the cache line:\n%s", out.String())
	}
	for _, want := range []string{"worker", "gpu-1", "gpu", "1/2", "docker", "gpu=a100,gpus=2", "abc123", "1h0m0s", "3s ago", "wf-1/train#2 (1m30s)"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("worker line lacks %q: %s", want, lines[1])
		}
	}
	for _, want := range []string{"gaterunner", "gates-1", "0/1", "3/1", "process (off: sandbox-user)"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("gate runner line lacks %q: %s", want, lines[2])
		}
	}
	if lines[4] != "gate cache: 3 hits, 1 misses (75% hits)" {
		t.Errorf("cache line %q", lines[4])
	}

	out.Reset()
	printRunners(&out, api.FleetResponse{}, now)
	if !strings.HasPrefix(out.String(), "no worker or gate runner announced itself") {
		t.Errorf("empty fleet: %q", out.String())
	}
}

// TestFleetCommandDev runs `coordinator fleet` against the embedded
// default, whose worker and gate runner share one process and one
// identity: both are listed, each as its kind, sorted, and an entry in
// the bucket that does not decode is left out.
func TestFleetCommandDev(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := fleet.Start(ctx, fleet.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tick: 200 * time.Millisecond,
		ProcessUser: jobrun.ProcessUserOff, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	nc, err := nats.Connect(st.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.Attach(ctx, nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Runners.Put(ctx, "agent.broken", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) cliResult {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--nats=" + st.URL()}, args...), &out, &errOut)
		return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
	}
	var resp api.FleetResponse
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "both embedded runners listed", func() bool {
		r := run("fleet", "-o", "json")
		wantCode(t, r, 0)
		resp = api.FleetResponse{}
		decodeJSON(t, r, &resp)
		return len(resp.Runners) == 2
	})
	if a, g := resp.Runners[0], resp.Runners[1]; a.Kind != protocol.KindAgent || a.Host != "dev" || g.Kind != protocol.KindGate ||
		g.Host != "dev" || a.Sandbox != "process" || len(a.Pools) != 1 || len(g.Pools) != 1 ||
		!slices.Contains(a.SandboxOff, sandbox.ProtectUser) {
		t.Fatalf("runners = %+v", resp.Runners)
	}
	// SBX-15: the protections off (here by ProcessUser off) are shown.
	wantCode(t, run("fleet"), 0, "worker", "gaterunner", "dev", "0/1", "process (off: sandbox-user")
}
