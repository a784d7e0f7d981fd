package statemachine

// The closed loop: what a failed round leads to. A failure the agent may
// fix is retried, after the task's retry policy's delay, with feedback;
// what it may not fix, and a node whose attempts or gate retries run out,
// escalates to a human, who approves, rejects or grants more attempts.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/feedback"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// failure is what went wrong in a node's round.
type failure struct {
	// agent is set when the agent itself did not succeed.
	agent string
	// noChanges is set when the agent succeeded but changed nothing.
	noChanges bool
	// refused, when set, is why the work of an agent that succeeded is
	// refused (a patch over protocol.MaxPatchBytes): the agent hears it
	// as its error, and it is never classified as transient or fatal.
	refused string
	// gates are the gates whose failure blocks, by name.
	gates []string
	// escalate, when set, is why no retry can help (an integrity
	// violation, on_fail block, a gate that could not run).
	escalate string
	// integration is set when gates are integration gates (named with
	// failureGatePrefix) that failed on top of the nodes ahead.
	integration bool
	ahead       []string
	// interfaces, when set, says which locked interface files the patch
	// changed (locked) and whose (files.go); the agent may fix it.
	interfaces string
	locked     []string
	// output is set when the round's result block was missing, invalid,
	// or reported a status that needs another round.
	output *feedback.Output
	// trusted, when set, says the patch changes trusted configuration
	// (trusted.go), trustedFiles which files.
	trusted      string
	trustedFiles []string
}

// gateFailure classifies a gating node's blocking failures.
func (n *Node) gateFailure() failure {
	var f failure
	var why []string
	for _, name := range n.GateOrder() {
		g := n.Gates[name]
		if !n.Blocking(name) || g.Status == protocol.GateSkipped {
			continue
		}
		f.gates = append(f.gates, name)
		switch {
		case g.Result != nil && g.Result.IntegrityViolation:
			why = append(why, fmt.Sprintf("gate %s changed the workspace outside its allowed_writes (integrity violation: %s)",
				name, strings.Join(g.Result.Violations, ", ")))
		case g.Status == protocol.GateError:
			reason := ""
			if g.Result != nil && g.Result.Error != "" {
				reason = ": " + g.Result.Error
			}
			why = append(why, fmt.Sprintf("gate %s could not run%s", name, reason))
		case n.OnFail()[name] == gates.Block:
			why = append(why, fmt.Sprintf("gate %s %s and its on_fail is block", name, g.Status))
		}
	}
	f.escalate = strings.Join(why, "; ")
	return f
}

// summary says in one line what failed.
func (f failure) summary(n *Node) string {
	if f.agent != "" {
		return f.agent
	}
	if f.interfaces != "" {
		return "interface_locked: " + f.interfaces
	}
	if f.trusted != "" {
		return "trusted_config: the patch changes " + TrustedConfigDir + "/"
	}
	parts := make([]string, 0, len(f.gates))
	for _, name := range f.gates {
		if g, ok := strings.CutPrefix(name, failureGatePrefix); ok {
			parts = append(parts, g+" "+string(n.Speculation().Gates[g].Status))
			continue
		}
		parts = append(parts, name+" "+string(n.Gates[name].Status))
	}
	sort.Strings(parts)
	if f.integration {
		on := "the branch"
		if len(f.ahead) > 0 {
			on = strings.Join(f.ahead, ", ")
		}
		return "integration gates did not pass on top of " + on + ": " + strings.Join(parts, ", ")
	}
	return "gates did not pass: " + strings.Join(parts, ", ")
}

// noChangesText is what the agent hears about a round that changed nothing.
const noChangesText = "no_changes: the round changed no file, and the task needs a change " +
	"(a task that may rightly change nothing says allow_empty: true)"

// sameFailureLimit is how many rounds may fail alike (the same gates, with
// the same output but for numbers) before the node escalates as a loop
// (S-7.3).
const sameFailureLimit = 3

