// Package statemachine is the coordinator's workflow state machine, with no
// I/O: State is a fold of the event log (Apply), and Decide says what should
// happen next — events to append, jobs to publish, patches to integrate,
// workflows to finish, and when to look again — given the state and the
// time. The functions for reports (OnReport) and operators' commands
// (Cancel, RerunGates, ChangeGates) likewise turn a request into effects or
// refuse it with an error that says why. The engine carries the effects
// out; nothing here talks to NATS, git or the state store.
package statemachine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// State is every workflow the coordinator knows, in submission order.
// It is not safe for concurrent use: the engine guards it.
type State struct {
	wfs map[string]*Workflow
	// retired are the finished workflows dropped from memory (retire.go),
	// by id: only their summaries stay.
	retired map[string]*Retired
	// order is every workflow's id, retired ones included.
	order []string
	fleet *Fleet
	// prompts reads task prompts back from the log; with leavePrompts the
	// workflows folded keep none in memory (prompts.go).
	prompts      PromptSource
	leavePrompts bool
}

// New returns an empty state.
func New() *State {
	return &State{wfs: map[string]*Workflow{}, retired: map[string]*Retired{}, fleet: &Fleet{}}
}

// Workflow returns the workflow with id.
func (s *State) Workflow(id string) (*Workflow, bool) {
	w, ok := s.wfs[id]
	return w, ok
}

// MarkPublished records that the engine published job jobID of node
// nodeID of workflow wf, so that deciding again need not ask the engine
// (Decide's published function) about that job. It is a hint kept in
// memory only: a job it does not name is looked up as before. Unknown
// workflows and nodes are ignored.
func (s *State) MarkPublished(wf, nodeID, gate, jobID string) {
	w, ok := s.wfs[wf]
	if !ok {
		return
	}
	n := w.Nodes[nodeID]
	if n == nil {
		return
	}
	if gate == "" {
		n.publishedJob = jobID
		return
	}
	if g := n.Gates[gate]; g != nil {
		g.publishedJob = jobID
	}
}

// ordered returns w's nodes in Order. The slice is built once per Order
// (a new Order, as nodes added by a plan make, builds it again), so
// deciding walks the nodes without a map lookup each. Put and a plan's
// expansion build it at once, so that states folded from the same events
// are equal whether or not they have been decided on.
func (w *Workflow) ordered() []*Node {
	if len(w.orderNodes) == len(w.Order) && (len(w.Order) == 0 || w.orderKey == &w.Order[0]) {
		return w.orderNodes
	}
	nodes := make([]*Node, len(w.Order))
	for i, id := range w.Order {
		nodes[i] = w.Nodes[id]
	}
	w.orderNodes = nodes
	if len(w.Order) > 0 {
		w.orderKey = &w.Order[0]
	}
	return nodes
}

// Workflows returns every workflow in memory, in submission order: not
// the retired ones (Listing has them too).
func (s *State) Workflows() []*Workflow {
	out := make([]*Workflow, 0, len(s.wfs))
	for _, id := range s.order {
		if w, ok := s.wfs[id]; ok {
			out = append(out, w)
		}
	}
	return out
}

// Len is the number of workflows in memory (not the retired ones).
func (s *State) Len() int { return len(s.wfs) }

// Put adds w, or replaces the workflow of its id (after the engine has
// rebuilt it from the log); a retired workflow of its id is back in
// memory, in its place in the order.
func (s *State) Put(w *Workflow) {
	if !s.known(w.ID) {
		s.order = append(s.order, w.ID)
	}
	delete(s.retired, w.ID)
	w.fleet = s.fleet
	if w.prompts != nil {
		w.prompts.src, w.prompts.leave = s.prompts, s.leavePrompts
	}
	w.ordered()
	s.wfs[w.ID] = w
}

// known reports whether the state has workflow id, in memory or retired.
func (s *State) known(id string) bool {
	if _, ok := s.wfs[id]; ok {
		return true
	}
	_, ok := s.retired[id]
	return ok
}

