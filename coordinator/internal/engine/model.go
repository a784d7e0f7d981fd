package engine

import (
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Workflow is the coordinator's view of one workflow: a fold of its events.
type Workflow struct {
	ID          string
	Spec        *protocol.WorkflowSpec
	Repo        protocol.RepoRef
	RepoPath    string
	Source      string
	Status      protocol.WorkflowStatus
	SubmittedAt time.Time
	FinishedAt  time.Time
	Reason      string
	Nodes       map[string]*Node
	// Order is the nodes' topological order (ties in declaration order).
	Order []string
	// Branch receives the accepted patches; Head is its tip ("" = base).
	Branch string
	Head   string
	// Integrated lists nodes in the order their patches reached Branch.
	Integrated      []string
	CancelRequested bool
	// LastSeq is the sequence of the last event folded in.
	LastSeq uint64
	// Generation counts reopenings (gate reruns of failed nodes).
	Generation int

	deps map[string][]string
}

// Node is one task's state.
type Node struct {
	ID         string
	Task       protocol.TaskSpec
	Status     protocol.NodeStatus
	Attempt    int
	LeaseToken uint64
	Host       string
	Agent      *protocol.AgentResult
	Patch      *protocol.PatchRef
	// GateOrder is the node's gates in dispatch order (dependency layers,
	// ties alphabetical), including gates pulled in through depends_on.
	GateOrder []string
	Gates     map[string]*GateRun
	// GateSpecs are the definitions in effect for this node (workflow
	// gates, with the task's own front-matter gates replacing them), and
	// OnFail what each gate's failure does to it (OF-01…OF-04).
	GateSpecs map[string]protocol.GateSpec
	OnFail    map[string]gates.FailAction
	Commit    string
	Reason    string
	ReadyAt   time.Time
	StartedAt time.Time
	EndedAt   time.Time

	// published is true once the current job was published by this
	// process; it is not event-sourced, so a restarted coordinator
	// republishes (harmlessly, thanks to Nats-Msg-Id) what may be missing.
	published bool
}

// GateRun is one gate's state for the node's current attempt.
type GateRun struct {
	Name       string
	Dispatched bool
	Round      int
	Status     protocol.GateStatus // "" until a result arrives
	LeaseToken uint64
	Host       string
	Result     *protocol.GateResult
	// PendingSince is when the gate first reported pending in this
	// attempt (the pending clock, decision 3); NextPollAt when it runs again.
	PendingSince time.Time
	NextPollAt   time.Time
	// NoCache is set when a rerun asked to bypass the gate cache.
	NoCache bool
	// Awaiting is true from a round's dispatch until its result, so a
	// pending gate is not polled again while a poll is out.
	Awaiting  bool
	published bool
}

// blocking reports whether the gate ended in a failure that counts: any
// non-passing final status except a failure whose on_fail is warn. An
// integrity violation always blocks, whatever the gate's severity (DESIGN
// decision 7). Skipped gates block too, so skips propagate (DP-08).
func (n *Node) blocking(name string) bool {
	g := n.Gates[name]
	if g == nil || !g.terminal() || g.Status == protocol.GatePassed {
		return false
	}
	if g.Result != nil && g.Result.IntegrityViolation {
		return true
	}
	if g.Status == protocol.GateSkipped {
		return true
	}
	return n.OnFail[name] != gates.Warn
}

// terminal reports whether the gate has a final status.
func (g *GateRun) terminal() bool {
	switch g.Status {
	case "", protocol.GatePending:
		return false
	}
	return true
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Summary renders the workflow for the API; withNodes adds per-node detail.
func (w *Workflow) Summary(withNodes bool) api.WorkflowSummary {
	s := api.WorkflowSummary{
		ID: w.ID, Name: w.Spec.Name, Status: w.Status, Source: w.Source, RepoPath: w.RepoPath,
		BaseCommit: w.Repo.BaseCommit, Branch: w.Branch, Head: w.Head, Reason: w.Reason,
		SubmittedAt: w.SubmittedAt, FinishedAt: timePtr(w.FinishedAt), Counts: map[string]int{},
	}
	if w.Status == protocol.WorkflowSucceeded {
		s.ResultBundle = ResultBundleName(w.ID)
	}
	for _, id := range w.Order {
		n := w.Nodes[id]
		s.Counts[string(n.Status)]++
		if !withNodes {
			continue
		}
		ns := api.NodeSummary{
			ID: id, Status: n.Status, Attempt: n.Attempt, Host: n.Host, DependsOn: n.Task.DependsOn,
			Commit: n.Commit, Reason: n.Reason, StartedAt: timePtr(n.StartedAt), EndedAt: timePtr(n.EndedAt),
		}
		if n.Agent != nil {
			ns.Sandbox = n.Agent.Sandbox
		}
		for _, g := range n.GateOrder {
			gr := n.Gates[g]
			gs := api.GateSummary{Name: g, Attempt: n.Attempt}
			if gr != nil {
				gs.Status, gs.Host, gs.Round = gr.Status, gr.Host, gr.Round
				if r := gr.Result; r != nil {
					gs.ExitCode, gs.Log, gs.DurationMillis = r.ExitCode, r.Log, r.DurationMillis
					gs.Cached, gs.CacheDisabled, gs.Output = r.Cached, r.CacheDisabled, r.Output
					gs.IntegrityViolation, gs.Violations, gs.Error = r.IntegrityViolation, r.Violations, r.Error
					gs.Sandbox = r.Sandbox
					if gs.Output == "" {
						gs.Output = strings.TrimSpace(r.Stdout + "\n" + r.Stderr)
					}
				}
			}
			ns.Gates = append(ns.Gates, gs)
		}
		s.Nodes = append(s.Nodes, ns)
	}
	return s
}

// ResultBundleName is the object name of a workflow's result branch bundle.
func ResultBundleName(wf string) string { return "results/" + wf + ".bundle" }

// BranchName is the branch a workflow's accepted work lands on.
func BranchName(wf string) string { return "supervisor/" + wf }