// roundFailed decides what a failed round of node n leads to: a retry
// after the retry policy's delay, with feedback, or an escalation to a
// human when the failure is not the agent's to fix, a gate has failed more
// rounds than its max_retries allow, the node's attempts are spent, or the
// node loops: it failed alike sameFailureLimit rounds in a row.
func (d *decider) roundFailed(n *Node, f failure) {
	reason := f.summary(n)
	escalate := f.escalate
	if f.agent != "" && escalate == "" && n.Agent != nil && n.Agent.Status == protocol.AgentError {
		// The runner could not run the agent, on its last delivery: not
		// the agent's to fix.
		escalate = "the agent could not run"
	}
	if escalate == "" {
		escalate = d.overBudget(n)
	}
	if f.agent != "" && escalate == "" && !f.noChanges && f.refused == "" && f.output == nil {
		switch class, match, after := classifyAgent(n.Agent); class {
		case Fatal:
			escalate = "a fatal agent error (" + match + ")"
		case Transient:
			if n.Transients() < maxTransient {
				d.transient(n, reason, match, after)
				return
			}
			escalate = fmt.Sprintf("transient agent errors %d rounds in a row (%s)", n.Transients()+1, match)
		}
	}
	sig := n.signature(f)
	if escalate == "" && sig != "" {
		same := 1
		for i := len(n.History()) - 1; i >= 0 && n.History()[i].Signature == sig; i-- {
			same++
		}
		if same >= sameFailureLimit {
			escalate = fmt.Sprintf("the last %d rounds failed alike", same)
		}
	}
	if escalate == "" {
		for _, name := range f.gates {
			_, spec := d.w.failedRun(n, name)
			if rounds, max := n.GateFailures()[name]+1, spec.Retries(); rounds > max {
				escalate = fmt.Sprintf("gate %s failed %d rounds; its max_retries is %d", name, rounds, max)
				break
			}
		}
	}
	if escalate == "" && n.Attempt >= n.Budget {
		escalate = fmt.Sprintf("%d of %d attempts used", n.Attempt, n.Budget)
	}
	if escalate != "" {
		reason = escalate + " (" + reason + ")"
		d.append(n, eventlog.NodeEscalated{Attempt: n.Attempt, Reason: reason, FailedGates: f.gates,
			Signature: sig, Feedback: d.w.feedback(n, f, true, nil)},
			fmt.Sprintf("%s.%s.a%d.escalated", d.w.ID, n.ID, n.Attempt))
		return
	}
	next := n.Attempt + 1
	delay := n.Task.RetryPolicy().Delay(next, d.w.ID+"/"+n.ID)
	d.append(n, eventlog.NodeRetryScheduled{Attempt: n.Attempt, Next: next, NotBefore: d.now.Add(delay),
		Reason: reason, FailedGates: f.gates, Signature: sig, Feedback: d.w.feedback(n, f, false, nil)},
		fmt.Sprintf("%s.%s.a%d.retry", d.w.ID, n.ID, n.Attempt))
}

// transient re-runs the agent after a back-off without using an attempt:
// the trouble (a rate limit, an overloaded API, the network) was not its
// work's. The back-off is the retry policy's, or the retry-after the agent
// reported if longer.
func (d *decider) transient(n *Node, reason, match string, after time.Duration) {
	next := n.Attempt + 1
	delay := max(n.Task.RetryPolicy().Delay(next, d.w.ID+"/"+n.ID), after)
	d.append(n, eventlog.NodeRetryScheduled{Attempt: n.Attempt, Next: next, NotBefore: d.now.Add(delay),
		Reason: fmt.Sprintf("transient: %s (%s)", match, reason), Class: string(Transient),
		Feedback: d.w.feedback(n, failure{agent: reason}, false, nil)},
		fmt.Sprintf("%s.%s.a%d.retry", d.w.ID, n.ID, n.Attempt))
}