// Workflow is one workflow's state: a fold of its events.
type Workflow struct {
	ID          string
	Spec        *protocol.WorkflowSpec
	Repo        protocol.RepoRef
	RepoPath    string
	Source      string
	Status      protocol.WorkflowStatus
	SubmittedAt time.Time
	FinishedAt  time.Time
	Reason      string
	Nodes       map[string]*Node
	// Order is the nodes' topological order (ties in declaration order).
	Order []string
	// orderNodes is Order's nodes, built by ordered for the Order whose
	// first element orderKey points at.
	orderNodes []*Node
	orderKey   *string
	// Branch receives the accepted patches; Head is its tip ("" = base).
	Branch string
	Head   string
	// Integrated lists nodes in the order their patches reached Branch.
	Integrated      []string
	CancelRequested bool
	// BaseBranch is the branch the workflow was submitted from ("" if
	// unknown), the default target of a merge; Merge is the latest merge
	// request and its outcome (nil: none).
	BaseBranch string
	Merge      *MergeState
	// TraceParent is the W3C traceparent of the submission's span (""
	// when it was not traced): the workflow's spans join its trace.
	TraceParent string
	// LastSeq is the stream sequence of the last event folded in: the
	// engine appends the next event only if the log still ends there.
	LastSeq uint64
	// Generation counts reopenings (gate reruns of failed nodes).
	Generation int
	// IntegrationOrder is the workflow's integration gates in dispatch
	// order (dependency layers), IntegrationSpecs their definitions.
	IntegrationOrder []string
	IntegrationSpecs map[string]protocol.GateSpec
	// fleet is the state of the fleet the workflow runs in.
	fleet *Fleet
	// prompts, if set, says where in the log the tasks' prompts left out
	// of memory are (prompts.go).
	prompts *promptsInLog
	// queue is the integration queue: node ids in the order they joined
	// it; IntegrationQueue filters those still waiting in it.
	queue []string

	// overlaps keeps, per pair of node ids (the lesser first), whether
	// their declared files may overlap (files.go); overlapMu guards it,
	// as readers of the state (status) fill it too.
	overlaps  map[[2]string]bool
	overlapMu sync.Mutex
}

// Node is one task's state.
type Node struct {
	ID string
	// Task is the node's task, read-only: the entry of the workflow's spec
	// (Spec.Tasks) until a change of the node's gates gives it a task of
	// its own (ownTask). Changing a node's task replaces the pointer
	// (setTask); nothing writes through it.
	Task       *protocol.TaskSpec
	Status     protocol.NodeStatus
	Attempt    int
	LeaseToken uint64
	Host       string
	Agent      *protocol.AgentResult
	Patch      *protocol.PatchRef
	// Output is the check of the current attempt's result block against
	// the task's output schema (nil: no schema, or no successful agent
	// result yet).
	Output *protocol.AgentOutput
	// plan is the node's gate plan (GateOrder, GateSpecs, OnFail),
	// derived from its task and read-only: nodes with the same gates share
	// one, and pointing at it keeps it in the process-wide table of plans
	// in use (internPlan); setTask replaces it.
	plan *gatePlan
	// Gates are the runs of the current attempt's gates (nil until one).
	Gates     map[string]*GateRun
	Reason    string
	ReadyAt   time.Time
	StartedAt time.Time

	// Budget is the node's budget of agent rounds: the task's, plus what
	// humans granted.
	Budget int

	// jobID is the current attempt's agent job id, kept so that deciding
	// again does not build it anew for every node in flight.
	jobID string
	// publishedJob is the agent job id the engine last said it published
	// (MarkPublished): deciding again skips the engine's lookup for it.
	// Memory only: a state rebuilt from the log asks the engine again.
	publishedJob string

	// The rest of the node's state is in parts allocated only once one of
	// their fields is set, and dropped again when all are zero (nodeparts.go):
	// most nodes in flight have none of it. Their accessors give the zero
	// value of a part that is not there.
	spent *nodeSpent
	retry *nodeRetry
	rare  *nodeRare
	done  *nodeDone
}

// AttemptRecord is what one finished attempt of a node did and what came
// of it: for `show` and the inbox, and to start the next attempt from its
// work.
type AttemptRecord struct {
	Attempt int
	Agent   *protocol.AgentResult
	Patch   *protocol.PatchRef
	// Output is the attempt's result block check, if the task has a schema.
	Output *protocol.AgentOutput
	// Gates are the attempt's final gate results, in the node's gate order.
	Gates []protocol.GateResult
	// Outcome is the event type that ended it (node.retry_scheduled,
	// node.escalated …) and Reason why.
	Outcome eventlog.Type
	Reason  string
	At      time.Time
	// Feedback is what the attempt's failure produced for the next one.
	Feedback json.RawMessage
	// Given is what the attempt itself was started with.
	Given AttemptStart
	// Signature identifies the attempt's failure (loop detection).
	Signature string
}

