// Command claude is a scripted stand-in for Claude Code, for tests only:
// built under the name claude, it takes the headless flags the
// claude-code adapter passes (and more of the real ones), carries out the
// prompt's directives (package scriptagent) and prints Claude Code's
// output: stream-json messages, the json result (an array with
// --verbose), or the text. An @api-error ends the run as the real CLI
// reports a failed API call (subtype "success", is_error, the HTTP status
// found in the text); --max-turns below the script's turns ends it with
// error_max_turns.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/worker/internal/scriptagent"
	"github.com/supervisorhq/supervisor/worker/internal/testcli"
)

var permissionModes = []string{"default", "manual", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	f := testcli.Flags{
		Bool: map[string]string{"-p": "print", "--print": "print", "--verbose": "verbose",
			"--dangerously-skip-permissions": "skip", "--bare": "bare", "--include-partial-messages": "partial",
			"--no-session-persistence": "nopersist", "-c": "continue", "--continue": "continue"},
		Value: map[string]string{"--output-format": "output-format", "--input-format": "input-format",
			"--permission-mode": "permission-mode", "--model": "model", "--fallback-model": "fallback-model",
			"--max-turns": "max-turns", "--max-budget-usd": "max-budget-usd", "--allowedTools": "allowed",
			"--allowed-tools": "allowed", "--disallowedTools": "disallowed", "--append-system-prompt": "append-system-prompt",
			"--system-prompt": "system-prompt", "--session-id": "session-id", "-r": "resume", "--resume": "resume",
			"--settings": "settings", "--add-dir": "add-dir"},
	}
	if err := f.Parse(args); err != nil {
		if u, ok := err.(*testcli.ErrUnknown); ok {
			fmt.Fprintf(stderr, "error: unknown option '%s'\n", u.Arg)
		} else {
			fmt.Fprintf(stderr, "error: %v\n", err)
		}
		return 1
	}
	format := f.Get("output-format")
	if format == "" {
		format = "text"
	}
	switch format {
	case "text", "json", "stream-json":
	default:
		fmt.Fprintf(stderr, "error: option '--output-format <format>' argument '%s' is invalid. Allowed choices are text, json, stream-json.\n", format)
		return 1
	}
	if format == "stream-json" && f.Has("print") && !f.Has("verbose") {
		fmt.Fprintln(stderr, "Error: When using --print, --output-format=stream-json requires --verbose")
		return 1
	}
	if m := f.Get("permission-mode"); m != "" && !contains(permissionModes, m) {
		fmt.Fprintf(stderr, "error: option '--permission-mode <mode>' argument '%s' is invalid. Allowed choices are %s.\n",
			m, strings.Join(permissionModes, ", "))
		return 1
	}
	maxTurns := 0
	if v := f.Get("max-turns"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "error: --max-turns must be a positive integer, got '%s'\n", v)
			return 1
		}
		maxTurns = n
	}
	if !f.Has("print") {
		fmt.Fprintln(stderr, "error: this stand-in runs headless only (-p)")
		return 1
	}
	prompt := strings.Join(f.Args, " ")
	in, err := testcli.ReadStdin()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if in != "" {
		if prompt != "" {
			prompt = in + "\n\n" + prompt
		} else {
			prompt = in
		}
	}
	if strings.TrimSpace(prompt) == "" {
		fmt.Fprintln(stderr, "Error: Input must be provided either through stdin or as a prompt argument when using --print")
		return 1
	}
	model := f.Get("model")
	if model == "" {
		model = "claude-scripted"
	}
	mode := f.Get("permission-mode")
	if mode == "" {
		mode = "default"
	}
	s := &session{id: f.Get("session-id"), model: model, mode: mode, format: format, verbose: f.Has("verbose"),
		out: stdout, start: time.Now()}
	if s.id == "" {
		s.id = testcli.UUID()
	}
	return s.run(prompt, maxTurns)
}

type session struct {
	id, model, mode, format string
	verbose                 bool
	out                     io.Writer
	start                   time.Time
	msgs                    []any // every message, for json with --verbose
	in, outTok              int64
}

