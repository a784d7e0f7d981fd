package agentcli

import (
	"fmt"
	"regexp"
	"strings"
)

// Codex is the Codex CLI adapter: `codex exec --json --sandbox
// workspace-write --skip-git-repo-check -`, the prompt on standard input
// (the "-" makes exec read it from there without waiting for a second
// input, and without the "Reading prompt from stdin..." notice).
type Codex struct{}

// Name implements Adapter.
func (Codex) Name() string { return "codex" }

// codexDefaultSandbox lets exec write in its working directory; exec never
// asks for approvals (it rejects -a/--ask-for-approval).
const codexDefaultSandbox = "workspace-write"

var codexSandboxes = []string{"read-only", "workspace-write", "danger-full-access"}

// Invocation implements Adapter. --skip-git-repo-check: the worker's
// workspace is a git worktree, but exec's trust check would otherwise fail
// a run outside a directory the user marked trusted.
func (Codex) Invocation(prompt string, s Settings) (Invocation, error) {
	if s.OutputFormat != "" && s.OutputFormat != "jsonl" {
		return Invocation{}, fmt.Errorf("codex: output format %q: codex exec --json prints JSON lines only", s.OutputFormat)
	}
	if s.MaxTurns != 0 {
		return Invocation{}, fmt.Errorf("codex: max_turns is not supported: codex exec has no turn limit")
	}
	mode := s.Permission
	if mode == "" {
		mode = codexDefaultSandbox
	}
	if !contains(codexSandboxes, mode) {
		return Invocation{}, fmt.Errorf("codex: sandbox %q is not one of %s", mode, strings.Join(codexSandboxes, ", "))
	}
	argv := []string{"codex", "exec", "--json", "--sandbox", mode, "--skip-git-repo-check"}
	if s.Model != "" {
		argv = append(argv, "--model", s.Model)
	}
	argv = append(argv, s.Args...)
	argv = append(argv, "-")
	return Invocation{Argv: argv, Stdin: prompt, PromptOnStdin: true}, nil
}

// NewParser implements Adapter.
func (Codex) NewParser(Settings) Parser { return &codexParser{} }

type codexEvent struct {
	Type     string     `json:"type"`
	ThreadID string     `json:"thread_id"`
	Item     *codexItem `json:"item"`
	Usage    *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Message string `json:"message"`
}

type codexItem struct {
	ID string `json:"id"`
	// Type is the item's kind; the earliest builds called it item_type.
	Type     string `json:"type"`
	ItemType string `json:"item_type"`
	Text     string `json:"text"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code"`
	Status   string `json:"status"`
	Changes  []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"changes"`
	Message string `json:"message"`
	Server  string `json:"server"`
	Tool    string `json:"tool"`
}

type codexParser struct {
	lines     // never in json mode: codex prints JSON lines only
	session   string
	turns     int
	text      string
	usage     *Usage
	completed bool
	failed    bool
	failMsg   string
	lastError string
}

// Line implements Parser.
func (p *codexParser) Line(line []byte) []Event {
	var e codexEvent
	if !p.decode(line, &e, func() string { return "codex event " + e.Type }) {
		return nil
	}
	switch e.Type {
	case "thread.started":
		p.session = e.ThreadID
		return []Event{{Kind: "session", Text: "thread " + e.ThreadID}}
	case "turn.started":
		p.turns++
	case "item.started", "item.completed":
		if e.Item != nil {
			return p.item(e.Type == "item.completed", e.Item)
		}
	case "turn.completed":
		p.completed, p.failed = true, false
		if e.Usage != nil {
			// The usage is the thread's running total: the last one counts.
			p.usage = &Usage{InputTokens: e.Usage.InputTokens, CachedInputTokens: e.Usage.CachedInputTokens,
				OutputTokens: e.Usage.OutputTokens}
		}
		return []Event{{Kind: "result", Text: "turn completed"}}
	case "turn.failed":
		p.failed, p.completed = true, false
		p.failMsg = "turn failed"
		if e.Error != nil && e.Error.Message != "" {
			p.failMsg = e.Error.Message
		}
		return []Event{{Kind: "result", Text: "turn failed: " + p.failMsg}}
	case "error":
		// Not the end of the run: exec reports each retry this way.
		p.lastError = e.Message
		p.warnings = append(p.warnings, shorten(e.Message))
		return []Event{{Kind: "error", Text: e.Message}}
	}
	return nil
}

// item returns the events of an item.
func (p *codexParser) item(completed bool, it *codexItem) []Event {
	kind := it.Type
	if kind == "" {
		kind = it.ItemType
	}
	switch kind {
	case "agent_message", "assistant_message":
		if completed {
			p.text = it.Text
			return []Event{{Kind: "text", Text: it.Text}}
		}
	case "command_execution":
		if !completed {
			return []Event{{Kind: "tool", Text: "$ " + it.Command}}
		}
		exit := "no exit code"
		if it.ExitCode != nil {
			exit = fmt.Sprintf("exit %d", *it.ExitCode)
		}
		return []Event{{Kind: "tool_result", Text: fmt.Sprintf("$ %s: %s, %s", it.Command, it.Status, exit)}}
	case "file_change":
		if completed {
			var parts []string
			for _, c := range it.Changes {
				parts = append(parts, c.Kind+" "+c.Path)
			}
			return []Event{{Kind: "tool_result", Text: "files " + it.Status + ": " + strings.Join(parts, ", ")}}
		}
	case "mcp_tool_call":
		if !completed {
			return []Event{{Kind: "tool", Text: it.Server + "." + it.Tool}}
		}
	case "error":
		if completed {
			p.warnings = append(p.warnings, shorten(it.Message))
			return []Event{{Kind: "error", Text: it.Message}}
		}
	}
	return nil
}

var codexPatterns = []classPattern{
	{Fatal, regexp.MustCompile(`(?i)401 unauthorized|unauthorized|403 forbidden|quota exceeded|you've hit your usage limit|` +
		`context window|not inside a trusted directory|error loading config|error parsing -c overrides|` +
		`unexpected argument|no prompt provided|error loading rules`)},
	{Transient, regexp.MustCompile(`(?i)last status: (429|5\d\d)|too many requests|stream disconnected before completion|` +
		`experiencing high demand|error while reading the server response|connection failed|rate limit|overloaded`)},
}