// AttemptStart is what an attempt was given when it started: the
// feedback document its agent received, and, when a human's retry started
// it, who granted the retry and their note (also in Feedback, as its
// note). All of it comes from the log's node.retry_scheduled,
// node.escalated and node.retry_granted events, so a replay rebuilds it.
type AttemptStart struct {
	Feedback  json.RawMessage
	RetriedBy string
	Note      string
}

// GateRun is one gate's state for the node's current attempt.
type GateRun struct {
	Name       string
	Dispatched bool
	Round      int
	Status     protocol.GateStatus // "" until a result arrives
	LeaseToken uint64
	Host       string
	Result     *protocol.GateResult
	// NoCache is set when a rerun asked to bypass the gate cache.
	NoCache bool
	// Awaiting is true from a round's dispatch until its result, so a
	// pending gate is not polled again while a poll is out.
	Awaiting bool

	// publishedJob is the gate job id the engine last said it published
	// (MarkPublished); memory only, as Node's.
	publishedJob string
	// jobID is the current round's job id.
	jobID string
	// more is the run's rarely set state, as a node's parts (nodeparts.go).
	more *gateMore
}

// BreakerWait is a job a runner holds back, unrun, because the circuit
// breaker of one of its scopes is open: the runner's waiting report.
type BreakerWait struct {
	// Scope is the breaker's (agent:…, gate:… or repo:…).
	Scope string
	// Until is when the breaker may let the job through.
	Until time.Time
	// Host is the runner holding the job.
	Host string
}

// Terminal reports whether the gate has a final status.
func (g *GateRun) Terminal() bool {
	switch g.Status {
	case "", protocol.GatePending:
		return false
	}
	return true
}

// newWorkflow builds the initial state of a submitted workflow.
func newWorkflow(id string, b eventlog.WorkflowSubmitted, at time.Time) (*Workflow, error) {
	if b.Workflow == nil {
		return nil, fmt.Errorf("workflow.submitted event for %s lacks its spec", id)
	}
	g, err := workflow.NewGraph(b.Workflow)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	// The spec's own copy, its Tasks trimmed to their number: a decoded
	// list keeps the spare capacity its growth left, and the nodes point
	// into this one.
	spec := *b.Workflow
	spec.Tasks = append(make([]protocol.TaskSpec, 0, len(b.Workflow.Tasks)), b.Workflow.Tasks...)
	shareAgents(spec.Tasks)
	shareLists(spec.Tasks)
	w := &Workflow{
		ID: id, Spec: &spec, Repo: b.Repo, RepoPath: b.RepoPath, Source: b.Source,
		Status: protocol.WorkflowRunning, SubmittedAt: at, Nodes: make(map[string]*Node, len(spec.Tasks)),
		Order: g.TopoOrder(), Branch: BranchName(id),
		BaseBranch: b.BaseBranch, TraceParent: b.TraceParent,
	}
	if err := w.setIntegrationGates(); err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	plans := gatePlans{}
	for i := range spec.Tasks {
		t := &spec.Tasks[i]
		n := &Node{ID: t.ID, Status: protocol.NodePending, Budget: t.Attempts()}
		if err := n.setTask(&spec, t, plans); err != nil {
			return nil, fmt.Errorf("workflow %s task %s: %w", id, t.ID, err)
		}
		w.Nodes[t.ID] = n
	}
	return w, nil
}

// sharedAgents bounds the distinct agent definitions shareAgents compares
// a task's with.
const sharedAgents = 4

// shareAgents points the tasks whose agent definitions are equal (nil and
// empty told apart) at one of them, as a workflow's defaults give every
// task the same: decoded, each has a copy of its own. Nothing writes
// through a task's Agent. Only the first few distinct definitions are
// compared with, which keeps it linear.
func shareAgents(tasks []protocol.TaskSpec) {
	var seen []*protocol.AgentSpec
	for i := range tasks {
		a := tasks[i].Agent
		if a == nil {
			continue
		}
		shared := false
		for _, s := range seen {
			if reflect.DeepEqual(a, s) {
				tasks[i].Agent, shared = s, true
				break
			}
		}
		if !shared && len(seen) < sharedAgents {
			seen = append(seen, a)
		}
	}
}

// sharedLists bounds the distinct gate lists shareLists compares a
// task's with.
const sharedLists = 8

