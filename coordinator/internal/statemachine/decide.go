package statemachine

import (
	"fmt"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/redact"
)

// Decide says what should happen next to workflow w at time now: the
// effects to carry out, in order, and when to decide again if nothing else
// happens first. It changes nothing. Asked again with nothing new in the
// state it says the same again, except that Publish effects are left out
// for jobs published reports as already published (nil: none is).
//
// The rules, in order: a workflow asked to cancel cancels its unfinished
// nodes, then finishes cancelled. A pending node whose dependencies all
// succeeded becomes ready and its agent job is published, unless a node
// whose declared files may overlap its own holds them (files.go); one with
// a dependency that ended otherwise is skipped. A node whose agent did not
// succeed fails. A gating node dispatches its gates in dependency layers
// (skipping those whose dependency failed in a blocking way), polls its
// pending gates, and once every gate has reported is decided: every gate
// passed (or only warned) → its patch is integrated and it succeeds (in a
// workflow with integration gates, it joins the integration queue
// instead: integration_queue.go); any blocking failure → it fails, even
// while another gate is still pending.
// When every node has finished, the workflow finishes. A finished
// workflow is only merged (merge.go): a merge request not done yet is
// carried out, and a succeeded workflow with auto_merge requests one.
func Decide(w *Workflow, now time.Time, published func(jobID string) bool) Decision {
	d := &decider{w: w, now: now, published: published}
	if w.Status.Terminal() {
		d.merge() // a finished workflow may still be merged
		return d.Decision
	}
	if w.CancelRequested {
		d.cancel()
		return d.Decision
	}
	for _, n := range w.ordered() {
		switch n.Status {
		case protocol.NodePending:
			d.pending(n)
		case protocol.NodeReady, protocol.NodeRunning:
			d.agentRunning(n)
		case protocol.NodeGating:
			d.gating(n)
		case protocol.NodeRetrying:
			d.retrying(n)
		case protocol.NodeEscalated:
			d.escalated(n)
		case protocol.NodeAwaitingApproval:
			d.awaiting(n)
		}
	}
	if w.Gated() {
		d.integrationQueue()
	}
	if len(d.Effects) == 0 {
		d.finish()
	}
	return d.Decision
}

type decider struct {
	Decision
	w         *Workflow
	now       time.Time
	published func(string) bool
	// released are the nodes made ready in this decision (DAG-07: they
	// hold their files before their events are folded).
	released map[string]bool
}

func (d *decider) append(n *Node, body eventlog.Body, msgID string) {
	ev := eventlog.Event{WorkflowID: d.w.ID, Time: d.now, Body: body}
	if n != nil {
		ev.NodeID = n.ID
	}
	d.Effects = append(d.Effects, Append{Event: ev, MsgID: d.w.msgID(msgID)})
}

// publishAgent publishes node n's agent job for attempt, unless the engine
// reports it published: the job is only built when it is needed, as
// Decide runs on every change of a workflow with many nodes in flight.
func (d *decider) publishAgent(n *Node, attempt int, at time.Time) {
	id := n.jobID
	if attempt != n.Attempt || id == "" {
		id = protocol.AgentJobID(d.w.ID, n.ID, attempt)
	}
	if id == n.publishedJob || (d.published != nil && d.published(id)) {
		return
	}
	job, err := d.w.agentJob(n, attempt, at)
	if err != nil {
		d.postpone(err)
		return
	}
	d.Effects = append(d.Effects, Publish{Agent: job})
}

// deferRetry is how soon a job that could not be built is tried again.
const deferRetry = time.Second

// postpone records a job that could not be built now, to be tried again
// after deferRetry.
func (d *decider) postpone(err error) {
	d.Deferred = append(d.Deferred, err)
	d.wakeAt(d.now.Add(deferRetry))
}

// publishGate publishes round round of node n's gate g, unless the engine
// reports it published.
func (d *decider) publishGate(n *Node, g *GateRun, round int) {
	id := g.jobID
	if round != g.Round || id == "" {
		id = protocol.GateJobID(d.w.ID, n.ID, n.Attempt, g.Name, round)
	}
	if id == g.publishedJob || (d.published != nil && d.published(id)) {
		return
	}
	job, err := d.w.gateJob(n, g, round, d.now)
	if err != nil {
		d.postpone(err)
		return
	}
	d.Effects = append(d.Effects, Publish{Gate: job})
}

