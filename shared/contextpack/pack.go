package contextpack

import (
	"context"
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Limits on what is read.
const (
	// MaxFileBytes: a larger file is left out of its part (noted in the
	// manifest).
	MaxFileBytes = 256 << 10
	// MaxPartBytes: a part whose text grows past it is dropped whole; it
	// could not fit the largest budget (MaxBudget tokens) anyway.
	MaxPartBytes = 4 << 20
	// maxDiffBytes caps the diff git may print.
	maxDiffBytes = MaxPartBytes + 1
)

// AlwaysExcluded are globs of files that typically hold nothing but
// secrets; no part ever packs them, whatever its globs say (CTX-07).
var AlwaysExcluded = []string{
	"**/.env", "**/.env.*", "**/*.pem", "**/*.key", "**/*.p12", "**/*.pfx", "**/id_rsa*", "**/id_ed25519*",
	"**/id_ecdsa*", "**/.netrc", "**/.npmrc", "**/.pypirc", "**/credentials", "**/credentials.json", "**/.git-credentials",
}

// Request is what Pack needs.
type Request struct {
	// Dir is the worktree's root; files are read from it.
	Dir string
	// Git runs git in the worktree (its Dir, or GitDir and WorkTree, set).
	Git gitexec.Runner
	// Base is the commit diff and changed parts are measured against
	// ("" = HEAD).
	Base string
	// Spec is the job's context: strategy, budget, targets, plan.
	Spec protocol.ContextSpec
	// Task is the task's prompt: always sent, counted against the budget
	// first (it is never dropped).
	Task string
	// Tokenizer counts tokens (nil: NewTokenizer()).
	Tokenizer *Tokenizer
}

// Packed is a packed context.
type Packed struct {
	// Text is the context, markdown: one section per part kept, a header
	// per file. Prompt puts it before the task.
	Text string
	// Manifest says what was kept and dropped, and why.
	Manifest Manifest
}

// Manifest accounts for a packed context.
type Manifest struct {
	Strategy string `json:"strategy"`
	Budget   int    `json:"budget"`
	// Encoding is the tokenizer's encoding; Estimated says some count fell
	// back to Estimate.
	Encoding  string `json:"encoding"`
	Estimated bool   `json:"estimated,omitempty"`
	// Tokens counts the whole prompt (context and task); TaskTokens the
	// task alone.
	Tokens     int        `json:"tokens"`
	TaskTokens int        `json:"task_tokens"`
	Parts      []PartInfo `json:"parts"`
	// Skipped are files a part matched but did not pack, with the reason.
	Skipped []Skipped `json:"skipped,omitempty"`
}

// PartInfo is one part's account.
type PartInfo struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Priority is the part's rank in priority_order, 1 the most important.
	Priority int      `json:"priority"`
	Keep     bool     `json:"keep,omitempty"`
	Tokens   int      `json:"tokens"`
	Files    []string `json:"files,omitempty"`
	Included bool     `json:"included"`
	// Reason says why a part is not included ("empty", "over budget", …).
	Reason string `json:"reason,omitempty"`
}

