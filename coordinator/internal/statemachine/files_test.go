package statemachine_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

func patchNodes(job *protocol.AgentJob) string {
	var out []string
	for _, p := range job.Patches {
		out = append(out, p.NodeID)
	}
	return strings.Join(out, ",")
}

// DAG-07: nodes whose declared files may overlap never run at the same
// time. The later waits, pending, until the earlier has finished (its
// status names what it waits for), then starts from the earlier's
// accepted work; a node with disjoint files, or none declared, runs
// alongside. Order is the workflow's, so replay decides the same.
func TestFileConflicts(t *testing.T) {
	const files = "name: f\n" + agent + "tasks:\n" +
		"  - {id: a, prompt: a, files: [src/*.go]}\n" +
		"  - {id: b, prompt: b, files: [src/auth.go, README.md]}\n" +
		"  - {id: c, prompt: c, files: [docs/**]}\n" +
		"  - {id: d, prompt: d}\n" +
		"  - {id: e, prompt: e, files: [README.md]}\n"
	runScenarios(t, []scenario{{
		name:   "the later of two overlapping nodes waits for the earlier to finish and builds on its work",
		yaml:   files,
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1", "node.ready c", "publish agent c a1", "node.ready d", "publish agent d a1", "node.ready e", "publish agent e a1"),
		steps: []step{
			{"b waits for a and e, whose files overlap its own", func(w *world) []string {
				if got := w.wf().WaitingForFiles("b"); !reflect.DeepEqual(got, []string{"a", "e"}) {
					t.Errorf("b waits for %v", got)
				}
				for _, id := range []string{"a", "c", "d", "e"} {
					if got := w.wf().WaitingForFiles(id); got != nil {
						t.Errorf("%s waits for %v", id, got)
					}
				}
				return w.started("a", 1)
			}, lines("node.started a")},
			agentStep("a succeeds; e still holds README.md", "a", 1, protocol.AgentSucceeded, true,
				"node.agent_done a succeeded", "integrate a", "node.integrated a", "node.finished a succeeded"),
			{"nothing happens while e runs", func(w *world) []string {
				if got := w.wf().WaitingForFiles("b"); !reflect.DeepEqual(got, []string{"e"}) {
					t.Errorf("b waits for %v", got)
				}
				return w.later(time.Minute)
			}, nil},
			agentStep("e fails: waiting to retry, it still holds its files", "e", 1, protocol.AgentFailed, false,
				"node.agent_done e failed", "node.retry_scheduled e"),
			{"e's retry runs while b waits", func(w *world) []string { return w.later(time.Hour) },
				lines("node.ready e", "publish agent e a2")},
			agentStep("e succeeds: b becomes ready", "e", 1, protocol.AgentSucceeded, true,
				"node.agent_done e succeeded", "integrate e", "node.integrated e", "node.finished e succeeded",
				"node.ready b", "publish agent b a1"),
		},
		after: func(t *testing.T, w *world) {
			job := w.job("b")
			if got := patchNodes(job); got != "a,e" {
				t.Errorf("b's job starts from the work of %q, want a,e", got)
			}
			want := []string{"files/wf-test/a", "files/wf-test/b", "files/wf-test/e"}
			if !reflect.DeepEqual(job.FileLocks, want) {
				t.Errorf("b's file locks %v, want %v", job.FileLocks, want)
			}
			if got := w.job("c").FileLocks; !reflect.DeepEqual(got, []string{"files/wf-test/c"}) {
				t.Errorf("c's file locks %v", got)
			}
			if got := w.job("d").FileLocks; got != nil {
				t.Errorf("d declares no files, but locks %v", got)
			}
		},
	}, {
		name: "two overlapping nodes ready at once: the first in the workflow's order goes first",
		yaml: "name: f\n" + agent + "tasks:\n  - {id: x, prompt: x}\n" +
			"  - {id: b, prompt: b, files: [lib/**], depends_on: [x]}\n" +
			"  - {id: a, prompt: a, files: [lib/a.go], depends_on: [x]}\n",
		submit: lines("workflow.submitted", "node.ready x", "publish agent x a1"),
		steps: []step{
			agentStep("x succeeds: b and a are both free to start; b is first", "x", 1, protocol.AgentSucceeded, false,
				"node.agent_done x succeeded", "integrate x", "node.integrated x", "node.finished x succeeded",
				"node.ready b", "publish agent b a1"),
			agentStep("b fails and waits to retry: a still waits", "b", 1,
				protocol.AgentFailed, false, "node.agent_done b failed", "node.retry_scheduled b"),
			{"b retries", func(w *world) []string { return w.later(time.Hour) },
				lines("node.ready b", "publish agent b a2")},
			agentStep("b succeeds without a change: a starts", "b", 1, protocol.AgentSucceeded, false,
				"node.agent_done b succeeded", "integrate b", "node.integrated b", "node.finished b succeeded",
				"node.ready a", "publish agent a a1"),
		},
	}, {
		name:   "a node that fails releases its files; the waiting node does not build on it",
		yaml:   "name: f\n" + agent + once + "tasks:\n  - {id: a, prompt: a, files: [x.go]}\n  - {id: b, prompt: b, files: [x.go]}\n",
		submit: lines("workflow.submitted", "node.ready a", "publish agent a a1"),
		steps: []step{
			agentStep("a fails its only attempt: it escalates, holding x.go", "a", 1, protocol.AgentFailed, false,
				"node.agent_done a failed", "node.escalated a"),
			rejectStep("a human rejects a: b starts", "a", "node.rejected a", "node.ready b", "publish agent b a1"),
		},
		after: func(t *testing.T, w *world) {
			if got := patchNodes(w.job("b")); got != "" {
				t.Errorf("b starts from the work of %q", got)
			}
		},
	}})
}

