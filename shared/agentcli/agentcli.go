// Package agentcli runs AI coding CLIs headless: one Adapter per CLI
// (Claude Code, Codex, Gemini CLI, and "command" for any argv) builds the
// CLI's non-interactive invocation from a workflow's agent settings and
// parses the CLI's output, line by line, into one Result: success, the
// final text, session, turns, duration, model, token usage, cost, and the
// class of a failure. What the output did not report is listed in
// Result.Missing, never guessed.
//
// The formats follow docs/agent-adapters.md, which names the CLIs' sources
// each flag and field was checked against.
package agentcli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"
)

// Settings are the workflow's agent settings that shape one invocation.
type Settings struct {
	// Model is passed to the CLI's model flag when set.
	Model string
	// MaxTurns bounds the agent's turns when the CLI has such a flag
	// (Claude Code); 0 leaves the CLI's default.
	MaxTurns int
	// Permission overrides the adapter's default permission setting:
	// Claude's --permission-mode, Codex's --sandbox, Gemini's
	// --approval-mode. Empty means the adapter's default, which lets a
	// headless run edit files in its working directory without asking.
	Permission string
	// OutputFormat selects the CLI's machine-readable format where it has
	// two: "stream-json" (the default) or "json". Codex has only JSON lines.
	OutputFormat string
	// Args are extra arguments, appended after the adapter's own flags and
	// before the prompt argument, if any.
	Args []string
	// Command is the argv of the "command" adapter; the others ignore it.
	Command []string
}

// Invocation is how to start the CLI for one prompt.
type Invocation struct {
	// Argv is the program and its arguments; it is never run through a shell.
	Argv []string
	// Stdin is what to write to the CLI's standard input. When PromptOnStdin
	// is false it is empty and the CLI's standard input must be the null
	// device (a CLI waiting for stdin to end would otherwise block).
	Stdin string
	// PromptOnStdin says whether the prompt travels on standard input.
	PromptOnStdin bool
}

// Adapter builds one CLI's headless invocation and parses its output.
type Adapter interface {
	// Name is the adapter's name in a workflow's agent settings.
	Name() string
	// Invocation returns the command that runs prompt with settings s, or
	// an error when s asks for something the CLI cannot do.
	Invocation(prompt string, s Settings) (Invocation, error)
	// NewParser returns a parser for the output of one run with settings s.
	NewParser(s Settings) Parser
}

// Parser reads one run's output incrementally.
type Parser interface {
	// Line takes one line of the CLI's standard output, without its line
	// ending, and returns the events it carries (for live log lines).
	Line(line []byte) []Event
	// Finish ends the run: the CLI's exit code and its standard error,
	// captured in full. It returns the run's Result.
	Finish(exitCode int, stderr []byte) Result
}

// Class says what a failed run calls for; it feeds the retry classifier.
type Class string

// Failure classes. A successful run has no class ("").
const (
	// Transient: a rate limit, an overloaded API, a dropped connection:
	// the same run may succeed later.
	Transient Class = "transient"
	// Fatal: the CLI cannot authenticate, its configuration or arguments
	// are wrong, a quota or budget is spent: no retry helps.
	Fatal Class = "fatal"
	// Agent: the agent itself failed (turn limit, a failed turn, no
	// result): another round, with feedback, may do better.
	Agent Class = "agent"
)

// Usage is the tokens a run used. InputTokens counts every prompt token,
// cached ones included; CachedInputTokens is the part read from a cache.
type Usage struct {
	InputTokens         int64 `json:"input_tokens"`
	CachedInputTokens   int64 `json:"cached_input_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_tokens,omitempty"`
	OutputTokens        int64 `json:"output_tokens"`
}

// Result is what one run of a CLI reported.
type Result struct {
	Adapter string `json:"adapter"`
	// Success is read from the CLI's final record (not its exit code alone).
	Success bool `json:"success"`
	// Text is the agent's final message.
	Text      string        `json:"text,omitempty"`
	SessionID string        `json:"session_id,omitempty"`
	Turns     int           `json:"turns,omitempty"`
	Duration  time.Duration `json:"duration,omitempty"`
	Model     string        `json:"model,omitempty"`
	Usage     Usage         `json:"usage"`
	// CostUSD is the cost the CLI reported; valid when CostReported.
	CostUSD      float64 `json:"cost_usd,omitempty"`
	CostReported bool    `json:"cost_reported,omitempty"`
	// Class and Error describe a failure; both are empty on success.
	Class Class  `json:"class,omitempty"`
	Error string `json:"error,omitempty"`
	// Warnings are non-fatal troubles the CLI reported (retries, denied
	// permissions, loop detection).
	Warnings []string `json:"warnings,omitempty"`
	// Missing names the fields the output did not report (see the
	// Missing* constants).
	Missing []string `json:"missing,omitempty"`
	// Malformed counts output lines that were not JSON objects.
	Malformed int `json:"malformed,omitempty"`
	// ExitCode is the CLI's exit code.
	ExitCode int `json:"exit_code"`
}

// Names of fields a Result can lack, listed in Result.Missing.
const (
	MissingSession  = "session_id"
	MissingTurns    = "turns"
	MissingDuration = "duration"
	MissingModel    = "model"
	MissingUsage    = "usage"
	MissingCost     = "cost"
	MissingText     = "text"
)

// Event is one thing a CLI reported while running, for a live log line.
type Event struct {
	// Kind is "session", "text", "tool", "tool_result", "error", "result",
	// or "output" (a line of the command adapter's unparsed output).
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// String is the event as one log line.
func (e Event) String() string { return e.Kind + ": " + e.Text }

// adapters holds every adapter by name.
var adapters = map[string]Adapter{
	"claude-code": Claude{},
	"codex":       Codex{},
	"gemini":      Gemini{},
	"command":     Command{},
}

// Lookup returns the adapter called name.
func Lookup(name string) (Adapter, bool) {
	a, ok := adapters[name]
	return a, ok
}

// Names returns the adapters' names, sorted.
func Names() []string {
	names := make([]string, 0, len(adapters))
	for n := range adapters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// MaxLine is the longest output line a parser reads; a longer line is
// counted as malformed.
const MaxLine = 16 << 20

// Parse feeds all of stdout to p, line by line, passing each event to emit
// (when not nil), then finishes p with exitCode and stderr.
func Parse(p Parser, stdout io.Reader, exitCode int, stderr []byte, emit func(Event)) (Result, error) {
	r := bufio.NewReaderSize(stdout, 64<<10)
	var long int
	for {
		line, err := readLine(r)
		if errors.Is(err, errLineTooLong) {
			long++
		} else if len(line) > 0 || err == nil {
			for _, ev := range p.Line(line) {
				if emit != nil {
					emit(ev)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			return Result{}, fmt.Errorf("read agent output: %w", err)
		}
	}
	res := p.Finish(exitCode, stderr)
	res.Malformed += long
	return res, nil
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its ending ("\n" or "\r\n"); a line
// longer than MaxLine is skipped whole and reported as errLineTooLong.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) <= MaxLine {
			buf = append(buf, chunk...)
		} else {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			if err == nil {
				return nil, errLineTooLong
			}
			return nil, errors.Join(errLineTooLong, io.EOF)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		buf = trimEOL(buf)
		return buf, err
	}
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}
