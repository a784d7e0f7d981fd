package statemachine_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// worldLog gives back the prompts of the world's log, as the engine's
// reader does from the event log; until read is set for a sequence it
// answers as a reader that has not read the event yet.
type worldLog struct {
	w *world
	// read, if not nil, lists the sequences read; the others are not.
	read map[uint64]bool
	// asked counts the calls.
	asked int
}

func (l *worldLog) Prompt(seq uint64, task string) (string, error) {
	l.asked++
	if l.read != nil && !l.read[seq] {
		return "", &statemachine.PromptsNotRead{Seq: seq}
	}
	for _, ev := range l.w.events {
		if ev.Seq != seq {
			continue
		}
		var tasks []protocol.TaskSpec
		switch b := ev.Body.(type) {
		case eventlog.WorkflowSubmitted:
			tasks = b.Workflow.Tasks
		case eventlog.NodesAdded:
			tasks = b.Tasks
		}
		for _, t := range tasks {
			if t.ID == task {
				return t.Prompt, nil
			}
		}
		return "", errors.New("no such task in the event")
	}
	return "", errors.New("no such event")
}

// promptWorld is a world whose state leaves prompts in its log, read
// back through the returned source.
func promptWorld(t *testing.T, yaml string, opts workflow.Options, read map[uint64]bool) (*world, *worldLog) {
	t.Helper()
	spec, err := workflow.ParseWithOptions("wf.yaml", []byte(yaml), opts)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, st: statemachine.New(), id: testWF, now: t0, published: map[string]bool{}, roundTrip: true}
	src := &worldLog{w: w, read: read}
	w.st.SetPromptSource(src, true)
	repo := protocol.RepoRef{ID: "r-test", BaseCommit: strings.Repeat("b", 40), Bundle: "r-test/base.bundle"}
	w.carry(statemachine.Submit(testWF, statemachine.Submission{Spec: spec, Repo: repo, Source: "wf.yaml"}, w.now))
	return w, src
}

