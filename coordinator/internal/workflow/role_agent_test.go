package workflow

import (
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// A task's agent, defaults.agent and the task's role's agent layer in
// that order of precedence, each merged over the one below field by field
// unless it names another adapter, which replaces what is below it whole.
// An expand template's agent layers over its role's the same way. The
// role's allowed_tools flags follow the args while the adapter is the
// role's.
func TestParseRoleAgentLayers(t *testing.T) {
	opts := realSources(t, overlay.File{Layer: overlay.Project, Name: "tuned", Path: "tuned.yaml",
		Data: []byte("extends: implementer\ndescription: tuned implementer\nagent:\n  model: role-model\n  max_turns: 30\n  args: [--role-flag]\nallowed_tools: [Read, Edit]\n")})
	tools := []string{"--allowedTools", "Read,Edit"}
	cases := []struct {
		name     string
		defaults string
		task     string
		want     protocol.AgentSpec
	}{
		{name: "role alone", want: protocol.AgentSpec{Adapter: "claude-code", Model: "role-model", MaxTurns: 30, Args: append([]string{"--role-flag"}, tools...)}},
		{name: "task model only", task: "{model: task-model}",
			want: protocol.AgentSpec{Adapter: "claude-code", Model: "task-model", MaxTurns: 30, Args: append([]string{"--role-flag"}, tools...)}},
		{name: "task same adapter", task: "{adapter: claude-code, max_turns: 5}",
			want: protocol.AgentSpec{Adapter: "claude-code", Model: "role-model", MaxTurns: 5, Args: append([]string{"--role-flag"}, tools...)}},
		{name: "task other adapter", task: "{adapter: codex}", want: protocol.AgentSpec{Adapter: "codex"}},
		{name: "defaults model, task args", defaults: "{model: defaults-model}", task: "{args: [--task-flag]}",
			want: protocol.AgentSpec{Adapter: "claude-code", Model: "defaults-model", MaxTurns: 30, Args: append([]string{"--task-flag"}, tools...)}},
		{name: "defaults other adapter", defaults: "{adapter: codex, model: o3}", task: "{args: [--task-flag]}",
			want: protocol.AgentSpec{Adapter: "codex", Model: "o3", Args: []string{"--task-flag"}}},
		{name: "defaults model, task other adapter", defaults: "{model: defaults-model}", task: "{adapter: gemini}",
			want: protocol.AgentSpec{Adapter: "gemini"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var src strings.Builder
			src.WriteString("name: layers\n")
			if tc.defaults != "" {
				src.WriteString("defaults:\n  agent: " + tc.defaults + "\n")
			}
			src.WriteString("tasks:\n  - id: a\n    role: tuned\n    prompt: p\n")
			if tc.task != "" {
				src.WriteString("    agent: " + tc.task + "\n")
			}
			src.WriteString("  - id: plan\n    role: planner\n    prompt: p\n    expand:\n      role: tuned\n")
			if tc.task != "" {
				src.WriteString("      agent: " + tc.task + "\n")
			}
			spec, err := ParseWithOptions("layers.yaml", []byte(src.String()), opts)
			if err != nil {
				t.Fatalf("%v\n%s", err, src.String())
			}
			for _, task := range spec.Tasks {
				got := task.Agent
				if task.ID == "plan" {
					if task.Expand() == nil {
						t.Fatal("plan has no expand template")
					}
					got = task.Expand().Agent
				}
				if got == nil || !reflect.DeepEqual(*got, tc.want) {
					t.Errorf("%s agent = %+v, want %+v", task.ID, got, tc.want)
				}
			}
		})
	}
}

// A role's agent fills what a task's partial agent leaves, so the merge
// does not lose the adapter; a task that sets an adapter-less agent with
// no role, defaults or role agent is still refused.
func TestParseRoleAgentPartialNeedsAdapter(t *testing.T) {
	src := "name: n\ntasks:\n  - id: a\n    agent: {model: m}\n    prompt: p\n"
	_, err := ParseWithOptions("n.yaml", []byte(src), realSources(t))
	if err == nil || !strings.Contains(err.Error(), "n.yaml:4") || !strings.Contains(err.Error(), "needs an adapter") {
		t.Fatalf("err = %v", err)
	}
}
