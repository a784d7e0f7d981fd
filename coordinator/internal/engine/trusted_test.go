package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// TestTrustedConfigNotOnTheRunnersWord (TRUST-CONFIG): the coordinator
// summarizes an agent's patch itself, from the object store. A runner
// whose report's summary leaves out the patch's change to
// .supervisor/gates.yaml does not get it integrated: the node escalates
// naming the file, and nothing lands on the branch.
func TestTrustedConfigNotOnTheRunnersWord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit("name: t\ndefaults:\n  " + agentCmd + "tasks:\n  - id: a\n    prompt: a\n")
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(j, 1)
	p := e.work(j, map[string]string{"a.txt": "a\n", ".supervisor/gates.yaml": "gates: [{name: evil, command: [sh]}]\n"})
	// The runner's word: only a.txt changed.
	p.Stat = &protocol.PatchStat{Files: 1, Insertions: 1, Paths: []string{"a.txt"}}
	e.agentDone(j, 1, protocol.AgentSucceeded, p)
	n := e.waitNode(wf, "a", protocol.NodeEscalated)
	if !strings.Contains(n.Reason, "trusted configuration (.supervisor/gates.yaml)") {
		t.Fatalf("node a escalated for %q, want the trusted configuration named", n.Reason)
	}
	if s := e.status(wf); s.Head != "" {
		t.Fatalf("the branch moved to %s before a human accepted the change", s.Head)
	}
}
