package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// A standby that takes over on another host has none of the integration
// commits the first coordinator made in its own mirror. It makes them
// again from the patches in the log — the very same commits, since their
// dates are in the log too — and finishes the workflow; cancelling a
// workflow whose branch it has to rebuild works as well.
func TestFailoverToAnotherHostRebuildsTheBranch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit("name: failover\ndefaults:\n  " + agentCmd + "tasks:\n  - {id: a, prompt: a}\n  - {id: b, prompt: b, depends_on: [a]}\n")
	held := e.submit("name: held\ndefaults:\n  " + agentCmd + "tasks:\n  - {id: x, prompt: x, pool: held}\n  - {id: y, prompt: y, pool: held, depends_on: [x]}\n")

	a := e.next(protocol.KindAgent, "default", 5*time.Second)
	e.started(a, 1)
	e.agentDone(a, 1, protocol.AgentSucceeded, e.makePatch(a, "a.txt", "from a\n"))
	x := e.next(protocol.KindAgent, "held", 5*time.Second)
	e.started(x, 1)
	e.agentDone(x, 1, protocol.AgentSucceeded, e.makePatch(x, "x.txt", "from x\n"))
	aCommit := e.waitNode(wf, "a", protocol.NodeSucceeded).Commit
	xCommit := e.waitNode(held, "x", protocol.NodeSucceeded).Commit
	if aCommit == e.repo.BaseCommit || xCommit == e.repo.BaseCommit {
		t.Fatalf("nothing integrated: a %s, x %s", aCommit, xCommit)
	}
	e.stopEng()

	// The standby's host: another data dir, so no mirror and no commits.
	e.dataDir = t.TempDir()
	e.start()
	b := e.next(protocol.KindAgent, "default", 5*time.Second)
	if len(b.agent.Patches) != 1 || b.agent.Patches[0].NodeID != "a" {
		t.Fatalf("b's job = %+v", b.agent)
	}
	e.started(b, 1)
	e.agentDone(b, 1, protocol.AgentSucceeded, e.makePatch(b, "b.txt", "from b\n"))
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)
	if got := testkit.Git(t, e.repoDir, "rev-parse", s.Head+"^"); got != aCommit {
		t.Errorf("b's commit sits on %s, want a's commit %s as the first coordinator made it", got, aCommit)
	}
	for f, want := range map[string]string{"a.txt": "from a", "b.txt": "from b"} {
		if got := testkit.Git(t, e.repoDir, "show", s.Head+":"+f); got != want {
			t.Errorf("%s on the branch = %q, want %q", f, got, want)
		}
	}

	// Cancelling delivers the branch, which this host has to rebuild.
	if _, err := e.client.Cancel(testkit.Context(t, 20*time.Second), held); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	c := e.waitWorkflow(held, protocol.WorkflowCancelled)
	if got := testkit.Git(t, e.repoDir, "rev-parse", "refs/heads/"+c.Branch); got != xCommit {
		t.Errorf("cancelled workflow's branch at %s, want x's commit %s", got, xCommit)
	}
}

// Two coordinators that both believe they lead (each with a state store of
// its own, so each holds "the" lease) share one event log. Every append is
// fenced on the workflow's last event: whichever coordinator is behind
// fails to append, reloads the workflow from the log and carries on from
// there. Reports go to either; a workflow one of them never saw is loaded
// from the log, not dropped. The workflow finishes once, with each
// transition in the log once.
func TestTwoLeadersShareTheLogSafely(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	_, stopSecond := startAlone(t, e, "second")
	wf := e.submit("name: split\ndefaults:\n  " + agentCmd + "gates:\n  - {name: vet, command: [vet]}\n" +
		"tasks:\n  - {id: a, prompt: a, gates: [vet]}\n  - {id: b, prompt: b, gates: []}\n  - {id: c, prompt: c, depends_on: [a, b], gates: []}\n")
	for i := 0; i < 2; i++ {
		j := e.next(protocol.KindAgent, "default", 5*time.Second)
		e.started(j, 1)
		e.agentDone(j, 1, protocol.AgentSucceeded, e.makePatch(j, j.agent.NodeID+".txt", j.agent.NodeID+"\n"))
	}
	vet := e.next(protocol.KindGate, "default", 5*time.Second)
	e.started(vet, 2)
	e.gateDone(vet, 2, protocol.GatePassed)
	c := e.tryNext(protocol.KindAgent, "default", 10*time.Second)
	if c == nil {
		for _, ev := range e.events(wf) {
			t.Logf("%d %s %s %+v", ev.Seq, ev.Type(), ev.NodeID, ev.Body)
		}
		t.FailNow()
	}
	e.noJob(protocol.KindAgent, "default", 500*time.Millisecond, "c's job published twice")
	e.started(c, 3)
	e.agentDone(c, 3, protocol.AgentSucceeded, e.makePatch(c, "c.txt", "c\n"))
	s := e.waitWorkflow(wf, protocol.WorkflowSucceeded)

	evs := e.events(wf)
	for _, want := range []struct {
		typ   eventlog.Type
		nodes []string
	}{
		{eventlog.TypeNodeReady, []string{"a", "b", "c"}},
		{eventlog.TypeNodeAgentDone, []string{"a", "b", "c"}},
		{eventlog.TypeNodeIntegrated, []string{"a", "b", "c"}},
		{eventlog.TypeNodeFinished, []string{"a", "b", "c"}},
		{eventlog.TypeGateDispatched, []string{"a"}},
		{eventlog.TypeWorkflowFinished, []string{""}},
	} {
		for _, n := range want.nodes {
			if got := countEvents(evs, want.typ, n); got != 1 {
				t.Errorf("%d %s events for %q, want 1", got, want.typ, n)
			}
		}
	}
	for f, want := range map[string]string{"a.txt": "a", "b.txt": "b", "c.txt": "c"} {
		if got := testkit.Git(t, e.repoDir, "show", s.Head+":"+f); got != want {
			t.Errorf("%s on the branch = %q, want %q", f, got, want)
		}
	}
	stopSecond()
}

// startAlone starts another engine on the env's NATS, with a Redis state
// store of its own: it leads whatever the env's engine does.
func startAlone(t *testing.T, e *env, id string) (*Engine, func()) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	store, err := redisstate.Open(ctx, testkit.Redis(t), redisstate.WithPrefix(fmt.Sprintf("%s:%s:", strings.ReplaceAll(t.Name(), "/", "."), id)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	eng, err := New(e.b, store, Options{DataDir: t.TempDir(), ID: id, Tick: 100 * time.Millisecond, LeaderTTL: 3 * time.Second, Log: quiet,
		RepoRoots: tempRoots(t)})
	if err != nil {
		t.Fatal(err)
	}
	stop := runEngine(t, id+" engine", eng, service.New(eng, e.b, service.Options{ID: id, Log: quiet, RepoRoots: tempRoots(t)}))
	return eng, stop
}
