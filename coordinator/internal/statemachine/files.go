package statemachine

// File-conflict serialization (DAG-07) and interface locking (HIER-03):
// what a task's files, interface and may_change_interfaces globs decide.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/supervisorhq/supervisor/shared/pathglob"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// interfacesGate names the interface check in feedback, where it is
// reported like a gate.
const interfacesGate = "interfaces"

// filesOverlap reports whether the declared files of nodes a and b may
// overlap (pathglob.Overlap: never false for globs a common path
// matches). A node that declares no files overlaps none. Answers are
// kept: a workflow's tasks do not change their files.
func (w *Workflow) filesOverlap(a, b string) bool {
	if a == b {
		return false
	}
	if a > b {
		a, b = b, a
	}
	key := [2]string{a, b}
	w.overlapMu.Lock()
	defer w.overlapMu.Unlock()
	if v, ok := w.overlaps[key]; ok {
		return v
	}
	na, nb := w.Nodes[a], w.Nodes[b]
	v := false
	if na != nil && nb != nil {
	outer:
		for _, ga := range na.Task.Files {
			for _, gb := range nb.Task.Files {
				if _, ok := pathglob.Overlap(ga, gb); ok {
					v = true
					break outer
				}
			}
		}
	}
	if w.overlaps == nil {
		w.overlaps = map[[2]string]bool{}
	}
	w.overlaps[key] = v
	return v
}

// fileConflicts are the nodes whose declared files may overlap node id's,
// in the workflow's order.
func (w *Workflow) fileConflicts(id string) []string {
	if n := w.Nodes[id]; n == nil || len(n.Task.Files) == 0 {
		return nil
	}
	var out []string
	for _, other := range w.Order {
		if o := w.Nodes[other]; o == nil || len(o.Task.Files) == 0 {
			continue
		}
		if w.filesOverlap(id, other) {
			out = append(out, other)
		}
	}
	return out
}

// holdsFiles reports whether node n holds its files: from the moment it
// becomes ready until it finishes, whatever it does in between (runs,
// is gated, waits to retry, for a human or in the integration queue).
func holdsFiles(n *Node) bool {
	return n.Status != protocol.NodePending && !n.Status.Terminal()
}

// fileBlockers are the nodes holding files that may overlap node id's:
// it may not become ready while there are any. released are nodes made
// ready earlier in the same decision, whose events are not folded yet.
func (w *Workflow) fileBlockers(id string, released map[string]bool) []string {
	var out []string
	for _, other := range w.fileConflicts(id) {
		if holdsFiles(w.Nodes[other]) || released[other] {
			out = append(out, other)
		}
	}
	return out
}

// WaitingForFiles names the nodes a pending node whose dependencies have
// all succeeded waits for because their declared files may overlap its
// own (nil: it waits for none).
func (w *Workflow) WaitingForFiles(id string) []string {
	n := w.Nodes[id]
	if n == nil || n.Status != protocol.NodePending {
		return nil
	}
	if blocked, waiting := w.depState(id); blocked != "" || waiting {
		return nil
	}
	return w.fileBlockers(id, nil)
}

// fileLocks are the state-store keys the worker running node n's agent
// holds (protocol.AgentJob.FileLocks): its own and those of every node
// whose files may overlap its own, so that two such agents never run at
// once anywhere in the fleet, whichever of the two jobs was built
// knowing of the other.
func (w *Workflow) fileLocks(n *Node) []string {
	if len(n.Task.Files) == 0 {
		return nil
	}
	keys := []string{protocol.FileLockKey(w.ID, n.ID)}
	for _, other := range w.fileConflicts(n.ID) {
		keys = append(keys, protocol.FileLockKey(w.ID, other))
	}
	sort.Strings(keys)
	return keys
}

// builtOn are the nodes whose accepted work node id's agent and gates
// start from: its ancestors, and the nodes it waited for because their
// files may overlap its own (they finished before it became ready).
func (w *Workflow) builtOn(id string) map[string]bool {
	on := w.ancestors(id)
	for _, other := range w.fileConflicts(id) {
		if w.Nodes[other].Integrated() {
			on[other] = true
		}
	}
	return on
}

// lockedInterfaces are the interface globs locked for node n: those of
// every other node that has succeeded, by node, in the workflow's order.
func (w *Workflow) lockedInterfaces(n *Node) (nodes []string, globs [][]string) {
	for _, id := range w.Order {
		o := w.Nodes[id]
		if id == n.ID || len(o.Task.Interface()) == 0 || o.Status != protocol.NodeSucceeded {
			continue
		}
		nodes, globs = append(nodes, id), append(globs, o.Task.Interface())
	}
	return nodes, globs
}

// interfaceViolation checks node n's patch against the interfaces locked
// for it (HIER-03, HIER-06): a changed file that a succeeded node's
// interface globs match, and n's may_change_interfaces do not, fails the
// round, with feedback naming the files and the interface nodes. A patch
// whose summary does not list every file it changes cannot be checked
// and fails too, while any interface is locked.
func (w *Workflow) interfaceViolation(n *Node) (failure, bool) {
	if n.Patch == nil {
		return failure{}, false
	}
	nodes, globs := w.lockedInterfaces(n)
	if len(nodes) == 0 {
		return failure{}, false
	}
	if st := n.Patch.Stat; st == nil || st.PathsTruncated {
		msg := "the patch's summary does not list every file it changes, so it cannot be checked against the interfaces " +
			strings.Join(nodes, ", ") + " locked"
		return failure{interfaces: msg}, true
	}
	allowed := make([]*pathglob.Pattern, 0, len(n.Task.MayChangeInterfaces()))
	for _, g := range n.Task.MayChangeInterfaces() {
		allowed = append(allowed, pathglob.Compile(g))
	}
	var files []string
	by := map[string]bool{}
	for _, path := range n.Patch.Stat.Paths {
		if mayChange(allowed, path) {
			continue
		}
		for i, gs := range globs {
			if matchAny(gs, path) {
				if len(files) == 0 || files[len(files)-1] != path {
					files = append(files, path)
				}
				by[nodes[i]] = true
			}
		}
	}
	if len(files) == 0 {
		return failure{}, false
	}
	var owners []string
	for _, id := range nodes {
		if by[id] {
			owners = append(owners, id)
		}
	}
	msg := fmt.Sprintf("the patch changes locked interface files (%s) defined by %s; an interface is fixed once "+
		"the node defining it has succeeded: keep these files as they are and work against them "+
		"(a task that must change them says may_change_interfaces)", strings.Join(files, ", "), strings.Join(owners, ", "))
	return failure{interfaces: msg, locked: files}, true
}

func mayChange(allowed []*pathglob.Pattern, path string) bool {
	for _, p := range allowed {
		if p.Match(path) {
			return true
		}
	}
	return false
}

func matchAny(globs []string, path string) bool {
	for _, g := range globs {
		if pathglob.Match(g, path) {
			return true
		}
	}
	return false
}
