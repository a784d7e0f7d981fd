package statemachine_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// CTX-06: an agent job carries its task's context, with the prompts of the
// nodes it depends on as the plan a reviewer checks the change against, and
// the interfaces locked for it as its $INTERFACES (CTX-09, HIER-03).
func TestAgentJobContext(t *testing.T) {
	cat, err := contextpack.Load(filepath.Join("..", "..", "..", "configs", "context"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workflow.ParseWithOptions("wf.yaml", []byte("name: c\n"+agent+`tasks:
  - {id: api, prompt: Define the API., interface: [api/*.go]}
  - {id: impl, prompt: "Rename the store to shop.\n", depends_on: [api], context: {strategy: implementer_targeted, targets: [store.go]}}
  - {id: review, prompt: Review it., depends_on: [impl], files: [store/], context: {strategy: reviewer_diff, interfaces: [docs/api.md]}}
`), workflow.Options{Strategies: cat})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, st: statemachine.New(), id: testWF, now: t0, published: map[string]bool{}}
	repo := protocol.RepoRef{ID: "r-test", BaseCommit: strings.Repeat("b", 40), Bundle: "r-test/base.bundle"}
	w.carry(statemachine.Submit(testWF, statemachine.Submission{Spec: spec, Repo: repo, Source: "wf.yaml"}, w.now))
	w.settle()
	if api := publishedJob(t, w, "api"); api.Context != nil {
		t.Fatalf("api context %+v, want none", api.Context)
	}
	w.agentDone("api", 1, protocol.AgentSucceeded, true)
	w.settle()
	impl := publishedJob(t, w, "impl")
	if impl.Context == nil || impl.Context.Strategy != "implementer_targeted" || impl.Context.Targets[0] != "store.go" ||
		impl.Context.Plan != "### Task api\n\nDefine the API.\n" {
		t.Fatalf("impl context %+v", impl.Context)
	}
	// The interfaces locked for impl are its $INTERFACES.
	if strings.Join(impl.Context.Interfaces, ",") != "api/*.go" {
		t.Fatalf("impl interfaces %v, want the locked api/*.go", impl.Context.Interfaces)
	}
	w.agentDone("impl", 1, protocol.AgentSucceeded, false) // no patch: nothing to check against the locked interface
	w.settle()
	review := publishedJob(t, w, "review")
	if review.Context == nil || review.Context.Definition.Name != "reviewer_diff" || review.Context.Budget != 15000 {
		t.Fatalf("review context %+v", review.Context)
	}
	if want := "### Task impl\n\nRename the store to shop.\n"; review.Context.Plan != want {
		t.Fatalf("review plan %q, want %q", review.Context.Plan, want)
	}
	if strings.Join(review.Context.Interfaces, ",") != "docs/api.md" {
		t.Fatalf("review interfaces %v, want its own", review.Context.Interfaces)
	}
	// A task's declared files are its $TARGET when its context names none.
	if strings.Join(review.Context.Targets, ",") != "store/**" {
		t.Fatalf("review targets %v, want its files", review.Context.Targets)
	}
	if spec.Tasks[2].Context.Plan != "" || len(spec.Tasks[1].Context.Interfaces) != 0 {
		t.Fatal("building the job changed the task's spec")
	}
}

// publishedJob is the agent job the coordinator publishes for node now.
func publishedJob(t *testing.T, w *world, node string) *protocol.AgentJob {
	t.Helper()
	d := statemachine.Decide(w.wf(), w.now, func(string) bool { return false })
	for _, eff := range d.Effects {
		if p, ok := eff.(statemachine.Publish); ok && p.Agent != nil && p.Agent.NodeID == node {
			return p.Agent
		}
	}
	t.Fatalf("no agent job published for %s", node)
	return nil
}
