package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
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

// A patch object not found at once, as when a cluster's replica that
// answers has not yet applied the runner's upload, is looked for again
// before the patch is taken as missing (and summarized as unknown, which
// would escalate the node as an integrity violation).
func TestPatchLookedForAgainBeforeMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit("name: t\ndefaults:\n  " + agentCmd + "tasks:\n  - id: a\n    prompt: a\n")
	j := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(j, 1)
	p := e.work(j, map[string]string{"a.txt": "a\n"})
	ctx := testkit.Context(t, 30*time.Second)
	data, err := e.b.Patches.GetBytes(ctx, p.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.Patches.Delete(ctx, p.Object); err != nil {
		t.Fatal(err)
	}
	back := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := e.b.Patches.PutBytes(ctx, p.Object, data)
		back <- err
	}()
	e.agentDone(j, 1, protocol.AgentSucceeded, p)
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if n := nodeOf(s, "a"); n.Status != protocol.NodeSucceeded {
		t.Fatalf("node a = %+v, want succeeded", n)
	}
}
