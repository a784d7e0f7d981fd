package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/bench"
)

// TestHistoryTiny runs the replay and scale scenarios at tiny sizes and
// checks that their reports are complete and consistent: both restarts
// know every workflow of the log, the snapshot restart folds only the
// tail, the counts add up, retired workflows cost less than kept ones. It
// never asserts on speed.
func TestHistoryTiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Concurrency: 1, Scenarios: []string{bench.ScenarioReplay, bench.ScenarioScale},
		WorkDir: t.TempDir(), FleetLog: quiet(), Progress: &progress,
		ReplayEvents: []int{300, 900}, ScaleNodes: []int{20, 60},
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if rep.Replay == nil || rep.Scale == nil || len(rep.Results) != 0 {
		t.Fatalf("report: replay %v, scale %v, results %d", rep.Replay, rep.Scale, len(rep.Results))
	}
	if len(rep.Replay.Points) != 2 {
		t.Fatalf("replay points: %d, want 2", len(rep.Replay.Points))
	}
	for i, p := range rep.Replay.Points {
		want := []int{300, 900}[i]
		// Each part, history and tail, ends with a whole workflow (82
		// events at most).
		if p.Events < want || p.Events > want+2*82 {
			t.Errorf("point %d: %d events, want %d to %d", i, p.Events, want, want+2*82)
		}
		if p.TailEvents != want/10 {
			t.Errorf("point %d: tail %d, want %d", i, p.TailEvents, want/10)
		}
		if p.FullWorkflows != p.Workflows || p.SnapshotWorkflows != p.Workflows {
			t.Errorf("point %d: the log has %d workflows; the full restart knows %d, the snapshot one %d",
				i, p.Workflows, p.FullWorkflows, p.SnapshotWorkflows)
		}
		if p.Retired == 0 || p.Retired > p.Workflows-p.InFlight || p.SnapshotBytes <= 0 {
			t.Errorf("point %d: %d retired of %d workflows (%d in flight), snapshot %d bytes", i, p.Retired, p.Workflows,
				p.InFlight, p.SnapshotBytes)
		}
		if p.FullSeconds <= 0 || p.SnapshotSeconds <= 0 || p.Speedup != p.FullSeconds/p.SnapshotSeconds {
			t.Errorf("point %d: times %v and %v, speed-up %v", i, p.FullSeconds, p.SnapshotSeconds, p.Speedup)
		}
	}
	if len(rep.Scale.Tracked) != 2 || len(rep.Scale.Growth) != 2 {
		t.Fatalf("scale points: %d tracked, %d growth; want 2 and 2", len(rep.Scale.Tracked), len(rep.Scale.Growth))
	}
	for i, p := range rep.Scale.Tracked {
		if p.Nodes != []int{20, 60}[i] || p.Workflows != p.Nodes/10 || p.EventsFolded == 0 {
			t.Errorf("tracked point %d: %+v", i, p)
		}
	}
	for i, g := range rep.Scale.Growth {
		if g.FinishedNodes != []int{20, 60}[i] || g.Workflows != g.FinishedNodes/10 {
			t.Errorf("growth point %d: %+v", i, g)
		}
		if g.KeptHeap <= g.RetiredHeap {
			t.Errorf("growth point %d: kept workflows hold %d bytes, retired ones %d", i, g.KeptHeap, g.RetiredHeap)
		}
	}
	var table bytes.Buffer
	bench.PrintTable(&table, rep)
	for _, s := range []string{"replay:", "scale:", "FROM SNAPSHOT", "RETIRED HEAP"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}