func (d *decider) wakeAt(t time.Time) {
	if d.Wake.IsZero() || t.Before(d.Wake) {
		d.Wake = t
	}
}

// finishNode records a node's end. A planner succeeding adds its plan's
// nodes first (HIER-01); if they can no longer be added (another plan
// took the room left under the task limit meanwhile), it escalates.
func (d *decider) finishNode(n *Node, st protocol.NodeStatus, reason string) {
	if st == protocol.NodeSucceeded && n.expands() {
		x, err := d.w.expansion(n)
		if err != nil {
			d.append(n, eventlog.NodeEscalated{Attempt: n.Attempt, Reason: "the plan cannot be added to the workflow: " + err.Error()},
				fmt.Sprintf("%s.%s.a%d.escalated", d.w.ID, n.ID, n.Attempt))
			return
		}
		d.append(n, eventlog.NodesAdded{Attempt: n.Attempt, Tasks: x.Tasks, Dependents: x.Dependents},
			fmt.Sprintf("%s.%s.a%d.nodes-added", d.w.ID, n.ID, n.Attempt))
	}
	d.append(n, eventlog.NodeFinished{Attempt: n.Attempt, Status: st, Reason: reason},
		fmt.Sprintf("%s.%s.a%d.%s", d.w.ID, n.ID, n.Attempt, st))
}

func (d *decider) cancel() {
	for _, id := range d.w.Order {
		if n := d.w.Nodes[id]; !n.Status.Terminal() {
			d.finishNode(n, protocol.NodeCancelled, "workflow cancelled")
		}
	}
	if len(d.Effects) > 0 {
		return // the workflow finishes once the nodes have
	}
	d.Effects = append(d.Effects, Finish{
		Event: eventlog.Event{WorkflowID: d.w.ID, Time: d.now, Body: eventlog.WorkflowFinished{
			Status: protocol.WorkflowCancelled, Branch: d.w.Branch, Commit: d.w.Head, Reason: "cancelled by request"}},
		MsgID: d.w.msgID(d.w.ID + ".finished"), Deliver: d.w.Head != "", Announce: true,
	})
}

func (d *decider) pending(n *Node) {
	blocked, waiting := d.w.depState(n.ID)
	switch {
	case blocked != "":
		d.finishNode(n, protocol.NodeSkipped, blocked)
	case !waiting && n.Task.Type == protocol.TaskHuman:
		// No agent: the task is a human's, and waits for their approval.
		d.awaitApproval(n, 1, "a human task")
	case !waiting && fleetPaused(d.w):
		// The fleet is paused: no new agent round starts.
	case !waiting && d.workflowOverBudget() != "":
		// The workflow's budget is spent: its first round is not started;
		// a human decides (a retry grants it the round).
		d.append(n, eventlog.NodeEscalated{Attempt: n.Attempt, Reason: d.workflowOverBudget()},
			fmt.Sprintf("%s.%s.a%d.escalated", d.w.ID, n.ID, n.Attempt))
	case !waiting && len(d.w.fileBlockers(n.ID, d.released)) > 0:
		// A node whose files may overlap its own holds them (DAG-07): it
		// becomes ready once that node has finished.
	case !waiting:
		if d.released == nil {
			d.released = map[string]bool{}
		}
		d.released[n.ID] = true
		d.append(n, eventlog.NodeReady{Attempt: 1}, fmt.Sprintf("%s.%s.a1.ready", d.w.ID, n.ID))
		d.publishAgent(n, 1, d.now)
	}
}

// fleetPaused reports whether w's fleet is paused (S-7.4).
func fleetPaused(w *Workflow) bool { return w.fleet != nil && w.fleet.Paused }

// agentRunning republishes a ready node's job if this engine has not, and
// fails a node whose agent did not succeed.
func (d *decider) agentRunning(n *Node) {
	if n.Agent != nil && !n.AgentSucceeded() {
		reason := fmt.Sprintf("agent %s (exit %d)", n.Agent.Status, n.Agent.ExitCode)
		if n.Agent.Error != "" {
			reason += ": " + n.Agent.Error
		}
		d.roundFailed(n, failure{agent: reason})
		return
	}
	if n.Status == protocol.NodeReady {
		d.publishAgent(n, n.Attempt, n.ReadyAt)
	}
}

