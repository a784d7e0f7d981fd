// Command gemini is a scripted stand-in for Gemini CLI, for tests only:
// built under the name gemini, it takes the headless flags the gemini
// adapter passes (and more of the real ones), rejects unknown ones,
// reads -p's prompt after a piped standard input as Gemini CLI does,
// carries out the prompt's directives (package scriptagent) and prints
// Gemini CLI's stream-json events or its json object (on stdout, or its
// error object on stderr when the run fails). An @api-error ends the run
// as an API error does: exit code the HTTP status found in the text
// modulo 256 (1 without one); @exit CODE exits with CODE and the error
// type Gemini CLI gives that code.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/worker/internal/scriptagent"
	"github.com/supervisorhq/supervisor/worker/internal/testcli"
)

var approvalModes = []string{"default", "auto_edit", "yolo", "plan"}

// exitTypes are the error types of Gemini CLI's exit codes.
var exitTypes = map[int]string{41: "FatalAuthenticationError", 42: "FatalInputError", 44: "FatalSandboxError",
	52: "FatalConfigError", 53: "FatalTurnLimitedError", 54: "FatalToolExecutionError", 130: "FatalCancellationError"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	f := testcli.Flags{
		Bool: map[string]string{"-y": "yolo", "--yolo": "yolo", "-s": "sandbox", "--sandbox": "sandbox",
			"--skip-trust": "skip-trust", "-d": "debug", "--debug": "debug", "--raw-output": "raw-output",
			"--accept-raw-output-risk": "accept-raw-output-risk"},
		Value: map[string]string{"-p": "prompt", "--prompt": "prompt", "-o": "output-format", "--output-format": "output-format",
			"-m": "model", "--model": "model", "--approval-mode": "approval-mode", "--include-directories": "include-directories",
			"-r": "resume", "--resume": "resume", "--session-id": "session-id", "--allowed-tools": "allowed-tools",
			"--policy": "policy"},
	}
	if err := f.Parse(args); err != nil {
		if u, ok := err.(*testcli.ErrUnknown); ok {
			fmt.Fprintf(stderr, "Unknown argument: %s\n", strings.TrimLeft(u.Arg, "-"))
		} else {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	if f.Has("yolo") && f.Get("approval-mode") != "" {
		fmt.Fprintln(stderr, "Cannot use both --yolo (-y) and --approval-mode together. Use --approval-mode=yolo instead.")
		return 1
	}
	if m := f.Get("approval-mode"); m != "" && !contains(approvalModes, m) {
		fmt.Fprintf(stderr, "Invalid values:\n  Argument: approval-mode, Given: \"%s\", Choices: %s\n", m, strings.Join(approvalModes, ", "))
		return 1
	}
	format := f.Get("output-format")
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" && format != "stream-json" {
		fmt.Fprintf(stderr, "Invalid values:\n  Argument: output-format, Given: \"%s\", Choices: \"text\", \"json\", \"stream-json\"\n", format)
		return 1
	}
	if f.Has("prompt") && len(f.Args) > 0 {
		fmt.Fprintln(stderr, "Cannot use both a positional prompt and the --prompt (-p) flag together")
		return 1
	}
	prompt := f.Get("prompt")
	if prompt == "" {
		prompt = strings.Join(f.Args, " ")
	}
	in, err := testcli.ReadStdin()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if in != "" {
		prompt = in + "\n\n" + prompt
	}
	if strings.TrimSpace(prompt) == "" {
		fmt.Fprintln(stderr, "No input provided via stdin. Input can be provided by piping data into gemini or using the --prompt option.")
		return 42
	}
	model := f.Get("model")
	if model == "" {
		model = "gemini-scripted"
	}
	r := &runner{format: format, model: model, session: f.Get("session-id"), out: stdout, errOut: stderr, start: time.Now()}
	if r.session == "" {
		r.session = testcli.UUID()
	}
	return r.run(prompt)
}

type runner struct {
	format, model, session string
	out, errOut            io.Writer
	start                  time.Time
}

func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }

func (r *runner) ev(v any) {
	if r.format == "stream-json" {
		testcli.WriteLine(r.out, v)
	}
}

func (r *runner) run(prompt string) int {
	r.ev(initEvent{Type: "init", Timestamp: now(), SessionID: r.session, Model: r.model})
	r.ev(messageEvent{Type: "message", Timestamp: now(), Role: "user", Content: prompt})
	var printed strings.Builder
	ran := scriptagent.Execute(prompt, &printed)
	var response strings.Builder
	say := func(text string) {
		response.WriteString(text)
		r.ev(messageEvent{Type: "message", Timestamp: now(), Role: "assistant", Content: text, Delta: true})
	}
	if printed.Len() > 0 {
		say(printed.String())
	}
	tools, used := 0, map[string]byName{}
	for _, c := range ran.Changes {
		tools++
		abs, _ := filepath.Abs(c.Path)
		id := fmt.Sprintf("%s-%d-%s", "write_file", time.Now().UnixMilli(), testcli.UUID()[:6])
		params := map[string]any{"file_path": abs}
		name := "write_file"
		if c.Op == "delete" {
			name, id = "run_shell_command", "run_shell_command"+id[len("write_file"):]
			params = map[string]any{"command": "rm " + c.Path}
		} else {
			body, _ := os.ReadFile(c.Path)
			params["content"] = string(body)
		}
		b := used[name]
		b.Count, b.Success, b.Decisions.AutoAccept = b.Count+1, b.Success+1, b.Decisions.AutoAccept+1
		used[name] = b
		r.ev(toolUseEvent{Type: "tool_use", Timestamp: now(), ToolName: name, ToolID: id, Parameters: params})
		r.ev(toolResultEvent{Type: "tool_result", Timestamp: now(), ToolID: id, Status: "success"})
	}
	in, out := testcli.Tokens(prompt), testcli.Tokens(ran.Summary)
	if ran.APIError || ran.Code != 0 {
		code, e := ran.Code, &errorObj{Type: "Error", Message: ran.Summary}
		if ran.APIError {
			code, e.Type, e.Message = 1, "unknown", "[API Error: "+ran.Summary+"]"
			if s := testcli.HTTPStatus(ran.Summary); s != 0 {
				code, e.Code = s%256, s
			}
		} else if t, ok := exitTypes[code]; ok {
			e.Type, e.Code = t, code
		}
		r.ev(resultEvent{Type: "result", Timestamp: now(), Status: "error", Error: &errorMsg{Type: e.Type, Message: e.Message},
			Stats: r.streamStats(in, 0, 0, tools)})
		switch r.format {
		case "json":
			testcli.WriteIndented(r.errOut, jsonError{SessionID: r.session, Error: *e})
		case "text":
			fmt.Fprintln(r.errOut, e.Message)
		}
		return code
	}
	say(ran.Summary)
	r.ev(resultEvent{Type: "result", Timestamp: now(), Status: "success", Stats: r.streamStats(in, out, time.Since(r.start).Milliseconds(), tools)})
	switch r.format {
	case "json":
		tok := tokens{Input: in, Prompt: in, Candidates: out, Total: in + out}
		testcli.WriteIndented(r.out, jsonOutput{SessionID: r.session, Response: response.String(), Stats: sessionStats{
			Models: map[string]modelStats{r.model: {API: apiStats{TotalRequests: 1, ErrorsByType: map[string]int{}}, Tokens: tok,
				Roles: map[string]roleStats{"main": {TotalRequests: 1, Tokens: tok}}}},
			Tools: toolStats{TotalCalls: tools, TotalSuccess: tools, TotalDecisions: decisions{AutoAccept: tools},
				ByName: used},
		}})
	case "text":
		fmt.Fprintln(r.out, response.String())
	}
	return 0
}

func (r *runner) streamStats(in, out, ms int64, tools int) *streamStats {
	t := modelTokens{TotalTokens: in + out, InputTokens: in, OutputTokens: out, Input: in}
	return &streamStats{TotalTokens: in + out, InputTokens: in, OutputTokens: out, Input: in, DurationMS: ms, ToolCalls: tools,
		Models: map[string]modelTokens{r.model: t}}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// The events and objects, their fields in the order Gemini CLI prints them.
type initEvent struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
}

