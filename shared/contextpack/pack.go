package contextpack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/supervisorhq/supervisor/shared/gitexec"
	"github.com/supervisorhq/supervisor/shared/pathglob"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
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

// gatherer reads the worktree for one Pack.
type gatherer struct {
	req     Request
	root    *os.Root
	files   []string // tracked files, in git's order
	index   *repoIndex
	claimed map[string]string // file → the part (higher priority) that packs it
	byName  map[string][]string
	skipped []Skipped
	err     error
}

func newGatherer(ctx context.Context, req Request) (*gatherer, error) {
	out, err := req.Git.Output(ctx, "ls-files", "-z", "--cached")
	if err != nil {
		return nil, fmt.Errorf("context: list tracked files: %w", err)
	}
	root, err := os.OpenRoot(req.Dir)
	if err != nil {
		return nil, fmt.Errorf("context: open worktree: %w", err)
	}
	g := &gatherer{req: req, root: root, claimed: map[string]string{}, byName: map[string][]string{}}
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			g.files = append(g.files, f)
		}
	}
	g.index = newRepoIndex(g.files, func(f string) ([]byte, bool) {
		data, reason := g.read(f)
		return data, reason == ""
	})
	return g, nil
}

// read returns a regular tracked file's content, or why it is not packed.
// The worktree is opened as an os.Root, so no symbolic link leads out.
func (g *gatherer) read(f string) ([]byte, string) {
	info, err := g.root.Lstat(f)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "deleted"
		}
		return nil, err.Error()
	}
	switch {
	case !info.Mode().IsRegular():
		return nil, "not a regular file"
	case info.Size() > MaxFileBytes:
		return nil, fmt.Sprintf("%d bytes, over the %d-byte limit", info.Size(), MaxFileBytes)
	}
	data, err := g.root.ReadFile(f)
	if err != nil {
		return nil, err.Error()
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return nil, "binary"
	}
	return data, ""
}

// gather builds every part, claiming files for parts in priority order so
// that a file is packed once, by the most important part that wants it.
func (g *gatherer) gather(ctx context.Context) []gathered {
	s := g.req.Spec.Definition
	byName := map[string]protocol.ContextPart{}
	for _, p := range s.Parts {
		byName[p.Name] = p
	}
	// The files each part wants, in the strategy's order (an imports part
	// comes after the part it resolves).
	var diff []byte
	diffTooLarge := false
	for _, p := range s.Parts {
		switch p.Kind {
		case KindFiles:
			g.byName[p.Name] = g.match(p, g.files)
		case KindChanged:
			g.byName[p.Name] = g.match(p, g.changed(ctx))
		case KindImports:
			g.byName[p.Name] = g.match(p, g.importsOf(g.byName[p.Of]))
		case KindDiff:
			diff, diffTooLarge = g.diff(ctx, p)
		}
		if g.err != nil {
			return nil
		}
	}
	// Claims follow the priority order: a file is packed once, by the most
	// important part that wants it.
	lists := map[string][]string{}
	for _, name := range s.PriorityOrder {
		var own []string
		for _, f := range g.byName[name] {
			if _, taken := g.claimed[f]; !taken {
				g.claimed[f] = name
				own = append(own, f)
			}
		}
		lists[name] = own
	}
	out := make([]gathered, 0, len(s.Parts))
	for _, p := range s.Parts {
		gp := gathered{info: PartInfo{Name: p.Name, Kind: p.Kind}}
		var b strings.Builder
		tooLarge := false
		switch p.Kind {
		case KindFiles, KindChanged, KindImports:
			for _, f := range lists[p.Name] {
				if b.Len() > MaxPartBytes {
					tooLarge = true
					break
				}
				data, why := g.read(f)
				if why != "" {
					g.skipped = append(g.skipped, Skipped{Part: p.Name, File: f, Reason: why})
					continue
				}
				writeFile(&b, f, string(data))
				gp.info.Files = append(gp.info.Files, f)
			}
		case KindDiff:
			tooLarge = diffTooLarge
			if len(diff) > 0 {
				writeBlock(&b, "diff", string(diff))
			}
		case KindPlan:
			if plan := strings.TrimSpace(g.req.Spec.Plan); plan != "" {
				b.WriteString(plan)
				b.WriteString("\n")
			}
		case KindTree:
			var tree strings.Builder
			for _, f := range g.match(p, g.files) {
				tree.WriteString(f)
				tree.WriteString("\n")
			}
			if tree.Len() > 0 {
				writeBlock(&b, "text", tree.String())
			}
		}
		switch {
		case tooLarge || b.Len() > MaxPartBytes:
			gp.info.Reason = fmt.Sprintf("dropped: over %d bytes of text, far beyond the largest budget (%d tokens)", MaxPartBytes, MaxBudget)
			gp.info.Files = nil
		case b.Len() == 0:
			gp.info.Reason = reasonEmpty
		default:
			gp.text = redact.String(fmt.Sprintf("## %s (%s)\n\n%s", p.Name, describeKind(p.Kind), b.String()))
		}
		out = append(out, gp)
	}
	return out
}

