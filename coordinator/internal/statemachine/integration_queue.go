package statemachine

// The integration queue (gating as Zuul's gate pipeline does it): in a
// workflow with integration_gates, a node whose own gates passed (and
// whose approval step, if any, approved it) does not land at once. It joins
// the workflow's integration queue, and its integration gates run as
// ordinary gate jobs on a speculative base: the base commit, every patch
// already on the branch in order, the patches of the queued nodes ahead of
// it, then its own. Queued nodes are tested in parallel, each on top of
// those ahead. A node lands once its run passed and every node ahead has
// landed. A node whose run failed leaves the queue once nothing ahead of
// it can still land (a failure is only its own when the base it failed on
// is the branch), the nodes behind it are tested again without it, and
// its failure is a failed round with feedback naming the nodes it broke
// the combination with.
//
// A speculation is identified by a digest of the sequence of patches its
// run applies. Each result is matched to the speculation it was
// dispatched for; when the queue ahead of a node changes, its speculation
// changes, and results of the old one are ignored.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// Speculation is a queued node's speculative run of the integration
// gates on one base.
type Speculation struct {
	// ID identifies the sequence of patches the run applies.
	ID string
	// Integrated counts the nodes on the branch when the speculation
	// began, whose patches its runs apply first, and Ahead names the
	// queued nodes, not on the branch then, whose patches come next,
	// before the node's own. Nodes ahead may land while it runs: the
	// sequence of patches, and so the speculation, stays the same.
	Integrated int
	Ahead      []string
	// Gates are the runs of the integration gates, by name.
	Gates map[string]*GateRun
	// Since is when the speculation's first gate was dispatched.
	Since time.Time
}

// failureGatePrefix marks an integration gate in a round's failed gates
// (node.retry_scheduled, node.escalated), whose failures are counted
// apart from a task gate of the same name.
const failureGatePrefix = "integration:"

// IntegrationJobID is the job id of round round of integration gate gate
// for node's attempt: rounds count up across speculations, so every run
// has an id of its own.
func IntegrationJobID(wf, node string, attempt int, gate string, round int) string {
	return fmt.Sprintf("%s.%s.a%d.i.%s.r%d", wf, node, attempt, gate, round)
}

// integrationJobPrefix is what every integration job id of node's attempt
// starts with.
func integrationJobPrefix(wf, node string, attempt int) string {
	return fmt.Sprintf("%s.%s.a%d.i.", wf, node, attempt)
}

// setIntegrationGates computes the workflow's integration gate plan.
func (w *Workflow) setIntegrationGates() error {
	if len(w.Spec.IntegrationGates) == 0 {
		return nil
	}
	layers, err := workflow.GateLayers(w.Spec.Gates, w.Spec.IntegrationGates)
	if err != nil {
		return fmt.Errorf("integration_gates: %w", err)
	}
	byName := make(map[string]protocol.GateSpec, len(w.Spec.Gates))
	for _, g := range w.Spec.Gates {
		byName[g.Name] = g
	}
	w.IntegrationSpecs = map[string]protocol.GateSpec{}
	for _, layer := range layers {
		for _, g := range layer {
			w.IntegrationOrder = append(w.IntegrationOrder, g)
			w.IntegrationSpecs[g] = byName[g]
		}
	}
	return nil
}

// Gated reports whether the workflow has integration gates: its nodes
// land through the integration queue.
func (w *Workflow) Gated() bool { return len(w.IntegrationOrder) > 0 }

// IntegrationQueue returns the nodes waiting in the integration queue, in
// queue order: first the head, which lands next.
func (w *Workflow) IntegrationQueue() []string {
	var out []string
	for _, id := range w.queue {
		if n := w.Nodes[id]; n.Status == protocol.NodeIntegrating && !n.Integrated() {
			out = append(out, id)
		}
	}
	return out
}

