package statemachine

import (
	"fmt"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// MergeStatus is where a workflow's latest merge request stands.
type MergeStatus string

// Merge statuses.
const (
	// MergeRequested: decided and not done yet (the engine merges).
	MergeRequested MergeStatus = "requested"
	// MergeDone: the target branch holds the workflow's work.
	MergeDone MergeStatus = "merged"
	// MergeFailed: not merged (a conflict, local changes in the way …);
	// neither branch changed. A new request may follow.
	MergeFailed MergeStatus = "failed"
)

// MergeState is a workflow's latest merge request and its outcome.
type MergeState struct {
	// Request numbers the workflow's requests from 1.
	Request int
	Status  MergeStatus
	// Into is the target branch; Commit the workflow's tip being merged.
	Into, Commit string
	// By asked for it; Auto is set for the workflow's auto_merge.
	By   string
	Auto bool
	// RequestedAt is when it was decided, EndedAt when it ended.
	RequestedAt, EndedAt time.Time
	// Result is the target's tip after the merge, FastForward and
	// UpToDate how it got there (neither: a merge commit).
	Result                string
	FastForward, UpToDate bool
	// Reason is why it failed, Conflicts the conflicting paths.
	Reason    string
	Conflicts []string
}

// Merge merges the workflow's branch at Commit into branch Into of the
// submitting repository, serialized fleet-wide by a lock on the
// repository and branch. Its outcome is an event: MergedEvent, or
// MergeFailedEvent. A merge commit is dated Date, so the same merge makes
// the same commit again; a target that already holds Commit (a merge done
// just before a crash) is left as it is and the request counts as merged.
type Merge struct {
	Request      int
	Into, Commit string
	Date         time.Time
	Message      string
}

func (Merge) effect() {}

// MergeTarget is the branch a merge of w goes into when the request names
// none: the workflow's merge_into, or else the branch it was submitted
// from ("" when neither is known).
func (w *Workflow) MergeTarget() string {
	if w.Spec != nil && w.Spec.MergeInto != "" {
		return w.Spec.MergeInto
	}
	return w.BaseBranch
}

// MergePending reports whether a merge was decided and not done yet.
func (w *Workflow) MergePending() bool {
	return w.Merge != nil && w.Merge.Status == MergeRequested
}

// RequestMerge asks for workflow w's branch to be merged into into (""
// for w.MergeTarget()) on behalf of by. Only a succeeded workflow can be
// merged: a failed or cancelled one's branch holds only part of the work,
// and a running one is not done. Asking again for the target of the
// request in progress, or of the latest merge that succeeded, changes
// nothing (no effect); a request in progress for another target is a
// conflict. After a failed merge a new request may be made.
func RequestMerge(w *Workflow, into, by string, now time.Time) ([]Effect, error) {
	if w.Status != protocol.WorkflowSucceeded {
		return nil, conflict("workflow %s is %s: only a succeeded workflow can be merged", w.ID, w.Status)
	}
	if into == "" {
		into = w.MergeTarget()
	}
	if into == "" {
		return nil, conflict("workflow %s records no branch it was submitted from and sets no merge_into: name the target branch (--into)", w.ID)
	}
	if err := protocol.CheckBranchName(into); err != nil {
		return nil, conflict("%v", err)
	}
	if m := w.Merge; m != nil {
		switch {
		case m.Status == MergeRequested && m.Into == into:
			return nil, nil
		case m.Status == MergeRequested:
			return nil, conflict("workflow %s is being merged into %s; ask again once that is done", w.ID, m.Into)
		case m.Status == MergeDone && m.Into == into && m.Commit == w.Parent():
			return nil, nil
		}
	}
	return []Effect{w.mergeRequest(into, by, false, now)}, nil
}

// mergeRequest is the event requesting the workflow's next merge.
func (w *Workflow) mergeRequest(into, by string, auto bool, now time.Time) Append {
	n := 1
	if w.Merge != nil {
		n = w.Merge.Request + 1
	}
	return Append{Event: eventlog.Event{WorkflowID: w.ID, Time: now, Body: eventlog.WorkflowMergeRequested{
		Request: n, Into: into, Commit: w.Parent(), By: by, Auto: auto}},
		MsgID: w.msgID(fmt.Sprintf("%s.merge.r%d.requested", w.ID, n))}
}

// merge decides the merging of a finished workflow: a request not done
// yet is carried out (again, after a restart: the engine's merge is
// idempotent); a succeeded workflow with auto_merge and no merge yet
// requests one into its merge target, or fails at once when it has none.
func (d *decider) merge() {
	w := d.w
	switch {
	case w.MergePending():
		m := w.Merge
		d.Effects = append(d.Effects, Merge{Request: m.Request, Into: m.Into, Commit: m.Commit,
			Date: m.RequestedAt.UTC().Truncate(time.Second), Message: w.mergeMessage(m)})
	case w.Merge == nil && w.Status == protocol.WorkflowSucceeded && w.Spec.AutoMerge:
		into := w.MergeTarget()
		if into == "" {
			d.Effects = append(d.Effects, Append{Event: eventlog.Event{WorkflowID: w.ID, Time: d.now,
				Body: eventlog.WorkflowMergeFailed{Request: 1, Reason: "auto_merge: the submission recorded no branch it " +
					"was submitted from and the workflow sets no merge_into"}},
				MsgID: w.msgID(w.ID + ".merge.r1.failed")})
			return
		}
		d.Effects = append(d.Effects, w.mergeRequest(into, "auto_merge", true, d.now))
	}
}

// mergeMessage is the message of request m's merge commit.
func (w *Workflow) mergeMessage(m *MergeState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Merge %s (%s) into %s\n\n", w.Branch, w.Spec.Name, m.Into)
	for _, id := range w.Integrated {
		fmt.Fprintf(&b, "* %s\n", id)
	}
	fmt.Fprintf(&b, "\nSupervisor-Workflow: %s\n", w.ID)
	if m.By != "" {
		fmt.Fprintf(&b, "Supervisor-Merged-By: %s\n", m.By)
	}
	return b.String()
}

// MergedEvent is the outcome of request x: merged, the target at result.
func MergedEvent(w *Workflow, x Merge, result string, fastForward, upToDate bool, now time.Time) Append {
	return Append{Event: eventlog.Event{WorkflowID: w.ID, Time: now, Body: eventlog.WorkflowMerged{
		Request: x.Request, Into: x.Into, Commit: result, FastForward: fastForward, UpToDate: upToDate}},
		MsgID: w.msgID(fmt.Sprintf("%s.merge.r%d.done", w.ID, x.Request))}
}

// MergeFailedEvent is the outcome of request x: not merged, for reason
// (conflicts: the conflicting paths).
func MergeFailedEvent(w *Workflow, x Merge, reason string, conflicts []string, now time.Time) Append {
	return Append{Event: eventlog.Event{WorkflowID: w.ID, Time: now, Body: eventlog.WorkflowMergeFailed{
		Request: x.Request, Into: x.Into, Reason: reason, Conflicts: conflicts}},
		MsgID: w.msgID(fmt.Sprintf("%s.merge.r%d.done", w.ID, x.Request))}
}

// applyMerge folds a merge event. An outcome for another request than
// the latest changes nothing.
func (w *Workflow) applyMerge(ev eventlog.Event) error {
	switch b := ev.Body.(type) {
	case eventlog.WorkflowMergeRequested:
		w.Merge = &MergeState{Request: b.Request, Status: MergeRequested, Into: b.Into, Commit: b.Commit,
			By: b.By, Auto: b.Auto, RequestedAt: ev.Time}
	case eventlog.WorkflowMerged:
		if m := w.Merge; m != nil && m.Request == b.Request {
			m.Status, m.EndedAt, m.Result, m.FastForward, m.UpToDate = MergeDone, ev.Time, b.Commit, b.FastForward, b.UpToDate
		}
	case eventlog.WorkflowMergeFailed:
		if w.Merge == nil && b.Request == 1 {
			// auto_merge without a target fails before any request.
			w.Merge = &MergeState{Request: 1, Into: b.Into, Auto: true, By: "auto_merge", RequestedAt: ev.Time}
		}
		if m := w.Merge; m != nil && m.Request == b.Request {
			m.Status, m.EndedAt, m.Reason, m.Conflicts = MergeFailed, ev.Time, b.Reason, b.Conflicts
		}
	default:
		return fmt.Errorf("not a merge event: %s", ev.Type())
	}
	return nil
}
