package agentcli

import "github.com/supervisorhq/supervisor/shared/protocol"

// AgentRun is r in the wire form of an agent result (protocol.AgentRun),
// as the CLI reported it: nothing redacted or capped (the runner does
// that), no cost estimated (the coordinator does that).
func (r Result) AgentRun() protocol.AgentRun {
	return protocol.AgentRun{
		Adapter: r.Adapter, SessionID: r.SessionID, Model: r.Model, Turns: r.Turns,
		DurationMillis: r.Duration.Milliseconds(),
		Usage: protocol.TokenUsage{Input: r.Usage.InputTokens, CachedInput: r.Usage.CachedInputTokens,
			CacheCreation: r.Usage.CacheCreationTokens, Output: r.Usage.OutputTokens},
		CostUSD: r.CostUSD, CostKnown: r.CostReported,
		Success: r.Success, Class: string(r.Class), Error: r.Error, Text: r.Text,
		Missing: r.Missing, Warnings: r.Warnings, Malformed: r.Malformed,
	}
}

// SpecSettings turns an agent spec (a task's agent, a review gate's
// reviewer) into its adapter's settings.
func SpecSettings(a protocol.AgentSpec) Settings {
	return Settings{Model: a.Model, MaxTurns: a.MaxTurns, Permission: a.Permission,
		OutputFormat: a.OutputFormat, Args: a.Args, Command: a.Command}
}
