package statemachine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// world drives the state machine the way the engine does, with no I/O:
// effects are "carried out" by folding their events in (with increasing
// sequences), publishing is remembered, an integration lands at a made-up
// commit. Every effect carried out is described in one line, so a test
// reads as the list of what the coordinator would do.
type world struct {
	t         *testing.T
	st        *statemachine.State
	id        string
	now       time.Time
	seq       uint64
	published map[string]bool
	events    []eventlog.Event
	commits   int
	// roundTrip folds each event as the log gives it back: encoded and
	// decoded.
	roundTrip bool
	// samePatch makes every attempt's agent produce the same patch.
	samePatch bool
	// patchStat is the summary the agents' patches carry (nil: one file,
	// <node>.txt, changed; noStat: none, as an older runner's).
	patchStat *protocol.PatchStat
	noStat    bool
	// say, if set, is the final message a succeeded agent reports
	// (AgentResult.Run.Text) for node under lease token.
	say func(node string, token uint64) string
}

const testWF = "wf-test"

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// newWorld submits the workflow written in yaml and settles it; with
// roundTrip, every event is folded as the log gives it back.
func newWorld(t *testing.T, yaml string, roundTrip ...bool) (*world, []string) {
	t.Helper()
	spec, err := workflow.Parse("wf.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("workflow: %v", err)
	}
	return newWorldSpec(t, spec, roundTrip...)
}

// newWorldSpec is newWorld for a workflow already parsed.
func newWorldSpec(t *testing.T, spec *protocol.WorkflowSpec, roundTrip ...bool) (*world, []string) {
	t.Helper()
	w := &world{t: t, st: statemachine.New(), id: testWF, now: t0, published: map[string]bool{},
		roundTrip: len(roundTrip) > 0 && roundTrip[0]}
	repo := protocol.RepoRef{ID: "r-test", BaseCommit: strings.Repeat("b", 40), Bundle: "r-test/base.bundle"}
	got := w.carry(statemachine.Submit(testWF, statemachine.Submission{Spec: spec, Repo: repo, Source: "wf.yaml"}, w.now))
	return w, append(got, w.settle()...)
}

func (w *world) wf() *statemachine.Workflow {
	x, ok := w.st.Workflow(w.id)
	if !ok {
		w.t.Fatalf("no workflow %s", w.id)
	}
	return x
}

func (w *world) node(id string) *statemachine.Node {
	n := w.wf().Nodes[id]
	if n == nil {
		w.t.Fatalf("no node %s", id)
	}
	return n
}

// fold appends an event to the world's log and folds it in.
func (w *world) fold(ev eventlog.Event) {
	w.t.Helper()
	if w.roundTrip {
		data, err := eventlog.Encode(ev)
		if err != nil {
			w.t.Fatalf("encode %s: %v", describeEvent(ev), err)
		}
		if ev, err = eventlog.Decode(data); err != nil {
			w.t.Fatalf("decode %s: %v", describeEvent(ev), err)
		}
	}
	w.seq++
	ev.Seq = w.seq
	if err := w.st.Apply(ev); err != nil {
		w.t.Fatalf("fold %s: %v", describeEvent(ev), err)
	}
	w.events = append(w.events, ev)
}

// carry carries effects out and describes them.
func (w *world) carry(effects ...statemachine.Effect) []string {
	w.t.Helper()
	var out []string
	for _, eff := range effects {
		out = append(out, describe(eff))
		switch x := eff.(type) {
		case statemachine.Append:
			w.fold(x.Event)
		case statemachine.Publish:
			w.published[x.JobID()] = true
		case statemachine.Integrate:
			n := w.node(x.Node)
			commit := w.wf().Parent()
			if n.Patch != nil {
				w.commits++
				commit = fmt.Sprintf("%040d", w.commits)
			}
			ev := statemachine.IntegratedEvent(w.wf(), x.Node, x, commit, w.now).Event
			w.fold(ev)
			out = append(out, describeEvent(ev))
		case statemachine.Finish:
			w.fold(x.Event)
		case statemachine.Reopen:
		}
	}
	return out
}

// settle decides and carries out until there is nothing more to do, as
// the engine's advance does.
func (w *world) settle() []string {
	w.t.Helper()
	var out []string
	for range 1000 {
		d := statemachine.Decide(w.wf(), w.now, func(id string) bool { return w.published[id] })
		if len(d.Effects) == 0 {
			return out
		}
		before := w.seq
		out = append(out, w.carry(d.Effects...)...)
		if w.seq == before {
			return out
		}
	}
	w.t.Fatal("the workflow did not settle in 1000 rounds")
	return nil
}

