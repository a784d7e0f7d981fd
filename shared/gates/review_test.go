package gates

import (
	"reflect"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// review is a mapping-form gate file whose gate "g" is a review gate with
// body lines (indented four spaces), from line 4 on.
func review(body string) string {
	return "gates:\n  g:\n    type: review\n" + body
}

// Review gates (EXE-009, OUT-05): every problem at its file:line:col.
func TestReviewGateValidation(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		wants []want
	}{
		{"one agent", review("    agent: {adapter: claude-code, model: opus}\n"), nil},
		{"reviewers list with quorum", review("    reviewers: [{adapter: claude-code}, {adapter: codex}, {adapter: gemini}]\n    quorum: {reviewers: 3, approvals: 2}\n"), nil},
		{"command adapter", review("    agent: {adapter: command, command: [review-bot, --json]}\n    prompt: Review it.\n"), nil},
		{"unknown type", "gates:\n  g:\n    type: llm\n    command: [x]\n", []want{`3:11: invalid gate "g" type "llm": must be command (the default) or review`}},
		{"no reviewers", review(""), []want{`3:5: gate "g" is a review gate without reviewers`}},
		{"both agent and reviewers", review("    agent: {adapter: codex}\n    reviewers: [{adapter: codex}]\n"),
			[]want{`5:5: gate "g" sets both agent and reviewers`}},
		{"a review gate has no command", review("    agent: {adapter: codex}\n    command: [x]\n"),
			[]want{`5:5: gate "g" is a review gate: its reviewers are agents`}},
		{"a review gate writes nothing", review("    agent: {adapter: codex}\n    allowed_writes: [out/]\n"),
			[]want{`5:5: gate "g" is a review gate: its reviewers may write nothing`}},
		{"a review gate is never cached", review("    agent: {adapter: codex}\n    cache: true\n"),
			[]want{`5:12: gate "g" is a review gate, which is never cached`}},
		{"cache: false is fine", review("    agent: {adapter: codex}\n    cache: false\n"), nil},
		{"unknown adapter", review("    agent: {adapter: cursor}\n"), []want{`4:22: unknown gate "g" agent adapter "cursor"`}},
		{"adapter required", review("    agent: {model: opus}\n"), []want{`4:12: gate "g" agent is missing required field "adapter"`}},
		{"unknown agent key", review("    agent: {adapter: codex, modle: x}\n"), []want{`4:29: unknown field "modle" in gate "g" agent; did you mean "model"?`}},
		{"settings the adapter refuses", review("    agent: {adapter: command}\n"), []want{`4:12: gate "g" agent: `}},
		{"agent command runs no shell", review("    agent: {adapter: command, command: [sh, -c, x]}\n"), []want{`4:40: gate "g" agent command runs a shell`}},
		{"reviewers not a list", review("    reviewers: {adapter: codex}\n"), []want{`4:16: gate "g" reviewers must be a non-empty list of agents`}},
		{"too many reviewers", review("    reviewers: [{adapter: codex},{adapter: codex},{adapter: codex},{adapter: codex},{adapter: codex},{adapter: codex},{adapter: codex},{adapter: codex},{adapter: codex},{adapter: codex}]\n"),
			[]want{`4:16: gate "g" has 10 reviewers; at most 9`}},
		{"bad reviewer", review("    reviewers: [{adapter: codex}, {adapter: x}]\n"), []want{`4:45: unknown gate "g" reviewers[1] adapter "x"`}},
		{"quorum approvals above reviewers", review("    agent: {adapter: codex}\n    quorum: {reviewers: 2, approvals: 3}\n"),
			[]want{`5:13: gate "g" quorum needs 3 approvals of 2 reviewers`}},
		{"quorum of a list disagrees", review("    reviewers: [{adapter: codex}, {adapter: gemini}]\n    quorum: {reviewers: 3}\n"),
			[]want{`5:13: gate "g" quorum says 3 reviewers but reviewers lists 2`}},
		{"approvals above a list", review("    reviewers: [{adapter: codex}]\n    quorum: {approvals: 2}\n"),
			[]want{`5:13: gate "g" quorum needs 2 approvals of 1 reviewers`}},
		{"quorum unknown key", review("    agent: {adapter: codex}\n    quorum: {reviewer: 2}\n"),
			[]want{`5:14: unknown field "reviewer" in gate "g" quorum`}},
		{"quorum out of range", review("    agent: {adapter: codex}\n    quorum: {reviewers: 0}\n"),
			[]want{`5:25: gate "g" quorum reviewers 0 is out of range`}},
		{"prompt must be a string", review("    agent: {adapter: codex}\n    prompt: [x]\n"),
			[]want{`5:13: gate "g" prompt must be a string`}},
		{"review fields on a command gate", one("agent", "{adapter: codex}"),
			[]want{`4:5: gate "g" sets agent, which only a review gate takes (type: review)`}},
		{"quorum on a command gate", one("quorum", "{reviewers: 2}"),
			[]want{`4:5: gate "g" sets quorum, which only a review gate takes`}},
		{"context outside a workflow", review("    agent: {adapter: codex}\n    context: reviewer_diff\n"),
			[]want{`5:5: gate "g" context: context strategies are resolved where a workflow is parsed`}},
		{"role outside a workflow", review("    role: reviewer\n"),
			[]want{`4:5: gate "g" role: roles are resolved where a workflow is parsed`}},
		{"a provider key in a review gate's env", review("    agent: {adapter: codex}\n    env: {OPENAI_API_KEY: sk-x, LANG: C}\n"),
			[]want{`5:11: gate "g" env may not set OPENAI_API_KEY`}},
		{"type command is a command gate", "gates:\n  g:\n    type: command\n    command: [x]\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseYAML(t, tc.src)
			checkProblems(t, "g.yaml", tc.src, err, tc.wants)
		})
	}
}

