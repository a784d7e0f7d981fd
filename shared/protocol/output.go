package protocol

import "encoding/json"

// AgentOutput is what the coordinator found, for the task's output schema
// (TaskSpec.Output), at the end of a successful agent round's final
// message (OUT-01…OUT-09): the validated JSON block, or why there is
// none. It travels in the node.agent_done event, so a replay folds the
// same verdict without validating again.
type AgentOutput struct {
	// Schema is the schema checked: generic, plan, implementation, review.
	Schema string `json:"schema"`
	// Block is the validated block, compacted (nil when Problem is set).
	Block json.RawMessage `json:"block,omitempty"`
	// Status is the block's status (a review's verdict).
	Status string `json:"status,omitempty"`
	// Problem is OutputNoBlock or OutputInvalid when the message had no
	// valid block ("" when it had one).
	Problem string `json:"problem,omitempty"`
	// Error says the problem in one line; Violations list, for an invalid
	// block, each violation as "JSON pointer: message".
	Error      string   `json:"error,omitempty"`
	Violations []string `json:"violations,omitempty"`
	// Source says where the text came from: "run" (the CLI's final
	// message, AgentResult.Run.Text) or "stdout" (the tail of the agent's
	// standard output, for an agent without a parsed run).
	Source string `json:"source,omitempty"`
}

// Problems of an AgentOutput.
const (
	OutputNoBlock = "no_block"
	OutputInvalid = "invalid"
)

// Valid reports whether the output has a validated block.
func (o *AgentOutput) Valid() bool { return o != nil && o.Problem == "" && len(o.Block) > 0 }