// report folds a runner's report and settles; a stale report's reason is
// the one line returned.
func (w *world) report(r *protocol.Report) []string {
	w.t.Helper()
	effects, stale := statemachine.OnReport(w.wf(), r, w.now)
	if stale != "" {
		return []string{"stale: " + stale}
	}
	return append(w.carry(effects...), w.settle()...)
}

// command runs an operator's command and settles; a refusal is the one
// line returned, as "refused <kind>: <message>".
func (w *world) command(effects []statemachine.Effect, err error) []string {
	w.t.Helper()
	if err != nil {
		kind := "?"
		switch {
		case isKind(err, statemachine.ErrNotFound):
			kind = "not found"
		case isKind(err, statemachine.ErrConflict):
			kind = "conflict"
		}
		return []string{"refused " + kind + ": " + err.Error()}
	}
	return append(w.carry(effects...), w.settle()...)
}

func (w *world) started(node string, token uint64) []string {
	n := w.node(node)
	return w.report(&protocol.Report{Type: protocol.ReportStarted, Started: &protocol.Started{
		Kind: protocol.KindAgent, JobID: protocol.AgentJobID(w.id, node, n.Attempt), WorkflowID: w.id, NodeID: node,
		Attempt: n.Attempt, LeaseToken: token, Host: "h", PublishedAt: n.ReadyAt, StartedAt: w.now}})
}

// agentDone reports node's agent result under token; a succeeded agent
// with patch true made a change.
func (w *world) agentDone(node string, token uint64, st protocol.AgentStatus, patch bool) []string {
	n := w.node(node)
	a := &protocol.AgentResult{JobID: protocol.AgentJobID(w.id, node, n.Attempt), WorkflowID: w.id, NodeID: node,
		Attempt: n.Attempt, LeaseToken: token, Host: "h", Status: st, FinishedAt: w.now.Add(1500 * time.Millisecond)}
	if st != protocol.AgentSucceeded {
		a.ExitCode, a.Error = 3, "boom"
	} else if w.say != nil {
		a.Run = &protocol.AgentRun{Adapter: "claude-code", Success: true, Text: w.say(node, token)}
	}
	if patch {
		// Each attempt's patch differs from the others, unless samePatch.
		sum := fmt.Sprintf("sha-a%d", n.Attempt)
		if w.samePatch {
			sum = "sha-same"
		}
		stat := w.patchStat
		if stat == nil && !w.noStat {
			stat = &protocol.PatchStat{Files: 1, Insertions: 1, Paths: []string{node + ".txt"}}
		}
		a.Patch = &protocol.PatchRef{NodeID: node, Object: fmt.Sprintf("%s/%s/a%d.patch", w.id, node, n.Attempt), SHA256: sum, Size: 1,
			Stat: stat}
	}
	return w.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: a})
}

// agentFails reports node's agent failing (exit 1) with stderr.
func (w *world) agentFails(node string, token uint64, stderr string) []string {
	n := w.node(node)
	return w.report(&protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{
		JobID: protocol.AgentJobID(w.id, node, n.Attempt), WorkflowID: w.id, NodeID: node, Attempt: n.Attempt,
		LeaseToken: token, Host: "h", Status: protocol.AgentFailed, ExitCode: 1, Stderr: stderr, FinishedAt: w.now}})
}

// gateDone reports gate's result for its current round under token.
func (w *world) gateDone(node, gate string, token uint64, st protocol.GateStatus, violations ...string) []string {
	n := w.node(node)
	g := n.Gates[gate]
	if g == nil {
		w.t.Fatalf("%s has no gate %s", node, gate)
	}
	return w.gateRound(node, gate, g.Round, token, st, violations...)
}

func (w *world) gateRound(node, gate string, round int, token uint64, st protocol.GateStatus, violations ...string) []string {
	n := w.node(node)
	exit := map[protocol.GateStatus]int{protocol.GatePassed: 0, protocol.GatePending: 75}[st]
	if st == protocol.GateFailed {
		exit = 1
	}
	r := &protocol.GateResult{JobID: protocol.GateJobID(w.id, node, n.Attempt, gate, round), WorkflowID: w.id, NodeID: node,
		Gate: gate, Attempt: n.Attempt, LeaseToken: token, Host: "g", Status: st, ExitCode: &exit, Round: round}
	if len(violations) > 0 {
		r.IntegrityViolation, r.Violations = true, violations
	}
	return w.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: r})
}

