package engine

import (
	"context"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// queueYAML is two sibling tasks, each with a gate of its own, in a
// workflow whose integration gate tests their work together.
const queueYAML = "name: queue\ndefaults:\n  " + agentCmd + `gates:
  - {name: own, command: [check-own]}
  - {name: combined, command: [check-combined]}
integration_gates: [combined]
tasks:
  - {id: a, prompt: add a.txt, gates: [own]}
  - {id: b, prompt: add b.txt, gates: [own]}
`

// patchObjects lists a gate job's patches by object name.
func patchObjects(j *taken) []string {
	var out []string
	for _, p := range j.gate.Patches {
		out = append(out, p.Object)
	}
	return out
}

// GIT-08 on embedded NATS with real git, the test playing the runners:
// two siblings pass their own gates and join the integration queue, a
// ahead of b. b's integration gate runs on a's patch and its own, a's on
// its own, in parallel. b's fails on top of a before a's run ends: b waits
// until a has landed, then retries with feedback naming a. A coordinator
// restart mid-queue dispatches nothing twice. b's attempt 2 is tested on
// the branch, which holds a, and lands after it.
func TestIntegrationQueueOnTheBus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bus.Config{})
	e.start()
	wf := e.submit(queueYAML)

	agents := e.nextN(protocol.KindAgent, 2)
	pa := e.makePatch(agents["a"], "a.txt", "a\n")
	pb := e.makePatch(agents["b"], "b.txt", "b\n")
	e.agentDone(agents["a"], 1, protocol.AgentSucceeded, pa)
	e.agentDone(agents["b"], 1, protocol.AgentSucceeded, pb)
	own := e.nextN(protocol.KindGate, 2)
	e.gateDone(own["a/own"], 2, protocol.GatePassed)
	e.settle()
	e.waitNode(wf, "a", protocol.NodeIntegrating)
	e.gateDone(own["b/own"], 2, protocol.GatePassed)
	e.settle()
	e.waitNode(wf, "b", protocol.NodeIntegrating)

	integ := e.nextN(protocol.KindGate, 2)
	ja, jb := integ["a/combined"], integ["b/combined"]
	if ja == nil || jb == nil || !strings.Contains(ja.id(), ".i.") || !strings.Contains(jb.id(), ".i.") {
		t.Fatalf("integration jobs = %v, want a's and b's combined", integ)
	}
	if got, want := patchObjects(ja), []string{pa.Object}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a's integration job applies %v, want %v", got, want)
	}
	if got, want := patchObjects(jb), []string{pa.Object, pb.Object}; !reflect.DeepEqual(got, want) {
		t.Fatalf("b's integration job applies %v, want %v", got, want)
	}
	s := e.status(wf)
	if q := nodeOf(s, "b").Integration; q == nil || q.Position != 2 || !reflect.DeepEqual(q.Ahead, []string{"a"}) {
		t.Fatalf("b's place in the queue = %+v, want position 2 behind a", q)
	}

	// A restart mid-queue re-derives the queue from the log.
	e.stopEng()
	e.start()
	e.settle()
	evs := e.events(wf)
	if n := countEvents(evs, eventlog.TypeIntegDispatched, "a") + countEvents(evs, eventlog.TypeIntegDispatched, "b"); n != 2 {
		t.Fatalf("%d integration.dispatched events after the restart, want 2", n)
	}

	e.gateDone(jb, 3, protocol.GateFailed)
	e.settle()
	if n := e.node(wf, "b"); n.Status != protocol.NodeIntegrating {
		t.Fatalf("b is %s after failing on top of a while a is under test; want integrating", n.Status)
	}
	e.gateDone(ja, 3, protocol.GatePassed)
	e.settle()
	e.waitNode(wf, "a", protocol.NodeSucceeded)

	// b's attempt 2 is told it broke the combination with a.
	j2 := e.next(protocol.KindAgent, "default", 10*time.Second)
	if j2.agent.NodeID != "b" || j2.agent.Attempt != 2 {
		t.Fatalf("agent job %s, want b's attempt 2", j2.id())
	}
	f := feedbackOf(t, j2.agent.Feedback)
	if f.Integration == nil || !reflect.DeepEqual(f.Integration.Ahead, []string{"a"}) ||
		!strings.Contains(j2.agent.Prompt, "broke the combination") {
		t.Fatalf("b's feedback = %s, prompt %q; want it to name a", j2.agent.Feedback, j2.agent.Prompt)
	}
	pb2 := e.makePatch(j2, "b.txt", "b, fixed\n")
	e.agentDone(j2, 4, protocol.AgentSucceeded, pb2)
	e.gateDone(e.next(protocol.KindGate, "default", 10*time.Second), 5, protocol.GatePassed)
	jb2 := e.next(protocol.KindGate, "default", 10*time.Second)
	if jb2.gate.NodeID != "b" || jb2.gate.Gate != "combined" {
		t.Fatalf("gate job %s, want b's integration gate", jb2.id())
	}
	if got, want := patchObjects(jb2), []string{pa.Object, pb2.Object}; !reflect.DeepEqual(got, want) {
		t.Fatalf("b's second integration job applies %v, want %v", got, want)
	}
	e.gateDone(jb2, 6, protocol.GatePassed)
	e.settle()
	e.waitWorkflow(wf, protocol.WorkflowSucceeded)

	ctx := testkit.Context(t, 10*time.Second)
	out := gitLog(ctx, t, e.repoDir, "supervisor/"+wf)
	if !strings.HasPrefix(out, "queue: b\nqueue: a\n") {
		t.Fatalf("branch log:\n%s\nwant b on top of a", out)
	}
}

// gitLog is the subjects of branch's commits in repo, newest first.
func gitLog(ctx context.Context, t *testing.T, repo, branch string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "log", "--format=%s", branch).CombinedOutput()
	if err != nil {
		t.Fatalf("git log %s: %v\n%s", branch, err, out)
	}
	return string(out)
}
