package statemachine

// The fleet-wide safeguard (S-7.4): when more agent rounds fail within an
// hour than the limit allows, something is wrong beyond any one task (a
// broken base, a model that lost its way, a gate that lies), so no new
// agent round starts anywhere until an operator resumes. Rounds already
// running finish; the pause and the resume are events of their own, in the
// fleet's log.

import (
	"fmt"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// FleetID is the workflow id of the fleet's own events.
const FleetID = eventlog.FleetLogID

// DefaultMaxFailuresPerHour is how many failed agent rounds the fleet
// takes within an hour before it pauses.
const DefaultMaxFailuresPerHour = 10

// failureWindow is the span failed rounds are counted over.
const failureWindow = time.Hour

// Fleet is what the coordinator knows across workflows.
type Fleet struct {
	Paused      bool
	PausedAt    time.Time
	PauseReason string
	// Failures are the times of the failed agent rounds within the last
	// hour (as of the latest), oldest first.
	Failures []time.Time
	// LastSeq is the sequence of the fleet log's last event.
	LastSeq uint64
}

// Fleet returns the state of the fleet w runs in.
func (w *Workflow) Fleet() *Fleet { return w.fleet }

// Fleet returns the fleet's state.
func (s *State) Fleet() *Fleet { return s.fleet }

// LastSeq is the sequence of the last event folded of workflow id's log
// (or the fleet's), 0 when there is none.
func (s *State) LastSeq(id string) uint64 {
	if id == FleetID {
		return s.fleet.LastSeq
	}
	if w, ok := s.wfs[id]; ok {
		return w.LastSeq
	}
	if r, ok := s.retired[id]; ok {
		return r.LastSeq
	}
	return 0
}

// SetPause takes the pause and the fleet log's position from f (the fleet
// log reloaded on its own), keeping the failures counted here.
func (s *State) SetPause(f *Fleet) {
	s.fleet.Paused, s.fleet.PausedAt, s.fleet.PauseReason, s.fleet.LastSeq = f.Paused, f.PausedAt, f.PauseReason, f.LastSeq
}

// applyFleet folds an event of the fleet's own log.
func (s *State) applyFleet(ev eventlog.Event) error {
	s.fleet.LastSeq = ev.Seq
	switch b := ev.Body.(type) {
	case eventlog.FleetPaused:
		s.fleet.Paused, s.fleet.PausedAt, s.fleet.PauseReason = true, ev.Time, b.Reason
	case eventlog.FleetResumed:
		// Failures before the resume no longer count: the operator has
		// looked at them.
		s.fleet.Paused, s.fleet.PausedAt, s.fleet.PauseReason, s.fleet.Failures = false, time.Time{}, "", nil
	default:
		return fmt.Errorf("event %s is not a fleet event", ev.Type())
	}
	return nil
}

// CountsAgainstFleet reports whether ev is a failed agent round the fleet
// counts: a retry that is not transient, or an escalation after a failed
// round.
func CountsAgainstFleet(ev eventlog.Event) bool {
	switch b := ev.Body.(type) {
	case eventlog.NodeRetryScheduled:
		return b.Class != string(Transient)
	case eventlog.NodeEscalated:
		return b.Signature != ""
	}
	return false
}

// countFailure notes a failed agent round of any workflow.
func (s *State) countFailure(ev eventlog.Event) {
	if CountsAgainstFleet(ev) {
		s.fleet.failed(ev.Time)
	}
}

func (f *Fleet) failed(at time.Time) {
	f.Failures = append(f.Failures, at)
	cut := 0
	for cut < len(f.Failures) && at.Sub(f.Failures[cut]) >= failureWindow {
		cut++
	}
	f.Failures = f.Failures[cut:]
}

// FailuresWithin counts the failed rounds within the hour before now.
func (f *Fleet) FailuresWithin(now time.Time) int {
	n := 0
	for _, t := range f.Failures {
		if now.Sub(t) < failureWindow {
			n++
		}
	}
	return n
}

// DecideFleet says whether the fleet must pause now: when more rounds
// failed within the hour than limit (DefaultMaxFailuresPerHour when 0; a
// negative limit never pauses).
func DecideFleet(s *State, now time.Time, limit int) []Effect {
	if limit == 0 {
		limit = DefaultMaxFailuresPerHour
	}
	f := s.fleet
	if limit < 0 || f.Paused {
		return nil
	}
	n := f.FailuresWithin(now)
	if n <= limit {
		return nil
	}
	reason := fmt.Sprintf("%d agent rounds failed within an hour, more than the %d allowed", n, limit)
	return []Effect{Append{Event: eventlog.Event{WorkflowID: FleetID, Time: now, Body: eventlog.FleetPaused{Reason: reason, Failures: n}}}}
}

// Resume ends a pause; by names the operator.
func Resume(s *State, by string, now time.Time) ([]Effect, error) {
	if !s.fleet.Paused {
		return nil, conflict("the fleet is not paused")
	}
	return []Effect{Append{Event: eventlog.Event{WorkflowID: FleetID, Time: now, Body: eventlog.FleetResumed{By: by}}}}, nil
}