// signature identifies a failure for loop detection: the failing gates
// (or the agent), each with a digest of its output in which every run of
// digits counts as one (durations, addresses and counters change from run
// to run; the failure does not).
func (n *Node) signature(f failure) string {
	h := sha256.New()
	write := func(name, out string) {
		fmt.Fprintf(h, "%s\x00%s\x00", name, digitRuns.ReplaceAllString(out, "#"))
	}
	switch {
	case f.output != nil:
		write("output", f.output.Problem+f.output.Status+f.output.Error+strings.Join(f.output.Violations, "\n"))
	case f.agent != "" && n.Agent != nil:
		write("agent", n.Agent.Stdout+n.Agent.Stderr)
	case f.interfaces != "":
		write(interfacesGate, f.interfaces)
	case f.trusted != "":
		write(trustedConfigGate, f.trusted)
	case len(f.gates) > 0:
		names := append([]string(nil), f.gates...)
		sort.Strings(names)
		for _, name := range names {
			out := ""
			if g := n.failedGate(name); g != nil && g.Result != nil {
				r := g.Result
				out = r.Stdout + r.Stderr + r.Output + r.Error
			}
			write(name, out)
		}
	default:
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

var digitRuns = regexp.MustCompile(`[0-9]+`)

// samePatch names the earlier attempt whose patch is the same as the
// current attempt's: the agent is going round in circles (RETRY-12).
func (n *Node) samePatch() int {
	if n.Patch == nil {
		return 0
	}
	for _, r := range n.History() {
		if r.Patch != nil && r.Patch.SHA256 == n.Patch.SHA256 && r.Attempt != n.Attempt {
			return r.Attempt
		}
	}
	return 0
}

// retrying starts a retrying node's next attempt once its delay is over.
func (d *decider) retrying(n *Node) {
	if fleetPaused(d.w) {
		return // no new agent round while the fleet is paused
	}
	if d.now.Before(n.RetryAt()) {
		d.wakeAt(n.RetryAt())
		return
	}
	d.append(n, eventlog.NodeReady{Attempt: n.NextAttempt()}, fmt.Sprintf("%s.%s.a%d.ready", d.w.ID, n.ID, n.NextAttempt()))
	d.publishAgent(n, n.NextAttempt(), d.now)
}

// escalated waits for a human; once one approved the node, its latest
// patch is integrated and it succeeds.
func (d *decider) escalated(n *Node) {
	if !n.Approved() {
		return
	}
	if !n.Integrated() {
		d.Effects = append(d.Effects, Integrate{Node: n.ID, CommitTime: d.w.commitTime(n)})
		return
	}
	d.finishNode(n, protocol.NodeSucceeded, n.Reason)
}

// awaitApproval makes n wait for a human's approval, until the approval
// step's timeout if it has one.
func (d *decider) awaitApproval(n *Node, attempt int, reason string) {
	ev := eventlog.NodeAwaitingApproval{Attempt: attempt, Reason: reason}
	if a := n.Task.Approval(); a != nil && a.TimeoutSeconds > 0 {
		ev.Deadline = d.now.Add(time.Duration(a.TimeoutSeconds) * time.Second)
	}
	d.append(n, ev, fmt.Sprintf("%s.%s.a%d.awaiting", d.w.ID, n.ID, attempt))
}

// awaiting waits for a human's approval; once given, the node's work is
// integrated (through the integration queue, in a workflow with
// integration gates) and it succeeds. Past the approval step's deadline, its
// on_timeout happens: approve, reject, or escalate (the default).
func (d *decider) awaiting(n *Node) {
	if n.Approved() {
		if d.w.Gated() && !n.Integrated() && n.Task.Type != protocol.TaskHuman {
			// Approved work lands through the integration queue.
			d.queueForIntegration(n)
			return
		}
		d.escalated(n)
		return
	}
	if n.ApprovalDeadline().IsZero() {
		return
	}
	if d.now.Before(n.ApprovalDeadline()) {
		d.wakeAt(n.ApprovalDeadline())
		return
	}
	onTimeout := protocol.OnTimeoutEscalate
	if a := n.Task.Approval(); a != nil && a.OnTimeout != "" {
		onTimeout = a.OnTimeout
	}
	id := fmt.Sprintf("%s.%s.a%d.approval-timeout", d.w.ID, n.ID, n.Attempt)
	switch onTimeout {
	case protocol.OnTimeoutApprove:
		if f, bad := n.trustedConfigViolation(); bad {
			// A timeout is nobody's acceptance of trusted configuration.
			d.append(n, eventlog.NodeEscalated{Attempt: n.Attempt, Reason: "nobody approved it in time; " + f.trusted}, id)
			return
		}
		d.append(n, eventlog.NodeApproved{Attempt: n.Attempt, By: TimeoutApprover, Note: "approved when the approval step timed out"}, id)
	case protocol.OnTimeoutReject:
		d.append(n, eventlog.NodeRejected{Attempt: n.Attempt, By: TimeoutApprover, Reason: "nobody approved it in time"}, id)
	default:
		d.append(n, eventlog.NodeEscalated{Attempt: n.Attempt, Reason: "nobody approved it in time"}, id)
	}
}

// feedback builds the document a failed round of n gives the next attempt
// (or the human it escalates to), with an operator's note if any.
func (w *Workflow) feedback(n *Node, f failure, escalated bool, note *feedback.Note) json.RawMessage {
	in := feedback.Input{WorkflowID: w.ID, NodeID: n.ID, Attempt: n.Attempt, MaxAttempts: n.Budget, Note: note,
		WorkReset: n.Task.RetryFrom() == protocol.RetryFromBase}
	in.Output = f.output
	if a := n.Agent; f.agent != "" && a != nil && f.output == nil {
		// The agent's own run failed: it is reported like a gate, "agent".
		st := protocol.GateFailed
		if a.Status == protocol.AgentTimeout {
			st = protocol.GateTimeout
		}
		code, errText := a.ExitCode, a.Error
		if f.noChanges {
			errText = noChangesText
		}
		if f.refused != "" {
			errText = f.refused
		}
		in.Gates = append(in.Gates, feedback.GateInput{Result: protocol.GateResult{Gate: "agent", Attempt: n.Attempt,
			Status: st, ExitCode: &code, Stdout: a.Stdout, Stderr: a.Stderr, Error: errText, Log: a.Log},
			Spec: protocol.GateSpec{Name: "agent"}, RoundsFailed: n.Attempt, Escalated: escalated})
	}
	if f.interfaces != "" {
		// Reported like a gate that found an integrity violation: the
		// locked files are its violations.
		in.Gates = append(in.Gates, feedback.GateInput{Result: protocol.GateResult{Gate: interfacesGate, Attempt: n.Attempt,
			Status: protocol.GateFailed, IntegrityViolation: true, Violations: f.locked, Error: f.interfaces},
			Spec: protocol.GateSpec{Name: interfacesGate}, RoundsFailed: 1, Escalated: escalated})
	}
	if f.trusted != "" {
		// Reported like a gate that found an integrity violation: the
		// trusted configuration files are its violations.
		in.Gates = append(in.Gates, feedback.GateInput{Result: protocol.GateResult{Gate: trustedConfigGate, Attempt: n.Attempt,
			Status: protocol.GateFailed, IntegrityViolation: true, Violations: f.trustedFiles, Error: f.trusted},
			Spec: protocol.GateSpec{Name: trustedConfigGate}, RoundsFailed: 1, Escalated: escalated})
	}
	for _, name := range f.gates {
		g, spec := w.failedRun(n, name)
		if g == nil || g.Result == nil {
			continue
		}
		in.Gates = append(in.Gates, feedback.GateInput{Result: *g.Result, Spec: spec,
			RoundsFailed: n.GateFailures()[name] + 1, Escalated: escalated})
	}
	if f.integration {
		in.Integration = &feedback.Integration{Ahead: f.ahead}
		for _, name := range f.gates {
			in.Integration.Gates = append(in.Integration.Gates, strings.TrimPrefix(name, failureGatePrefix))
		}
	}
	data, err := json.Marshal(feedback.Build(in))
	if err != nil {
		// A Feedback is plain data: it always encodes.
		panic(fmt.Sprintf("statemachine: encode feedback: %v", err))
	}
	return data
}

// withNote returns the feedback document doc with an operator's note.
func withNote(doc json.RawMessage, note *feedback.Note, next, budget int) json.RawMessage {
	var f feedback.Feedback
	if len(doc) > 0 {
		if err := json.Unmarshal(doc, &f); err != nil {
			f = feedback.Feedback{}
		}
	}
	f.Note, f.NextAttempt, f.MaxAttempts = note, next, budget
	data, err := json.Marshal(f)
	if err != nil {
		panic(fmt.Sprintf("statemachine: encode feedback: %v", err))
	}
	return data
}

// renderFeedback is the text appended to the agent's prompt for doc,
// rendered with the named feedback template (the task role's; "" for the
// default).
func renderFeedback(doc json.RawMessage, tmpl string) string {
	if len(doc) == 0 {
		return ""
	}
	var f feedback.Feedback
	if err := json.Unmarshal(doc, &f); err != nil {
		return ""
	}
	text, err := feedback.Render(f, tmpl)
	if err != nil {
		return ""
	}
	return text
}

// startFrom is the patch a retry of n starts from: the latest attempt's
// work, unless the task says to start from the base.
func (n *Node) startFrom() *protocol.PatchRef {
	if n.Task.RetryFrom() == protocol.RetryFromBase {
		return nil
	}
	for i := len(n.History()) - 1; i >= 0; i-- {
		if p := n.History()[i].Patch; p != nil {
			return p
		}
	}
	return nil
}

// Approve accepts an escalated node's latest patch despite its failed
// gates: it is integrated and the node succeeds. A node whose agent did
// not succeed has no work to approve, and one whose gates found an
// integrity violation cannot be approved: its patch cannot be trusted.
// Nor can a patch that changes trusted configuration (trusted.go):
// ApproveConfig accepts that.
func Approve(w *Workflow, node, by, note string, now time.Time) ([]Effect, error) {
	return approve(w, node, by, note, false, now)
}

// ApproveConfig is Approve that also accepts the node's changes to
// trusted configuration, recorded in the approval (AcceptedConfig).
func ApproveConfig(w *Workflow, node, by, note string, now time.Time) ([]Effect, error) {
	return approve(w, node, by, note, true, now)
}

func approve(w *Workflow, node, by, note string, acceptConfig bool, now time.Time) ([]Effect, error) {
	n, err := waitingNode(w, node, by)
	if err != nil {
		return nil, err
	}
	if !n.AgentSucceeded() && n.Task.Type != protocol.TaskHuman {
		return nil, conflict("node %s: attempt %d's agent did not succeed, so there is no work to approve (reject it, or retry)",
			n.ID, n.Attempt)
	}
	for _, name := range n.GateOrder() {
		if g := n.Gates[name]; g != nil && g.Result != nil && g.Result.IntegrityViolation {
			return nil, conflict("node %s: gate %s found an integrity violation in attempt %d; it cannot be approved (reject it, or retry)",
				n.ID, name, n.Attempt)
		}
	}
	for _, r := range n.speculationResults() {
		if r.IntegrityViolation {
			return nil, conflict("node %s: integration gate %s found an integrity violation in attempt %d; it cannot be approved (reject it, or retry)",
				n.ID, r.Gate, n.Attempt)
		}
	}
	var accepted []string
	if files, unlisted := n.TrustedConfigChanges(); len(files) > 0 || unlisted {
		if !acceptConfig {
			return nil, conflict("node %s: attempt %d's patch changes Supervisor's trusted configuration (%s); "+
				"approving it needs --accept-config, which accepts that change", n.ID, n.Attempt, trustedWhat(files, unlisted))
		}
		accepted = acceptedConfig(n)
	}
	return []Effect{Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: n.ID, Time: now,
		Body: eventlog.NodeApproved{Attempt: n.Attempt, By: by, Note: note, AcceptedConfig: accepted}},
		MsgID: w.msgID(fmt.Sprintf("%s.%s.a%d.approved", w.ID, n.ID, n.Attempt))}}, nil
}

