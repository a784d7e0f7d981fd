// Package contextpack gives an agent the context its role needs within a
// token budget (CTX-01…CTX-11). A strategy (a YAML file in configs/context,
// loaded here into a protocol.ContextStrategy) names the parts to gather —
// files matching globs, the files they import, the diff against the base
// commit, the changed files in full, the plan of the work under review, a
// file tree — the order they are printed in, the order they are kept in
// when the budget is short, and the budget. Pack reads a git worktree
// (tracked files only, so ignored files are never packed), redacts secrets,
// counts tokens with a real tokenizer and drops whole parts from the lowest
// priority up until the context fits.
package contextpack

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Token budgets (CTX-08): they size the context, not the cost.
const (
	DefaultBudget = 20000
	MaxBudget     = 50000
	// MinBudget is the smallest budget accepted.
	MinBudget = 1000
)

// Part kinds.
const (
	KindFiles   = "files"
	KindImports = "imports"
	KindDiff    = "diff"
	KindChanged = "changed"
	KindPlan    = "plan"
	KindTree    = "tree"
)

// Kinds lists the part kinds, for messages.
var Kinds = []string{KindFiles, KindImports, KindDiff, KindChanged, KindPlan, KindTree}

// Placeholders in include globs (CTX-09).
const (
	PlaceholderTarget     = "$TARGET"
	PlaceholderInterfaces = "$INTERFACES"
)

var nameRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$`)

// ValidName reports whether s may name a strategy or a part: lowercase
// letters, digits, '_' and '-', starting and ending with a letter or digit,
// at most 64 characters.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// DefinitionError is a context that cannot be packed as defined: an
// invalid strategy or budget. Packing it again would fail again.
type DefinitionError struct {
	Msg string
}

func (e *DefinitionError) Error() string { return e.Msg }

// Validate checks a strategy that did not come from a file (a job's
// ContextSpec, say) the way the loader checks files. Its error is a
// *DefinitionError.
func Validate(s protocol.ContextStrategy) error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !ValidName(s.Name) {
		add("strategy name %q is not valid", s.Name)
	}
	if s.TokenBudget < MinBudget || s.TokenBudget > MaxBudget {
		add("token_budget %d is out of range: must be between %d and %d", s.TokenBudget, MinBudget, MaxBudget)
	}
	if len(s.Parts) == 0 {
		add("strategy has no parts")
	}
	parts := map[string]protocol.ContextPart{}
	for _, p := range s.Parts {
		if _, dup := parts[p.Name]; dup {
			add("part %q appears twice", p.Name)
		}
		parts[p.Name] = p
		if !ValidName(p.Name) {
			add("part name %q is not valid", p.Name)
		}
		if !validKind(p.Kind) {
			add("part %q has unknown kind %q", p.Name, p.Kind)
		}
		if msg := checkPart(p, parts); msg != "" {
			add("part %q: %s", p.Name, msg)
		}
	}
	seen := map[string]bool{}
	for _, n := range s.PriorityOrder {
		if _, ok := parts[n]; !ok {
			add("priority_order names unknown part %q", n)
		}
		if seen[n] {
			add("priority_order lists %q twice", n)
		}
		seen[n] = true
	}
	for _, p := range s.Parts {
		if !seen[p.Name] {
			add("priority_order does not list part %q", p.Name)
		}
	}
	for _, n := range s.Keep {
		if _, ok := parts[n]; !ok {
			add("keep names unknown part %q", n)
		}
	}
	if len(problems) > 0 {
		return &DefinitionError{Msg: fmt.Sprintf("context strategy %q: %s", s.Name, strings.Join(problems, "; "))}
	}
	return nil
}

func validKind(k string) bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// checkPart returns what is wrong with a part's fields for its kind, given
// the parts before it ("" if nothing).
func checkPart(p protocol.ContextPart, before map[string]protocol.ContextPart) string {
	switch p.Kind {
	case KindFiles:
		if len(p.Include) == 0 {
			return "a files part needs include"
		}
	case KindImports:
		if p.Of == "" {
			return "an imports part needs of (the part whose files' imports it resolves)"
		}
		of, ok := before[p.Of]
		if !ok || of.Name == p.Name {
			return fmt.Sprintf("of names %q, which is not a part before this one", p.Of)
		}
		if of.Kind != KindFiles && of.Kind != KindChanged {
			return fmt.Sprintf("of names %q, a %s part; it must be a files or changed part", p.Of, of.Kind)
		}
	}
	if p.Of != "" && p.Kind != KindImports {
		return "only an imports part takes of"
	}
	if len(p.Include) > 0 && p.Kind != KindFiles && p.Kind != KindTree {
		return "only files and tree parts take include"
	}
	for _, g := range append(append([]string(nil), p.Include...), p.Exclude...) {
		if msg := checkGlob(g); msg != "" {
			return msg
		}
	}
	return ""
}

// checkGlob returns what is wrong with an include or exclude glob.
func checkGlob(g string) string {
	switch {
	case strings.TrimSpace(g) == "":
		return "a glob is empty"
	case strings.HasPrefix(g, "/"):
		return fmt.Sprintf("glob %q is absolute; globs are relative to the repository root", g)
	case strings.Contains(g, "$") && g != PlaceholderTarget && g != PlaceholderInterfaces:
		return fmt.Sprintf("glob %q: a placeholder (%s or %s) must stand alone", g, PlaceholderTarget, PlaceholderInterfaces)
	}
	for _, seg := range strings.Split(g, "/") {
		if seg == ".." {
			return fmt.Sprintf("glob %q leaves the repository (..)", g)
		}
	}
	return ""
}

// CheckGlob returns an error saying what is wrong with a target or
// interface glob of a task (relative to the repository root, not leaving
// it), or nil.
func CheckGlob(g string) error {
	if strings.Contains(g, "$") {
		return fmt.Errorf("glob %q: placeholders belong in strategies, not in targets", g)
	}
	if msg := checkGlob(g); msg != "" {
		return errors.New(msg)
	}
	return nil
}

// Spec resolves a strategy of the catalogue into the ContextSpec a task
// carries: the strategy's definition in full, the budget (0: the
// strategy's own) and the targets and interface globs. It is how a
// workflow's context field and a role's strategy become a task's Context.
func (c *Catalogue) Spec(name string, budget int, targets, interfaces []string) (*protocol.ContextSpec, error) {
	s, ok := c.Lookup(name)
	if !ok {
		known := "none are loaded"
		if names := c.Names(); len(names) > 0 {
			known = "known: " + strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("unknown context strategy %q (%s)", name, known)
	}
	if budget == 0 {
		budget = s.TokenBudget
	}
	if budget < MinBudget || budget > MaxBudget {
		return nil, fmt.Errorf("context budget %d is out of range: must be between %d and %d", budget, MinBudget, MaxBudget)
	}
	for _, g := range append(append([]string(nil), targets...), interfaces...) {
		if err := CheckGlob(g); err != nil {
			return nil, err
		}
	}
	return &protocol.ContextSpec{Strategy: name, Definition: s, Budget: budget,
		Targets: dirGlobs(targets), Interfaces: dirGlobs(interfaces)}, nil
}

// dirGlobs copies globs, a directory written with a trailing slash
// ("internal/store/") becoming everything under it, as a task's files.
func dirGlobs(globs []string) []string {
	var out []string
	for _, g := range globs {
		if strings.HasSuffix(g, "/") {
			g = strings.TrimRight(g, "/") + "/**"
		}
		out = append(out, g)
	}
	return out
}
