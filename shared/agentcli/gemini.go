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

// Gemini is the Gemini CLI adapter: `gemini -p PROMPT --output-format
// stream-json --approval-mode auto_edit`.
type Gemini struct{}

// Name implements Adapter.
func (Gemini) Name() string { return "gemini" }

// geminiDefaultApproval auto-approves edits: headless, the default mode
// denies every tool that would ask.
const geminiDefaultApproval = "auto_edit"

var geminiApprovalModes = []string{"default", "auto_edit", "yolo", "plan"}

// geminiMaxArgPrompt is the longest prompt passed in -p's argument; Linux
// caps one argument at 128 KiB. A longer prompt goes on standard input,
// which Gemini CLI puts before -p's text.
const geminiMaxArgPrompt = 100 << 10

// geminiStdinInstruction is -p's text when the prompt is on standard input.
const geminiStdinInstruction = "Carry out the task given above."

// Invocation implements Adapter. The prompt is -p's argument, and standard
// input is the null device: Gemini CLI reads a piped stdin and prepends it
// to the prompt.
func (Gemini) Invocation(prompt string, s Settings) (Invocation, error) {
	format := s.OutputFormat
	if format == "" {
		format = "stream-json"
	}
	if format != "stream-json" && format != "json" {
		return Invocation{}, fmt.Errorf("gemini: output format %q is not stream-json or json", s.OutputFormat)
	}
	if s.MaxTurns != 0 {
		return Invocation{}, fmt.Errorf("gemini: max_turns is not supported: Gemini CLI reads maxSessionTurns from its settings file only")
	}
	mode := s.Permission
	if mode == "" {
		mode = geminiDefaultApproval
	}
	if !contains(geminiApprovalModes, mode) {
		return Invocation{}, fmt.Errorf("gemini: approval mode %q is not one of %s", mode, strings.Join(geminiApprovalModes, ", "))
	}
	inv := Invocation{}
	p := prompt
	if len(prompt) > geminiMaxArgPrompt {
		p, inv.Stdin, inv.PromptOnStdin = geminiStdinInstruction, prompt, true
	}
	argv := []string{"gemini", "-p", p, "--output-format", format, "--approval-mode", mode}
	if s.Model != "" {
		argv = append(argv, "--model", s.Model)
	}
	inv.Argv = append(argv, s.Args...)
	return inv, nil
}

// NewParser implements Adapter.
func (Gemini) NewParser(s Settings) Parser {
	return &geminiParser{lines: lines{json: s.OutputFormat == "json"}}
}

type geminiError struct {
	Type    string          `json:"type"`
	Message string          `json:"message"`
	Code    json.RawMessage `json:"code"`
}