// Replaying the log of a workflow whose nodes waited for files rebuilds
// the same state: waiting is decided from the state alone.
func TestFileConflictsReplay(t *testing.T) {
	yaml := "name: f\n" + agent + "tasks:\n  - {id: a, prompt: a, files: [x/**]}\n  - {id: b, prompt: b, files: [x/y]}\n"
	w, _ := newWorld(t, yaml, true)
	w.agentDone("a", 1, protocol.AgentSucceeded, true)
	st := statemachine.New()
	for _, ev := range w.events {
		if err := st.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := st.Workflow(w.id)
	if again.Nodes["b"].Status != protocol.NodeReady || w.node("b").Status != protocol.NodeReady {
		t.Fatalf("b is %s after replay, %s live", again.Nodes["b"].Status, w.node("b").Status)
	}
	if d := statemachine.Decide(again, w.now, func(string) bool { return true }); len(d.Effects) != 0 {
		t.Fatalf("the replayed state decides %v", d.Effects)
	}
}

// touching sets the files the world's next patches change.
func touching(w *world, paths ...string) {
	w.patchStat = &protocol.PatchStat{Files: len(paths), Paths: paths}
}

// HIER-03, HIER-06: once the node defining an interface has succeeded,
// another node's patch that changes a locked file fails its round with
// feedback naming the files and the interface node (the agent may put
// them back), unless the task may change them; before that, nothing is
// locked.
func TestInterfaceLocking(t *testing.T) {
	const wf = "name: i\n" + agent + "tasks:\n" +
		"  - {id: api, prompt: p, interface: [api/*.yaml]}\n" +
		"  - {id: early, prompt: p}\n" +
		"  - {id: impl, prompt: p, depends_on: [api]}\n" +
		"  - {id: ext, prompt: p, depends_on: [api], may_change_interfaces: [api/extra.yaml]}\n" +
		"  - {id: any, prompt: p, depends_on: [api], may_change_interfaces: true}\n"
	runScenarios(t, []scenario{{
		name:   "locked once defined",
		yaml:   wf,
		submit: lines("workflow.submitted", "node.ready api", "publish agent api a1", "node.ready early", "publish agent early a1"),
		steps: []step{
			{"early changes api/openapi.yaml before api succeeded: nothing is locked yet", func(w *world) []string {
				touching(w, "api/openapi.yaml")
				return w.agentDone("early", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done early succeeded", "integrate early", "node.integrated early", "node.finished early succeeded")},
			{"api defines the interface and succeeds", func(w *world) []string {
				touching(w, "api/openapi.yaml", "api/extra.yaml")
				return w.agentDone("api", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done api succeeded", "integrate api", "node.integrated api", "node.finished api succeeded",
				"node.ready impl", "publish agent impl a1", "node.ready ext", "publish agent ext a1", "node.ready any", "publish agent any a1")},
			{"impl changes a locked file: its round fails, to be retried", func(w *world) []string {
				touching(w, "api/openapi.yaml", "src/impl.go")
				return w.agentDone("impl", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done impl succeeded", "node.retry_scheduled impl")},
			{"the retry gets the feedback", func(w *world) []string { return w.later(time.Hour) },
				lines("node.ready impl", "publish agent impl a2")},
			{"impl leaves the interface alone: accepted", func(w *world) []string {
				touching(w, "src/impl.go")
				return w.agentDone("impl", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done impl succeeded", "integrate impl", "node.integrated impl", "node.finished impl succeeded")},
			{"ext may change api/extra.yaml", func(w *world) []string {
				touching(w, "api/extra.yaml")
				return w.agentDone("ext", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done ext succeeded", "integrate ext", "node.integrated ext", "node.finished ext succeeded")},
			{"any may change every locked file", func(w *world) []string {
				touching(w, "api/openapi.yaml", "api/extra.yaml")
				return w.agentDone("any", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done any succeeded", "integrate any", "node.integrated any", "node.finished any succeeded",
				"finish succeeded deliver")},
		},
		after: func(t *testing.T, w *world) {
			impl := w.node("impl")
			want := "interface_locked: the patch changes locked interface files (api/openapi.yaml) defined by api"
			if r := impl.History()[0].Reason; !strings.HasPrefix(r, want) {
				t.Errorf("impl's failed round: %q, want it to start %q", r, want)
			}
			f := feedbackOf(t, impl.History()[0].Feedback)
			if len(f.Gates) != 1 || f.Gates[0].Name != "interfaces" || !f.Gates[0].IntegrityViolation ||
				!strings.Contains(f.Gates[0].Error, "defined by api") {
				t.Fatalf("feedback %+v", f.Gates)
			}
			if got := f.Gates[0].Violations; !reflect.DeepEqual(got, []string{"api/openapi.yaml"}) {
				t.Errorf("violations %v", got)
			}
		},
	}, {
		name: "an interface behind an approval step is locked once approved; a patch that cannot be checked fails",
		yaml: "name: i\n" + agent + once + "tasks:\n" +
			"  - {id: api, prompt: p, interface: [api/**], approval: {approvers: [ada]}}\n" +
			"  - {id: impl, prompt: p}\n",
		submit: lines("workflow.submitted", "node.ready api", "publish agent api a1", "node.ready impl", "publish agent impl a1"),
		steps: []step{
			{"api awaits approval", func(w *world) []string {
				touching(w, "api/v1.yaml")
				return w.agentDone("api", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done api succeeded", "node.awaiting_approval api")},
			{"ada approves: now it is locked", func(w *world) []string {
				return w.command(statemachine.Approve(w.wf(), "api", "ada", "", w.now))
			}, lines("node.approved api", "integrate api", "node.integrated api", "node.finished api succeeded")},
			{"impl's patch lists only part of its files", func(w *world) []string {
				w.patchStat = &protocol.PatchStat{Files: 300, Paths: []string{"src/a.go"}, PathsTruncated: true}
				return w.agentDone("impl", 1, protocol.AgentSucceeded, true)
			}, lines("node.agent_done impl succeeded", "node.escalated impl")},
		},
		after: func(t *testing.T, w *world) {
			if r := w.node("impl").Reason; !strings.Contains(r, "cannot be checked against the interfaces api locked") {
				t.Errorf("impl's escalation %q", r)
			}
		},
	}})
}