// emit records a message and prints it in stream-json.
func (s *session) emit(m any) {
	s.msgs = append(s.msgs, m)
	if s.format == "stream-json" {
		testcli.WriteLine(s.out, m)
	}
}

func (s *session) run(prompt string, maxTurns int) int {
	cwd, _ := os.Getwd()
	s.emit(initMsg{Type: "system", Subtype: "init", Cwd: cwd, SessionID: s.id,
		Tools:      []string{"Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "TodoWrite", "WebFetch", "WebSearch"},
		MCPServers: []any{}, Model: s.model, PermissionMode: s.mode, SlashCommands: []string{}, APIKeySource: "none",
		ClaudeCodeVersion: "0.0.0-scripted", OutputStyle: "default", Agents: []string{}, Skills: []string{}, Plugins: []any{},
		UUID: testcli.UUID()})
	var printed strings.Builder
	ran := scriptagent.Execute(prompt, &printed)
	s.in = testcli.Tokens(prompt)
	turns := 1
	if printed.Len() > 0 {
		s.assistant([]any{textBlock{Type: "text", Text: strings.TrimRight(printed.String(), "\n")}}, "end_turn")
	}
	for _, c := range ran.Changes {
		if maxTurns > 0 && turns >= maxTurns {
			// The turn after the limit is not started.
			turns++
			return s.result(resultMsg{Subtype: "error_max_turns", IsError: true, NumTurns: turns, StopReason: "tool_use",
				Errors: []string{fmt.Sprintf("Reached maximum number of turns (%d)", maxTurns)}, TerminalReason: "max_turns"}, 1)
		}
		turns++
		id := "toolu_" + strings.ReplaceAll(testcli.UUID(), "-", "")[:24]
		abs, _ := filepath.Abs(c.Path)
		var use toolUse
		switch c.Op {
		case "delete":
			use = toolUse{Type: "tool_use", ID: id, Name: "Bash", Input: map[string]any{"command": "rm " + c.Path}}
		default:
			body, _ := os.ReadFile(c.Path)
			use = toolUse{Type: "tool_use", ID: id, Name: "Write", Input: map[string]any{"file_path": abs, "content": string(body)}}
		}
		s.assistant([]any{use}, "tool_use")
		s.emit(userMsg{Type: "user", Message: userContent{Role: "user", Content: []toolResult{{ToolUseID: id, Type: "tool_result",
			Content: "The file " + abs + " has been updated successfully."}}}, SessionID: s.id, UUID: testcli.UUID()})
	}
	if ran.APIError {
		status := testcli.HTTPStatus(ran.Summary)
		kind := "unknown"
		switch {
		case status == 429:
			kind = "rate_limit"
		case status == 401 || status == 403:
			kind = "authentication_failed"
		case status >= 500:
			kind = "server_error"
		}
		s.emit(synthetic{Type: "assistant", Message: syntheticMessage{ID: testcli.UUID(), Model: "<synthetic>", Role: "assistant",
			StopReason: "stop_sequence", StopSequence: "", Type: "message", Usage: syntheticUsage{},
			Content: []any{textBlock{Type: "text", Text: ran.Summary}}}, SessionID: s.id, UUID: testcli.UUID(),
			Error: kind, IsAPIErrorMessage: true, RequestID: "req_scripted"})
		var st *int
		if status != 0 {
			st = &status
		}
		text := ran.Summary
		return s.result(resultMsg{Subtype: "success", IsError: true, APIErrorStatus: st, NumTurns: turns, Result: &text,
			StopReason: "stop_sequence", TerminalReason: "api_error"}, 1)
	}
	if ran.Code != 0 {
		return s.result(resultMsg{Subtype: "error_during_execution", IsError: true, NumTurns: turns, StopReason: "end_turn",
			Errors: []string{ran.Summary}, TerminalReason: "completed"}, ran.Code)
	}
	s.assistant([]any{textBlock{Type: "text", Text: ran.Summary}}, "end_turn")
	text := ran.Summary
	return s.result(resultMsg{Subtype: "success", NumTurns: turns, Result: &text, StopReason: "end_turn",
		TerminalReason: "completed"}, 0)
}

func (s *session) assistant(content []any, stop string) {
	out := testcli.Tokens(fmt.Sprint(content))
	s.outTok += out
	s.emit(assistantMsg{Type: "assistant", Message: message{ID: "msg_" + strings.ReplaceAll(testcli.UUID(), "-", "")[:24],
		Type: "message", Role: "assistant", Model: s.model, Content: content, StopReason: stop,
		Usage: msgUsage{InputTokens: s.in, OutputTokens: out, ServiceTier: "standard"}}, SessionID: s.id, UUID: testcli.UUID()})
}

// result prints the final message (and, in json, the output) and returns
// the exit code.
func (s *session) result(r resultMsg, code int) int {
	r.Type, r.SessionID, r.UUID = "result", s.id, testcli.UUID()
	r.DurationMS = time.Since(s.start).Milliseconds()
	r.Usage = zeroUsage()
	r.ModelUsage = map[string]modelUsage{}
	r.PermissionDenials = []any{}
	if !r.IsError || r.APIErrorStatus == nil {
		r.Usage.InputTokens, r.Usage.OutputTokens = s.in, s.outTok
		// An illustrative cost: $3 and $15 per million input and output
		// tokens.
		r.TotalCostUSD = float64(s.in*3+s.outTok*15) / 1e6
		r.ModelUsage[s.model] = modelUsage{InputTokens: s.in, OutputTokens: s.outTok, ContextWindow: 200000, MaxOutputTokens: 64000,
			CostUSD: r.TotalCostUSD}
		r.DurationAPIMS = r.DurationMS
	}
	s.emit(r)
	switch s.format {
	case "json":
		if s.verbose {
			testcli.WriteLine(s.out, s.msgs)
		} else {
			testcli.WriteLine(s.out, r)
		}
	case "text":
		switch {
		case r.Result != nil:
			fmt.Fprintln(s.out, *r.Result)
		default:
			fmt.Fprintln(s.out, strings.Join(r.Errors, "\n"))
		}
	}
	return code
}

func zeroUsage() usage {
	return usage{ServiceTier: "standard"}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// The message types, their fields in the order Claude Code prints them.
type initMsg struct {
	Type              string   `json:"type"`
	Subtype           string   `json:"subtype"`
	Cwd               string   `json:"cwd"`
	SessionID         string   `json:"session_id"`
	Tools             []string `json:"tools"`
	MCPServers        []any    `json:"mcp_servers"`
	Model             string   `json:"model"`
	PermissionMode    string   `json:"permissionMode"`
	SlashCommands     []string `json:"slash_commands"`
	APIKeySource      string   `json:"apiKeySource"`
	ClaudeCodeVersion string   `json:"claude_code_version"`
	OutputStyle       string   `json:"output_style"`
	Agents            []string `json:"agents"`
	Skills            []string `json:"skills"`
	Plugins           []any    `json:"plugins"`
	UUID              string   `json:"uuid"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolUse struct {
	Type  string         `json:"type"`
	ID    string         `json:"id"`
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

type msgUsage struct {
	InputTokens              int64  `json:"input_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	ServiceTier              string `json:"service_tier"`
}

type message struct {
	ID           string   `json:"id"`
	Type         string   `json:"type"`
	Role         string   `json:"role"`
	Model        string   `json:"model"`
	Content      []any    `json:"content"`
	StopReason   string   `json:"stop_reason"`
	StopSequence *string  `json:"stop_sequence"`
	Usage        msgUsage `json:"usage"`
}

type assistantMsg struct {
	Type            string  `json:"type"`
	Message         message `json:"message"`
	ParentToolUseID *string `json:"parent_tool_use_id"`
	SessionID       string  `json:"session_id"`
	UUID            string  `json:"uuid"`
}

type toolResult struct {
	ToolUseID string `json:"tool_use_id"`
	Type      string `json:"type"`
	Content   string `json:"content"`
}

type userContent struct {
	Role    string       `json:"role"`
	Content []toolResult `json:"content"`
}

type userMsg struct {
	Type            string      `json:"type"`
	Message         userContent `json:"message"`
	ParentToolUseID *string     `json:"parent_tool_use_id"`
	SessionID       string      `json:"session_id"`
	UUID            string      `json:"uuid"`
}

type syntheticMessage struct {
	ID           string         `json:"id"`
	Model        string         `json:"model"`
	Role         string         `json:"role"`
	StopReason   string         `json:"stop_reason"`
	StopSequence string         `json:"stop_sequence"`
	Type         string         `json:"type"`
	Usage        syntheticUsage `json:"usage"`
	Content      []any          `json:"content"`
}

// syntheticUsage is a synthetic message's (all zero) usage.
type syntheticUsage struct {
	InputTokens              int64         `json:"input_tokens"`
	OutputTokens             int64         `json:"output_tokens"`
	CacheCreationInputTokens int64         `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64         `json:"cache_read_input_tokens"`
	ServerToolUse            serverToolUse `json:"server_tool_use"`
	ServiceTier              *string       `json:"service_tier"`
	CacheCreation            cacheCreation `json:"cache_creation"`
}

type synthetic struct {
	Type              string           `json:"type"`
	Message           syntheticMessage `json:"message"`
	ParentToolUseID   *string          `json:"parent_tool_use_id"`
	SessionID         string           `json:"session_id"`
	UUID              string           `json:"uuid"`
	Error             string           `json:"error"`
	IsAPIErrorMessage bool             `json:"is_api_error_message"`
	RequestID         string           `json:"request_id"`
}

type serverToolUse struct {
	WebSearchRequests int64 `json:"web_search_requests"`
	WebFetchRequests  int64 `json:"web_fetch_requests"`
}

type cacheCreation struct {
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
}

type usage struct {
	InputTokens              int64         `json:"input_tokens"`
	CacheCreationInputTokens int64         `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64         `json:"cache_read_input_tokens"`
	OutputTokens             int64         `json:"output_tokens"`
	ServerToolUse            serverToolUse `json:"server_tool_use"`
	ServiceTier              string        `json:"service_tier"`
	CacheCreation            cacheCreation `json:"cache_creation"`
}

type modelUsage struct {
	InputTokens              int64   `json:"inputTokens"`
	OutputTokens             int64   `json:"outputTokens"`
	CacheReadInputTokens     int64   `json:"cacheReadInputTokens"`
	CacheCreationInputTokens int64   `json:"cacheCreationInputTokens"`
	WebSearchRequests        int64   `json:"webSearchRequests"`
	CostUSD                  float64 `json:"costUSD"`
	ContextWindow            int64   `json:"contextWindow"`
	MaxOutputTokens          int64   `json:"maxOutputTokens"`
}

// resultMsg is the final message; its optional fields are those of the
// success, error and API-error variants.
type resultMsg struct {
	Type              string                `json:"type"`
	Subtype           string                `json:"subtype"`
	IsError           bool                  `json:"is_error"`
	APIErrorStatus    *int                  `json:"api_error_status,omitempty"`
	DurationMS        int64                 `json:"duration_ms"`
	DurationAPIMS     int64                 `json:"duration_api_ms"`
	NumTurns          int                   `json:"num_turns"`
	Result            *string               `json:"result,omitempty"`
	StopReason        string                `json:"stop_reason"`
	SessionID         string                `json:"session_id"`
	TotalCostUSD      float64               `json:"total_cost_usd"`
	Usage             usage                 `json:"usage"`
	ModelUsage        map[string]modelUsage `json:"modelUsage"`
	PermissionDenials []any                 `json:"permission_denials"`
	Errors            []string              `json:"errors,omitempty"`
	TerminalReason    string                `json:"terminal_reason"`
	UUID              string                `json:"uuid"`
}
