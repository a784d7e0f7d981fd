package service

import (
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
)

// redactSpec masks secrets in every prompt of a submitted workflow that
// reaches an agent, says where, and leaves the definitions it was built
// from (which other workflows share) alone (CTX-07).
func TestRedactSpec(t *testing.T) {
	shared := &protocol.ReviewSpec{Prompt: "Check it. token=tok-0d9e8f7a6b5c", Approvals: 1}
	spec := &protocol.WorkflowSpec{
		Tasks: []protocol.TaskSpec{
			{ID: "plain", Prompt: "Add a greeting."},
			{ID: "deploy", Prompt: "Deploy. password: pw-1a2b3c4d5e", TaskRare: &protocol.TaskRare{Expand: &protocol.ExpandSpec{Prompt: "api_key=ak-9z8y7x6w5v"}},
				GateDefs: []protocol.GateSpec{{Name: "look", Type: protocol.GateTypeReview, Review: shared}}},
		},
		Gates: []protocol.GateSpec{{Name: "review", Type: protocol.GateTypeReview, Review: shared}, {Name: "test", Command: []string{"go", "test", "--token", "t"}}},
	}
	got := redactSpec(spec)
	want := []string{"task deploy: prompt", "task deploy: expand prompt", "task deploy: gate look: review prompt", "gate review: review prompt"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("redactSpec reported %q; want %q", got, want)
	}
	for _, text := range []string{spec.Tasks[1].Prompt, spec.Tasks[1].Expand().Prompt, spec.Tasks[1].GateDefs[0].Review.Prompt, spec.Gates[0].Review.Prompt} {
		if !strings.Contains(text, redact.Mask) || strings.ContainsAny(strings.TrimPrefix(text, "Deploy. "), "0123456789") {
			t.Errorf("%q: want its secret masked", text)
		}
	}
	if spec.Tasks[0].Prompt != "Add a greeting." {
		t.Errorf("a prompt without secrets changed: %q", spec.Tasks[0].Prompt)
	}
	if !strings.Contains(shared.Prompt, "tok-0d9e8f7a6b5c") {
		t.Errorf("the shared review definition was changed in place: %q", shared.Prompt)
	}
	if c := spec.Gates[1].Command; !reflect.DeepEqual(c, []string{"go", "test", "--token", "t"}) {
		t.Errorf("a gate's command was changed: %q", c)
	}
}
