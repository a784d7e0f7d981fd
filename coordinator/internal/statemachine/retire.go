package statemachine

// Retirement of finished workflows (PERF-33): a workflow that has
// finished, with nothing left to do for it, leaves memory after a
// retention period; only a summary of it stays, for the workflow list. The
// engine reads a retired workflow back from its events when asked about
// it, and puts it back in memory (Put) before a command changes it.

import (
	"errors"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// ErrRetired is the error of folding an event of a retired workflow: the
// engine reloads the workflow from its log instead.
var ErrRetired = errors.New("the workflow is retired from memory")

// Retired is what stays in memory of a retired workflow: what the
// workflow list shows of it, and its log's last sequence (appends to its
// log stay fenced on it).
type Retired struct {
	ID          string                  `json:"id"`
	Name        string                  `json:"name"`
	Status      protocol.WorkflowStatus `json:"status"`
	Source      string                  `json:"source,omitempty"`
	RepoPath    string                  `json:"repo_path,omitempty"`
	BaseCommit  string                  `json:"base_commit,omitempty"`
	Branch      string                  `json:"branch,omitempty"`
	Head        string                  `json:"head,omitempty"`
	Reason      string                  `json:"reason,omitempty"`
	SubmittedAt time.Time               `json:"submitted_at"`
	FinishedAt  time.Time               `json:"finished_at"`
	// Counts are the nodes by status.
	Counts      map[protocol.NodeStatus]int `json:"counts"`
	BaseBranch  string                      `json:"base_branch,omitempty"`
	AutoMerge   bool                        `json:"auto_merge,omitempty"`
	MergeInto   string                      `json:"merge_into,omitempty"`
	Merge       *MergeState                 `json:"merge,omitempty"`
	TraceParent string                      `json:"trace_parent,omitempty"`
	Spend       Spend                       `json:"spend"`
	MaxCostUSD  float64                     `json:"max_cost_usd,omitempty"`
	LastSeq     uint64                      `json:"last_seq"`
}

// Retirable reports whether w may leave memory at now, having finished at
// least retain ago: finished, with no merge waiting to be carried out.
func (w *Workflow) Retirable(now time.Time, retain time.Duration) bool {
	return w.Status.Terminal() && !w.MergePending() && !w.FinishedAt.IsZero() && now.Sub(w.FinishedAt) >= retain
}

// Retire drops workflow id from memory, keeping its summary; it reports
// whether it did (false: not in memory).
func (s *State) Retire(id string) bool {
	w, ok := s.wfs[id]
	if !ok {
		return false
	}
	r := &Retired{
		ID: w.ID, Name: w.Spec.Name, Status: w.Status, Source: w.Source, RepoPath: w.RepoPath,
		BaseCommit: w.Repo.BaseCommit, Branch: w.Branch, Head: w.Head, Reason: w.Reason,
		SubmittedAt: w.SubmittedAt, FinishedAt: w.FinishedAt, Counts: map[protocol.NodeStatus]int{},
		BaseBranch: w.BaseBranch, AutoMerge: w.Spec.AutoMerge, MergeInto: w.Spec.MergeInto, Merge: w.Merge,
		TraceParent: w.TraceParent, Spend: w.Spend(), MaxCostUSD: w.Spec.MaxCostUSD, LastSeq: w.LastSeq,
	}
	for _, n := range w.Nodes {
		r.Counts[n.Status]++
	}
	delete(s.wfs, id)
	s.retired[id] = r
	return true
}

// Retired returns the summary of retired workflow id.
func (s *State) Retired(id string) (*Retired, bool) {
	r, ok := s.retired[id]
	return r, ok
}

// RetiredLen is the number of retired workflows.
func (s *State) RetiredLen() int { return len(s.retired) }

// Entry is one workflow of the listing: in memory (Workflow) or retired
// (Retired).
type Entry struct {
	Workflow *Workflow
	Retired  *Retired
}

// Listing returns every workflow, retired ones included, in submission
// order.
func (s *State) Listing() []Entry {
	out := make([]Entry, 0, len(s.order))
	for _, id := range s.order {
		if w, ok := s.wfs[id]; ok {
			out = append(out, Entry{Workflow: w})
		} else if r, ok := s.retired[id]; ok {
			out = append(out, Entry{Retired: r})
		}
	}
	return out
}