// applyIntegration folds the integration queue's events.
func (w *Workflow) applyIntegration(n *Node, ev eventlog.Event) {
	switch b := ev.Body.(type) {
	case eventlog.NodeIntegrationQueued:
		r := part(&n.rare)
		n.Status, n.Reason, r.QueuedAt, r.Speculation = protocol.NodeIntegrating, "", ev.Time, nil
		tidy(&n.rare)
		w.queue = append(slices.DeleteFunc(w.queue, func(id string) bool { return id == n.ID }), n.ID)
	case eventlog.IntegrationDispatched:
		s := n.Speculation()
		if s == nil || s.ID != b.Speculation {
			s = &Speculation{ID: b.Speculation, Ahead: b.Ahead, Integrated: len(w.Integrated),
				Gates: map[string]*GateRun{}, Since: ev.Time}
			part(&n.rare).Speculation = s
		}
		g := s.Gates[b.Gate]
		if g == nil {
			g = &GateRun{Name: b.Gate}
			s.Gates[b.Gate] = g
		}
		g.Dispatched, g.Round, g.Awaiting, g.LeaseToken = true, b.Round, true, 0
		g.jobID = IntegrationJobID(w.ID, n.ID, n.Attempt, b.Gate, b.Round)
		r := part(&n.rare)
		if r.integRounds == nil {
			r.integRounds = map[string]int{}
		}
		r.integRounds[b.Gate] = max(r.integRounds[b.Gate], b.Round)
	case eventlog.IntegrationFinished:
		s := n.Speculation()
		if s == nil || s.ID != b.Speculation {
			return // a superseded speculation's: it no longer counts
		}
		g := s.Gates[b.Gate]
		if g == nil || g.Round != b.Round {
			if g != nil || b.Result.Status != protocol.GateSkipped {
				return
			}
			g = &GateRun{Name: b.Gate, Round: b.Round}
			s.Gates[b.Gate] = g
		}
		g.Status, g.Result, g.Awaiting, g.LeaseToken = b.Result.Status, b.Result, false, b.LeaseToken
		if b.Host != "" {
			g.Host = b.Host
		}
		if g.Status == protocol.GatePending {
			g.setPending(ev.Time, ev.Time.Add(w.IntegrationSpecs[b.Gate].PollInterval()))
		}
	}
}

