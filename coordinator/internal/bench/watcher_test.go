package bench

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The watcher reads nothing of the log until a window closes; then settle
// reads it all, in log order, into the figures, and a later reading
// (collect, or progress explaining a failure) goes on from where the last
// one stopped, counting nothing twice. The log is a real JetStream stream.
func TestWatcherReadsTheLogAfterTheWindow(t *testing.T) {
	ctx := testkit.Context(t, time.Minute)
	srv, err := embedded.Start(embedded.Options{Host: "127.0.0.1", StoreDir: filepath.Join(t.TempDir(), "js"), ServerName: "bench-watcher"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	b, err := bus.Open(ctx, srv.URL(), "bench-watcher", bus.Config{}, testkit.Logger(t), bus.InProcess(srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	at := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	ev := func(wf, node string, d time.Duration, body eventlog.Body) eventlog.Event {
		return eventlog.Event{WorkflowID: wf, NodeID: node, Time: at.Add(d), Body: body}
	}
	appendAll := func(events ...eventlog.Event) {
		t.Helper()
		for len(events) > 0 {
			_, n, _, err := b.AppendEvents(ctx, events)
			if err != nil {
				t.Fatal(err)
			}
			events = events[n:]
		}
	}
	// A batch of two node.ready, then one message per event.
	appendAll(ev("wf-w", "a", 0, eventlog.NodeReady{Attempt: 1}), ev("wf-w", "b", 0, eventlog.NodeReady{Attempt: 1}))
	for i, n := range []string{"a", "b"} {
		d := time.Duration(i+1) * time.Millisecond
		appendAll(ev("wf-w", n, d, eventlog.NodeStarted{Attempt: 1, Host: "h", LatencyMicros: int64(100 * (i + 1))}))
		appendAll(ev("wf-w", n, 2*d, eventlog.NodeAgentDone{Attempt: 1}))
		appendAll(ev("wf-w", n, 3*d, eventlog.NodeFinished{Attempt: 1, Status: protocol.NodeSucceeded}))
	}
	appendAll(ev("wf-w", "", 10*time.Millisecond, eventlog.WorkflowFinished{Status: protocol.WorkflowSucceeded}))

	// wait finds the end in the workflow's last message, and reads
	// nothing else.
	// No coordinator answers the listing here: wait goes on without it.
	w := newWatcher(b, &api.Client{NC: b.NC})
	end, err := w.wait(ctx, []string{"wf-w"})
	if err != nil || !end.Equal(at.Add(10*time.Millisecond)) {
		t.Fatalf("wait = %v, %v; want the workflow.finished time %v", end, err, at.Add(10*time.Millisecond))
	}
	if len(w.wfs) != 0 || w.next != 1 {
		t.Fatalf("wait read the log: %d workflows, next sequence %d", len(w.wfs), w.next)
	}
	// A workflow with no events has not finished.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := w.wait(short, []string{"wf-w", "wf-none"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a workflow with no events: %v, want the deadline", err)
	}
	w.settle()
	st, err := w.collect([]string{"wf-w"})
	if err != nil {
		t.Fatal(err)
	}
	// The readings left no consumer on the log.
	stream, err := b.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("the event log has %d consumers after the readings, want none", info.State.Consumers)
	}
	if st.succeeded != 2 || len(st.nodeLatency) != 2 || len(st.turnaround) != 2 || st.agentHosts["h"] != 2 {
		t.Fatalf("collect read %+v, want 2 nodes succeeded, started and turned around on host h", st)
	}
	if wf := w.wfs["wf-w"]; !wf.finished || !wf.finishedAt.Equal(at.Add(10*time.Millisecond)) {
		t.Fatalf("workflow.finished read as %v at %v", wf.finished, wf.finishedAt)
	}

	// A second workflow fails: wait explains it from the log, reading
	// only what is new; the first workflow is not counted again.
	appendAll(ev("wf-x", "a", 0, eventlog.NodeFinished{Attempt: 1, Status: protocol.NodeFailed, Reason: "gate vet failed"}))
	appendAll(ev("wf-x", "", time.Millisecond, eventlog.WorkflowFinished{Status: protocol.WorkflowFailed, Reason: "1 node failed"}))
	if _, err := w.wait(ctx, []string{"wf-x"}); err == nil || !strings.Contains(err.Error(), "gate vet failed") {
		t.Fatalf("wait on a failed workflow: %v, want the first node's failure", err)
	}
	st, err = w.collect([]string{"wf-w"})
	if err != nil || st.succeeded != 2 || len(st.nodeLatency) != 2 {
		t.Fatalf("after a second reading: %d nodes succeeded, %d latencies, %v; want 2, 2", st.succeeded, len(st.nodeLatency), err)
	}
}

// listed reads the coordinator's listing as wait needs it.
func TestListed(t *testing.T) {
	t1 := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Second)
	sum := func(id string, st protocol.WorkflowStatus, fin *time.Time) api.WorkflowSummary {
		return api.WorkflowSummary{ID: id, Status: st, FinishedAt: fin}
	}
	for _, tc := range []struct {
		name     string
		sums     []api.WorkflowSummary
		last     time.Time
		finished int
		failed   bool
	}{
		{"none listed yet", nil, time.Time{}, 0, false},
		{"running", []api.WorkflowSummary{sum("a", protocol.WorkflowRunning, nil)}, time.Time{}, 0, false},
		{"both succeeded: the later end", []api.WorkflowSummary{
			sum("a", protocol.WorkflowSucceeded, &t2), sum("b", protocol.WorkflowSucceeded, &t1)}, t2, 2, false},
		{"another workflow is not counted", []api.WorkflowSummary{
			sum("a", protocol.WorkflowSucceeded, &t1), sum("z", protocol.WorkflowFailed, &t2)}, t1, 1, false},
		{"waits for a human", []api.WorkflowSummary{sum("a", protocol.WorkflowNeedsAttention, nil)}, time.Time{}, 0, true},
		{"failed", []api.WorkflowSummary{sum("b", protocol.WorkflowFailed, &t1)}, t1, 1, true},
		{"cancelled", []api.WorkflowSummary{sum("b", protocol.WorkflowCancelled, &t1)}, t1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last, finished, failed := listed(tc.sums, []string{"a", "b"})
			if !last.Equal(tc.last) || finished != tc.finished || failed != tc.failed {
				t.Fatalf("listed = %v, %d, %v; want %v, %d, %v", last, finished, failed, tc.last, tc.finished, tc.failed)
			}
		})
	}
}