// gateOOM reports gate's current round killed for running out of memory.
func (w *world) gateOOM(node, gate string, token uint64) []string {
	n := w.node(node)
	g := n.Gates[gate]
	return w.report(&protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{
		JobID: protocol.GateJobID(w.id, node, n.Attempt, gate, g.Round), WorkflowID: w.id, NodeID: node, Gate: gate,
		Attempt: n.Attempt, LeaseToken: token, Host: "g", Status: protocol.GateError, Round: g.Round,
		Error: "resource limit: out of memory", OOMKilled: true}})
}

// waiting reports that a runner holds node's agent job (gate "") or
// gate's job of round round back on breaker scope for a minute.
func (w *world) waiting(node, gate string, round int, scope string) []string {
	n := w.node(node)
	wt := &protocol.Waiting{Kind: protocol.KindAgent, JobID: protocol.AgentJobID(w.id, node, n.Attempt), WorkflowID: w.id,
		NodeID: node, Attempt: n.Attempt, Scope: scope, State: "open", Until: w.now.Add(time.Minute), Host: "h", Delivery: 1, At: w.now}
	if gate != "" {
		wt.Kind, wt.Gate, wt.Round = protocol.KindGate, gate, round
		wt.JobID = protocol.GateJobID(w.id, node, n.Attempt, gate, round)
	}
	return w.report(&protocol.Report{Type: protocol.ReportWaiting, Waiting: wt})
}

// later moves the clock on and settles.
func (w *world) later(d time.Duration) []string {
	w.now = w.now.Add(d)
	return w.settle()
}

func isKind(err, kind error) bool {
	r, ok := err.(*statemachine.Refusal)
	return ok && r.Kind == kind
}

func describe(eff statemachine.Effect) string {
	switch x := eff.(type) {
	case statemachine.Append:
		return describeEvent(x.Event)
	case statemachine.Publish:
		if x.Agent != nil {
			return fmt.Sprintf("publish agent %s a%d", x.Agent.NodeID, x.Agent.Attempt)
		}
		kind := "gate"
		if strings.Contains(x.Gate.JobID, fmt.Sprintf(".a%d.i.", x.Gate.Attempt)) {
			kind = "integration"
		}
		s := fmt.Sprintf("publish %s %s/%s r%d", kind, x.Gate.NodeID, x.Gate.Gate, x.Gate.Round)
		if x.Gate.NoCache {
			s += " no-cache"
		}
		return s
	case statemachine.Integrate:
		return "integrate " + x.Node
	case statemachine.Finish:
		s := "finish " + string(x.Event.Body.(eventlog.WorkflowFinished).Status)
		if x.Deliver {
			s += " deliver"
		}
		if x.Announce {
			s += " announce"
		}
		return s
	case statemachine.Reopen:
		return "reopen"
	}
	return fmt.Sprintf("%T", eff)
}

func describeEvent(ev eventlog.Event) string {
	s := string(ev.Type())
	if ev.NodeID != "" {
		s += " " + ev.NodeID
	}
	switch b := ev.Body.(type) {
	case eventlog.NodeFinished:
		s += " " + string(b.Status)
	case eventlog.GateDispatched:
		s += fmt.Sprintf("/%s r%d", b.Gate, b.Round)
		if b.Poll {
			s += " poll"
		}
	case eventlog.GateFinished:
		s += fmt.Sprintf("/%s %s", b.Gate, b.Result.Status)
	case eventlog.GateStarted:
		s += "/" + b.Gate
	case eventlog.NodeWaiting:
		s += " " + b.Scope
	case eventlog.GateWaiting:
		s += fmt.Sprintf("/%s r%d %s", b.Gate, b.Round, b.Scope)
	case eventlog.GateRerunRequested:
		s += "/" + b.Gate
	case eventlog.IntegrationDispatched:
		s += fmt.Sprintf("/%s r%d on [%s]", b.Gate, b.Round, strings.Join(b.Ahead, " "))
	case eventlog.IntegrationFinished:
		s += fmt.Sprintf("/%s %s", b.Gate, b.Result.Status)
	case eventlog.NodeAgentDone:
		s += " " + string(b.Result.Status)
	case eventlog.NodesAdded:
		for _, t := range b.Tasks {
			s += " +" + t.ID
		}
	case eventlog.NodeGatesChanged:
		if b.Change.Definition != nil {
			s += " +" + b.Change.Definition.Name
		} else {
			s += " -" + b.Change.Remove
		}
	}
	return s
}

// lines is a shorthand for a want list.
func lines(s ...string) []string { return s }

func check(t *testing.T, step string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\ngot:\n  %s\nwant:\n  %s", step, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
