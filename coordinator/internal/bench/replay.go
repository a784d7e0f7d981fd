package bench

// The replay scenario (PERF-36): how long a coordinator takes to start on
// an event log of N events of history, from the newest snapshot plus the
// events after it against folding the whole log (the reference), in the
// same run on the same log.

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/coordinator/internal/engine"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/state/kvstate"
)

// DefaultReplayEvents are the replay scenario's log sizes by default;
// docs/performance.md has 1,000, 10,000 and 100,000.
var DefaultReplayEvents = []int{1000, 10000}

// ReplayReport is the replay scenario's figures, one point per log size.
type ReplayReport struct {
	Points []ReplayPoint `json:"points"`
}

// ReplayPoint is one log size's restart, both ways.
type ReplayPoint struct {
	// Events is the log's size; TailEvents of them came after the
	// snapshot the snapshot restart starts from.
	Events     int `json:"events"`
	TailEvents int `json:"tail_events"`
	// Workflows is how many workflows the log holds, InFlight how many of
	// them still run; Retired how many the snapshot holds as summaries.
	Workflows int `json:"workflows"`
	InFlight  int `json:"in_flight"`
	Retired   int `json:"retired"`
	// SnapshotBytes is the snapshot's size.
	SnapshotBytes int64 `json:"snapshot_bytes"`
	// Full is the restart folding the whole log (the reference), Snapshot
	// the one from the snapshot and the tail: wall time from New to Ready,
	// and the process's CPU time (NATS serving the log included).
	FullSeconds        float64 `json:"full_seconds"`
	FullCPUSeconds     float64 `json:"full_cpu_seconds"`
	SnapshotSeconds    float64 `json:"snapshot_seconds"`
	SnapshotCPUSeconds float64 `json:"snapshot_cpu_seconds"`
	// Speedup is FullSeconds over SnapshotSeconds; CPURatio is
	// SnapshotCPUSeconds over FullCPUSeconds.
	Speedup  float64 `json:"speedup"`
	CPURatio float64 `json:"cpu_ratio"`
	// FullWorkflows and SnapshotWorkflows are the workflows each restart
	// knows (in memory and retired): the same when both are right.
	FullWorkflows     int `json:"full_workflows"`
	SnapshotWorkflows int `json:"snapshot_workflows"`
}

// inFlightEvery makes one workflow in this many of the history still run.
const inFlightEvery = 20

// runReplay measures every size of the replay scenario.
func (r *runner) runReplay(ctx context.Context) (*ReplayReport, error) {
	rep := &ReplayReport{}
	for _, n := range r.cfg.ReplayEvents {
		p, err := r.replayPoint(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("%d events: %w", n, err)
		}
		r.progress("%s: %d events: full replay %.2fs (%.2fs CPU), snapshot + %d events %.3fs (%.3fs CPU)", ScenarioReplay,
			p.Events, p.FullSeconds, p.FullCPUSeconds, p.TailEvents, p.SnapshotSeconds, p.SnapshotCPUSeconds)
		rep.Points = append(rep.Points, p)
	}
	return rep, nil
}

