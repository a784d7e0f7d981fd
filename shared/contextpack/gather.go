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