// What a review gate's definition becomes: the agent repeated for the
// quorum's reviewers, seed 002's default of two approvals, no cache, and
// the same again after a round trip through the wire form.
func TestReviewGateSpec(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		reviewers []protocol.AgentSpec
		approvals int
	}{
		{"default one of one", "    agent: {adapter: claude-code}\n",
			[]protocol.AgentSpec{{Adapter: "claude-code"}}, 1},
		{"three of one agent, two approve by default", "    agent: {adapter: codex, model: m, args: [--x]}\n    quorum: {reviewers: 3}\n",
			[]protocol.AgentSpec{{Adapter: "codex", Model: "m", Args: []string{"--x"}}, {Adapter: "codex", Model: "m", Args: []string{"--x"}},
				{Adapter: "codex", Model: "m", Args: []string{"--x"}}}, 2},
		{"two models, both approve", "    reviewers: [{adapter: claude-code, max_turns: 3}, {adapter: gemini, permission: yolo}]\n    quorum: {approvals: 2}\n",
			[]protocol.AgentSpec{{Adapter: "claude-code", MaxTurns: 3}, {Adapter: "gemini", Permission: "yolo"}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gs, err := parseYAML(t, review(tc.body+"    prompt: Check the error handling.\n"))
			if err != nil {
				t.Fatal(err)
			}
			g := gs[0]
			if g.Type != protocol.GateTypeReview || g.Cache || g.Command != nil || g.Review == nil {
				t.Fatalf("gate = %+v", g)
			}
			if !reflect.DeepEqual(g.Review.Reviewers, tc.reviewers) || g.Review.Approvals != tc.approvals ||
				g.Review.Prompt != "Check the error handling." {
				t.Errorf("review = %+v", *g.Review)
			}
			spec := g.Spec()
			if !spec.IsReview() || spec.UsesCache() {
				t.Errorf("spec = %+v", spec)
			}
			back := FromSpec(spec)
			if !reflect.DeepEqual(back.Review, g.Review) || back.Type != g.Type || back.Cache {
				t.Errorf("round trip = %+v", back)
			}
		})
	}
}
