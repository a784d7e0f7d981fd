package statemachine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// fixtures are the recorded outputs of the real CLIs the adapters parse.
const fixtures = "../../../shared/agentcli/testdata"

// TestClassifyAgentRun: the class the adapter read from the CLI's output
// decides (RETRY-02…07): a rate limit or overload is transient, with the
// retry-after the CLI reported; authentication is fatal; a failed turn or
// a turn limit is the agent's to fix. Each case is a fixture of a real
// CLI's output, parsed as the worker parses it.
func TestClassifyAgentRun(t *testing.T) {
	tests := []struct {
		adapter, format, stdout, stderr string
		exit                            int
		want                            ErrorClass
		match                           string // contained in the deciding text
	}{
		{adapter: "claude-code", format: "json", stdout: "claude_json_rate_limited.json", want: Transient, match: "claude-code: "},
		{adapter: "claude-code", stdout: "claude_stream_overloaded.jsonl", exit: 1, want: Transient},
		{adapter: "claude-code", stdout: "claude_stream_auth_error.jsonl", exit: 1, want: Fatal},
		{adapter: "claude-code", format: "json", stdout: "claude_json_max_turns.json", exit: 1, want: Fixable, match: "error_max_turns"},
		{adapter: "claude-code", stdout: "claude_stream_truncated.jsonl", want: Fixable},
		{adapter: "codex", stdout: "codex_turn_failed_ratelimit.jsonl", want: Transient, match: "codex: turn failed"},
		{adapter: "codex", stdout: "codex_turn_failed_overloaded.jsonl", exit: 1, want: Transient},
		{adapter: "codex", stdout: "codex_turn_failed_auth.jsonl", exit: 1, want: Fatal},
		{adapter: "codex", stderr: "codex_usage_error.stderr", exit: 2, want: Fatal},
		{adapter: "gemini", stderr: "gemini_stream_auth_error.stderr", exit: 41, want: Fatal},
		{adapter: "gemini", stdout: "gemini_stream_turn_limit.jsonl", exit: 53, want: Fixable},
		{adapter: "gemini", stdout: "gemini_stream_rate_limit.jsonl", exit: 173, want: Transient},
	}
	for _, tt := range tests {
		name := tt.stdout + tt.stderr
		t.Run(name, func(t *testing.T) {
			a, _ := agentcli.Lookup(tt.adapter)
			s := agentcli.Settings{OutputFormat: tt.format}
			res, err := agentcli.Parse(a.NewParser(s), bytes.NewReader(read(t, tt.stdout)), tt.exit, read(t, tt.stderr), nil)
			if err != nil {
				t.Fatal(err)
			}
			run := res.AgentRun()
			// What a worker reports: the CLI's output tails, the adapter's
			// error, and its Run.
			r := &protocol.AgentResult{Status: protocol.AgentFailed, ExitCode: tt.exit, Error: run.Error,
				Stdout: string(read(t, tt.stdout)), Stderr: string(read(t, tt.stderr)), Run: &run}
			class, match, _ := classifyAgent(r)
			if class != tt.want || !strings.HasPrefix(match, tt.adapter+": ") || !strings.Contains(match, tt.match) {
				t.Errorf("class %s (%q), want %s (holding %q); run class %q error %q", class, match, tt.want, tt.match, run.Class, run.Error)
			}
		})
	}
}

// TestClassifyAgentRunFirst: the adapter's class wins over the patterns
// (an agent's own text may mention a rate limit it merely discussed);
// without a class the patterns decide as before; a retry-after the CLI
// reported delays a transient re-run.
func TestClassifyAgentRunFirst(t *testing.T) {
	tests := []struct {
		name  string
		r     protocol.AgentResult
		want  ErrorClass
		after time.Duration
	}{
		{"agent class over a pattern", protocol.AgentResult{Status: protocol.AgentFailed, Stdout: "I read about rate limits",
			Run: &protocol.AgentRun{Adapter: "codex", Class: "agent", Error: "turn failed: the model gave up"}}, Fixable, 0},
		{"transient with retry-after", protocol.AgentResult{Status: protocol.AgentFailed,
			Run: &protocol.AgentRun{Adapter: "claude-code", Class: "transient", Error: "API Error: 429 rate limit; retry-after: 40"}}, Transient, 40 * time.Second},
		{"fatal", protocol.AgentResult{Status: protocol.AgentFailed,
			Run: &protocol.AgentRun{Adapter: "gemini", Class: "fatal", Error: "authentication failed (exit 41)"}}, Fatal, 0},
		{"no class: the patterns", protocol.AgentResult{Status: protocol.AgentFailed, Stderr: "429 too many requests",
			Run: &protocol.AgentRun{Adapter: "command", Class: ""}}, Transient, 0},
		{"the command adapter: the patterns", protocol.AgentResult{Status: protocol.AgentFailed, Stderr: "rate limit exceeded",
			Run: &protocol.AgentRun{Adapter: "command", Class: "agent", Error: "exit code 1"}}, Transient, 0},
		{"no run: the patterns", protocol.AgentResult{Status: protocol.AgentFailed, Stderr: "Invalid API key"}, Fatal, 0},
		{"a timeout is fixable whatever the run says", protocol.AgentResult{Status: protocol.AgentTimeout,
			Run: &protocol.AgentRun{Adapter: "codex", Class: "transient"}}, Fixable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, _, after := classifyAgent(&tt.r)
			if class != tt.want || after != tt.after {
				t.Errorf("class %s after %s, want %s after %s", class, after, tt.want, tt.after)
			}
		})
	}
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	if name == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