func (d *decider) gating(n *Node) {
	if f, failed := d.w.outputFailure(n); failed {
		// No gate runs on a round whose result was not accepted.
		d.roundFailed(n, f)
		return
	}
	if n.Patch == nil && !n.Task.AllowEmpty {
		// Gates passing on the base would prove nothing of the task.
		d.roundFailed(n, failure{agent: "no_changes: the agent changed nothing", noChanges: true})
		return
	}
	if n.Patch != nil && n.Patch.Size > protocol.MaxPatchBytes {
		// Too large to gate or integrate (the worker refuses to upload one;
		// this catches a report that names one anyway). The agent hears
		// why and may make a smaller change.
		why := protocol.PatchTooLarge(n.Patch.Size)
		d.roundFailed(n, failure{agent: why, refused: why})
		return
	}
	if prev := n.samePatch(); prev > 0 {
		// Its gates would judge the same code again: no point in running them.
		d.roundFailed(n, failure{agent: fmt.Sprintf("attempt %d made the same patch as attempt %d", n.Attempt, prev),
			escalate: "the agent is going round in circles"})
		return
	}
	if f, bad := d.w.interfaceViolation(n); bad {
		// It changes an interface locked before its gates could judge it
		// (HIER-03).
		d.roundFailed(n, f)
		return
	}
	appended := false
	for _, name := range n.GateOrder() {
		g := n.Gates[name]
		if g == nil {
			g = &GateRun{Name: name}
		}
		spec := n.GateSpecs()[name]
		if !g.Dispatched && g.Terminal() {
			continue // skipped: it stays so until a rerun
		}
		if g.Dispatched {
			switch {
			case g.Status == protocol.GateError && g.Result != nil && g.Result.OOMKilled && g.OOMs() == 1:
				// A resource error, not the code's: it gets one more run.
				d.rerun(n, g, "out of memory")
				appended = true
			case g.Status == protocol.GatePending:
				appended = d.pendingGate(n, g, spec) || appended
			case !g.Terminal():
				d.publishGate(n, g, g.Round)
			}
			continue
		}
		blocked, waiting := n.gateDepState(spec)
		switch {
		case blocked != "":
			res := &protocol.GateResult{WorkflowID: d.w.ID, NodeID: n.ID, Gate: name, Attempt: n.Attempt,
				Status: protocol.GateSkipped, Error: "skipped: " + blocked, Round: g.Round}
			d.append(n, eventlog.GateFinished{Gate: name, Attempt: n.Attempt, Round: g.Round, Result: res, Reason: blocked},
				fmt.Sprintf("%s.%s.a%d.g.%s.r%d.skipped", d.w.ID, n.ID, n.Attempt, name, g.Round))
			appended = true
		case !waiting:
			d.dispatch(n, g, false)
			appended = true
		}
	}
	if appended {
		return // decide the node once these events are in
	}
	d.decideNode(n)
}

// dispatch starts a new round of gate g and publishes its job.
func (d *decider) dispatch(n *Node, g *GateRun, poll bool) {
	round := g.Round + 1
	d.append(n, eventlog.GateDispatched{Gate: g.Name, Attempt: n.Attempt, Round: round, Poll: poll, NoCache: g.NoCache},
		fmt.Sprintf("%s.%s.a%d.g.%s.r%d.dispatched", d.w.ID, n.ID, n.Attempt, g.Name, round))
	d.publishGate(n, g, round)
}

// rerun runs a gate that ended once more in the same attempt, for why.
func (d *decider) rerun(n *Node, g *GateRun, why string) {
	round := g.Round + 1
	d.append(n, eventlog.GateDispatched{Gate: g.Name, Attempt: n.Attempt, Round: round, NoCache: g.NoCache, Rerun: why},
		fmt.Sprintf("%s.%s.a%d.g.%s.r%d.dispatched", d.w.ID, n.ID, n.Attempt, g.Name, round))
	d.publishGate(n, g, round)
}