type messageEvent struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Role      string `json:"role"`
	Content   string `json:"content"`
	Delta     bool   `json:"delta,omitempty"`
}

type toolUseEvent struct {
	Type       string         `json:"type"`
	Timestamp  string         `json:"timestamp"`
	ToolName   string         `json:"tool_name"`
	ToolID     string         `json:"tool_id"`
	Parameters map[string]any `json:"parameters"`
}

type toolResultEvent struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	ToolID    string `json:"tool_id"`
	Status    string `json:"status"`
}

type errorMsg struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type modelTokens struct {
	TotalTokens  int64 `json:"total_tokens"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Cached       int64 `json:"cached"`
	Input        int64 `json:"input"`
}

type streamStats struct {
	TotalTokens  int64                  `json:"total_tokens"`
	InputTokens  int64                  `json:"input_tokens"`
	OutputTokens int64                  `json:"output_tokens"`
	Cached       int64                  `json:"cached"`
	Input        int64                  `json:"input"`
	DurationMS   int64                  `json:"duration_ms"`
	ToolCalls    int                    `json:"tool_calls"`
	Models       map[string]modelTokens `json:"models"`
}

type resultEvent struct {
	Type      string       `json:"type"`
	Timestamp string       `json:"timestamp"`
	Status    string       `json:"status"`
	Error     *errorMsg    `json:"error,omitempty"`
	Stats     *streamStats `json:"stats,omitempty"`
}

type errorObj struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    any    `json:"code,omitempty"`
}

type jsonError struct {
	SessionID string   `json:"session_id"`
	Error     errorObj `json:"error"`
}

type apiStats struct {
	TotalRequests  int            `json:"totalRequests"`
	TotalErrors    int            `json:"totalErrors"`
	TotalLatencyMs int64          `json:"totalLatencyMs"`
	ErrorsByType   map[string]int `json:"errorsByType"`
}

type tokens struct {
	Input      int64 `json:"input"`
	Prompt     int64 `json:"prompt"`
	Candidates int64 `json:"candidates"`
	Total      int64 `json:"total"`
	Cached     int64 `json:"cached"`
	Thoughts   int64 `json:"thoughts"`
	Tool       int64 `json:"tool"`
}

type roleStats struct {
	TotalRequests  int    `json:"totalRequests"`
	TotalErrors    int    `json:"totalErrors"`
	TotalLatencyMs int64  `json:"totalLatencyMs"`
	Tokens         tokens `json:"tokens"`
}

type modelStats struct {
	API    apiStats             `json:"api"`
	Tokens tokens               `json:"tokens"`
	Roles  map[string]roleStats `json:"roles"`
}

type decisions struct {
	Accept     int `json:"accept"`
	Reject     int `json:"reject"`
	Modify     int `json:"modify"`
	AutoAccept int `json:"auto_accept"`
}

type byName struct {
	Count      int       `json:"count"`
	Success    int       `json:"success"`
	Fail       int       `json:"fail"`
	DurationMs int64     `json:"durationMs"`
	Decisions  decisions `json:"decisions"`
}

type toolStats struct {
	TotalCalls      int               `json:"totalCalls"`
	TotalSuccess    int               `json:"totalSuccess"`
	TotalFail       int               `json:"totalFail"`
	TotalDurationMs int64             `json:"totalDurationMs"`
	TotalDecisions  decisions         `json:"totalDecisions"`
	ByName          map[string]byName `json:"byName"`
}

type fileStats struct {
	TotalLinesAdded   int `json:"totalLinesAdded"`
	TotalLinesRemoved int `json:"totalLinesRemoved"`
}

type sessionStats struct {
	Models map[string]modelStats `json:"models"`
	Tools  toolStats             `json:"tools"`
	Files  fileStats             `json:"files"`
}

type jsonOutput struct {
	SessionID string       `json:"session_id"`
	Response  string       `json:"response"`
	Stats     sessionStats `json:"stats"`
}
