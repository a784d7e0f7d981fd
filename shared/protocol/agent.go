package protocol

// AgentSpec says how a node's agent runs: which CLI adapter (package
// shared/agentcli) builds the invocation and parses the output, and the
// settings that shape it. The worker builds the argv from it; nothing in
// it is run through a shell.
type AgentSpec struct {
	// Adapter is "claude-code", "codex", "gemini" or "command".
	Adapter string `json:"adapter"`
	// Command is the argv of the "command" adapter; the others ignore it.
	Command []string `json:"command,omitempty"`
	// Model is passed to the CLI's model flag when set.
	Model string `json:"model,omitempty"`
	// Args are extra arguments after the adapter's own flags.
	Args []string `json:"args,omitempty"`
	// MaxTurns bounds the agent's turns where the CLI has such a flag.
	MaxTurns int `json:"max_turns,omitempty"`
	// Permission overrides the adapter's default permission setting
	// (Claude's permission mode, Codex's sandbox, Gemini's approval mode).
	Permission string `json:"permission,omitempty"`
	// OutputFormat is "stream-json" (default) or "json" where the CLI has
	// both.
	OutputFormat string `json:"output_format,omitempty"`
}

// TokenUsage is the tokens one agent run used. Input counts every prompt
// token, cached ones included; CachedInput is the part read from a cache.
type TokenUsage struct {
	Input         int64 `json:"input_tokens"`
	CachedInput   int64 `json:"cached_input_tokens,omitempty"`
	CacheCreation int64 `json:"cache_creation_tokens,omitempty"`
	Output        int64 `json:"output_tokens"`
}

// Add returns the sum of u and v.
func (u TokenUsage) Add(v TokenUsage) TokenUsage {
	return TokenUsage{Input: u.Input + v.Input, CachedInput: u.CachedInput + v.CachedInput,
		CacheCreation: u.CacheCreation + v.CacheCreation, Output: u.Output + v.Output}
}

// AgentRun is what an agent CLI reported about one run, as its adapter
// parsed it: the worker fills it in AgentResult.Run.
type AgentRun struct {
	Adapter   string `json:"adapter"`
	SessionID string `json:"session_id,omitempty"`
	Model     string `json:"model,omitempty"`
	Turns     int    `json:"turns,omitempty"`
	// DurationMillis is the duration the CLI reported (0: not reported).
	DurationMillis int64      `json:"duration_ms,omitempty"`
	Usage          TokenUsage `json:"usage"`
	// CostUSD is the run's cost when CostKnown: reported by the CLI, or,
	// when CostEstimated, computed from the coordinator's price table.
	CostUSD       float64 `json:"cost_usd,omitempty"`
	CostKnown     bool    `json:"cost_known,omitempty"`
	CostEstimated bool    `json:"cost_estimated,omitempty"`
	// Success is the CLI's own verdict, read from its final record.
	Success bool `json:"success"`
	// Class is the adapter's class of a failure: "transient", "fatal" or
	// "agent" ("" on success).
	Class string `json:"class,omitempty"`
	// Error is the CLI's account of a failure.
	Error string `json:"error,omitempty"`
	// Text is the agent's final message, secrets redacted, capped at
	// MaxAgentText bytes (its tail kept).
	Text string `json:"text,omitempty"`
	// Missing names what the output did not report (session_id, usage …).
	Missing []string `json:"missing,omitempty"`
	// Warnings are non-fatal troubles the CLI reported.
	Warnings []string `json:"warnings,omitempty"`
	// Malformed counts output lines that could not be parsed.
	Malformed int `json:"malformed,omitempty"`
}

// MaxAgentText caps AgentRun.Text (64 KiB).
const MaxAgentText = 64 << 10