type geminiTokens struct {
	TotalTokens  int64  `json:"total_tokens"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	Cached       int64  `json:"cached"`
	Input        int64  `json:"input"`
	DurationMS   *int64 `json:"duration_ms"`
	ToolCalls    int    `json:"tool_calls"`
}

type geminiEvent struct {
	Type      string       `json:"type"`
	SessionID string       `json:"session_id"`
	Model     string       `json:"model"`
	Role      string       `json:"role"`
	Content   string       `json:"content"`
	ToolName  string       `json:"tool_name"`
	ToolID    string       `json:"tool_id"`
	Status    string       `json:"status"`
	Severity  string       `json:"severity"`
	Message   string       `json:"message"`
	Error     *geminiError `json:"error"`
	Stats     *struct {
		geminiTokens
		Models map[string]geminiTokens `json:"models"`
	} `json:"stats"`
}

// geminiJSON is json mode's single object.
type geminiJSON struct {
	SessionID string       `json:"session_id"`
	Response  *string      `json:"response"`
	Error     *geminiError `json:"error"`
	Warnings  []string     `json:"warnings"`
	Stats     *struct {
		Models map[string]struct {
			API struct {
				TotalRequests int `json:"totalRequests"`
			} `json:"api"`
			Tokens struct {
				Prompt     int64 `json:"prompt"`
				Candidates int64 `json:"candidates"`
				Cached     int64 `json:"cached"`
			} `json:"tokens"`
		} `json:"models"`
	} `json:"stats"`
}

type geminiParser struct {
	lines
	session  string
	model    string
	text     strings.Builder // the assistant's text since the last tool call
	prevText string          // the text before it
	result   *geminiEvent
}

// Line implements Parser.
func (p *geminiParser) Line(line []byte) []Event {
	var e geminiEvent
	if !p.decode(line, &e, func() string { return "gemini event " + e.Type }) {
		return nil
	}
	switch e.Type {
	case "init":
		p.session, p.model = e.SessionID, e.Model
		return []Event{{Kind: "session", Text: fmt.Sprintf("session %s, model %s", e.SessionID, e.Model)}}
	case "message":
		if e.Role == "assistant" {
			// Assistant text arrives in chunks (delta: true).
			p.text.WriteString(e.Content)
			return []Event{{Kind: "text", Text: e.Content}}
		}
	case "tool_use":
		if t := p.text.String(); strings.TrimSpace(t) != "" {
			p.prevText = t
		}
		p.text.Reset()
		return []Event{{Kind: "tool", Text: e.ToolName}}
	case "tool_result":
		text := e.ToolID + ": " + e.Status
		if e.Error != nil {
			text += ": " + e.Error.Message
		}
		return []Event{{Kind: "tool_result", Text: text}}
	case "error":
		// Non-fatal: the run goes on to its result.
		p.warnings = append(p.warnings, shorten(e.Severity+": "+e.Message))
		return []Event{{Kind: "error", Text: e.Message}}
	case "result":
		p.result = &e
		return []Event{{Kind: "result", Text: e.Status}}
	}
	return nil
}

// geminiExitClasses are Gemini CLI's meaningful exit codes. An API error
// can end the run with its HTTP status modulo 256 (429 → 173, 5xx → 244…).
var geminiExitClasses = map[int]struct {
	class Class
	what  string
}{
	41: {Fatal, "authentication error"}, 42: {Fatal, "input error"}, 44: {Fatal, "sandbox error"},
	52: {Fatal, "configuration error"}, 53: {Agent, "turn limit reached"}, 54: {Fatal, "fatal tool error"},
	130: {Agent, "cancelled"},
	173: {Transient, "API status 429"}, 243: {Transient, "API status 499"}, 244: {Transient, "API status 500"},
	246: {Transient, "API status 502"}, 247: {Transient, "API status 503"}, 248: {Transient, "API status 504"},
}

var geminiTypeClasses = map[string]Class{
	"RetryableQuotaError": Transient, "TerminalQuotaError": Fatal, "ModelNotFoundError": Fatal,
	"FatalAuthenticationError": Fatal, "FatalConfigError": Fatal, "FatalInputError": Fatal,
	"FatalSandboxError": Fatal, "FatalToolExecutionError": Fatal, "FatalTurnLimitedError": Agent,
}

var geminiPatterns = []classPattern{
	{Fatal, regexp.MustCompile(`(?i)please set an auth method|limit: 0|terminalquotaerror|daily|api key not valid|` +
		`permission_denied|unauthenticated|cannot use both|unknown argument|invalid values`)},
	{Transient, regexp.MustCompile(`(?i)resource_exhausted|unavailable|overloaded|please retry in|status: 429|status: 503|` +
		`too many requests|rate limit`)},
}

// Finish implements Parser.
func (p *geminiParser) Finish(exitCode int, stderr []byte) Result {
	if p.json {
		return p.finishJSON(exitCode, stderr)
	}
	res := Result{Adapter: "gemini", ExitCode: exitCode, SessionID: p.session, Model: p.model,
		Malformed: p.bad, Warnings: p.warnings}
	res.Text = p.text.String()
	if strings.TrimSpace(res.Text) == "" {
		res.Text = p.prevText
	}
	r := p.result
	if r == nil {
		res.Class, res.Error = classifyMissingResult(geminiPatterns, "Gemini CLI result event", exitCode, stderr)
		if ec, ok := geminiExitClasses[exitCode]; ok {
			res.Class = ec.class
			res.Error = ec.what + ": " + res.Error
		}
		res.Missing = missing(MissingSession, res.SessionID == "", MissingTurns, true, MissingDuration, true,
			MissingModel, res.Model == "", MissingUsage, true, MissingCost, true, MissingText, res.Text == "")
		return res
	}
	var dur *int64
	if st := r.Stats; st != nil {
		res.Usage = Usage{InputTokens: st.InputTokens, CachedInputTokens: st.Cached, OutputTokens: st.OutputTokens}
		// An error result's duration is always 0: not a measurement.
		if st.DurationMS != nil && (r.Status == "success" || *st.DurationMS > 0) {
			dur = st.DurationMS
			res.Duration = time.Duration(*dur) * time.Millisecond
		}
		if res.Model == "" && len(st.Models) > 0 {
			res.Model = joinKeys(st.Models)
		}
	}
	// Gemini CLI reports no turn count and no cost.
	res.Missing = missing(MissingSession, res.SessionID == "", MissingTurns, true, MissingDuration, dur == nil,
		MissingModel, res.Model == "", MissingUsage, r.Stats == nil, MissingCost, true,
		MissingText, res.Text == "")
	res.Success = r.Status == "success" && exitCode == 0
	if res.Success {
		return res
	}
	res.Error, res.Class = geminiFailure(r.Status, r.Error, exitCode, stderr)
	return res
}

// geminiFailure describes a failed run and classifies it: the error's
// type, then the exit code, then the texts.
func geminiFailure(status string, e *geminiError, exitCode int, stderr []byte) (string, Class) {
	msg := fmt.Sprintf("status %q, exit code %d", status, exitCode)
	class := Class("")
	var texts []string
	if e != nil {
		msg = strings.TrimSpace(e.Type + ": " + e.Message)
		class = geminiTypeClasses[e.Type]
		texts = append(texts, e.Type, e.Message)
		if code, err := strconv.Atoi(strings.Trim(string(e.Code), `"`)); err == nil && class == "" {
			switch code {
			case 429, 499, 500, 502, 503, 504:
				class = Transient
			case 401, 403:
				class = Fatal
			}
		}
	}
	if ec, ok := geminiExitClasses[exitCode]; ok {
		msg += " (" + ec.what + ")"
		if class == "" {
			class = ec.class
		}
	}
	if class == "" {
		class = classOr(geminiPatterns, Agent, append(texts, string(stderr))...)
	}
	return shorten(msg), class
}