// Reject fails an escalated node; its dependents are skipped.
func Reject(w *Workflow, node, by, reason string, now time.Time) ([]Effect, error) {
	n, err := waitingNode(w, node, by)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(reason) == "" {
		return nil, conflict("a rejection needs a reason (--reason)")
	}
	return []Effect{Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: n.ID, Time: now,
		Body: eventlog.NodeRejected{Attempt: n.Attempt, By: by, Reason: reason}},
		MsgID: w.msgID(fmt.Sprintf("%s.%s.a%d.rejected", w.ID, n.ID, n.Attempt))}}, nil
}

// Retry grants an escalated node attempts more rounds (0: the task's
// budget) and starts the next at once; note, if any, reaches the agent
// with the failed round's feedback, marked as the operator's.
func Retry(w *Workflow, node, by, note string, attempts int, now time.Time) ([]Effect, error) {
	n, err := waitingNode(w, node, by)
	if err != nil {
		return nil, err
	}
	if n.Task.Type == protocol.TaskHuman {
		return nil, conflict("node %s is a human task: there is no agent to retry (approve or reject it)", n.ID)
	}
	if attempts <= 0 {
		attempts = n.Task.Attempts()
	}
	if attempts > protocol.MaxMaxAttempts {
		return nil, conflict("at most %d more attempts at a time", protocol.MaxMaxAttempts)
	}
	var fn *feedback.Note
	if strings.TrimSpace(note) != "" {
		fn = &feedback.Note{From: by, Text: note}
	}
	return []Effect{Append{Event: eventlog.Event{WorkflowID: w.ID, NodeID: n.ID, Time: now,
		Body: eventlog.NodeRetryGranted{Attempt: n.Attempt, By: by, Note: note, Attempts: attempts,
			Feedback: withNote(n.Feedback(), fn, n.Attempt+1, n.Budget+attempts)}},
		MsgID: w.msgID(fmt.Sprintf("%s.%s.a%d.retry-granted", w.ID, n.ID, n.Attempt))}}, nil
}

// waitingNode returns node if it waits for a human's decision (escalated,
// or awaiting approval) and by may make it: an approval step with
// approvers takes them only.
func waitingNode(w *Workflow, node, by string) (*Node, error) {
	if w.CancelRequested || w.Status == protocol.WorkflowCancelled {
		return nil, conflict("workflow %s was cancelled", w.ID)
	}
	n := w.Nodes[node]
	if n == nil {
		return nil, notFound("workflow %s has no node %q", w.ID, node)
	}
	if by == PolicyApprover || by == TimeoutApprover {
		return nil, conflict("%q is the name decisions not made by a person are recorded under; decide as yourself (--as)", by)
	}
	if (n.Status != protocol.NodeEscalated && n.Status != protocol.NodeAwaitingApproval) || n.Approved() {
		return nil, conflict("node %s is %s: only an escalated node, or one awaiting approval, waits for a human", n.ID, n.Status)
	}
	if a := n.Task.Approval(); a != nil && len(a.Approvers) > 0 && n.Status == protocol.NodeAwaitingApproval &&
		!slices.Contains(a.Approvers, by) {
		return nil, conflict("node %s may be decided by %s only, not %s", n.ID, strings.Join(a.Approvers, ", "), by)
	}
	return n, nil
}
