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

// watch shows what a round's result block was found to be, and the nodes
// a plan added (OUT-06, HIER-01).
func TestOutputEventLines(t *testing.T) {
	at := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	ok := &protocol.AgentResult{Status: protocol.AgentSucceeded}
	for _, c := range []struct {
		body eventlog.Body
		want string
	}{
		{eventlog.NodeAgentDone{Attempt: 1, Result: ok, Output: &protocol.AgentOutput{Schema: "plan", Status: "COMPLETE", Block: []byte(`{}`)}},
			"agent succeeded (exit 0), no changes; plan result COMPLETE"},
		{eventlog.NodeAgentDone{Attempt: 1, Result: ok, Output: &protocol.AgentOutput{Schema: "review", Problem: protocol.OutputNoBlock,
			Error: "no JSON block found"}}, "review result not accepted: no JSON block found"},
		{eventlog.NodesAdded{Attempt: 1, Tasks: []protocol.TaskSpec{{ID: "p--a"}, {ID: "p--b"}}, Dependents: []string{"docs"}},
			"plan added 2 nodes: p--a, p--b; docs now wait for them"},
	} {
		var line bytes.Buffer
		printEvent(&line, eventlog.Event{WorkflowID: "wf-1", NodeID: "p", Time: at, Body: c.body})
		if !strings.Contains(line.String(), "node p") || !strings.Contains(line.String(), c.want) {
			t.Errorf("watch printed %q; want %q", line.String(), c.want)
		}
	}
}

// show prints each attempt's result check: the block, or what was wrong.
func TestShowPrintsOutput(t *testing.T) {
	d := api.NodeDetail{WorkflowID: "wf-1", Node: api.NodeSummary{ID: "p", Status: protocol.NodeSucceeded, Attempt: 2}, Budget: 3,
		Attempts: []api.AttemptDetail{
			{Attempt: 1, AgentStatus: protocol.AgentSucceeded, Outcome: "retry_scheduled", Reason: "output",
				Output: &protocol.AgentOutput{Schema: "plan", Problem: protocol.OutputInvalid, Error: "the block does not match the plan schema",
					Violations: []string{"/status: value must be one of 'COMPLETE'"}}},
			{Attempt: 2, AgentStatus: protocol.AgentSucceeded, Output: &protocol.AgentOutput{Schema: "plan", Status: "COMPLETE",
				Block: []byte(`{"status":"COMPLETE"}`)}},
		}}
	var out bytes.Buffer
	printNodeDetail(&out, d)
	for _, want := range []string{"plan result not accepted: the block does not match the plan schema\n    /status: value must be one of 'COMPLETE'",
		"plan result COMPLETE:\n    {\n      \"status\": \"COMPLETE\"\n    }"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show printed:\n%s\nwant %q", out.String(), want)
		}
	}
}

