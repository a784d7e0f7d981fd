package protocol

// ContextSpec says what context a node's agent is given (CTX-01…CTX-09):
// the strategy, resolved in full when the workflow is parsed so a worker
// on any host packs it without reading configuration files, the token
// budget and the files the task targets. Package shared/contextpack
// packs it.
type ContextSpec struct {
	// Strategy is the strategy's name, as the workflow or role named it.
	Strategy string `json:"strategy"`
	// Definition is the strategy itself.
	Definition ContextStrategy `json:"definition"`
	// Budget is the token budget in effect: the task's, else the
	// strategy's.
	Budget int `json:"budget"`
	// Targets are the globs $TARGET stands for: the files the task works
	// on (relative to the repository root).
	Targets []string `json:"targets,omitempty"`
	// Interfaces are the globs $INTERFACES stands for: the interface
	// definitions the task must respect.
	Interfaces []string `json:"interfaces,omitempty"`
	// Plan is, on an AgentJob, the prompts of the node's direct
	// dependencies: the work a reviewer checks the change against (CTX-06).
	// The coordinator fills it when it builds the job.
	Plan string `json:"plan,omitempty"`
}

// ContextStrategy is one context strategy (CTX-03): the parts it gathers,
// in the order they are printed, the order they are kept in when the
// budget is short, and the budget.
type ContextStrategy struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// TokenBudget is the strategy's budget (CTX-08: 20 000 when the file
	// sets none, at most 50 000).
	TokenBudget int `json:"token_budget"`
	// Exclude applies to every part that lists files.
	Exclude []string `json:"exclude,omitempty"`
	// Parts are gathered and printed in this order (the strategy's steps).
	Parts []ContextPart `json:"parts"`
	// PriorityOrder names every part, the most important first: over
	// budget, parts are dropped whole from the end (CTX-05).
	PriorityOrder []string `json:"priority_order"`
	// Keep names the parts that are never dropped: when they and the task
	// do not fit, packing fails.
	Keep []string `json:"keep,omitempty"`
}

// ContextPart is one part of a strategy.
type ContextPart struct {
	Name string `json:"name"`
	// Kind is what the part holds: "files" (tracked files matching
	// Include), "imports" (the files that the files of part Of import),
	// "diff" (the change against the base commit), "changed" (the changed
	// files in full), "plan" (the dependencies' prompts) or "tree" (the
	// list of tracked files matching Include, all when empty).
	Kind string `json:"kind"`
	// Include are globs, with $TARGET and $INTERFACES placeholders.
	Include []string `json:"include,omitempty"`
	// Exclude are globs left out of this part, besides the strategy's.
	Exclude []string `json:"exclude,omitempty"`
	// Of names the part whose files an "imports" part resolves.
	Of string `json:"of,omitempty"`
}
