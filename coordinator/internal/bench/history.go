package bench

// Realistic event-log history for the replay and scale scenarios: the
// events a coordinator appends for workflows of gated tasks that run to
// success (or are still running), written the way the log holds them.

import (
	"fmt"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// historyTasks is the number of tasks of each generated workflow.
const historyTasks = 10

// historyPrompt is each generated task's prompt: a paragraph, as real
// task descriptions are (they dominate a node's memory).
var historyPrompt = strings.Repeat("Refactor the parser so that it reports every error with its line. ", 6)

// historyYAML is the generated workflows' definition: historyTasks tasks
// with one gate each, a dependency between neighbours.
func historyYAML() []byte {
	var b strings.Builder
	b.WriteString("name: history\ndefaults:\n  agent:\n    command: [\"true\"]\n  timeout: 1m\n" +
		"gates:\n  - name: test\n    command: [\"go\", \"test\", \"./...\"]\n    timeout: 10m\ntasks:\n")
	for i := range historyTasks {
		fmt.Fprintf(&b, "  - id: t%02d\n    prompt: %q\n    files: [\"pkg/p%02d/**\"]\n", i, historyPrompt, i)
		if i%2 == 1 {
			fmt.Fprintf(&b, "    depends_on: [t%02d]\n", i-1)
		}
	}
	return []byte(b.String())
}

// history generates workflows' events in order.
type history struct {
	// spec is the workflow, parsed once: every event is encoded before it
	// is folded (the log, or foldWorkflow), so no two workflows share it.
	spec *protocol.WorkflowSpec
	at   time.Time
	n    int
}

// newHistory generates workflows submitted from start on, a second apart.
func newHistory(start time.Time) (*history, error) {
	spec, err := workflow.Parse("history.yaml", historyYAML())
	if err != nil {
		return nil, fmt.Errorf("the history's workflow: %w", err)
	}
	return &history{spec: spec, at: start}, nil
}

// stage is how far a generated workflow gets.
type stage int

const (
	// finished: every node succeeded and the workflow finished.
	finished stage = iota
	// inFlight: of the nodes without a dependency, half are being gated
	// and half run; those with one wait for it.
	inFlight
)

// next returns the id and events of the next workflow, which gets as far
// as st.
func (h *history) next(st stage) (string, []eventlog.Event, error) {
	spec := h.spec
	h.n++
	id := fmt.Sprintf("wf-h%011d", h.n)
	at := h.at
	h.at = h.at.Add(time.Second)
	tick := func() time.Time { at = at.Add(time.Millisecond); return at }
	repo := protocol.RepoRef{ID: "r-bench", BaseCommit: strings.Repeat("b", 40), Bundle: "r-bench/base.bundle"}
	evs := []eventlog.Event{{WorkflowID: id, Time: tick(),
		Body: eventlog.WorkflowSubmitted{Workflow: spec, Repo: repo, Source: "history.yaml", BaseBranch: "main"}}}
	add := func(node string, body eventlog.Body) {
		evs = append(evs, eventlog.Event{WorkflowID: id, NodeID: node, Time: tick(), Body: body})
	}
	for i, t := range spec.Tasks {
		host := fmt.Sprintf("worker-%d", i%4)
		if st == inFlight && i%2 == 1 {
			continue // waits for its dependency
		}
		add(t.ID, eventlog.NodeReady{Attempt: 1})
		add(t.ID, eventlog.NodeStarted{Attempt: 1, LeaseToken: 1, Host: host})
		if st == inFlight && i%4 == 2 {
			continue // still running
		}
		patch := &protocol.PatchRef{NodeID: t.ID, Object: fmt.Sprintf("%s/%s/a1.patch", id, t.ID),
			SHA256: strings.Repeat("c", 64), Size: 2048,
			Stat: &protocol.PatchStat{Files: 2, Insertions: 40, Deletions: 12, Paths: []string{"pkg/p/a.go", "pkg/p/a_test.go"}}}
		add(t.ID, eventlog.NodeAgentDone{Attempt: 1, LeaseToken: 1, Host: host, Result: &protocol.AgentResult{
			JobID: protocol.AgentJobID(id, t.ID, 1), WorkflowID: id, NodeID: t.ID, Attempt: 1, LeaseToken: 1, Host: host,
			Status: protocol.AgentSucceeded, Patch: patch, Log: fmt.Sprintf("%s/%s/a1/agent.log", id, t.ID)}})
		add(t.ID, eventlog.GateDispatched{Gate: "test", Attempt: 1, Round: 1})
		add(t.ID, eventlog.GateStarted{Gate: "test", Attempt: 1, LeaseToken: 1, Host: "gates-0"})
		if st == inFlight {
			continue // being gated
		}
		code := 0
		add(t.ID, eventlog.GateFinished{Gate: "test", Attempt: 1, Round: 1, LeaseToken: 1, Host: "gates-0",
			Result: &protocol.GateResult{JobID: protocol.GateJobID(id, t.ID, 1, "test", 1), WorkflowID: id, NodeID: t.ID,
				Gate: "test", Attempt: 1, LeaseToken: 1, Host: "gates-0", Status: protocol.GatePassed, ExitCode: &code,
				Stdout: "ok  \tgithub.com/example/p\t0.412s\n"}})
		add(t.ID, eventlog.NodeIntegrated{Attempt: 1, Branch: statemachine.BranchName(id), Commit: fmt.Sprintf("%040x", h.n*100+i),
			CommitTime: at.Truncate(time.Second)})
		add(t.ID, eventlog.NodeFinished{Attempt: 1, Status: protocol.NodeSucceeded})
	}
	if st == finished {
		add("", eventlog.WorkflowFinished{Status: protocol.WorkflowSucceeded, Branch: statemachine.BranchName(id),
			Commit: fmt.Sprintf("%040x", h.n*100+len(spec.Tasks)-1)})
	}
	return id, evs, nil
}