// show prints, per attempt, who retried it with what note and the
// feedback it received; what a retry policy's round received is the
// feedback printed just above as the attempt before gave it: printed once.
func TestShowPrintsWhatAnAttemptReceived(t *testing.T) {
	fb1, fb2 := []byte(`{"attempt":1,"next_attempt":2}`), []byte(`{"attempt":2,"next_attempt":3}`)
	noted := []byte(`{"attempt":2,"next_attempt":3,"note":{"from":"ada","text":"use strings.ToUpper"}}`)
	d := api.NodeDetail{WorkflowID: "wf-1", Node: api.NodeSummary{ID: "a", Status: protocol.NodeRunning, Attempt: 3}, Budget: 3,
		Attempts: []api.AttemptDetail{
			{Attempt: 1, AgentStatus: protocol.AgentSucceeded, Outcome: "retry_scheduled", Reason: "test failed", Feedback: fb1},
			{Attempt: 2, AgentStatus: protocol.AgentSucceeded, Outcome: "escalated", Reason: "test failed", Feedback: fb2,
				ReceivedFeedback: fb1},
			{Attempt: 3, RetriedBy: "ada", RetryNote: "use strings.ToUpper", ReceivedFeedback: noted},
		}}
	var out bytes.Buffer
	printNodeDetail(&out, d)
	for _, want := range []string{
		"attempt 1: agent succeeded → retry_scheduled: test failed\n  feedback given to attempt 2:\n",
		"attempt 2: agent succeeded → escalated: test failed\n  feedback given to attempt 3:\n",
		"attempt 3: agent \n  retried by ada with a note: use strings.ToUpper\n  feedback received:\n    {\n",
		`"text": "use strings.ToUpper"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show printed:\n%s\nwant %q", out.String(), want)
		}
	}
	if strings.Count(out.String(), "feedback received:") != 1 {
		t.Errorf("show printed a received feedback more than once:\n%s", out.String())
	}
}

// status names what a planner added and how a review came out.
func TestStatusOutputDetail(t *testing.T) {
	s := api.WorkflowSummary{ID: "wf-1", Name: "g", Status: protocol.WorkflowRunning, Nodes: []api.NodeSummary{
		{ID: "plan", Status: protocol.NodeSucceeded, Commit: "0123456789abcdef", Expanded: 3},
		{ID: "rev", Status: protocol.NodeSucceeded, ReviewRejected: true,
			Output: &protocol.AgentOutput{Schema: "review", Status: "CHANGES_REQUESTED", Block: []byte(`{}`)}},
	}}
	var out bytes.Buffer
	printWorkflow(&out, s)
	for _, want := range []string{"commit 0123456789ab; plan added 3 nodes", "review: CHANGES_REQUESTED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status printed:\n%s\nwant %q", out.String(), want)
		}
	}
}

// watch shows the fleet's pauses and resumes that concern the workflow:
// of those before it began only a pause still in force, once; those
// while it runs; those after its end only if it runs again (S-4.6).
func TestWatchFleetLines(t *testing.T) {
	at := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	paused := func(reason string) eventlog.Event {
		return eventlog.Event{WorkflowID: eventlog.FleetLogID, Time: at, Body: eventlog.FleetPaused{Reason: reason}}
	}
	resumed := func(by string) eventlog.Event {
		return eventlog.Event{WorkflowID: eventlog.FleetLogID, Time: at, Body: eventlog.FleetResumed{By: by}}
	}
	// step is a fleet event (ended: whether the workflow's last event so
	// far was its end) or, with wf set, one of the workflow's events.
	type step struct {
		fleet eventlog.Event
		wf    bool
		ended bool
	}
	for _, c := range []struct {
		name  string
		steps []step
		want  []string // the fleet lines shown, in order ("wf" for each workflow event)
	}{
		{"history: only the pause in force", []step{{fleet: paused("one")}, {fleet: resumed("ada")}, {fleet: paused("two")}, {wf: true}, {wf: true}},
			[]string{"paused: two", "wf", "wf"}},
		{"history ended by a resume", []step{{fleet: paused("one")}, {fleet: resumed("ada")}, {wf: true}}, []string{"wf"}},
		{"while it runs", []step{{wf: true}, {fleet: paused("one")}, {fleet: resumed("ada")}, {wf: true}},
			[]string{"wf", "paused: one", "resumed by ada", "wf"}},
		{"after its end: held", []step{{wf: true}, {fleet: paused("one"), ended: true}, {fleet: resumed("ada"), ended: true}},
			[]string{"wf"}},
		{"after its end, then it runs again", []step{{wf: true}, {fleet: paused("one"), ended: true}, {wf: true}},
			[]string{"wf", "paused: one", "wf"}},
	} {
		var out bytes.Buffer
		var f fleetLines
		for _, s := range c.steps {
			if s.wf {
				f.workflowEvent(&out)
				out.WriteString("wf\n")
				continue
			}
			f.event(&out, s.fleet, s.ended)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			switch {
			case l == "wf":
				got = append(got, l)
			case strings.Contains(l, "fleet") && strings.Contains(l, "paused: "):
				got = append(got, l[strings.Index(l, "paused: "):strings.Index(l, ";")])
			case strings.Contains(l, "fleet") && strings.Contains(l, "resumed by "):
				got = append(got, l[strings.Index(l, "resumed by "):])
			default:
				t.Errorf("%s: unexpected line %q", c.name, l)
			}
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s: shown %q, want %q", c.name, got, c.want)
		}
	}
}