// PERF-50: a state given a prompt source keeps no agent task's prompt in
// memory, yet builds the same jobs: the task's prompt, a dependent's
// context plan with its dependency's prompt, and the same again from a
// snapshot of it, which records where the prompts are.
func TestPromptsLeftInTheLog(t *testing.T) {
	cat, err := contextpack.Load(filepath.Join("..", "..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	w, src := promptWorld(t, "name: c\n"+agent+`tasks:
  - {id: api, prompt: Define the API., interface: [api/*.go]}
  - {id: impl, prompt: "Rename the store to shop.\n", depends_on: [api], context: {strategy: implementer_targeted, targets: [store.go]}}
  - {id: sign, type: human, prompt: Sign it off., depends_on: [impl]}
`, workflow.Options{Strategies: cat}, nil)
	for _, task := range w.wf().Spec.Tasks {
		want := ""
		if task.ID == "sign" {
			want = "Sign it off." // the inbox shows a human task's instructions
		}
		if task.Prompt != want {
			t.Fatalf("task %s's prompt in memory %q, want %q", task.ID, task.Prompt, want)
		}
	}
	w.settle()
	if api := publishedJob(t, w, "api"); !strings.HasPrefix(api.Prompt, "Define the API.") {
		t.Fatalf("api's prompt %q", api.Prompt)
	}
	w.agentDone("api", 1, protocol.AgentSucceeded, true)
	w.settle()
	impl := publishedJob(t, w, "impl")
	if !strings.HasPrefix(impl.Prompt, "Rename the store to shop.") || impl.Context == nil ||
		impl.Context.Plan != "### Task api\n\nDefine the API.\n" {
		t.Fatalf("impl's prompt %q, context %+v", impl.Prompt, impl.Context)
	}
	if src.asked == 0 {
		t.Fatal("the prompts were not read from the source")
	}

	// A snapshot holds where the prompts are, not the prompts.
	var buf bytes.Buffer
	enc := statemachine.NewSnapshotEncoder(&buf)
	if err := enc.Fleet(w.st.Fleet()); err != nil {
		t.Fatal(err)
	}
	if err := enc.Workflow(w.wf()); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("Rename the store")) {
		t.Fatal("the snapshot holds a prompt left in the log")
	}
	back, err := statemachine.DecodeSnapshot(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	wb, _ := back.Workflow(testWF)
	if _, err := wb.TaskPrompt(wb.Nodes["impl"]); !errors.Is(err, statemachine.ErrPromptUnavailable) {
		t.Fatalf("a prompt without a source: %v, want ErrPromptUnavailable", err)
	}
	back.SetPromptSource(src, true)
	if p, err := wb.TaskPrompt(wb.Nodes["impl"]); err != nil || p != "Rename the store to shop.\n" {
		t.Fatalf("impl's prompt from the snapshot's state: %q, %v", p, err)
	}
}

// PERF-50: a job whose prompt the source has not read yet is postponed,
// not published without it: the decision says which event to read and
// wakes the workflow again; once read, the job is published.
func TestJobWaitsForItsPrompt(t *testing.T) {
	read := map[uint64]bool{}
	w, _ := promptWorld(t, "name: c\n"+agent+"tasks:\n  - {id: a, prompt: Do a.}\n", workflow.Options{}, read)
	d := statemachine.Decide(w.wf(), w.now, func(id string) bool { return w.published[id] })
	w.carry(d.Effects...) // a is ready
	d = statemachine.Decide(w.wf(), w.now, func(id string) bool { return w.published[id] })
	for _, eff := range d.Effects {
		if p, ok := eff.(statemachine.Publish); ok {
			t.Fatalf("published %s without its prompt", p.JobID())
		}
	}
	var nr *statemachine.PromptsNotRead
	if len(d.Deferred) != 1 || !errors.As(d.Deferred[0], &nr) || nr.Seq != 1 {
		t.Fatalf("deferred %v, want the submission (event 1) to read", d.Deferred)
	}
	if !d.Wake.Equal(w.now.Add(time.Second)) {
		t.Fatalf("wake %v, want a second later", d.Wake)
	}
	read[1] = true
	w.settle()
	if a := publishedJob(t, w, "a"); !strings.HasPrefix(a.Prompt, "Do a.") {
		t.Fatalf("a's prompt %q", a.Prompt)
	}
}

// PERF-50: the nodes a plan adds leave their prompts in the log too (read
// back from the nodes_added event), unless the state no longer leaves
// prompts there (a coordinator whose log may lose events, starting from a
// snapshot of one that did): then they stay in memory, while the prompts
// already left out are still read back.
func TestAddedNodesPrompts(t *testing.T) {
	const yaml = "name: g\n" + agent + `tasks:
  - id: plan
    prompt: plan it
    output: plan
    gates: []
    expand: {prompt: Build it., gates: []}
`
	for _, leave := range []bool{true, false} {
		w, src := promptWorld(t, yaml, workflow.Options{}, nil)
		w.st.SetPromptSource(src, leave)
		w.say = func(node string, _ uint64) string {
			if node == "plan" {
				return block(growPlan)
			}
			return block(implOK)
		}
		w.settle()
		if p := publishedJob(t, w, "plan"); !strings.HasPrefix(p.Prompt, "plan it") {
			t.Fatalf("leave %v: the planner's prompt %q", leave, p.Prompt)
		}
		w.agentDone("plan", 1, protocol.AgentSucceeded, false)
		types := w.node("plan--types")
		if inMemory := types.Task.Prompt != ""; inMemory == leave {
			t.Fatalf("leave %v: the added node's prompt in memory: %q", leave, types.Task.Prompt)
		}
		if j := publishedJob(t, w, "plan--types"); !strings.HasPrefix(j.Prompt, "Build it.\n\n## Component types") {
			t.Fatalf("leave %v: the added node's job prompt %q", leave, j.Prompt)
		}
	}
}
