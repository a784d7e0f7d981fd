package statemachine

// A node's rarely set state lives in parts the node points at (PERF-39):
// a part is allocated when one of its fields is first set and dropped
// when all of them are zero again, so a node in flight that has not
// spent, retried, waited, been approved or queued carries three nil
// pointers instead of the fields. The accessors read a missing part as
// zero, as the fields read before they were set. A part is never left
// allocated and zero, so two nodes with the same fields are equal
// (reflect.DeepEqual) however they got there.

import (
	"encoding/json"
	"reflect"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// nodeSpent is what a node's runs used.
type nodeSpent struct {
	// Spend is what all the node's runs and its review gates' reviewers
	// used, every round counted; LastRun what the agent CLI reported about
	// the node's latest run.
	Spend   Spend
	LastRun *protocol.AgentRun
}

// nodeRetry is a node's state between attempts.
type nodeRetry struct {
	// RetryAt is when a retrying node's next attempt, NextAttempt, starts.
	RetryAt     time.Time
	NextAttempt int
	// Feedback is the document the current (or next) attempt receives: the
	// failed round's, with a human's note when one granted the retry.
	Feedback json.RawMessage
	// Given is what the current attempt was started with (Feedback when it
	// became ready; nil for attempt 1): kept in its AttemptRecord, so that
	// it outlives the next failure, which replaces Feedback.
	Given AttemptStart
	// grant is the retry a human granted, until the attempt it starts is
	// ready.
	grant *AttemptStart
	// GateFailures counts, per gate, the rounds whose retry or escalation
	// it caused (nil until one did).
	GateFailures map[string]int
	// Transients counts the transient re-runs in a row.
	Transients int
	// History holds the node's finished attempts, oldest first.
	History []AttemptRecord
}

// nodeRare is the rest: approval, breakers, plans, the integration queue.
type nodeRare struct {
	// Approved is set when a human approved the escalated or waiting
	// node, ApprovedBy who (or TimeoutApprover, PolicyApprover).
	Approved   bool
	ApprovedBy string
	// AcceptedConfig are the trusted configuration files (trusted.go) the
	// human who approved the current attempt accepted (nil: none).
	AcceptedConfig []string
	// AwaitingSince is when the node began awaiting approval, and
	// ApprovalDeadline when its approval step times out (zero: never).
	AwaitingSince    time.Time
	ApprovalDeadline time.Time
	// Waiting is set while a runner holds the current attempt's agent job
	// back on an open circuit breaker.
	Waiting *BreakerWait
	// Expanded counts the nodes the node's plan added (-1: a plan of no
	// components; 0: none added yet).
	Expanded int
	// QueuedAt is when the node joined the integration queue, and
	// Speculation its current speculative run of the integration gates.
	QueuedAt    time.Time
	Speculation *Speculation
	// integRounds numbers each integration gate's rounds in the attempt,
	// across speculations, so every run has a job id of its own.
	integRounds map[string]int
	// ownTask is the node's task once it is no longer the spec's entry
	// (after a change of its gates), nil before: what a snapshot keeps,
	// Task (and the gate plan) being derived again from it or the spec.
	ownTask *protocol.TaskSpec
}

// nodeDone is how a node ended: when, and the commit its patch landed as.
type nodeDone struct {
	// Integrated is set once the node's patch is on the branch, Commit
	// being the branch's tip then and CommitTime the date it was made with.
	Integrated bool
	Commit     string
	CommitTime time.Time
	// EndedAt is when the node reached its final status.
	EndedAt time.Time
}

// gateMore is a gate run's rarely set state.
type gateMore struct {
	// PendingSince is when the gate first reported pending in this
	// attempt (the pending clock); NextPollAt when it runs again.
	PendingSince time.Time
	NextPollAt   time.Time
	// OOMs counts the gate's out-of-memory kills in this attempt.
	OOMs int
	// Waiting is set while a runner holds the current round's job back on
	// an open circuit breaker.
	Waiting *BreakerWait
}

// part returns *p, allocating it first if it is nil.
func part[T any](p **T) *T {
	if *p == nil {
		*p = new(T)
	}
	return *p
}

// tidy drops *p if all its fields are zero.
func tidy[T any](p **T) {
	if *p != nil && reflect.ValueOf(*p).Elem().IsZero() {
		*p = nil
	}
}

// tidyParts drops the node's parts that are all zero.
func (n *Node) tidyParts() {
	tidy(&n.spent)
	tidy(&n.retry)
	tidy(&n.rare)
	tidy(&n.done)
}

// Spend is what all the node's runs and its review gates' reviewers used,
// every round counted: it outlives the round, unlike Agent.
func (n *Node) Spend() Spend {
	if n.spent == nil {
		return Spend{}
	}
	return n.spent.Spend
}

// LastRun is what the agent CLI reported about the node's latest run (nil
// before one reported).
func (n *Node) LastRun() *protocol.AgentRun {
	if n.spent == nil {
		return nil
	}
	return n.spent.LastRun
}

// RetryAt is when a retrying node's next attempt starts.
func (n *Node) RetryAt() time.Time {
	if n.retry == nil {
		return time.Time{}
	}
	return n.retry.RetryAt
}

// NextAttempt is the attempt a retrying node starts at RetryAt.
func (n *Node) NextAttempt() int {
	if n.retry == nil {
		return 0
	}
	return n.retry.NextAttempt
}

// Feedback is the document the current (or next) attempt receives: the
// failed round's, with a human's note when one granted the retry.
func (n *Node) Feedback() json.RawMessage {
	if n.retry == nil {
		return nil
	}
	return n.retry.Feedback
}

// Given is what the current attempt was started with (Feedback when it
// became ready; nil for attempt 1).
func (n *Node) Given() AttemptStart {
	if n.retry == nil {
		return AttemptStart{}
	}
	return n.retry.Given
}

// GateFailures counts, per gate, the rounds whose retry or escalation it
// caused (nil until one did). It is the node's own: callers only read it.
func (n *Node) GateFailures() map[string]int {
	if n.retry == nil {
		return nil
	}
	return n.retry.GateFailures
}

// Transients counts the node's transient re-runs in a row.
func (n *Node) Transients() int {
	if n.retry == nil {
		return 0
	}
	return n.retry.Transients
}

// History is the node's finished attempts, oldest first. It is the
// node's own: callers only read it.
func (n *Node) History() []AttemptRecord {
	if n.retry == nil {
		return nil
	}
	return n.retry.History
}

// Approved reports whether a human approved the escalated or waiting node
// (or its approval step timed out, or its policy approved it).
func (n *Node) Approved() bool { return n.rare != nil && n.rare.Approved }

// ApprovedBy is who approved the node (or TimeoutApprover,
// PolicyApprover); "" before.
func (n *Node) ApprovedBy() string {
	if n.rare == nil {
		return ""
	}
	return n.rare.ApprovedBy
}

// AcceptedConfig are the trusted configuration files (trusted.go) the
// human who approved the current attempt accepted (nil: none).
func (n *Node) AcceptedConfig() []string {
	if n.rare == nil {
		return nil
	}
	return n.rare.AcceptedConfig
}

// AwaitingSince is when the node began awaiting approval (zero: never).
func (n *Node) AwaitingSince() time.Time {
	if n.rare == nil {
		return time.Time{}
	}
	return n.rare.AwaitingSince
}

// ApprovalDeadline is when the node's approval step times out (zero:
// never).
func (n *Node) ApprovalDeadline() time.Time {
	if n.rare == nil {
		return time.Time{}
	}
	return n.rare.ApprovalDeadline
}

// Waiting is set while a runner holds the current attempt's agent job
// back on an open circuit breaker (nil otherwise).
func (n *Node) Waiting() *BreakerWait {
	if n.rare == nil {
		return nil
	}
	return n.rare.Waiting
}

// Expanded counts the nodes the node's plan added (-1: a plan of no
// components; 0: none added yet).
func (n *Node) Expanded() int {
	if n.rare == nil {
		return 0
	}
	return n.rare.Expanded
}

// Integrated reports whether the node's patch is on the branch.
func (n *Node) Integrated() bool { return n.done != nil && n.done.Integrated }

// Commit is the branch's tip once the node's patch landed on it ("" before).
func (n *Node) Commit() string {
	if n.done == nil {
		return ""
	}
	return n.done.Commit
}

// CommitTime is the date the node's integration commit was made with
// (zero before it was integrated).
func (n *Node) CommitTime() time.Time {
	if n.done == nil {
		return time.Time{}
	}
	return n.done.CommitTime
}

// EndedAt is when the node reached its final status (zero while it has
// none).
func (n *Node) EndedAt() time.Time {
	if n.done == nil {
		return time.Time{}
	}
	return n.done.EndedAt
}

// setEnded records when the node ended (zero: it has not, again).
func (n *Node) setEnded(at time.Time) {
	if at.IsZero() && n.done == nil {
		return
	}
	part(&n.done).EndedAt = at
	tidy(&n.done)
}

// PendingSince is when the gate first reported pending in this attempt
// (the pending clock; zero: it has not).
func (g *GateRun) PendingSince() time.Time {
	if g.more == nil {
		return time.Time{}
	}
	return g.more.PendingSince
}

// NextPollAt is when a pending gate runs again.
func (g *GateRun) NextPollAt() time.Time {
	if g.more == nil {
		return time.Time{}
	}
	return g.more.NextPollAt
}

// OOMs counts the gate's out-of-memory kills in this attempt.
func (g *GateRun) OOMs() int {
	if g.more == nil {
		return 0
	}
	return g.more.OOMs
}

// Waiting is set while a runner holds the current round's job back on an
// open circuit breaker (nil otherwise).
func (g *GateRun) Waiting() *BreakerWait {
	if g.more == nil {
		return nil
	}
	return g.more.Waiting
}

// setWaiting sets (or, with nil, clears) the breaker the gate's job waits
// on.
func (g *GateRun) setWaiting(b *BreakerWait) {
	if b == nil {
		if g.more != nil && g.more.Waiting != nil {
			g.more.Waiting = nil
			tidy(&g.more)
		}
		return
	}
	part(&g.more).Waiting = b
}

// setPending starts the gate's pending clock at at, unless it runs, and
// polls it again at next.
func (g *GateRun) setPending(at, next time.Time) {
	m := part(&g.more)
	if m.PendingSince.IsZero() {
		m.PendingSince = at
	}
	m.NextPollAt = next
	tidy(&g.more)
}

// QueuedAt is when the node joined the integration queue (zero: never).
func (n *Node) QueuedAt() time.Time {
	if n.rare == nil {
		return time.Time{}
	}
	return n.rare.QueuedAt
}

// Speculation is the node's current speculative run of the integration
// gates (nil: none).
func (n *Node) Speculation() *Speculation {
	if n.rare == nil {
		return nil
	}
	return n.rare.Speculation
}

// integRounds numbers each integration gate's rounds in the attempt.
func (n *Node) integRounds() map[string]int {
	if n.rare == nil {
		return nil
	}
	return n.rare.integRounds
}

// ownTask is the node's task once it is no longer the spec's entry.
func (n *Node) ownTask() *protocol.TaskSpec {
	if n.rare == nil {
		return nil
	}
	return n.rare.ownTask
}

// setWaiting sets (or, with nil, clears) the breaker the node's agent job
// waits on.
func (n *Node) setWaiting(b *BreakerWait) {
	if b == nil {
		if n.rare != nil && n.rare.Waiting != nil {
			n.rare.Waiting = nil
			tidy(&n.rare)
		}
		return
	}
	part(&n.rare).Waiting = b
}

// setOwnTask gives the node a task of its own.
func (n *Node) setOwnTask(t *protocol.TaskSpec) {
	if t == nil {
		if n.rare != nil {
			n.rare.ownTask = nil
			tidy(&n.rare)
		}
		return
	}
	part(&n.rare).ownTask = t
}

// setExpanded records how many nodes the node's plan added.
func (n *Node) setExpanded(x int) {
	part(&n.rare).Expanded = x
	tidy(&n.rare)
}