// codexStdinNotices are the lines exec prints on stderr about reading its
// standard input: information, not errors.
var codexStdinNotices = regexp.MustCompile(`(?m)^Reading (additional input|prompt) from stdin\.\.\.\r?\n?`)

// Finish implements Parser. Success is a turn.completed as the last turn
// event and exit code 0: exec prints turn.failed for a failed turn, prints
// no final event when interrupted, and exits non-zero when it saw an error
// it did not retry.
func (p *codexParser) Finish(exitCode int, stderr []byte) Result {
	stderr = codexStdinNotices.ReplaceAll(stderr, nil)
	res := Result{Adapter: "codex", ExitCode: exitCode, SessionID: p.session, Turns: p.turns, Text: p.text,
		Malformed: p.bad, Warnings: p.warnings}
	if p.usage != nil {
		res.Usage = *p.usage
	}
	// Codex's events carry no model, duration or cost.
	res.Missing = missing(MissingSession, p.session == "", MissingTurns, p.turns == 0, MissingDuration, true,
		MissingModel, true, MissingUsage, p.usage == nil, MissingCost, true, MissingText, p.text == "")
	switch {
	case p.failed:
		res.Error = "turn failed: " + shorten(p.failMsg)
		res.Class = classOr(codexPatterns, Agent, p.failMsg, p.lastError, string(stderr))
	case p.completed && exitCode == 0:
		res.Success = true
	case p.completed:
		res.Error = fmt.Sprintf("codex exited %d after turn.completed", exitCode)
		if p.lastError != "" {
			res.Error += ": " + shorten(p.lastError)
		}
		res.Class = classOr(codexPatterns, Agent, p.lastError, string(stderr))
	default:
		res.Class, res.Error = classifyMissingResult(codexPatterns, "turn.completed or turn.failed event", exitCode, stderr)
		if c, _ := firstMatch(codexPatterns, p.lastError); c != "" && res.Class == Agent {
			res.Class = c
		}
		if exitCode == 2 && p.session == "" {
			// clap rejects the arguments with exit code 2.
			res.Class = Fatal
		}
	}
	return res
}

// classOr is the class of the first pattern matching texts, or def.
func classOr(patterns []classPattern, def Class, texts ...string) Class {
	if c, _ := firstMatch(patterns, texts...); c != "" {
		return c
	}
	return def
}
