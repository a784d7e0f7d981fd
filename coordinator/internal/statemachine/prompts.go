package statemachine

// Prompts left in the event log (PERF-50). A task's prompt is the largest
// thing a node in flight holds (a paragraph or more, against a few hundred
// bytes of state), and the coordinator needs it only when it builds a job:
// the node's agent job, a dependent's context plan, a review gate's job,
// the inbox's instructions of a human task. A state given a PromptSource
// keeps no prompt of the workflows it folds: each task's prompt is read
// back from the event that brought the task in (the submission, or the
// plan expansion that added it) when it is needed.

import (
	"errors"
	"fmt"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// PromptSource gives back task prompts from the events of the log.
type PromptSource interface {
	// Prompt returns the prompt of task, which the event at seq brought
	// in (a workflow's submission or a plan's added nodes). A source that
	// will not block the state's reader on I/O returns a *PromptsNotRead
	// for an event it has not read yet, and reads it when asked by
	// whoever got the error.
	Prompt(seq uint64, task string) (string, error)
}

// ErrPromptUnavailable is a task prompt that is neither in memory nor
// (yet) read from the log.
var ErrPromptUnavailable = errors.New("task prompt unavailable")

// PromptsNotRead is a PromptSource's answer for an event it has not read
// yet: the job that needs it is postponed (Decision.Deferred) while the
// engine reads it, outside the state's lock.
type PromptsNotRead struct {
	// Seq is the event to read.
	Seq uint64
}

func (e *PromptsNotRead) Error() string {
	return fmt.Sprintf("event %d of the log not read yet", e.Seq)
}

// promptsInLog records where a workflow's task prompts left out of memory
// are in the log.
type promptsInLog struct {
	// At is the sequence of the submission, whose tasks' prompts are left
	// out.
	At uint64
	// Added are the tasks a plan added, by id, with the sequence of the
	// nodes_added event that brought each.
	Added map[string]uint64
	// src reads them back, and leave says whether the prompts of nodes a
	// plan adds are left out too (both set by Put and SetPromptSource, from
	// the state's).
	src   PromptSource
	leave bool
}

// SetPromptSource makes the state read task prompts from src. With
// leaveInLog, the workflows folded from then on keep no prompt in memory:
// each is read from src when needed. The workflows already in the state
// (read from a snapshot) read theirs from src too. Without a source, or
// without leaveInLog, prompts stay in memory as the events give them.
func (s *State) SetPromptSource(src PromptSource, leaveInLog bool) {
	s.prompts, s.leavePrompts = src, leaveInLog && src != nil
	for _, w := range s.wfs {
		if w.prompts != nil {
			w.prompts.src, w.prompts.leave = src, s.leavePrompts
		}
	}
}

// leavePromptsOut drops the prompts of the workflow's tasks from memory:
// they are those of the submission at seq. A state without a source, or an
// event not read from the log (seq 0), keeps them. A human task's prompt,
// its instructions, stays: the inbox shows it.
func (s *State) leavePromptsOut(w *Workflow, seq uint64) {
	if !s.leavePrompts || seq == 0 {
		return
	}
	leaveOut(w.Spec.Tasks)
	w.prompts = &promptsInLog{At: seq} // Put gives it the state's source
}

// leaveOut drops the prompts of tasks, but those of human tasks.
func leaveOut(tasks []protocol.TaskSpec) {
	for i := range tasks {
		if tasks[i].Type != protocol.TaskHuman {
			tasks[i].Prompt = ""
		}
	}
}

// leaveAddedPromptsOut drops the prompts of the tasks a plan added from
// memory, when the workflow's other prompts are left out and the state
// leaves prompts in the log: they are those of the nodes_added event at
// seq.
func (w *Workflow) leaveAddedPromptsOut(tasks []protocol.TaskSpec, seq uint64) {
	if w.prompts == nil || !w.prompts.leave || seq == 0 {
		return
	}
	if w.prompts.Added == nil {
		w.prompts.Added = map[string]uint64{}
	}
	leaveOut(tasks)
	for i := range tasks {
		w.prompts.Added[tasks[i].ID] = seq
	}
}

// TaskPrompt is node n's task prompt: the task's own, or, when the state
// keeps prompts in the log, the one read back from it.
func (w *Workflow) TaskPrompt(n *Node) (string, error) {
	if w.prompts == nil || n.Task.Prompt != "" || n.Task.Type == protocol.TaskHuman {
		return n.Task.Prompt, nil
	}
	seq, ok := w.prompts.Added[n.ID]
	if !ok {
		seq = w.prompts.At
	}
	if w.prompts.src == nil {
		return "", fmt.Errorf("%w: %s/%s: its prompt is in event %d of the log, which this state cannot read",
			ErrPromptUnavailable, w.ID, n.ID, seq)
	}
	p, err := w.prompts.src.Prompt(seq, n.ID)
	if err != nil {
		return "", fmt.Errorf("%w: %s/%s: event %d of the log: %w", ErrPromptUnavailable, w.ID, n.ID, seq, err)
	}
	return p, nil
}
