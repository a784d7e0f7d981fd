package agentcli

import (
	"slices"
	"strings"
	"testing"
)

// TestInvocation checks the headless argv each adapter builds from the
// agent settings: the output format, the permission flag a run needs to
// edit files without asking, model, turns and extra arguments, and where
// the prompt goes (WORK-03).
func TestInvocation(t *testing.T) {
	long := strings.Repeat("x", geminiMaxArgPrompt+1)
	tests := []struct {
		name    string
		adapter string
		prompt  string
		s       Settings
		argv    []string
		stdin   string
		onStdin bool
		err     string
	}{
		{name: "claude defaults", adapter: "claude-code", prompt: "fix it",
			argv:  []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"},
			stdin: "fix it", onStdin: true},
		{name: "claude settings", adapter: "claude-code", prompt: "fix it",
			s: Settings{Model: "sonnet", MaxTurns: 12, Permission: "bypassPermissions", Args: []string{"--bare"}},
			argv: []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions",
				"--model", "sonnet", "--max-turns", "12", "--bare"},
			stdin: "fix it", onStdin: true},
		{name: "claude json has no --verbose", adapter: "claude-code", prompt: "p", s: Settings{OutputFormat: "json"},
			argv: []string{"claude", "-p", "--output-format", "json", "--permission-mode", "acceptEdits"}, stdin: "p", onStdin: true},
		{name: "claude bad permission mode", adapter: "claude-code", s: Settings{Permission: "yolo"}, err: "permission mode"},
		{name: "claude bad format", adapter: "claude-code", s: Settings{OutputFormat: "text"}, err: "output format"},
		{name: "claude negative turns", adapter: "claude-code", s: Settings{MaxTurns: -1}, err: "negative"},
		{name: "codex defaults: prompt on stdin through -", adapter: "codex", prompt: "fix it",
			argv:  []string{"codex", "exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-"},
			stdin: "fix it", onStdin: true},
		{name: "codex settings", adapter: "codex", prompt: "p",
			s: Settings{Model: "gpt-5-codex", Permission: "danger-full-access", Args: []string{"-c", "model_reasoning_effort=high"}},
			argv: []string{"codex", "exec", "--json", "--sandbox", "danger-full-access", "--skip-git-repo-check",
				"--model", "gpt-5-codex", "-c", "model_reasoning_effort=high", "-"},
			stdin: "p", onStdin: true},
		{name: "codex has no turn limit", adapter: "codex", s: Settings{MaxTurns: 3}, err: "max_turns"},
		{name: "codex bad sandbox", adapter: "codex", s: Settings{Permission: "acceptEdits"}, err: "sandbox"},
		{name: "codex json only", adapter: "codex", s: Settings{OutputFormat: "json"}, err: "output format"},
		{name: "gemini defaults: prompt in -p, stdin null", adapter: "gemini", prompt: "fix it",
			argv: []string{"gemini", "-p", "fix it", "--output-format", "stream-json", "--approval-mode", "auto_edit"}},
		{name: "gemini settings", adapter: "gemini", prompt: "p",
			s:    Settings{Model: "gemini-2.5-pro", Permission: "yolo", OutputFormat: "json", Args: []string{"--skip-trust"}},
			argv: []string{"gemini", "-p", "p", "--output-format", "json", "--approval-mode", "yolo", "--model", "gemini-2.5-pro", "--skip-trust"}},
		{name: "gemini long prompt on stdin", adapter: "gemini", prompt: long,
			argv:  []string{"gemini", "-p", geminiStdinInstruction, "--output-format", "stream-json", "--approval-mode", "auto_edit"},
			stdin: long, onStdin: true},
		{name: "gemini has no turn flag", adapter: "gemini", s: Settings{MaxTurns: 3}, err: "max_turns"},
		{name: "gemini bad approval mode", adapter: "gemini", s: Settings{Permission: "acceptEdits"}, err: "approval mode"},
		{name: "command", adapter: "command", prompt: "p", s: Settings{Command: []string{"my-agent", "--fast"}, Args: []string{"x"}},
			argv: []string{"my-agent", "--fast", "x"}, stdin: "p", onStdin: true},
		{name: "command without argv", adapter: "command", err: "no argv"},
		{name: "command with a model", adapter: "command", s: Settings{Command: []string{"a"}, Model: "m"}, err: "CLI adapter only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := Lookup(tt.adapter)
			inv, err := a.Invocation(tt.prompt, tt.s)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(inv.Argv, tt.argv) || inv.Stdin != tt.stdin || inv.PromptOnStdin != tt.onStdin {
				t.Errorf("invocation = %q stdin %d bytes (%v), want %q stdin %d bytes (%v)",
					inv.Argv, len(inv.Stdin), inv.PromptOnStdin, tt.argv, len(tt.stdin), tt.onStdin)
			}
		})
	}
	if got := Names(); !slices.Equal(got, []string{"claude-code", "codex", "command", "gemini"}) {
		t.Errorf("Names() = %q", got)
	}
}

// TestParseLines checks the line reader under the parsers: CRLF endings,
// a last line without a newline, and a line past MaxLine, which is
// skipped and counted as malformed while the lines after it still count.
func TestParseLines(t *testing.T) {
	ok := `{"type":"thread.started","thread_id":"t1"}` + "\r\n" + `{"type":"turn.started"}` + "\n"
	huge := "{" + strings.Repeat(" ", MaxLine) + "}\n"
	end := `{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"hi"}}` + "\n" +
		`{"type":"turn.completed","usage":{"input_tokens":3,"cached_input_tokens":1,"output_tokens":2}}`
	res, err := Parse(Codex{}.NewParser(Settings{}), strings.NewReader(ok+huge+end), 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || res.SessionID != "t1" || res.Text != "hi" || res.Malformed != 1 || res.Usage.OutputTokens != 2 {
		t.Errorf("result = %+v", res)
	}
}
