package agentoutput

import (
	"bytes"
	"embed"
	"fmt"
	"strings"
)

//go:embed examples/*.json
var exampleFS embed.FS

// Example returns a valid example block of the named schema, indented
// (nil for an unknown name).
func Example(name string) []byte {
	data, err := exampleFS.ReadFile("examples/" + name + ".json")
	if err != nil {
		return nil
	}
	return bytes.TrimSpace(data)
}

// statusMeaning says what each status does to the node, per schema.
var statusMeaning = map[string]string{
	Generic: "SUCCESS when the task is done; NEEDS_REVISION if your work is not finished (you will get another round); " +
		"BLOCKED, with blockers, only if you cannot go on without a human (the task stops and a human is asked).",
	Implementation: "SUCCESS when the component is built and tested; PARTIAL or FAILED if not (you will get another round); " +
		"BLOCKED, with blockers, only if you cannot go on without a human (the task stops and a human is asked).",
	Plan: "COMPLETE when the plan is ready: each component becomes a task of the workflow; NEEDS_REFINEMENT if not " +
		"(you will get another round); BLOCKED, with blockers, only if you cannot go on without a human.",
	Review: "APPROVED if the change may land as it is; CHANGES_REQUESTED or REJECTED otherwise, with at least one issue. " +
		"A reply without a valid block counts as a rejection.",
}

// Instructions is the text to append to an agent's prompt for the named
// schema (OUT-08): the agent must end its final message with one fenced
// json block matching the schema, which is quoted in full, with an
// example. It returns "" for an unknown or empty name.
func Instructions(schema string) string {
	doc := SchemaDocument(schema)
	if doc == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Required output format (%s)\n\n", schema)
	b.WriteString("End your final message with exactly one JSON code block (```json … ```) that matches the JSON Schema below. ")
	b.WriteString("It must be the last JSON block of the message. Nothing else is read as your result: ")
	b.WriteString("without a valid block the round fails and you are asked again.\n\n")
	fmt.Fprintf(&b, "Status: %s\n\n", statusMeaning[schema])
	if schema == Plan {
		b.WriteString("Component and phase ids: lower-case letters, digits, '-' and '_'. Phases run in the order listed: " +
			"every component of a phase waits for every component of the phase before it, and for the components it names in depends_on.\n\n")
	}
	b.WriteString("Schema:\n\n```json\n")
	b.Write(bytes.TrimSpace(doc))
	b.WriteString("\n```\n\nExample:\n\n```json\n")
	b.Write(Example(schema))
	b.WriteString("\n```\n")
	return b.String()
}