// pendingGate re-runs a pending gate once its poll interval has passed, or
// times it out once it has been pending longer than max_pending. The
// schedule is in the log (the last pending result's time), so a restarted
// coordinator keeps it; polls are not attempts. It reports whether it
// appended an event.
func (d *decider) pendingGate(n *Node, g *GateRun, spec protocol.GateSpec) bool {
	limit := spec.MaxPending()
	deadline := g.PendingSince().Add(limit)
	if d.now.After(deadline) {
		reason := fmt.Sprintf("pending since %s, longer than max_pending %s", g.PendingSince().UTC().Format(time.RFC3339), limit)
		res := &protocol.GateResult{WorkflowID: d.w.ID, NodeID: n.ID, Gate: g.Name, Attempt: n.Attempt,
			Status: protocol.GateTimeout, Error: reason, Round: g.Round}
		if g.Result != nil {
			res.Log, res.Output, res.Host = g.Result.Log, g.Result.Output, g.Result.Host
		}
		d.append(n, eventlog.GateFinished{Gate: g.Name, Attempt: n.Attempt, Round: g.Round, Result: res, Reason: reason},
			fmt.Sprintf("%s.%s.a%d.g.%s.r%d.pending-timeout", d.w.ID, n.ID, n.Attempt, g.Name, g.Round))
		return true
	}
	d.wakeAt(deadline.Add(time.Millisecond))
	switch {
	case g.Awaiting: // the last poll has not reported yet
		d.publishGate(n, g, g.Round)
	case d.now.Before(g.NextPollAt()):
		d.wakeAt(g.NextPollAt())
	default:
		d.dispatch(n, g, true)
		return true
	}
	return false
}

// decideNode decides a gating node once every gate has reported: every
// gate passed, or failed with on_fail warn (or there are none) → integrate
// and succeed; any blocking failure → fail, even while another gate is
// pending (failed > pending > passed); otherwise (some gate pending) keep
// gating.
func (d *decider) decideNode(n *Node) {
	statuses := make([]protocol.GateStatus, 0, len(n.GateOrder()))
	for _, name := range n.GateOrder() {
		g := n.Gates[name]
		if g == nil || g.Status == "" {
			return // not dispatched yet, or still running
		}
		st := g.Status
		if g.Terminal() && st != protocol.GatePassed && !n.Blocking(name) {
			st = protocol.GatePassed // a warning: reported, not blocking
		}
		statuses = append(statuses, st)
	}
	switch workflow.FoldGates(statuses) {
	case workflow.OutcomePassed:
		if !n.Integrated() && !n.Approved() {
			if f, bad := n.trustedConfigViolation(); bad {
				// Passing gates do not make a change to trusted
				// configuration acceptable: a human decides.
				d.roundFailed(n, f)
				return
			}
		}
		if n.Task.Approval() != nil && !n.Approved() {
			d.approvalStep(n)
			return
		}
		if !n.Integrated() && d.w.Gated() {
			d.queueForIntegration(n)
			return
		}
		if !n.Integrated() {
			d.Effects = append(d.Effects, Integrate{Node: n.ID, CommitTime: d.w.commitTime(n)})
			return
		}
		reason := ""
		if n.Approved() { // by its approval policy
			reason = n.Reason
		}
		d.finishNode(n, protocol.NodeSucceeded, reason)
	case workflow.OutcomePending:
	default:
		d.roundFailed(n, n.gateFailure())
	}
}

// finish ends a workflow whose nodes have all finished. A failed
// workflow's accepted work is delivered too: every commit on the branch
// passed its gates, and whoever decides what happens next needs to see it.
func (d *decider) finish() {
	var failed []string
	for _, id := range d.w.Order {
		n := d.w.Nodes[id]
		if !n.Status.Terminal() {
			return
		}
		if n.Status != protocol.NodeSucceeded {
			failed = append(failed, id+" "+string(n.Status))
		}
	}
	st, reason := protocol.WorkflowSucceeded, ""
	if len(failed) > 0 {
		st, reason = protocol.WorkflowFailed, "nodes did not succeed: "+strings.Join(failed, ", ")
	}
	d.Effects = append(d.Effects, Finish{
		Event: eventlog.Event{WorkflowID: d.w.ID, Time: d.now, Body: eventlog.WorkflowFinished{
			Status: st, Branch: d.w.Branch, Commit: d.w.Head, Reason: reason}},
		MsgID: d.w.msgID(d.w.ID + ".finished"), Deliver: st == protocol.WorkflowSucceeded || d.w.Head != "",
	})
}

// gateDepState reports whether a gate must be skipped because a dependency
// failed in a blocking way (and the gate skips on dependency failure, the
// default), or must still wait for a dependency. A dependency whose
// failure only warns counts as passed.
func (n *Node) gateDepState(spec protocol.GateSpec) (blocked string, waiting bool) {
	for _, dep := range spec.DependsOn {
		dg := n.Gates[dep]
		switch {
		case dg != nil && dg.Status == protocol.GatePassed:
		case dg == nil || !dg.Terminal():
			waiting = true
		case n.Blocking(dep) && spec.SkipsOnDependencyFailure():
			if blocked == "" {
				blocked = fmt.Sprintf("gate %s %s", dep, dg.Status)
			}
		}
	}
	return blocked, waiting
}

