// Package workflow parses and validates workflow YAML into the wire form
// protocol.WorkflowSpec, and holds the pure scheduling logic the coordinator
// applies to it: the task DAG (dag.go), gate dependency layers, and the fold
// of a node's gate results into one outcome (outcome.go).
package workflow
