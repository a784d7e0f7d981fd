package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

func newWatch() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch WF",
		Short: "Follow a workflow live, one line per transition, until it ends",
		Long: `watch prints the workflow's history and then its live progress, one line per
node or gate transition; when standard output is a terminal, a progress line
below them is kept up to date (nodes done/total, running, failed, waiting for a
human, elapsed). It exits when the workflow ends: 0 if it succeeded,
2 if it failed, 3 if it was cancelled. With --repo, a succeeded workflow's
branch is fetched into that repository if it is not there yet. A workflow
with auto_merge is followed until its merge is done (exit 0) or has failed
(exit 6).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "watch")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			nc, client, err := e.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			b, err := bus.Attach(ctx, nc, e.log)
			if err != nil {
				return &ExitError{Code: ExitUnavailable, Err: err}
			}
			repo := e.v.GetString("repo")
			if repo != "" {
				if repo, err = filepath.Abs(repo); err != nil {
					return err
				}
			}
			return e.follow(ctx, b, client, args[0], repo)
		},
	}
	cmd.Flags().String("repo", "", "repository to fetch the result branch into when the workflow succeeds")
	return cmd
}

// follow prints a workflow's events until it finishes and returns the exit
// error its final status calls for.
func (e *env) follow(ctx context.Context, b *bus.Bus, client *api.Client, wf, repoPath string) error {
	rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
	sum, err := client.Status(rctx, wf)
	cancel()
	if err != nil {
		return apiErr(err)
	}
	cons, err := b.JS.OrderedConsumer(ctx, protocol.StreamEvents, jetstream.OrderedConsumerConfig{
		// The fleet's log too: a pause holds every workflow's next round.
		FilterSubjects: []string{protocol.EventSubject(wf), protocol.EventSubject(eventlog.FleetLogID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("watch %s: %w", wf, err)}
	}
	// The iterator rides out the ordered consumer's resets (Next on the
	// consumer itself fails with "no responders" while one is under way in
	// a cluster); its Next blocks, so ctx stops it.
	it, err := cons.Messages()
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("watch %s: %w", wf, err)}
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	// On a terminal, a progress line stays below the transition lines.
	changed, ended := func() {}, func(bool) {}
	if width, ok := terminalWidth(e.out); ok {
		out := e.out
		live := newLiveLine(out, width)
		prog := startProgress(live, func(ctx context.Context) (api.WorkflowSummary, error) { return client.Status(ctx, wf) })
		e.out, changed, ended = live, prog.Changed, prog.Ended
		defer func() {
			prog.Stop()
			e.out = out
		}()
	}
	// escalated are the nodes waiting for a human (escalated, or awaiting
	// approval), as the events tell.
	escalated := map[string]bool{}
	// recheck is set while nodes wait for a human and the last event has
	// been read, but the coordinator's status did not say that nothing can
	// move: an event is in the log a moment before the coordinator serves
	// the state it leads to, so the status is asked again whenever no event
	// comes for a while, rather than waiting for one that may never come.
	recheck := false
	// fin is the workflow's latest end while nothing but merges happened
	// since (a node event means it was reopened), and merged the outcome
	// of its latest merge since then; awaitMerge is set once a succeeded
	// workflow with auto_merge has finished and its merge has no outcome
	// yet: watch goes on until it has.
	// fleet follows the fleet's log: its events before the workflow's
	// first are history, of which only a pause still in force is shown.
	fleet := fleetLines{}
	var (
		fin        *eventlog.WorkflowFinished
		merged     *eventlog.Event
		awaitMerge bool
		// msg is the message last read, and queued its events not
		// handled yet: a message holds one event or a batch of them.
		msg    jetstream.Msg
		queued []eventlog.Event
	)
	for {
		if len(queued) == 0 {
			var next []jetstream.NextOpt
			if recheck {
				next = append(next, jetstream.NextMaxWait(time.Second))
			}
			var err error
			if msg, err = it.Next(next...); err != nil || msg == nil {
				if ctx.Err() != nil {
					return &ExitError{Code: ExitFault, Err: ctx.Err()}
				}
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("watch %s: %w", wf, err)}
				}
				if recheck && errors.Is(err, nats.ErrTimeout) {
					if stuck, err := e.waitsForHuman(ctx, client, wf); err == nil && stuck {
						fmt.Fprintf(e.out, "workflow %s needs attention: nothing runs until a human decides (coordinator inbox)\n", wf)
						return &ExitError{Code: ExitNeedsAttention}
					}
					continue
				}
				// A missed heartbeat and the like: the iterator carries on.
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if queued, err = eventlog.DecodeAll(msg.Data()); err != nil {
				continue
			}
		}
		ev := queued[0]
		queued = queued[1:]
		ofFleet := ev.WorkflowID == eventlog.FleetLogID
		if ofFleet {
			fleet.event(e.out, ev, fin != nil)
		} else {
			fleet.workflowEvent(e.out)
			printEvent(e.out, ev)
		}
		changed()
		if awaitMerge {
			if done, err := mergeOutcome(ev, sum.Branch); done {
				return err
			}
			continue
		}
		if !ofFleet {
			switch b := ev.Body.(type) {
			case eventlog.NodeEscalated, eventlog.NodeAwaitingApproval:
				escalated[ev.NodeID] = true
			case eventlog.NodeApproved, eventlog.NodeRejected, eventlog.NodeRetryGranted, eventlog.NodeReopened:
				delete(escalated, ev.NodeID)
			case eventlog.WorkflowFinished:
				fin, merged = &b, nil
			case eventlog.WorkflowMerged, eventlog.WorkflowMergeFailed:
				merged = &ev
			}
			if ev.NodeID != "" {
				fin, merged = nil, nil // the workflow runs again
			}
		}
		ended(fin != nil)
		recheck = false
		if fin == nil {
			if md, err := msg.Metadata(); err == nil && len(queued) == 0 && md.NumPending == 0 && len(escalated) > 0 {
				if stuck, err := e.waitsForHuman(ctx, client, wf); err == nil && stuck {
					fmt.Fprintf(e.out, "workflow %s needs attention: nothing runs until a human decides (coordinator inbox)\n", wf)
					return &ExitError{Code: ExitNeedsAttention}
				}
				recheck = true
			}
			continue
		}
		if md, err := msg.Metadata(); len(queued) > 0 || (err == nil && md.NumPending > 0) {
			continue // reopened since (a gate rerun), or merged: follow it to its latest end
		}
		// Accepted work is delivered whatever the outcome: on failure the
		// branch holds the nodes that passed their gates.
		if repoPath != "" && fin.Commit != "" && fin.Commit != sum.BaseCommit {
			if err := fetchResult(ctx, b, repoPath, wf, sum.Branch, fin.Commit); err != nil {
				return &ExitError{Code: ExitFault, Err: err}
			}
			fmt.Fprintf(e.out, "branch %s in %s is at %s\n", sum.Branch, repoPath, short(fin.Commit))
		}
		// The end is in the log a moment before the coordinator serves
		// it: wait for that, so a status asked next agrees.
		e.awaitStatus(ctx, client, wf, fin.Status)
		switch fin.Status {
		case protocol.WorkflowSucceeded:
			if !sum.AutoMerge {
				return nil
			}
			if merged != nil {
				_, err := mergeOutcome(*merged, sum.Branch)
				return err
			}
			awaitMerge = true
			continue
		case protocol.WorkflowCancelled:
			return &ExitError{Code: ExitCancelled}
		default:
			return &ExitError{Code: ExitFailed}
		}
	}
}

// awaitStatus asks the coordinator for workflow wf's status until it is
// want, for at most 5 s (or --timeout, if shorter): an event is in the
// log a moment before the coordinator serves the state it leads to. It
// gives up quietly: the log has already said how the workflow ended, and
// the workflow may have been reopened since.
func (e *env) awaitStatus(ctx context.Context, client *api.Client, wf string, want protocol.WorkflowStatus) {
	deadline := time.Now().Add(min(e.v.GetDuration("timeout"), 5*time.Second))
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
		s, err := client.Status(rctx, wf)
		cancel()
		if err == nil && s.Status == want {
			return
		}
		if time.Now().Add(delay).After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// waitsForHuman reports whether workflow wf needs attention and nothing
// in it can move without a human: no node is in flight, retrying, in the
// integration queue, approved and being integrated, awaiting an approval
// step whose timeout will decide it, or pending with every dependency done.
func (e *env) waitsForHuman(ctx context.Context, client *api.Client, wf string) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
	defer cancel()
	s, err := client.Status(rctx, wf)
	if err != nil || s.Status != protocol.WorkflowNeedsAttention {
		return false, err
	}
	status := map[string]protocol.NodeStatus{}
	for _, n := range s.Nodes {
		status[n.ID] = n.Status
	}
	for _, n := range s.Nodes {
		if n.Approved {
			// Approved (by a human or a timeout) a moment ago: its work
			// is being integrated, and it succeeds without a human.
			return false, nil
		}
		switch n.Status {
		case protocol.NodeReady, protocol.NodeRunning, protocol.NodeGating, protocol.NodeRetrying, protocol.NodeIntegrating:
			return false, nil
		case protocol.NodeAwaitingApproval:
			if n.ApprovalDeadline != nil {
				return false, nil // its timeout decides if nobody does
			}
		case protocol.NodePending:
			ready := true
			for _, d := range n.DependsOn {
				ready = ready && status[d] == protocol.NodeSucceeded
			}
			if ready {
				return false, nil
			}
		}
	}
	return true, nil
}

// resultLookupWait is how long fetchResult asks again for a result bundle
// not found.
const resultLookupWait = 10 * time.Second

// fetchResult makes sure the workflow's branch is in the repository: the
// coordinator writes it there when it can see the repository; otherwise it
// is fetched from the result bundle in the object store.
func fetchResult(ctx context.Context, b *bus.Bus, repoPath, wf, branch, commit string) error {
	if commit != "" {
		if got, err := workspace.ResolveCommit(ctx, repoPath, "refs/heads/"+branch); err == nil && got == commit {
			return nil
		}
	}
	tmp, err := os.MkdirTemp("", "supervisor-result-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "result.bundle")
	name := "results/" + wf + ".bundle"
	// The coordinator stores the bundle before it records the end, but in
	// a cluster a replica may answer the lookup before it has the bundle:
	// not found is asked again for a while.
	var info *jetstream.ObjectInfo
	for delay, deadline := 50*time.Millisecond, time.Now().Add(resultLookupWait); ; delay *= 2 {
		info, err = b.Bundles.GetInfo(ctx, name)
		if err == nil || !errors.Is(err, jetstream.ErrObjectNotFound) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(delay, time.Second)):
		}
	}
	if err != nil {
		return fmt.Errorf("look up result bundle of %s: %w", wf, err)
	}
	if info.Size > protocol.MaxBundleBytes {
		return fmt.Errorf("result of %s: %s", wf, protocol.BundleTooLarge(name, int64(info.Size)))
	}
	if err := b.Bundles.GetFile(ctx, name, file); err != nil {
		return fmt.Errorf("download result bundle of %s: %w", wf, err)
	}
	return workspace.ImportBranch(ctx, repoPath, file, branch)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// feedbackFixes lists a feedback document's priority fixes, one indented
// line each, for watch.
func feedbackFixes(doc json.RawMessage) string {
	var f struct {
		Fixes []string `json:"priority_fixes"`
	}
	if json.Unmarshal(doc, &f) != nil || len(f.Fixes) == 0 {
		return ""
	}
	var b strings.Builder
	for i, fix := range f.Fixes {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "          feedback: %s", fix)
	}
	return b.String()
}

// fleetLines shows the fleet's pauses and resumes among a workflow's
// events: those while it runs as they come; of the earlier ones only a
// pause still in force, once, before the workflow's first event; and
// those after its end only if it runs again (a gate rerun, a merge).
type fleetLines struct {
	started bool             // a workflow event has been shown
	paused  *eventlog.Event  // the pause in force before that, if any
	held    []eventlog.Event // fleet events since the workflow's end
}

// event takes an event of the fleet's log; ended says whether the
// workflow's latest event so far is its end.
func (f *fleetLines) event(w io.Writer, ev eventlog.Event, ended bool) {
	switch {
	case !f.started:
		if _, ok := ev.Body.(eventlog.FleetPaused); ok {
			f.paused = &ev
		} else {
			f.paused = nil
		}
	case ended:
		f.held = append(f.held, ev)
	default:
		printEvent(w, ev)
	}
}

// workflowEvent is called before each of the workflow's events is shown.
func (f *fleetLines) workflowEvent(w io.Writer) {
	if !f.started {
		f.started = true
		if f.paused != nil {
			printEvent(w, *f.paused)
		}
		return
	}
	for _, ev := range f.held {
		printEvent(w, ev)
	}
	f.held = nil
}

// printEvent writes one human line for an event.
func printEvent(w io.Writer, ev eventlog.Event) {
	ts := ev.Time.Local().Format("15:04:05")
	subject := "workflow " + ev.WorkflowID
	switch {
	case ev.NodeID != "":
		subject = "node " + ev.NodeID
	case ev.WorkflowID == eventlog.FleetLogID:
		subject = "fleet"
	}
	withReason := func(what, reason string) string {
		if reason != "" {
			return what + ": " + reason
		}
		return what
	}
	var what string
	switch b := ev.Body.(type) {
	case eventlog.WorkflowSubmitted:
		what = fmt.Sprintf("submitted: %s, %d tasks, base %s", b.Workflow.Name, len(b.Workflow.Tasks), short(b.Repo.BaseCommit))
	case eventlog.WorkflowCancelRequested:
		what = "cancel requested"
	case eventlog.WorkflowFinished:
		what = withReason(string(b.Status), b.Reason)
	case eventlog.NodeReady:
		what = fmt.Sprintf("ready (attempt %d)", b.Attempt)
	case eventlog.NodeStarted:
		what = fmt.Sprintf("running on %s (lease %d)", b.Host, b.LeaseToken)
	case eventlog.NodeWaiting:
		what = fmt.Sprintf("waiting on breaker %s until %s (held by %s)", b.Scope, b.Until.Local().Format("15:04:05"), b.Host)
	case eventlog.GateWaiting:
		what = fmt.Sprintf("gate %s waiting on breaker %s until %s (held by %s)", b.Gate, b.Scope,
			b.Until.Local().Format("15:04:05"), b.Host)
	case eventlog.NodeAgentDone:
		what = fmt.Sprintf("agent %s (exit %d)", b.Result.Status, b.Result.ExitCode)
		if b.Result.Patch == nil && b.Result.Status == protocol.AgentSucceeded {
			what += ", no changes"
		}
		if r := b.Result.Run; r != nil && r.Adapter != "command" {
			what += ": " + runLine(r)
		}
		if o := b.Output; o != nil {
			if o.Valid() {
				what += fmt.Sprintf("; %s result %s", o.Schema, o.Status)
			} else {
				what += fmt.Sprintf("; %s result not accepted: %s", o.Schema, o.Error)
			}
		}
	case eventlog.NodesAdded:
		ids := make([]string, 0, len(b.Tasks))
		for _, t := range b.Tasks {
			ids = append(ids, t.ID)
		}
		what = fmt.Sprintf("plan added %d nodes: %s", len(ids), strings.Join(ids, ", "))
		if len(b.Dependents) > 0 {
			what += "; " + strings.Join(b.Dependents, ", ") + " now wait for them"
		}
	case eventlog.GateDispatched:
		what = fmt.Sprintf("gate %s dispatched", b.Gate)
	case eventlog.GateStarted:
		what = fmt.Sprintf("gate %s running on %s", b.Gate, b.Host)
	case eventlog.GateFinished:
		what = fmt.Sprintf("gate %s %s", b.Gate, b.Result.Status)
		if b.Result.ExitCode != nil {
			what += fmt.Sprintf(" (exit %d)", *b.Result.ExitCode)
		}
		what = withReason(what, b.Reason)
	case eventlog.NodeIntegrated:
		what = fmt.Sprintf("integrated onto %s at %s", b.Branch, short(b.Commit))
	case eventlog.NodeFinished:
		what = withReason(string(b.Status), b.Reason)
	case eventlog.NodeGatesChanged:
		if b.Change.Definition != nil {
			what = fmt.Sprintf("gate %s added or redefined", b.Change.Definition.Name)
		} else {
			what = fmt.Sprintf("gate %s removed", b.Change.Remove)
		}
	case eventlog.NodeRetryScheduled:
		what = fmt.Sprintf("retrying: attempt %d at %s with feedback (%s)", b.Next,
			b.NotBefore.Local().Format("15:04:05"), b.Reason)
		if fixes := feedbackFixes(b.Feedback); fixes != "" {
			what += "\n" + fixes
		}
	case eventlog.NodeEscalated:
		what = "escalated to a human: " + b.Reason
	case eventlog.NodeAwaitingApproval:
		what = "awaiting approval: " + b.Reason
		if !b.Deadline.IsZero() {
			what += " (until " + b.Deadline.Local().Format("15:04:05") + ")"
		}
	case eventlog.NodeApproved:
		what = withReason("approved by "+b.By, b.Note)
	case eventlog.NodeRejected:
		what = withReason("rejected by "+b.By, b.Reason)
	case eventlog.NodeRetryGranted:
		what = withReason(fmt.Sprintf("%d more attempts granted by %s", b.Attempts, b.By), b.Note)
	case eventlog.FleetPaused:
		what = "paused: " + b.Reason + "; no new agent round starts anywhere until `coordinator resume`"
	case eventlog.FleetResumed:
		what = "resumed by " + b.By
	case eventlog.WorkflowMergeRequested, eventlog.WorkflowMerged, eventlog.WorkflowMergeFailed:
		what = mergeEventLine(ev)
	case eventlog.NodeIntegrationQueued, eventlog.IntegrationDispatched, eventlog.IntegrationFinished:
		what = integrationEvent(ev)
	default:
		what = string(ev.Type())
	}
	fmt.Fprintf(w, "%s  %-28s %s\n", ts, subject, strings.TrimSpace(what))
}

// runLine summarizes what an agent's CLI reported: "claude-code opus,
// 3 turns, 12000/800 tokens, $0.0241" ("~$" when estimated).
func runLine(r *protocol.AgentRun) string {
	parts := []string{strings.TrimSpace(r.Adapter + " " + r.Model)}
	if r.Turns > 0 {
		parts = append(parts, fmt.Sprintf("%d turns", r.Turns))
	}
	if r.Usage != (protocol.TokenUsage{}) {
		parts = append(parts, fmt.Sprintf("%d/%d tokens", r.Usage.Input, r.Usage.Output))
	}
	if r.CostKnown {
		c := fmt.Sprintf("$%.4f", r.CostUSD)
		if r.CostEstimated {
			c = "~" + c
		}
		parts = append(parts, c)
	}
	if r.Error != "" {
		parts = append(parts, r.Error)
	}
	return strings.Join(parts, ", ")
}