// msgID keeps the de-duplication ids of a reopened workflow, which repeats
// transitions (ready, finished …), distinct from the first time's.
func (w *Workflow) msgID(id string) string {
	if id == "" || w.Generation == 0 {
		return id
	}
	return fmt.Sprintf("%s.g%d", id, w.Generation)
}

// commitTime is the date node n's integration commit is made with: when
// its agent finished (the base of the workflow's submission time if the
// result has none), to the second, so that any coordinator replaying the
// log makes the very same commit.
func (w *Workflow) commitTime(n *Node) time.Time {
	t := w.SubmittedAt
	if n.Agent != nil && !n.Agent.FinishedAt.IsZero() {
		t = n.Agent.FinishedAt
	}
	return t.UTC().Truncate(time.Second)
}

// agentJob is node n's agent job for attempt, published at publishedAt. A
// retry starts from the previous attempt's work and gets the failed
// round's feedback, as a document and appended to the prompt. It fails
// only when a prompt left in the log cannot be read back.
func (w *Workflow) agentJob(n *Node, attempt int, publishedAt time.Time) (*protocol.AgentJob, error) {
	prompt, err := w.TaskPrompt(n)
	if err != nil {
		return nil, err
	}
	job := &protocol.AgentJob{
		JobID: protocol.AgentJobID(w.ID, n.ID, attempt), WorkflowID: w.ID, NodeID: n.ID,
		Attempt: attempt, Pool: n.Task.Pool, Repo: w.Repo, Patches: w.BasePatches(n.ID),
		Command: n.Task.Command(), Agent: n.Task.Agent, Prompt: prompt, Env: n.Task.Env,
		TimeoutSeconds: n.Task.TimeoutSeconds, PublishedAt: publishedAt, FileLocks: w.fileLocks(n),
	}
	if job.Context, err = w.contextSpec(n); err != nil {
		return nil, err
	}
	for id := range w.ancestors(n.ID) {
		if a := w.Nodes[id]; a.Approved() && a.ApprovedBy() != "" {
			if job.Approvals == nil {
				job.Approvals = map[string]string{}
			}
			job.Approvals[id] = a.ApprovedBy()
		}
	}
	text := ""
	if attempt > 1 {
		job.StartFrom = n.startFrom()
		job.Feedback = n.Feedback()
		text = renderFeedback(n.Feedback(), n.Task.FeedbackTemplate())
	}
	job.Prompt = w.withDependencyReports(job.Prompt, n)
	job.Prompt = withOutputInstructions(job.Prompt, n.Task.Output, text)
	if text != "" {
		job.Prompt = strings.TrimRight(job.Prompt, "\n") + "\n\n" + text
	}
	// Masked once more as it leaves (CTX-07): a workflow submitted before
	// submissions were redacted, or a report of a runner that does not
	// redact, must not put a secret in a job.
	job.Prompt = redact.String(job.Prompt)
	return job, nil
}

// gateJob is round round of gate g of node n: the gate runs on the
// ancestors' accepted patches plus the node's own. It fails only when the
// task prompt a review gate needs cannot be read back from the log.
func (w *Workflow) gateJob(n *Node, g *GateRun, round int, now time.Time) (*protocol.GateJob, error) {
	spec := n.GateSpecs()[g.Name]
	patches := w.BasePatches(n.ID)
	if n.Patch != nil {
		patches = append(patches, *n.Patch)
	}
	def := spec
	job := &protocol.GateJob{
		JobID:      protocol.GateJobID(w.ID, n.ID, n.Attempt, g.Name, round),
		WorkflowID: w.ID, NodeID: n.ID, Attempt: n.Attempt, Gate: g.Name, Pool: spec.Pool,
		Repo: w.Repo, Patches: patches, Command: spec.Command, Env: spec.Env,
		WorkingDir: spec.WorkingDir, TimeoutSeconds: spec.TimeoutSeconds, PublishedAt: now.UTC(),
		Round: round, Definition: &def, NoCache: g.NoCache,
	}
	if spec.IsReview() {
		// The reviewers judge the work against the task (CTX-06).
		prompt, err := w.TaskPrompt(n)
		if err != nil {
			return nil, err
		}
		job.TaskPrompt = redact.String(prompt)
	}
	if job.Pool == "" {
		job.Pool = protocol.DefaultPool
	}
	return job, nil
}