// shareLists points the tasks' gate lists (gates, required, optional)
// that are equal at one of them, and their equal pools at one string, as
// a workflow's tasks mostly name the same gates and pool: decoded, each
// has a copy of its own (PERF-39). Nil and empty lists are told apart.
// Nothing writes through a task's lists: a change of a node's gates
// clones them (cloneTask), and growing a workflow copies a depends_on
// before appending. Only the first few distinct lists are compared with,
// which keeps it linear.
func shareLists(tasks []protocol.TaskSpec) {
	var seen [][]string
	share := func(l *[]string) {
		if *l == nil {
			return
		}
		for _, s := range seen {
			if slices.Equal(s, *l) {
				*l = s
				return
			}
		}
		if len(seen) < sharedLists {
			seen = append(seen, *l)
		}
	}
	var pools []string
	for i := range tasks {
		t := &tasks[i]
		share(&t.Gates)
		share(&t.Required)
		share(&t.Optional)
		if j := slices.Index(pools, t.Pool); j >= 0 {
			t.Pool = pools[j]
		} else if len(pools) < sharedLists {
			pools = append(pools, t.Pool)
		}
	}
}

// Gate returns the node's run of gate name, creating an empty one.
func (n *Node) Gate(name string) *GateRun {
	g := n.Gates[name]
	if g == nil {
		g = &GateRun{Name: name}
		if n.Gates == nil {
			n.Gates = map[string]*GateRun{}
		}
		n.Gates[name] = g
	}
	return g
}

// Blocking reports whether the gate ended in a failure that counts: any
// non-passing final status except a failure whose on_fail is warn. An
// integrity violation always blocks, whatever the gate's severity, and
// skipped gates block too, so skips propagate.
func (n *Node) Blocking(name string) bool {
	g := n.Gates[name]
	if g == nil || !g.Terminal() || g.Status == protocol.GatePassed {
		return false
	}
	if g.Result != nil && g.Result.IntegrityViolation {
		return true
	}
	if g.Status == protocol.GateSkipped {
		return true
	}
	return n.OnFail()[name] != gates.Warn
}

// AgentSucceeded reports whether the node's current attempt has a
// successful agent result.
func (n *Node) AgentSucceeded() bool {
	return n.Agent != nil && n.Agent.Status == protocol.AgentSucceeded
}

// dependsOn is node id's dependencies: its task's depends_on (PERF-39:
// the task is the one place they are kept).
func (w *Workflow) dependsOn(id string) []string {
	if n := w.Nodes[id]; n != nil && n.Task != nil {
		return n.Task.DependsOn
	}
	return nil
}

// depState reports whether a node is blocked (a dependency ended without
// succeeding; the reason names it) or still waiting on a dependency.
func (w *Workflow) depState(id string) (blocked string, waiting bool) {
	for _, d := range w.dependsOn(id) {
		switch ds := w.Nodes[d].Status; {
		case ds == protocol.NodeSucceeded:
		case ds.Terminal():
			if blocked == "" {
				blocked = fmt.Sprintf("dependency %s %s", d, ds)
			}
		default:
			waiting = true
		}
	}
	return blocked, waiting
}

// ancestors returns the transitive dependencies of a node.
func (w *Workflow) ancestors(id string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		for _, d := range w.dependsOn(n) {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(id)
	return seen
}

// BasePatches are the accepted patches of a node's ancestors, and of the
// nodes it waited for because their files may overlap its own, in the
// order they were integrated onto the branch.
func (w *Workflow) BasePatches(id string) []protocol.PatchRef {
	anc := w.builtOn(id)
	var out []protocol.PatchRef
	for _, nid := range w.Integrated {
		if anc[nid] && w.Nodes[nid].Patch != nil {
			out = append(out, *w.Nodes[nid].Patch)
		}
	}
	return out
}

// Parent is the commit a next integration lands on: the branch's tip, or
// the base commit while nothing has landed.
func (w *Workflow) Parent() string {
	if w.Head == "" {
		return w.Repo.BaseCommit
	}
	return w.Head
}

// ResultBundleName is the object name of a workflow's result branch bundle.
func ResultBundleName(wf string) string { return "results/" + wf + ".bundle" }

// BranchName is the branch a workflow's accepted work lands on.
func BranchName(wf string) string { return "supervisor/" + wf }

// Skip records that the event at seq in workflow wf's log could not be
// read: appends are fenced on the log's last event, which it may be.
func (s *State) Skip(wf string, seq uint64) {
	if w, ok := s.wfs[wf]; ok && seq > w.LastSeq {
		w.LastSeq = seq
	}
	if r, ok := s.retired[wf]; ok && seq > r.LastSeq {
		r.LastSeq = seq
	}
}