// finishJSON reads json mode's object: on stdout on success, on stderr
// when the CLI fails.
func (p *geminiParser) finishJSON(exitCode int, stderr []byte) Result {
	res := Result{Adapter: "gemini", ExitCode: exitCode, Warnings: p.warnings}
	var doc geminiJSON
	found := false
	if out := bytes.TrimSpace(p.buf.Bytes()); len(out) > 0 {
		ok, note := decodeObject(out, &doc)
		if !ok {
			res.Malformed++
		} else {
			found = true
			if note != "" {
				res.Warnings = append(res.Warnings, "gemini output: "+note)
			}
		}
	}
	if !found || doc.Error == nil && exitCode != 0 {
		if obj := lastJSONObject(stderr); obj != nil {
			var errDoc geminiJSON
			if ok, _ := decodeObject(obj, &errDoc); ok && errDoc.Error != nil {
				if !found {
					doc = errDoc
				} else {
					doc.Error = errDoc.Error
				}
				found = true
			}
		}
	}
	res.SessionID = doc.SessionID
	res.Warnings = append(res.Warnings, doc.Warnings...)
	if doc.Response != nil {
		res.Text = *doc.Response
	}
	if doc.Stats != nil && len(doc.Stats.Models) > 0 {
		names := make([]string, 0, len(doc.Stats.Models))
		for name, m := range doc.Stats.Models {
			names = append(names, name)
			res.Usage.InputTokens += m.Tokens.Prompt
			res.Usage.CachedInputTokens += m.Tokens.Cached
			res.Usage.OutputTokens += m.Tokens.Candidates
		}
		sort.Strings(names)
		res.Model = strings.Join(names, ",")
	}
	res.Missing = missing(MissingSession, res.SessionID == "", MissingTurns, true, MissingDuration, true,
		MissingModel, res.Model == "", MissingUsage, doc.Stats == nil, MissingCost, true,
		MissingText, doc.Response == nil)
	if !found {
		res.Class, res.Error = classifyMissingResult(geminiPatterns, "Gemini CLI JSON object", exitCode, stderr)
		if ec, ok := geminiExitClasses[exitCode]; ok {
			res.Class = ec.class
			res.Error = ec.what + ": " + res.Error
		}
		return res
	}
	res.Success = exitCode == 0 && doc.Error == nil && doc.Response != nil
	if res.Success {
		return res
	}
	status := "error"
	if doc.Error == nil && doc.Response == nil {
		status = "no response"
	}
	res.Error, res.Class = geminiFailure(status, doc.Error, exitCode, stderr)
	return res
}

// joinKeys is a map's keys, sorted and joined with commas.
func joinKeys[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