// speculationResults are the results of the node's current speculation,
// by gate name, for its attempt's history.
func (n *Node) speculationResults() []protocol.GateResult {
	s := n.Speculation()
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.Gates))
	for name := range s.Gates {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []protocol.GateResult
	for _, name := range names {
		if r := s.Gates[name].Result; r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// speculationID identifies the run of n's integration gates on the
// branch's patches, then those of the nodes ahead, then n's own: the same
// sequence of patches gives the same id whether the nodes ahead have
// landed or not.
func (w *Workflow) speculationID(ahead []string, n *Node) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", w.Repo.BaseCommit)
	write := func(id string) {
		p := "-"
		if x := w.Nodes[id]; x.Patch != nil {
			p = x.Patch.SHA256
		}
		fmt.Fprintf(h, "%s\x00%s\x00", id, p)
	}
	for _, id := range w.Integrated {
		write(id)
	}
	for _, id := range ahead {
		write(id)
	}
	write(n.ID)
	fmt.Fprintf(h, "a%d", n.Attempt)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// speculativePatches are the patches a run of n's integration gates
// applies on the base commit.
func (w *Workflow) speculativePatches(ahead []string, n *Node) []protocol.PatchRef {
	var out []protocol.PatchRef
	for _, id := range append(slices.Clone(w.Integrated), append(slices.Clone(ahead), n.ID)...) {
		if p := w.Nodes[id].Patch; p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// queueForIntegration puts n at the end of the integration queue.
func (d *decider) queueForIntegration(n *Node) {
	d.append(n, eventlog.NodeIntegrationQueued{Attempt: n.Attempt},
		fmt.Sprintf("%s.%s.a%d.queued", d.w.ID, n.ID, n.Attempt))
}

// integrationQueue decides the queued nodes, head first. ahead collects
// the nodes a node behind is tested on top of: every queued node ahead
// of it that has not landed, save those whose run failed.
func (d *decider) integrationQueue() {
	var ahead []string
	for _, id := range d.w.queue {
		n := d.w.Nodes[id]
		if n.Status != protocol.NodeIntegrating {
			continue
		}
		if n.Integrated() {
			d.finishNode(n, protocol.NodeSucceeded, "")
			continue
		}
		spec := d.w.speculationID(ahead, n)
		if s := n.Speculation(); s == nil || s.ID != spec {
			d.speculate(n, spec, ahead)
			ahead = append(ahead, id)
			continue
		}
		switch d.speculativeGates(n, ahead) {
		case workflow.OutcomePassed:
			// Not while another patch is about to land outside the queue
			// (an escalated node a human approved): the run did not
			// assume it, and will run again once it is on the branch.
			if len(ahead) == 0 && !d.integrates() {
				d.Effects = append(d.Effects, Integrate{Node: n.ID, CommitTime: d.w.commitTime(n)})
			}
			ahead = append(ahead, id)
		case workflow.OutcomeFailed:
			// Those behind are tested without it. Its failure is its own
			// once nothing it was not tested on can still land before it.
			if len(ahead) == 0 {
				d.roundFailed(n, d.w.integrationFailure(n))
			}
		default:
			ahead = append(ahead, id)
		}
	}
}

// integrates reports whether the decision already lands a patch.
func (d *decider) integrates() bool {
	for _, e := range d.Effects {
		if _, ok := e.(Integrate); ok {
			return true
		}
	}
	return false
}

// speculate starts a new speculation of n's integration gates on top of
// the branch and ahead: the gates of the first layer are dispatched.
func (d *decider) speculate(n *Node, spec string, ahead []string) {
	for _, name := range d.w.IntegrationOrder {
		if len(d.w.IntegrationSpecs[name].DependsOn) == 0 {
			d.dispatchIntegration(n, name, spec, ahead, false)
		}
	}
}

// dispatchIntegration starts a new round of integration gate name for n
// on speculation spec and publishes its job.
func (d *decider) dispatchIntegration(n *Node, name, spec string, ahead []string, poll bool) {
	round := n.integRounds()[name] + 1
	id := IntegrationJobID(d.w.ID, n.ID, n.Attempt, name, round)
	d.append(n, eventlog.IntegrationDispatched{Attempt: n.Attempt, Gate: name, Round: round, Speculation: spec,
		Ahead: slices.Clone(ahead), Poll: poll}, id+".dispatched")
	d.publishIntegration(n, name, round, ahead)
}

// publishIntegration publishes round round of integration gate name of n,
// unless the engine reports it published.
func (d *decider) publishIntegration(n *Node, name string, round int, ahead []string) {
	id := IntegrationJobID(d.w.ID, n.ID, n.Attempt, name, round)
	if d.published != nil && d.published(id) {
		return
	}
	spec := d.w.IntegrationSpecs[name]
	def := spec
	job := &protocol.GateJob{
		JobID: id, WorkflowID: d.w.ID, NodeID: n.ID, Attempt: n.Attempt, Gate: name, Pool: spec.Pool,
		Repo: d.w.Repo, Patches: d.w.speculativePatches(ahead, n), Command: spec.Command, Env: spec.Env,
		WorkingDir: spec.WorkingDir, TimeoutSeconds: spec.TimeoutSeconds, PublishedAt: d.now.UTC(),
		Round: round, Definition: &def,
	}
	if job.Pool == "" {
		job.Pool = protocol.DefaultPool
	}
	d.Effects = append(d.Effects, Publish{Gate: job})
}

// speculativeGates moves n's current speculation on: gates whose
// dependencies passed are dispatched, those whose dependency failed are
// skipped, pending ones are polled, and jobs this engine has not published
// are published again. It returns the speculation's outcome once every
// gate has reported ("" while some has not).
func (d *decider) speculativeGates(n *Node, ahead []string) workflow.Outcome {
	s := n.Speculation()
	moved := false
	statuses := make([]protocol.GateStatus, 0, len(d.w.IntegrationOrder))
	for _, name := range d.w.IntegrationOrder {
		spec := d.w.IntegrationSpecs[name]
		g := s.Gates[name]
		switch {
		case g == nil:
			blocked, waiting := speculationDepState(s, spec)
			switch {
			case blocked != "":
				res := &protocol.GateResult{WorkflowID: d.w.ID, NodeID: n.ID, Gate: name, Attempt: n.Attempt,
					Status: protocol.GateSkipped, Error: "skipped: " + blocked}
				d.append(n, eventlog.IntegrationFinished{Attempt: n.Attempt, Gate: name, Speculation: s.ID, Result: res,
					Reason: blocked}, fmt.Sprintf("%s.%s.a%d.i.%s.%s.skipped", d.w.ID, n.ID, n.Attempt, name, s.ID))
				moved = true
			case !waiting:
				d.dispatchIntegration(n, name, s.ID, ahead, false)
				moved = true
			}
			statuses = append(statuses, "")
			continue
		case g.Status == protocol.GatePending:
			moved = d.pendingIntegration(n, g, spec, ahead) || moved
		case !g.Terminal():
			d.publishIntegration(n, name, g.Round, ahead)
		}
		statuses = append(statuses, g.Status)
	}
	if moved || slices.Contains(statuses, "") {
		return ""
	}
	return workflow.FoldGates(statuses)
}

// speculationDepState is gateDepState for an integration gate: every
// failure of an integration gate blocks.
func speculationDepState(s *Speculation, spec protocol.GateSpec) (blocked string, waiting bool) {
	for _, dep := range spec.DependsOn {
		dg := s.Gates[dep]
		switch {
		case dg != nil && dg.Status == protocol.GatePassed:
		case dg == nil || !dg.Terminal():
			waiting = true
		case spec.SkipsOnDependencyFailure():
			if blocked == "" {
				blocked = fmt.Sprintf("integration gate %s %s", dep, dg.Status)
			}
		}
	}
	return blocked, waiting
}

// pendingIntegration polls a pending integration gate, or times it out
// past its max_pending, as pendingGate does for a node's gate.
func (d *decider) pendingIntegration(n *Node, g *GateRun, spec protocol.GateSpec, ahead []string) bool {
	limit := spec.MaxPending()
	deadline := g.PendingSince().Add(limit)
	if d.now.After(deadline) {
		reason := fmt.Sprintf("pending since %s, longer than max_pending %s", g.PendingSince().UTC().Format(time.RFC3339), limit)
		res := &protocol.GateResult{WorkflowID: d.w.ID, NodeID: n.ID, Gate: g.Name, Attempt: n.Attempt,
			Status: protocol.GateTimeout, Error: reason, Round: g.Round}
		d.append(n, eventlog.IntegrationFinished{Attempt: n.Attempt, Gate: g.Name, Round: g.Round,
			Speculation: n.Speculation().ID, Result: res, Reason: reason},
			IntegrationJobID(d.w.ID, n.ID, n.Attempt, g.Name, g.Round)+".pending-timeout")
		return true
	}
	d.wakeAt(deadline.Add(time.Millisecond))
	switch {
	case g.Awaiting:
		d.publishIntegration(n, g.Name, g.Round, ahead)
	case d.now.Before(g.NextPollAt()):
		d.wakeAt(g.NextPollAt())
	default:
		d.dispatchIntegration(n, g.Name, n.Speculation().ID, ahead, true)
		return true
	}
	return false
}

// integrationFailure is the failure of n's current speculation: the
// integration gates that did not pass, and the nodes whose work it was
// tested on top of that n's own agent did not build on (the nodes on the
// branch that it did not start from, and those queued ahead of it).
func (w *Workflow) integrationFailure(n *Node) failure {
	s := n.Speculation()
	f := failure{integration: true}
	anc := w.builtOn(n.ID)
	for _, id := range w.Integrated[:min(s.Integrated, len(w.Integrated))] {
		if !anc[id] {
			f.ahead = append(f.ahead, id)
		}
	}
	for _, id := range s.Ahead {
		if !slices.Contains(f.ahead, id) {
			f.ahead = append(f.ahead, id)
		}
	}
	var why []string
	for _, name := range w.IntegrationOrder {
		g := s.Gates[name]
		if g == nil || !g.Terminal() || g.Status == protocol.GatePassed || g.Status == protocol.GateSkipped {
			continue
		}
		f.gates = append(f.gates, failureGatePrefix+name)
		switch {
		case g.Result != nil && g.Result.IntegrityViolation:
			why = append(why, fmt.Sprintf("integration gate %s changed the workspace outside its allowed_writes (integrity violation: %s)",
				name, strings.Join(g.Result.Violations, ", ")))
		case g.Status == protocol.GateError:
			reason := ""
			if g.Result != nil && g.Result.Error != "" {
				reason = ": " + g.Result.Error
			}
			why = append(why, fmt.Sprintf("integration gate %s could not run%s", name, reason))
		}
	}
	f.escalate = strings.Join(why, "; ")
	return f
}

// failedRun returns the run and definition of a gate named in a failure:
// a node's gate, or an integration gate (failureGatePrefix) of its
// current speculation.
func (w *Workflow) failedRun(n *Node, name string) (*GateRun, protocol.GateSpec) {
	if g, ok := strings.CutPrefix(name, failureGatePrefix); ok {
		return n.failedGate(name), w.IntegrationSpecs[g]
	}
	return n.Gates[name], n.GateSpecs()[name]
}

// failedGate is failedRun's run alone.
func (n *Node) failedGate(name string) *GateRun {
	if g, ok := strings.CutPrefix(name, failureGatePrefix); ok {
		if n.Speculation() == nil {
			return nil
		}
		return n.Speculation().Gates[g]
	}
	return n.Gates[name]
}

// onIntegrationReport turns a runner's report on an integration gate job
// into its event: a result (or dead letter) of the node's current
// speculation's current round. A report of a superseded speculation, or of
// an earlier round, causes none; stale says why. Started and waiting
// reports cause none either: nothing is fenced on them.
func onIntegrationReport(w *Workflow, r *protocol.Report, now time.Time) (effects []Effect, stale string) {
	var node, jobID, gate string
	var attempt int
	var res *protocol.GateResult
	switch r.Type {
	case protocol.ReportGateResult:
		node, jobID, gate, attempt, res = r.Gate.NodeID, r.Gate.JobID, r.Gate.Gate, r.Gate.Attempt, r.Gate
	case protocol.ReportDeadLetter:
		dl := r.DeadLetter
		node, jobID, gate, attempt = dl.NodeID, dl.JobID, dl.Gate, dl.Attempt
		res = &protocol.GateResult{JobID: dl.JobID, WorkflowID: w.ID, NodeID: dl.NodeID, Gate: dl.Gate, Attempt: dl.Attempt,
			Status: protocol.GateError, Error: fmt.Sprintf("integration gate job %s dead-lettered after %d deliveries: %s",
				dl.JobID, dl.Deliveries, dl.Reason)}
	default:
		return nil, ""
	}
	n := w.Nodes[node]
	if n == nil || attempt != n.Attempt || n.Status != protocol.NodeIntegrating || n.Speculation() == nil {
		return nil, "the node no longer waits in the integration queue for this attempt"
	}
	s := n.Speculation()
	g := s.Gates[gate]
	if g == nil || g.jobID != jobID {
		return nil, fmt.Sprintf("a superseded speculation's job (the node is now tested on speculation %s)", s.ID)
	}
	if g.Terminal() {
		return nil, ""
	}
	if res.LeaseToken < g.LeaseToken {
		return nil, fmt.Sprintf("lease %d is current", g.LeaseToken)
	}
	id := fmt.Sprintf("%s.finished.%d.%s", jobID, res.LeaseToken, res.Status)
	if r.Type == protocol.ReportDeadLetter {
		id = jobID + ".dead"
	} else if res.Status == protocol.GatePending {
		id = ""
	}
	res.Round = g.Round
	return []Effect{Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: n.ID, Time: now,
		Body: eventlog.IntegrationFinished{Attempt: attempt, Gate: gate, Round: g.Round, Speculation: s.ID,
			LeaseToken: res.LeaseToken, Host: res.Host, Result: res}}, MsgID: w.msgID(id)}}, ""
}

// isIntegrationReport reports whether r concerns an integration gate job.
func isIntegrationReport(w *Workflow, r *protocol.Report) bool {
	var node, jobID string
	var attempt int
	switch {
	case r.Type == protocol.ReportGateResult && r.Gate != nil:
		node, jobID, attempt = r.Gate.NodeID, r.Gate.JobID, r.Gate.Attempt
	case r.Type == protocol.ReportDeadLetter && r.DeadLetter != nil && r.DeadLetter.Kind == protocol.KindGate:
		node, jobID, attempt = r.DeadLetter.NodeID, r.DeadLetter.JobID, r.DeadLetter.Attempt
	case r.Type == protocol.ReportStarted && r.Started != nil && r.Started.Kind == protocol.KindGate:
		node, jobID, attempt = r.Started.NodeID, r.Started.JobID, r.Started.Attempt
	case r.Type == protocol.ReportWaiting && r.Waiting != nil && r.Waiting.Kind == protocol.KindGate:
		node, jobID, attempt = r.Waiting.NodeID, r.Waiting.JobID, r.Waiting.Attempt
	default:
		return false
	}
	return strings.HasPrefix(jobID, integrationJobPrefix(w.ID, node, attempt))
}
