package agentcli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture is one constructed output of a CLI (testdata/README.md) and what
// its parse must give.
type fixture struct {
	name     string
	adapter  string
	format   string // Settings.OutputFormat
	stdout   string // file in testdata, "" for none
	stderr   string // file in testdata, "" for none
	exit     int
	success  bool
	class    Class
	text     string // contained in Result.Text
	errText  string // contained in Result.Error
	session  string
	turns    int
	duration time.Duration
	model    string
	usage    Usage
	cost     float64
	costSeen bool
	bad      int
	missing  []string
	warning  string // contained in one of Result.Warnings
}

var claudeSession = "3f2c9a1e-7b4d-4e2a-9c1f-0d8e6b5a4c3b"

var fixtures = []fixture{
	// Claude Code (WORK-08): the result message decides, is_error first.
	{name: "claude stream success", adapter: "claude-code", stdout: "claude_stream_success_edit.jsonl",
		success: true, text: `greet.py now prints "hello"`, session: claudeSession, turns: 2, duration: 9120 * time.Millisecond,
		model: "claude-sonnet-4-5-20250929", usage: Usage{InputTokens: 18 + 5210 + 5350, CachedInputTokens: 5210, CacheCreationTokens: 5350, OutputTokens: 107},
		cost: 0.0241, costSeen: true},
	{name: "claude json success", adapter: "claude-code", format: "json", stdout: "claude_json_success.json",
		success: true, text: `greet.py now prints "hello"`, session: claudeSession, turns: 2, duration: 9120 * time.Millisecond,
		model: "claude-sonnet-4-5-20250929", usage: Usage{InputTokens: 10578, CachedInputTokens: 5210, CacheCreationTokens: 5350, OutputTokens: 107},
		cost: 0.0241, costSeen: true},
	{name: "claude json array (verbose on)", adapter: "claude-code", format: "json", stdout: "claude_json_array_success.json",
		success: true, text: `greet.py now prints "hello"`, session: claudeSession, turns: 2, duration: 9120 * time.Millisecond,
		model: "claude-sonnet-4-5-20250929", usage: Usage{InputTokens: 10578, CachedInputTokens: 5210, CacheCreationTokens: 5350, OutputTokens: 107},
		cost: 0.0241, costSeen: true},
	{name: "claude max turns", adapter: "claude-code", format: "json", stdout: "claude_json_max_turns.json", exit: 1,
		class: Agent, errText: "error_max_turns: Reached maximum number of turns (3)", session: "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
		turns: 4, duration: 15872 * time.Millisecond, model: "claude-sonnet-4-5-20250929",
		usage: Usage{InputTokens: 41 + 15630 + 7020, CachedInputTokens: 15630, CacheCreationTokens: 7020, OutputTokens: 512},
		cost:  0.0612, costSeen: true},
	{name: "claude rate limited, subtype success, exit 0", adapter: "claude-code", format: "json", stdout: "claude_json_rate_limited.json",
		class: Transient, errText: "API Error: Rate limit reached", session: "b2c3d4e5-f6a7-4b8c-9d0e-1f2a3b4c5d6e", turns: 1,
		duration: 1204 * time.Millisecond, costSeen: true, missing: []string{MissingModel}},
	{name: "claude auth error", adapter: "claude-code", stdout: "claude_stream_auth_error.jsonl", exit: 1,
		class: Fatal, errText: "Invalid API key", session: "c4d5e6f7-a8b9-4c0d-8e1f-2a3b4c5d6e7f", turns: 1,
		duration: 412 * time.Millisecond, model: "claude-sonnet-4-5-20250929", costSeen: true},
	{name: "claude overloaded", adapter: "claude-code", stdout: "claude_stream_overloaded.jsonl", exit: 1,
		class: Transient, errText: "Repeated 529 Overloaded", session: "d5e6f7a8-b9c0-4d1e-8f2a-3b4c5d6e7f8a", turns: 1,
		duration: 48210 * time.Millisecond, model: "claude-sonnet-4-5-20250929", costSeen: true, warning: "API retry 1 (status 529)"},
	{name: "claude truncated", adapter: "claude-code", stdout: "claude_stream_truncated.jsonl",
		class: Agent, errText: "no Claude Code's result message", text: "I'll fix the greeting", session: claudeSession,
		model:   "claude-sonnet-4-5-20250929",
		missing: []string{MissingTurns, MissingDuration, MissingUsage, MissingCost}},
	{name: "claude malformed lines and unknown types", adapter: "claude-code", stdout: "claude_stream_malformed.jsonl",
		success: true, text: `greet.py now prints "hello"`, session: claudeSession, turns: 2, duration: 9120 * time.Millisecond,
		model: "claude-sonnet-4-5-20250929", usage: Usage{InputTokens: 10578, CachedInputTokens: 5210, CacheCreationTokens: 5350, OutputTokens: 107},
		cost: 0.0241, costSeen: true, bad: 3},
	{name: "claude rejects its arguments", adapter: "claude-code", exit: 1, stderr: "claude_usage_error.stderr",
		class: Fatal, errText: "requires --verbose",
		missing: []string{MissingSession, MissingTurns, MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},

	// Codex (WORK-07): turn.completed or turn.failed decides, not the exit code.
	{name: "codex success", adapter: "codex", stdout: "codex_success_edit.jsonl", stderr: "codex_stdin_notice.stderr",
		success: true, text: "Fixed the typo in `greet.py`", session: "0199a213-81c0-7800-8aa1-bbab2a035a53", turns: 1,
		usage:   Usage{InputTokens: 24763, CachedInputTokens: 24448, OutputTokens: 122},
		missing: []string{MissingDuration, MissingModel, MissingCost}},
	{name: "codex turn failed, rate limit", adapter: "codex", stdout: "codex_turn_failed_ratelimit.jsonl", exit: 1,
		class: Transient, errText: "429 Too Many Requests", session: "0199a4c2-5e10-7a31-9b0f-3c2d1e0f9a8b", turns: 1,
		missing: []string{MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}, warning: "Reconnecting... 1/5"},
	{name: "codex turn failed, exit 0 still fails", adapter: "codex", stdout: "codex_turn_failed_ratelimit.jsonl", exit: 0,
		class: Transient, errText: "turn failed", session: "0199a4c2-5e10-7a31-9b0f-3c2d1e0f9a8b", turns: 1,
		missing: []string{MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},
	{name: "codex turn failed, unauthorized", adapter: "codex", stdout: "codex_turn_failed_auth.jsonl", exit: 1,
		class: Fatal, errText: "401 Unauthorized", session: "0199a5d3-6f21-7b42-8c1a-4d3e2f1a0b9c", turns: 1,
		missing: []string{MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},
	{name: "codex turn failed, high demand", adapter: "codex", stdout: "codex_turn_failed_overloaded.jsonl", exit: 1,
		class: Transient, errText: "high demand", session: "0199a6e4-7032-7c53-9d2b-5e4f3a2b1c0d", turns: 1,
		missing: []string{MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},
	{name: "codex truncated (interrupted)", adapter: "codex", stdout: "codex_truncated.jsonl", exit: 1,
		class: Agent, errText: "no turn.completed or turn.failed", session: "0199a213-81c0-7800-8aa1-bbab2a035a53", turns: 1,
		missing: []string{MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},
	{name: "codex malformed lines and unknown events", adapter: "codex", stdout: "codex_malformed.jsonl",
		success: true, text: "Fixed the typo in `greet.py`", session: "0199a213-81c0-7800-8aa1-bbab2a035a53", turns: 1,
		usage: Usage{InputTokens: 24763, CachedInputTokens: 24448, OutputTokens: 122}, bad: 2,
		missing: []string{MissingDuration, MissingModel, MissingCost}},
	{name: "codex usage error (clap, exit 2)", adapter: "codex", stderr: "codex_usage_error.stderr", exit: 2,
		class: Fatal, errText: "unexpected argument",
		missing: []string{MissingSession, MissingTurns, MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},
	{name: "codex outside a trusted directory", adapter: "codex", stderr: "codex_not_trusted.stderr", exit: 1,
		class: Fatal, errText: "Not inside a trusted directory",
		missing: []string{MissingSession, MissingTurns, MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},

	// Gemini CLI: the result event, its error's type, then the exit code.
	{name: "gemini stream success", adapter: "gemini", stdout: "gemini_stream_success_edit.jsonl",
		success: true, text: `Done: greet.py now prints "hello".`, session: "6c1f3b2a-9d4e-4f7a-8b0c-2e5d7a9f1c3b",
		duration: 4050 * time.Millisecond, model: "gemini-2.5-pro", usage: Usage{InputTokens: 10640, CachedInputTokens: 5120, OutputTokens: 96},
		missing: []string{MissingTurns, MissingCost}},
	{name: "gemini json success", adapter: "gemini", format: "json", stdout: "gemini_json_success.json",
		success: true, text: `Done: greet.py now prints "hello".`, session: "6c1f3b2a-9d4e-4f7a-8b0c-2e5d7a9f1c3b",
		model: "gemini-2.5-pro", usage: Usage{InputTokens: 10640, CachedInputTokens: 5120, OutputTokens: 96},
		missing: []string{MissingTurns, MissingDuration, MissingCost}},
	{name: "gemini json auth error on stderr", adapter: "gemini", format: "json", stderr: "gemini_json_auth_error.stderr", exit: 41,
		class: Fatal, errText: "Please set an Auth method", session: "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f6a",
		missing: []string{MissingTurns, MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},
	{name: "gemini stream auth error (no JSON)", adapter: "gemini", stderr: "gemini_stream_auth_error.stderr", exit: 41,
		class: Fatal, errText: "authentication error",
		missing: []string{MissingSession, MissingTurns, MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}},
	{name: "gemini turn limit", adapter: "gemini", stdout: "gemini_stream_turn_limit.jsonl", exit: 53,
		class: Agent, errText: "Reached max session turns", session: "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d",
		model: "gemini-2.5-pro", usage: Usage{InputTokens: 47002, CachedInputTokens: 30100, OutputTokens: 1209},
		missing: []string{MissingTurns, MissingDuration, MissingCost, MissingText}},
	{name: "gemini rate limit (status 429 exits 173)", adapter: "gemini", stdout: "gemini_stream_rate_limit.jsonl", exit: 173,
		class: Transient, errText: "RESOURCE_EXHAUSTED", session: "7b8c9d0e-1f2a-4b3c-8d4e-5f6a7b8c9d0e", model: "gemini-2.5-pro",
		missing: []string{MissingTurns, MissingDuration, MissingCost, MissingText}},
	{name: "gemini truncated", adapter: "gemini", stdout: "gemini_stream_truncated.jsonl",
		class: Agent, errText: "no Gemini CLI result event", text: "I'll fix the typo", session: "6c1f3b2a-9d4e-4f7a-8b0c-2e5d7a9f1c3b",
		model: "gemini-2.5-pro", missing: []string{MissingTurns, MissingDuration, MissingUsage, MissingCost}},
	{name: "gemini malformed lines and unknown events", adapter: "gemini", stdout: "gemini_stream_malformed.jsonl",
		success: true, text: `Done: greet.py now prints "hello".`, session: "6c1f3b2a-9d4e-4f7a-8b0c-2e5d7a9f1c3b",
		duration: 4050 * time.Millisecond, model: "gemini-2.5-pro", usage: Usage{InputTokens: 10640, CachedInputTokens: 5120, OutputTokens: 96},
		bad: 2, missing: []string{MissingTurns, MissingCost}, warning: "Loop detected"},
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	if name == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseFixtures parses each CLI's constructed outputs (success, max
// turns, failed turns, auth errors, rate limits, overload, malformed and
// truncated streams) and checks every field of the Result (WORK-07,
// WORK-08, ARCH-07).
func TestParseFixtures(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			a, ok := Lookup(f.adapter)
			if !ok {
				t.Fatalf("no adapter %q", f.adapter)
			}
			var events []Event
			res, err := Parse(a.NewParser(Settings{OutputFormat: f.format}), bytes.NewReader(readFixture(t, f.stdout)),
				f.exit, readFixture(t, f.stderr), func(e Event) { events = append(events, e) })
			if err != nil {
				t.Fatal(err)
			}
			if res.Adapter != f.adapter || res.ExitCode != f.exit {
				t.Errorf("adapter, exit = %q, %d", res.Adapter, res.ExitCode)
			}
			if res.Success != f.success || res.Class != f.class {
				t.Errorf("success, class = %v, %q; want %v, %q (error %q)", res.Success, res.Class, f.success, f.class, res.Error)
			}
			if f.success != (res.Error == "") {
				t.Errorf("error = %q on success=%v", res.Error, res.Success)
			}
			if !strings.Contains(res.Error, f.errText) {
				t.Errorf("error = %q, want it to contain %q", res.Error, f.errText)
			}
			if !strings.Contains(res.Text, f.text) {
				t.Errorf("text = %q, want %q", res.Text, f.text)
			}
			if res.SessionID != f.session || res.Turns != f.turns || res.Duration != f.duration || res.Model != f.model {
				t.Errorf("session, turns, duration, model = %q, %d, %v, %q; want %q, %d, %v, %q",
					res.SessionID, res.Turns, res.Duration, res.Model, f.session, f.turns, f.duration, f.model)
			}
			if res.Usage != f.usage {
				t.Errorf("usage = %+v, want %+v", res.Usage, f.usage)
			}
			if res.CostUSD != f.cost || res.CostReported != f.costSeen {
				t.Errorf("cost = %v (reported %v), want %v (%v)", res.CostUSD, res.CostReported, f.cost, f.costSeen)
			}
			if res.Malformed != f.bad {
				t.Errorf("malformed = %d, want %d", res.Malformed, f.bad)
			}
			if !slices.Equal(res.Missing, f.missing) {
				t.Errorf("missing = %q, want %q", res.Missing, f.missing)
			}
			if f.warning != "" && !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, f.warning) }) {
				t.Errorf("warnings = %q, want one containing %q", res.Warnings, f.warning)
			}
			if f.format == "" && f.stdout != "" && len(events) == 0 {
				t.Errorf("no live events from a streamed output")
			}
		})
	}
}
