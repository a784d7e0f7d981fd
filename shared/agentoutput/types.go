package agentoutput

import (
	"encoding/json"
)

// Statuses of the four schemas.
const (
	StatusSuccess           = "SUCCESS"           // generic, implementation
	StatusNeedsRevision     = "NEEDS_REVISION"    // generic
	StatusBlocked           = "BLOCKED"           // every schema but review
	StatusPartial           = "PARTIAL"           // implementation
	StatusFailed            = "FAILED"            // implementation
	StatusComplete          = "COMPLETE"          // plan
	StatusNeedsRefinement   = "NEEDS_REFINEMENT"  // plan
	VerdictApproved         = "APPROVED"          // review
	VerdictChangesRequested = "CHANGES_REQUESTED" // review
	VerdictRejected         = "REJECTED"          // review
)

// GenericOutput is the generic schema's block (OUT-02).
type GenericOutput struct {
	Status        string   `json:"status"`
	ActionTaken   string   `json:"action_taken"`
	FilesModified []string `json:"files_modified,omitempty"`
	// ReviewStatus is APPROVED, CHANGES_REQUESTED or "" (null).
	ReviewStatus string   `json:"review_status,omitempty"`
	Blockers     []string `json:"blockers,omitempty"`
	NextStep     string   `json:"next_step,omitempty"`
}

// ImplementationOutput is an implementer's block (OUT-04).
type ImplementationOutput struct {
	Status        string   `json:"status"`
	Summary       string   `json:"summary,omitempty"`
	FilesCreated  []string `json:"files_created"`
	FilesModified []string `json:"files_modified"`
	TestsWritten  []string `json:"tests_written"`
	Blockers      []string `json:"blockers,omitempty"`
}

// ReviewOutput is a reviewer's block (OUT-05): Status is the verdict.
type ReviewOutput struct {
	Status           string        `json:"status"`
	Issues           []ReviewIssue `json:"issues"`
	Suggestions      []string      `json:"suggestions"`
	SecurityConcerns []string      `json:"security_concerns,omitempty"`
}

// ReviewIssue is one problem a reviewer found.
type ReviewIssue struct {
	// Severity is critical, major, minor or info.
	Severity    string `json:"severity"`
	File        string `json:"file,omitempty"`
	Line        int    `json:"line,omitempty"`
	Description string `json:"description"`
	Suggestion  string `json:"suggestion,omitempty"`
}

// PlanOutput is a planner's block (OUT-03, HIER-04).
type PlanOutput struct {
	Status              string       `json:"status"`
	Phases              []Phase      `json:"phases"`
	Dependencies        []Dependency `json:"dependencies,omitempty"`
	EstimatedComponents int          `json:"estimated_components"`
	Risks               []string     `json:"risks,omitempty"`
	Blockers            []string     `json:"blockers,omitempty"`
}

// Phase groups components (PhaseDefinition). Phases run in order: each
// component of a phase waits for every component of the phase before.
type Phase struct {
	ID         string      `json:"id"`
	Title      string      `json:"title,omitempty"`
	Components []Component `json:"components"`
	Interfaces []Interface `json:"interfaces,omitempty"`
}

// Component is one unit of work of a plan: it becomes a workflow node.
type Component struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	// Files are globs of the files the component owns.
	Files []string `json:"files,omitempty"`
	// DependsOn names components, of any phase, this one waits for.
	DependsOn []string `json:"depends_on,omitempty"`
	// Interfaces names interfaces the component implements or uses.
	Interfaces []string `json:"interfaces,omitempty"`
}

// Dependency says that Component waits for DependsOn.
type Dependency struct {
	Component string `json:"component"`
	DependsOn string `json:"depends_on"`
	Reason    string `json:"reason,omitempty"`
}

// Interface is a contract fixed before the components using it are built
// (HIER-03): Type is the definition's language (typescript_interface,
// openapi, go …).
type Interface struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
	File       string `json:"file,omitempty"`
}

// Output is a validated block, decoded: exactly one of the typed fields,
// the one of Schema, is set.
type Output struct {
	Schema string
	// Block is the block as extracted, compacted.
	Block          json.RawMessage
	Generic        *GenericOutput
	Plan           *PlanOutput
	Implementation *ImplementationOutput
	Review         *ReviewOutput
}

// Status is the block's status (a review's verdict).
func (o *Output) Status() string {
	switch {
	case o.Generic != nil:
		return o.Generic.Status
	case o.Plan != nil:
		return o.Plan.Status
	case o.Implementation != nil:
		return o.Implementation.Status
	case o.Review != nil:
		return o.Review.Status
	}
	return ""
}

// Blockers are what the agent said keeps it from going on.
func (o *Output) Blockers() []string {
	switch {
	case o.Generic != nil:
		return o.Generic.Blockers
	case o.Plan != nil:
		return o.Plan.Blockers
	case o.Implementation != nil:
		return o.Implementation.Blockers
	}
	return nil
}

// Parse extracts the last JSON block of text, validates it against the
// named schema and decodes it. Its errors are Extract's and Validate's.
func Parse(schema, text string) (*Output, error) {
	block, err := Extract(text)
	if err != nil {
		if ie, ok := err.(*InvalidError); ok {
			ie.Schema = schema
		}
		return nil, err
	}
	return Decode(schema, block)
}

// Decode validates block against the named schema and decodes it.
func Decode(schema string, block []byte) (*Output, error) {
	if err := Validate(schema, block); err != nil {
		return nil, err
	}
	o := &Output{Schema: schema, Block: compact(block)}
	var target any
	switch schema {
	case Generic:
		o.Generic = &GenericOutput{}
		target = o.Generic
	case Plan:
		o.Plan = &PlanOutput{}
		target = o.Plan
	case Implementation:
		o.Implementation = &ImplementationOutput{}
		target = o.Implementation
	case Review:
		o.Review = &ReviewOutput{}
		target = o.Review
	}
	if err := json.Unmarshal(block, target); err != nil {
		// The schema admits a few numbers the types do not (3.0 for an
		// integer): the agent hears it like any other violation.
		return nil, &InvalidError{Schema: schema, Violations: []Violation{{Message: "cannot be decoded: " + err.Error()}}}
	}
	if o.Plan != nil {
		if vs := checkPlan(o.Plan); len(vs) > 0 {
			return nil, &InvalidError{Schema: schema, Violations: vs}
		}
	}
	return o, nil
}
