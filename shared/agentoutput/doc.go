// Package agentoutput reads the structured result an agent ends its final
// message with (OUT-01…OUT-09): Extract finds the last JSON block of the
// message, Validate checks it against one of the output schemas (generic,
// plan, implementation, review: JSON Schema documents embedded from
// schemas/, checked with github.com/santhosh-tekuri/jsonschema/v6), Parse
// does both and decodes the block into the schema's Go type, and
// Instructions is the text a prompt ends with to tell the agent the format
// it must use.
//
// Failures are distinct (OUT-06): ErrNoBlock when the message has no JSON
// block, an *InvalidError (errors.Is(err, ErrInvalid)) listing every
// violation with its JSON pointer when the block is malformed or breaks
// the schema. There is no fallback to text markers (OUT-01).
//
// The package does no I/O and reads no clock: the same text always gives
// the same answer, so the coordinator's state machine may call it.
// docs/structured-output.md documents the schemas with an example each.
package agentoutput
