package statemachine

import (
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// Effect is one thing the engine must do for a workflow. Effects are
// carried out in order; an effect that fails stops the rest, and the
// engine decides again later (Decide is idempotent).
type Effect interface{ effect() }

// Append appends Event to the workflow's log and folds it into the state.
type Append struct {
	Event eventlog.Event
	// MsgID de-duplicates a repeated append ("" = none).
	MsgID string
}

// Publish publishes a job unless this engine already has: job ids are
// deterministic and the bus de-duplicates them, so publishing again after
// a restart is harmless. Exactly one of Agent and Gate is set.
type Publish struct {
	Agent *protocol.AgentJob
	Gate  *protocol.GateJob
}

// JobID is the published job's id.
func (p Publish) JobID() string {
	if p.Agent != nil {
		return p.Agent.JobID
	}
	return p.Gate.JobID
}

// Integrate lands Node's accepted patch on the workflow's branch, on top
// of the branch's tip as the log records it, with CommitTime as the
// commit's date. Its outcome is an event: IntegratedEvent, or
// IntegrationConflictEvent when the patch does not apply.
type Integrate struct {
	Node       string
	CommitTime time.Time
}

// Finish ends the workflow: its branch is delivered (a bundle in the
// object store, and the submitting repository when visible) if Deliver,
// then Event is appended, then runners are told, through the state store,
// to drop its jobs still queued; Announce also tells the runners running
// them to stop (a cancellation).
type Finish struct {
	Event    eventlog.Event
	MsgID    string
	Deliver  bool
	Announce bool
}

// Reopen tells runners the workflow runs again: the finished marker they
// check before taking a job is removed (a gate rerun of a failed workflow).
type Reopen struct{}

func (Append) effect()    {}
func (Publish) effect()   {}
func (Integrate) effect() {}
func (Finish) effect()    {}
func (Reopen) effect()    {}

// Decision is what Decide returns.
type Decision struct {
	Effects []Effect
	// Wake, if not zero, is when the workflow should be decided again
	// even if nothing happens (a pending gate's next poll or deadline).
	Wake time.Time
	// Deferred are the jobs that could not be built now (a task prompt not
	// read from the log yet: ErrPromptUnavailable), each with why. The
	// engine reads what they wait for and decides again at once; if it
	// cannot, Wake (a second later) tries again.
	Deferred []error
}
