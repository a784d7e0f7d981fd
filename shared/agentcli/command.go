package agentcli

import (
	"errors"
	"fmt"
)

// Command is the adapter for any argv: the prompt goes on standard input,
// the output is not parsed, and success is exit code 0.
type Command struct{}

// Name implements Adapter.
func (Command) Name() string { return "command" }

// Invocation implements Adapter.
func (Command) Invocation(prompt string, s Settings) (Invocation, error) {
	if len(s.Command) == 0 {
		return Invocation{}, errors.New("command: no argv")
	}
	if s.MaxTurns != 0 || s.Model != "" || s.Permission != "" || s.OutputFormat != "" {
		return Invocation{}, errors.New("command: model, max_turns, permission and output format apply to a CLI adapter only")
	}
	argv := append(append([]string(nil), s.Command...), s.Args...)
	return Invocation{Argv: argv, Stdin: prompt, PromptOnStdin: true}, nil
}

// NewParser implements Adapter.
func (Command) NewParser(Settings) Parser { return &commandParser{} }

type commandParser struct{}

// Line implements Parser: each line is output, as is.
func (*commandParser) Line(line []byte) []Event {
	return []Event{{Kind: "output", Text: string(line)}}
}

// Finish implements Parser.
func (*commandParser) Finish(exitCode int, _ []byte) Result {
	res := Result{Adapter: "command", ExitCode: exitCode, Success: exitCode == 0,
		Missing: []string{MissingSession, MissingTurns, MissingDuration, MissingModel, MissingUsage, MissingCost, MissingText}}
	if !res.Success {
		res.Class, res.Error = Agent, fmt.Sprintf("exit code %d", exitCode)
	}
	return res
}