// replayPoint writes n events of history — all but the last tenth (at
// most 1,000) before a snapshot is taken — then starts a coordinator on
// it both ways.
func (r *runner) replayPoint(ctx context.Context, n int) (ReplayPoint, error) {
	dir := filepath.Join(r.dir, fmt.Sprintf("replay-%d", n))
	srv, err := embedded.Start(embedded.Options{Host: "127.0.0.1", StoreDir: filepath.Join(dir, "jetstream"),
		ServerName: "supervisor-bench-replay"})
	if err != nil {
		return ReplayPoint{}, err
	}
	defer srv.Shutdown()
	b, err := bus.Open(ctx, srv.URL(), "supervisor-bench-replay", bus.Config{}, r.cfg.Log)
	if err != nil {
		return ReplayPoint{}, err
	}
	defer b.Close()
	store, err := kvstate.New(ctx, b.JS)
	if err != nil {
		return ReplayPoint{}, err
	}

	p := ReplayPoint{TailEvents: min(1000, n/10)}
	// Finished two hours ago and more: past the default retention.
	h, err := newHistory(time.Now().Add(-2*time.Hour - time.Duration(n)*time.Second))
	if err != nil {
		return p, err
	}
	if err := r.writeHistory(ctx, b, h, n-p.TailEvents, &p); err != nil {
		return p, err
	}
	opts := engine.Options{DataDir: filepath.Join(dir, "coordinator"), ID: "bench", Log: r.cfg.FleetLog}
	// A coordinator that stops cleanly leaves a snapshot of the history.
	if _, _, _, err := startStop(ctx, b, store, opts); err != nil {
		return p, err
	}
	if err := r.writeHistory(ctx, b, h, p.TailEvents, &p); err != nil {
		return p, err
	}
	snaps, err := b.Snapshots(ctx)
	if err != nil {
		return p, err
	}
	if list, err := snaps.List(ctx); err == nil && len(list) > 0 {
		p.SnapshotBytes = int64(list[len(list)-1].Size)
	}

	full := opts
	full.SnapshotInterval = -1 // neither read nor written
	d, cpu, st, err := timedStart(ctx, b, store, full)
	if err != nil {
		return p, err
	}
	p.FullSeconds, p.FullCPUSeconds, p.FullWorkflows = d.Seconds(), cpu.Seconds(), st.known
	d, cpu, st, err = timedStart(ctx, b, store, opts)
	if err != nil {
		return p, err
	}
	p.SnapshotSeconds, p.SnapshotCPUSeconds, p.SnapshotWorkflows, p.Retired = d.Seconds(), cpu.Seconds(), st.known, st.retired
	p.Speedup = ratioTo(p.FullSeconds, p.SnapshotSeconds)
	p.CPURatio = ratioTo(p.SnapshotCPUSeconds, p.FullCPUSeconds)
	return p, nil
}

// writeHistory appends about n events of history to the log: finished
// workflows, one in inFlightEvery still running.
func (r *runner) writeHistory(ctx context.Context, b *bus.Bus, h *history, n int, p *ReplayPoint) error {
	const window = 4096
	pending := 0
	for written := 0; written < n; {
		st := finished
		if h.n%inFlightEvery == inFlightEvery-1 {
			st = inFlight
			p.InFlight++
		}
		_, evs, err := h.next(st)
		if err != nil {
			return err
		}
		p.Workflows++
		for _, ev := range evs {
			data, err := eventlog.Encode(ev)
			if err != nil {
				return err
			}
			if _, err := b.JS.PublishAsync(protocol.EventSubject(ev.WorkflowID), data); err != nil {
				return fmt.Errorf("write history: %w", err)
			}
			if pending++; pending == window {
				if err := waitPublished(ctx, b.JS); err != nil {
					return err
				}
				pending = 0
			}
		}
		written += len(evs)
		p.Events += len(evs)
	}
	return waitPublished(ctx, b.JS)
}

func waitPublished(ctx context.Context, js jetstream.JetStream) error {
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// known is what a started engine knows.
type known struct{ known, retired int }

// timedStart starts an engine and stops it once ready: the wall time from
// New to Ready and the process's CPU time meanwhile.
func timedStart(ctx context.Context, b *bus.Bus, store *kvstate.Store, opts engine.Options) (time.Duration, time.Duration, known, error) {
	return startStop(ctx, b, store, opts)
}

// startStop starts an engine, waits until it is ready, notes what it
// knows, how long it took and the CPU time it used, and stops it.
func startStop(ctx context.Context, b *bus.Bus, store *kvstate.Store, opts engine.Options) (time.Duration, time.Duration, known, error) {
	cpu0, _ := cpuTime()
	start := time.Now()
	eng, err := engine.New(b, store, opts)
	if err != nil {
		return 0, 0, known{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(rctx, nil) }()
	var took, cpu time.Duration
	select {
	case <-eng.Ready():
		took = time.Since(start)
		cpu1, _ := cpuTime()
		cpu = cpu1 - cpu0
	case err := <-done:
		cancel()
		return 0, 0, known{}, fmt.Errorf("coordinator stopped before it was ready: %w", err)
	case <-ctx.Done():
		cancel()
		if err := <-done; err != nil {
			return 0, 0, known{}, fmt.Errorf("%w (and the coordinator: %w)", ctx.Err(), err)
		}
		return 0, 0, known{}, ctx.Err()
	}
	var k known
	eng.Read(func(s *statemachine.State) { k = known{known: s.Len() + s.RetiredLen(), retired: s.RetiredLen()} })
	cancel()
	if err := <-done; err != nil {
		return took, cpu, k, fmt.Errorf("coordinator: %w", err)
	}
	return took, cpu, k, nil
}
