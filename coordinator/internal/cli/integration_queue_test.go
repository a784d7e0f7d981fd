package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// status and watch show the integration queue (GIT-08): a queued node's
// position and what its integration gates run on, and each run's
// dispatch and result.
func TestIntegrationQueueLines(t *testing.T) {
	s := api.WorkflowSummary{ID: "wf-1", Name: "q", Status: protocol.WorkflowRunning, Nodes: []api.NodeSummary{{
		ID: "b", Status: protocol.NodeIntegrating, Attempt: 1,
		Integration: &api.QueueEntry{Position: 2, Speculation: "0123456789ab", Integrated: 1, Ahead: []string{"a"},
			Gates: []api.GateSummary{{Name: "combined"}}},
	}}}
	var out bytes.Buffer
	printWorkflow(&out, s)
	if want := "queued for integration, position 2, tested on the branch (1 integrated) + a [combined:running]"; !strings.Contains(out.String(), want) {
		t.Errorf("status printed:\n%s\nwant a line with %q", out.String(), want)
	}

	exit := 1
	at := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		body eventlog.Body
		want string
	}{
		{eventlog.NodeIntegrationQueued{Attempt: 1}, "queued for integration (attempt 1)"},
		{eventlog.IntegrationDispatched{Attempt: 1, Gate: "combined", Round: 1, Speculation: "0123456789ab", Ahead: []string{"a"}},
			"integration gate combined dispatched on the branch + a (speculation 0123456789ab)"},
		{eventlog.IntegrationFinished{Attempt: 1, Gate: "combined", Round: 1, Speculation: "0123456789ab",
			Result: &protocol.GateResult{Status: protocol.GateFailed, ExitCode: &exit}},
			"integration gate combined failed (exit 1) on speculation 0123456789ab"},
	} {
		var line bytes.Buffer
		printEvent(&line, eventlog.Event{WorkflowID: "wf-1", NodeID: "b", Time: at, Body: c.body})
		if !strings.Contains(line.String(), "node b") || !strings.Contains(line.String(), c.want) {
			t.Errorf("watch printed %q; want node b and %q", line.String(), c.want)
		}
	}
}