// Skipped is a file left out, and why.
type Skipped struct {
	Part   string `json:"part"`
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// TooLargeError is returned when the task and the parts that must be kept
// do not fit the budget even with every other part dropped (CTX-05).
type TooLargeError struct {
	Strategy string
	Budget   int
	// Minimum is the tokens of the task and the kept parts.
	Minimum int
	Kept    []string
}

func (e *TooLargeError) Error() string {
	what := "the task alone"
	if len(e.Kept) > 0 {
		what = "the task and the parts that are always kept (" + strings.Join(e.Kept, ", ") + ")"
	}
	return fmt.Sprintf("context strategy %s: %s take %d tokens; the budget is %d: raise the budget or narrow the strategy",
		e.Strategy, what, e.Minimum, e.Budget)
}

// gathered is one part before pruning.
type gathered struct {
	info PartInfo
	text string // its section, redacted
}

// Pack gathers the strategy's parts from the worktree, redacts secrets,
// and drops whole parts from the lowest priority up until the context and
// the task fit the budget (CTX-05). Parts that must be kept are never
// dropped: when they and the task do not fit, Pack returns a
// *TooLargeError; an invalid strategy or budget is a *DefinitionError.
func Pack(ctx context.Context, req Request) (*Packed, error) {
	s := req.Spec.Definition
	if err := Validate(s); err != nil {
		return nil, err
	}
	budget := req.Spec.Budget
	if budget == 0 {
		budget = s.TokenBudget
	}
	if budget < MinBudget || budget > MaxBudget {
		return nil, &DefinitionError{Msg: fmt.Sprintf("context strategy %s: budget %d is out of range: must be between %d and %d",
			s.Name, budget, MinBudget, MaxBudget)}
	}
	tok := req.Tokenizer
	if tok == nil {
		tok = NewTokenizer()
	}
	g, err := newGatherer(ctx, req)
	if err != nil {
		return nil, err
	}
	defer g.root.Close() //nolint:errcheck // read-only
	parts := g.gather(ctx)
	if g.err != nil {
		return nil, g.err
	}

	m := Manifest{Strategy: s.Name, Budget: budget, Encoding: Encoding, Skipped: g.skipped}
	count := func(text string) int {
		n, exact := tok.Count(text)
		if !exact {
			m.Estimated = true
		}
		return n
	}
	task := req.Task
	m.TaskTokens = count(taskSection(task))
	rank := map[string]int{}
	for i, n := range s.PriorityOrder {
		rank[n] = i + 1
	}
	keep := map[string]bool{}
	for _, n := range s.Keep {
		keep[n] = true
	}
	for i := range parts {
		p := &parts[i]
		p.info.Priority, p.info.Keep = rank[p.info.Name], keep[p.info.Name]
		if p.info.Reason == "" && p.text != "" {
			p.info.Tokens = count(p.text)
			p.info.Included = true
		}
	}

	// Drop whole parts, the lowest priority first (CTX-05). Sums of the
	// parts' own counts decide first, so a large context is not counted
	// again after each drop; then the whole prompt is counted, and parts
	// are dropped on until it fits (the sum and the count of the joined
	// text differ by a few tokens where parts meet).
	header := count(compose(s.Name, []gathered{{info: PartInfo{Included: true}}}))
	sum := func() int {
		n := m.TaskTokens
		for _, p := range parts {
			if p.info.Included {
				n += p.info.Tokens
			}
		}
		if n > m.TaskTokens {
			n += header
		}
		return n
	}
	text := compose(s.Name, parts)
	total := sum()
	exact := false
	for {
		if !exact && total <= budget {
			exact = true
			text = compose(s.Name, parts)
			total = count(prompt(text, task))
		}
		if total <= budget || !dropLowest(parts, s.PriorityOrder, total, budget) {
			break
		}
		if exact {
			text = compose(s.Name, parts)
			total = count(prompt(text, task))
		} else {
			total = sum()
		}
	}
	if !exact {
		text = compose(s.Name, parts)
		total = count(prompt(text, task))
	}
	for _, p := range parts {
		if p.info.Keep && p.info.Reason != "" && p.info.Reason != reasonEmpty {
			return nil, &DefinitionError{Msg: fmt.Sprintf("context strategy %s: part %s must be kept but was %s", s.Name, p.info.Name,
				strings.TrimPrefix(p.info.Reason, "dropped: "))}
		}
	}
	if total > budget {
		return nil, &TooLargeError{Strategy: s.Name, Budget: budget, Minimum: total, Kept: s.Keep}
	}
	m.Tokens = total
	for _, p := range parts {
		m.Parts = append(m.Parts, p.info)
	}
	return &Packed{Text: text, Manifest: m}, nil
}

const reasonEmpty = "empty"

// dropLowest drops the included part of lowest priority that is not kept,
// recording why; false when there is none.
func dropLowest(parts []gathered, priority []string, total, budget int) bool {
	for i := len(priority) - 1; i >= 0; i-- {
		for j := range parts {
			p := &parts[j]
			if p.info.Name != priority[i] || !p.info.Included || p.info.Keep {
				continue
			}
			p.info.Included = false
			p.info.Reason = fmt.Sprintf("dropped: over budget (%d tokens with it, budget %d)", total, budget)
			return true
		}
	}
	return false
}

// Prompt returns the prompt an agent is given: the packed context first,
// then the task under a "# Task" heading (the task last, where the
// agent's instructions end).
func (p *Packed) Prompt(task string) string { return prompt(p.Text, task) }

func prompt(context, task string) string {
	if context == "" {
		return task
	}
	return context + "\n" + taskSection(task)
}

func taskSection(task string) string { return "# Task\n\n" + task }

// compose renders the included parts, in the strategy's order.
func compose(strategy string, parts []gathered) string {
	var b strings.Builder
	for _, p := range parts {
		if !p.info.Included {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "# Context (strategy %s)\n\n", strategy)
		}
		b.WriteString(p.text)
		b.WriteString("\n")
	}
	return b.String()
}
