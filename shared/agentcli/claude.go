package agentcli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Claude is the Claude Code adapter: `claude -p --output-format
// stream-json --verbose --permission-mode acceptEdits`, the prompt on
// standard input.
type Claude struct{}

// Name implements Adapter.
func (Claude) Name() string { return "claude-code" }

// claudeDefaultPermission auto-approves file edits: a headless run denies
// any tool that needs approval.
const claudeDefaultPermission = "acceptEdits"

var claudePermissionModes = []string{"default", "manual", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"}

// Invocation implements Adapter. stream-json needs --verbose with -p; json
// does not take it (verbose turns json into an array).
func (Claude) Invocation(prompt string, s Settings) (Invocation, error) {
	format := s.OutputFormat
	if format == "" {
		format = "stream-json"
	}
	argv := []string{"claude", "-p", "--output-format", format}
	switch format {
	case "stream-json":
		argv = append(argv, "--verbose")
	case "json":
	default:
		return Invocation{}, fmt.Errorf("claude-code: output format %q is not stream-json or json", s.OutputFormat)
	}
	mode := s.Permission
	if mode == "" {
		mode = claudeDefaultPermission
	}
	if !contains(claudePermissionModes, mode) {
		return Invocation{}, fmt.Errorf("claude-code: permission mode %q is not one of %s", mode, strings.Join(claudePermissionModes, ", "))
	}
	argv = append(argv, "--permission-mode", mode)
	if s.Model != "" {
		argv = append(argv, "--model", s.Model)
	}
	if s.MaxTurns < 0 {
		return Invocation{}, fmt.Errorf("claude-code: max_turns %d is negative", s.MaxTurns)
	}
	if s.MaxTurns > 0 {
		argv = append(argv, "--max-turns", strconv.Itoa(s.MaxTurns))
	}
	argv = append(argv, s.Args...)
	return Invocation{Argv: argv, Stdin: prompt, PromptOnStdin: true}, nil
}

// NewParser implements Adapter.
func (Claude) NewParser(s Settings) Parser {
	return &claudeParser{lines: lines{json: s.OutputFormat == "json"}}
}

// claudeMsg is the union of the stream-json message fields read.
type claudeMsg struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	Message   *struct {
		Model   string `json:"model"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
			Name string `json:"name"`
		} `json:"content"`
	} `json:"message"`
	// Error is an assistant message's API error ("rate_limit", …); in a
	// system/api_retry message it may be an object, kept raw.
	Error json.RawMessage `json:"error"`
	// system/api_retry
	Attempt     int  `json:"attempt"`
	ErrorStatus *int `json:"error_status"`
	// rate_limit_event
	RateLimitInfo *struct {
		Status string `json:"status"`
	} `json:"rate_limit_info"`
	// result
	IsError           *bool                       `json:"is_error"`
	Result            *string                     `json:"result"`
	NumTurns          *int                        `json:"num_turns"`
	DurationMS        *int64                      `json:"duration_ms"`
	TotalCostUSD      *float64                    `json:"total_cost_usd"`
	Usage             *claudeUsage                `json:"usage"`
	ModelUsage        map[string]claudeModelUsage `json:"modelUsage"`
	Errors            []string                    `json:"errors"`
	APIErrorStatus    *int                        `json:"api_error_status"`
	TerminalReason    string                      `json:"terminal_reason"`
	PermissionDenials []struct {
		ToolName string `json:"tool_name"`
	} `json:"permission_denials"`
}

type claudeUsage struct {
	InputTokens         int64 `json:"input_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
}

type claudeModelUsage struct {
	InputTokens         int64 `json:"inputTokens"`
	OutputTokens        int64 `json:"outputTokens"`
	CacheReadTokens     int64 `json:"cacheReadInputTokens"`
	CacheCreationTokens int64 `json:"cacheCreationInputTokens"`
}

type claudeParser struct {
	lines
	session  string
	model    string
	lastText string
	apiError string // the last assistant message's error field
	result   *claudeMsg
}

// Line implements Parser.
func (p *claudeParser) Line(line []byte) []Event {
	var m claudeMsg
	if !p.decode(line, &m, func() string { return "claude message " + m.Type }) {
		return nil
	}
	return p.message(&m)
}

// message takes one decoded message and returns its events.
func (p *claudeParser) message(m *claudeMsg) []Event {
	if m.SessionID != "" {
		p.session = m.SessionID
	}
	switch m.Type {
	case "system":
		switch m.Subtype {
		case "init":
			if m.Model != "" {
				p.model = m.Model
			}
			return []Event{{Kind: "session", Text: fmt.Sprintf("session %s, model %s", m.SessionID, m.Model)}}
		case "api_retry":
			status := "unknown status"
			if m.ErrorStatus != nil {
				status = "status " + strconv.Itoa(*m.ErrorStatus)
			}
			w := fmt.Sprintf("API retry %d (%s)", m.Attempt, status)
			p.warnings = append(p.warnings, w)
			return []Event{{Kind: "error", Text: w}}
		}
	case "rate_limit_event":
		if m.RateLimitInfo != nil && m.RateLimitInfo.Status == "rejected" {
			p.warnings = append(p.warnings, "rate limit rejected")
			return []Event{{Kind: "error", Text: "rate limit rejected"}}
		}
	case "assistant":
		var evs []Event
		if s := rawString(m.Error); s != "" {
			p.apiError = s
			evs = append(evs, Event{Kind: "error", Text: "API error: " + s})
		}
		if m.Message == nil {
			return evs
		}
		if m.Message.Model != "" && m.Message.Model != "<synthetic>" {
			p.model = m.Message.Model
		}
		for _, c := range m.Message.Content {
			switch c.Type {
			case "text":
				if strings.TrimSpace(c.Text) != "" {
					p.lastText = c.Text
					evs = append(evs, Event{Kind: "text", Text: c.Text})
				}
			case "tool_use":
				evs = append(evs, Event{Kind: "tool", Text: c.Name})
			}
		}
		return evs
	case "result":
		p.result = m
		return []Event{{Kind: "result", Text: m.Subtype}}
	}
	return nil
}

// rawString is a JSON string's value, "" for anything else.
func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// decodeJSON reads json mode's output: one result object, or an array of
// every message with the result last (when verbose output is on).
func (p *claudeParser) decodeJSON() {
	out := bytes.TrimSpace(p.buf.Bytes())
	if len(out) == 0 {
		return
	}
	if out[0] == '[' {
		var msgs []json.RawMessage
		if json.Unmarshal(out, &msgs) != nil {
			p.bad++
			return
		}
		for _, raw := range msgs {
			var m claudeMsg
			ok, note := decodeObject(raw, &m)
			if !ok {
				p.bad++
				continue
			}
			if note != "" {
				p.warnings = append(p.warnings, "claude message "+m.Type+": "+note)
			}
			p.message(&m)
		}
		return
	}
	var m claudeMsg
	ok, note := decodeObject(out, &m)
	if !ok {
		p.bad++
		return
	}
	if note != "" {
		p.warnings = append(p.warnings, "claude result: "+note)
	}
	p.message(&m)
}

// claudeFatal and claudeTransient are the texts Claude Code prints for
// failures no retry helps and for passing ones.
var claudePatterns = []classPattern{
	{Fatal, regexp.MustCompile(`(?i)invalid api key|not logged in|oauth token revoked|credit balance is too low|` +
		`you've hit your (weekly )?limit|organization has disabled|prompt is too long|requires --verbose|` +
		`unknown option|authentication_error|permission_error`)},
	{Transient, regexp.MustCompile(`(?i)rate limit|rate_limit_error|rate limited|overloaded|\b529\b|` +
		`experiencing high load|api error: 5\d\d|request rejected \(429\)`)},
}

// Finish implements Parser.
func (p *claudeParser) Finish(exitCode int, stderr []byte) Result {
	if p.json {
		p.decodeJSON()
	}
	res := Result{Adapter: "claude-code", ExitCode: exitCode, SessionID: p.session, Model: p.model,
		Malformed: p.bad, Warnings: p.warnings}
	r := p.result
	if r == nil {
		res.Class, res.Error = classifyMissingResult(claudePatterns, "Claude Code's result message", exitCode, stderr)
		res.Text = p.lastText
		res.Missing = missing(MissingSession, res.SessionID == "", MissingTurns, true, MissingDuration, true,
			MissingModel, res.Model == "", MissingUsage, true, MissingCost, true, MissingText, res.Text == "")
		return res
	}
	var miss []string
	if r.IsError != nil {
		res.Success = !*r.IsError
	} else {
		// No is_error: fall back on the subtype and the exit code.
		res.Success = r.Subtype == "success" && exitCode == 0
		res.Warnings = append(res.Warnings, "result has no is_error")
	}
	if r.Result != nil {
		res.Text = *r.Result
	}
	if r.NumTurns != nil {
		res.Turns = *r.NumTurns
	}
	if r.DurationMS != nil {
		res.Duration = time.Duration(*r.DurationMS) * time.Millisecond
	}
	if r.TotalCostUSD != nil {
		res.CostUSD, res.CostReported = *r.TotalCostUSD, true
	}
	// modelUsage includes subagents and compaction; usage covers the main
	// loop only.
	if len(r.ModelUsage) > 0 {
		names := make([]string, 0, len(r.ModelUsage))
		for name, u := range r.ModelUsage {
			names = append(names, name)
			res.Usage.InputTokens += u.InputTokens + u.CacheReadTokens + u.CacheCreationTokens
			res.Usage.CachedInputTokens += u.CacheReadTokens
			res.Usage.CacheCreationTokens += u.CacheCreationTokens
			res.Usage.OutputTokens += u.OutputTokens
		}
		sort.Strings(names)
		if res.Model == "" {
			res.Model = strings.Join(names, ",")
		}
	} else if r.Usage != nil {
		u := r.Usage
		res.Usage = Usage{InputTokens: u.InputTokens + u.CacheReadTokens + u.CacheCreationTokens,
			CachedInputTokens: u.CacheReadTokens, CacheCreationTokens: u.CacheCreationTokens, OutputTokens: u.OutputTokens}
	}
	for _, d := range r.PermissionDenials {
		res.Warnings = append(res.Warnings, "permission denied: "+d.ToolName)
	}
	miss = missing(MissingSession, res.SessionID == "", MissingTurns, r.NumTurns == nil,
		MissingDuration, r.DurationMS == nil, MissingModel, res.Model == "",
		MissingUsage, r.Usage == nil && len(r.ModelUsage) == 0, MissingCost, r.TotalCostUSD == nil,
		MissingText, res.Success && r.Result == nil)
	res.Missing = miss
	if res.Success {
		return res
	}
	detail := strings.Join(r.Errors, "; ")
	if detail == "" {
		detail = res.Text
	}
	if detail == "" {
		detail = strings.TrimSpace(string(stderr))
	}
	res.Error = shorten(strings.TrimSpace(r.Subtype + ": " + detail))
	res.Class = p.classify(r, detail, stderr)
	return res
}

// classify decides a failed result's class: structured fields first (the
// HTTP status of a failed API call, the assistant's error, the subtype),
// then the texts.
func (p *claudeParser) classify(r *claudeMsg, detail string, stderr []byte) Class {
	if s := r.APIErrorStatus; s != nil {
		switch *s {
		case 429, 500, 502, 503, 504, 529:
			return Transient
		case 401, 403:
			return Fatal
		}
	}
	switch p.apiError {
	case "rate_limit", "server_error":
		return Transient
	case "authentication_failed", "billing_error":
		return Fatal
	}
	if r.Subtype == "error_max_budget_usd" {
		return Fatal
	}
	if c, _ := firstMatch(claudePatterns, detail, string(stderr)); c != "" {
		return c
	}
	return Agent
}

// classifyMissingResult describes a run whose output ended without its
// final record: the stream was truncated, or the CLI failed before it
// started (its reason then is on stderr).
func classifyMissingResult(patterns []classPattern, what string, exitCode int, stderr []byte) (Class, string) {
	msg := fmt.Sprintf("no %s: the output ended without it (truncated, interrupted or failed to start); exit code %d", what, exitCode)
	if s := strings.TrimSpace(string(stderr)); s != "" {
		msg += "; stderr: " + shorten(s)
	}
	if c, _ := firstMatch(patterns, string(stderr)); c != "" {
		return c, msg
	}
	return Agent, msg
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