func describeKind(k string) string {
	switch k {
	case KindFiles:
		return "files"
	case KindImports:
		return "files the files above import"
	case KindDiff:
		return "the change so far, against the base commit"
	case KindChanged:
		return "the changed files in full"
	case KindPlan:
		return "the plan of the work: the tasks this one builds on"
	case KindTree:
		return "tracked files"
	}
	return k
}

// match filters files by the part's include globs (all files when it has
// none, for changed and imports parts), its excludes, the strategy's and
// AlwaysExcluded.
func (g *gatherer) match(p protocol.ContextPart, files []string) []string {
	var include []*pathglob.Pattern
	for _, glob := range p.Include {
		switch glob {
		case PlaceholderTarget:
			for _, t := range g.req.Spec.Targets {
				include = append(include, pathglob.Compile(t))
			}
		case PlaceholderInterfaces:
			for _, t := range g.req.Spec.Interfaces {
				include = append(include, pathglob.Compile(t))
			}
		default:
			include = append(include, pathglob.Compile(glob))
		}
	}
	if len(p.Include) > 0 && len(include) == 0 {
		return nil // placeholders with nothing to stand for
	}
	var exclude []*pathglob.Pattern
	for _, glob := range g.excludes(p) {
		exclude = append(exclude, pathglob.Compile(glob))
	}
	var out []string
	for _, f := range files {
		if len(include) > 0 && !anyMatch(include, f) {
			continue
		}
		if anyMatch(exclude, f) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// excludes are the globs part p leaves out: AlwaysExcluded, the
// strategy's and the part's own.
func (g *gatherer) excludes(p protocol.ContextPart) []string {
	return append(append(append([]string(nil), AlwaysExcluded...), g.req.Spec.Definition.Exclude...), p.Exclude...)
}

func anyMatch(ps []*pathglob.Pattern, f string) bool {
	for _, p := range ps {
		if p.Match(f) {
			return true
		}
	}
	return false
}

// importsOf returns the tracked files the given files import, without
// those files themselves, in first-seen order.
func (g *gatherer) importsOf(files []string) []string {
	seen := map[string]bool{}
	for _, f := range files {
		seen[f] = true
	}
	var out []string
	for _, f := range files {
		data, why := g.read(f)
		if why != "" {
			continue
		}
		for _, imp := range g.index.imports(f, data) {
			if !seen[imp] {
				seen[imp] = true
				out = append(out, imp)
			}
		}
	}
	return out
}

func (g *gatherer) base() string {
	if g.req.Base != "" {
		return g.req.Base
	}
	return "HEAD"
}

// changed lists the tracked files that differ from the base commit and
// still exist.
func (g *gatherer) changed(ctx context.Context) []string {
	out, err := g.req.Git.Output(ctx, "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", g.base(), "--")
	if err != nil {
		g.err = fmt.Errorf("context: list changed files against %s: %w", g.base(), err)
		return nil
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			if _, err := g.root.Lstat(f); err == nil {
				files = append(files, f)
			}
		}
	}
	return files
}

// diff returns the change of the worktree against the base commit, or
// tooLarge when git printed more than MaxPartBytes. Files excluded from
// every part (AlwaysExcluded, the strategy's and the part's excludes) are
// left out of it too, as git glob pathspecs.
func (g *gatherer) diff(ctx context.Context, p protocol.ContextPart) (patch []byte, tooLarge bool) {
	r := g.req.Git
	r.MaxOutput = maxDiffBytes
	args := []string{"diff", "--no-ext-diff", "--no-textconv", "--no-color", g.base(), "--", "."}
	for _, glob := range g.excludes(p) {
		args = append(args, ":(exclude,glob)"+pathglob.Normalize(glob))
	}
	out, err := r.Output(ctx, args...)
	if errors.Is(err, gitexec.ErrOutputLimit) {
		return nil, true
	}
	if err != nil {
		g.err = fmt.Errorf("context: diff against %s: %w", g.base(), err)
		return nil, false
	}
	return out, false
}

// writeFile writes a file's header and its content in a fence.
func writeFile(b *strings.Builder, name, content string) {
	fmt.Fprintf(b, "### %s\n\n", name)
	writeBlock(b, language(name), content)
}

// writeBlock writes a fenced block whose fence is longer than any run of
// backticks in content.
func writeBlock(b *strings.Builder, lang, content string) {
	fence := "```"
	for strings.Contains(content, fence) {
		fence += "`"
	}
	b.WriteString(fence + lang + "\n")
	b.WriteString(content)
	if !strings.HasSuffix(content, "\n") {
		b.WriteString("\n")
	}
	b.WriteString(fence + "\n\n")
}

var languages = map[string]string{
	".go": "go", ".py": "python", ".js": "javascript", ".jsx": "jsx", ".mjs": "javascript", ".cjs": "javascript",
	".ts": "typescript", ".tsx": "tsx", ".md": "markdown", ".yaml": "yaml", ".yml": "yaml", ".json": "json",
	".toml": "toml", ".sh": "sh", ".rs": "rust", ".java": "java", ".rb": "ruby", ".c": "c", ".h": "c",
	".cpp": "cpp", ".sql": "sql", ".html": "html", ".css": "css", ".mod": "go.mod",
}

func language(name string) string { return languages[path.Ext(name)] }
