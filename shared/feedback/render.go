package feedback

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/supervisorhq/supervisor/shared/agentoutput"
)

// templateFS holds the templates (RETRY-09, FB-06): one file per role at
// the top (default.tmpl and role-specific ones), the sections every role
// shares under parts/, and one template per kind of gate failure under
// gates/ (gates/<kind>.tmpl defines "gate/<kind>").
//
//go:embed templates
var templateFS embed.FS

// roles maps each role (default, implementer…) to its parsed set: the
// shared parts and gate templates plus the role's file, which is the
// template named "<role>.tmpl".
var roles = mustParseRoles()

func mustParseRoles() map[string]*template.Template {
	base := template.Must(template.New("feedback").Funcs(funcs).ParseFS(templateFS, "templates/parts/*.tmpl", "templates/gates/*.tmpl"))
	entries, err := fs.ReadDir(templateFS, "templates")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, e := range entries {
		role, ok := strings.CutSuffix(e.Name(), ".tmpl")
		if e.IsDir() || !ok {
			continue
		}
		t := template.Must(base.Clone())
		out[role] = template.Must(t.ParseFS(templateFS, path.Join("templates", e.Name())))
	}
	if out["default"] == nil {
		panic("feedback: templates/default.tmpl is missing")
	}
	return out
}

// Templates returns the names of the feedback templates (default,
// implementer …), sorted: the values a role's feedback may name.
func Templates() []string {
	names := make([]string, 0, len(roles))
	for name := range roles {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Render writes f as Markdown to append to the agent's prompt (FB-02,
// FB-05, FB-06, RETRY-09). The template is templates/<role>.tmpl when the
// role has one (implementer…), else templates/default.tmpl; each gate is
// rendered by the template of its Kind (generic for an unknown kind).
//
// The operator's note comes first, marked as the operator's; then the
// constraints; then the untrusted notice, and only after it anything taken
// from gate output: priority fixes, names, messages and tails. Tails and
// messages are in fenced blocks whose fence is longer than any run of
// backticks inside, so no output can close its block early. Empty lists
// render as "(none)" (FB-08).
func Render(f Feedback, role string) (string, error) {
	if roles[role] == nil {
		role = "default"
	}
	t, err := roles[role].Clone()
	if err != nil {
		return "", err
	}
	// "gate" renders one gate with the template of its kind.
	t.Funcs(template.FuncMap{"gate": func(g Gate) (string, error) {
		kt := t.Lookup("gate/" + g.Kind)
		if kt == nil {
			kt = t.Lookup("gate/" + KindGeneric)
		}
		var b strings.Builder
		err := kt.Execute(&b, g)
		return b.String(), err
	}})
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, role+".tmpl", f); err != nil {
		return "", fmt.Errorf("feedback: render: %w", err)
	}
	return b.String(), nil
}

// funcs are the helpers the templates use.
var funcs = template.FuncMap{
	"fence":   fence,
	"code":    code,
	"oneline": oneLine,
	"exit": func(p *int) string {
		if p == nil {
			return "none (it did not exit by itself)"
		}
		return strconv.Itoa(*p)
	},
	"add": func(a, b int) int { return a + b },
	// "instructions" is the output schema's requirements and example.
	"instructions": agentoutput.Instructions,
	"join":         strings.Join,
	"lines": func(s string) []string {
		return strings.Split(s, "\n")
	},
	// "gate" is replaced in Render; this one lets the templates parse.
	"gate": func(Gate) (string, error) { return "", nil },
}

// fence puts s in a text code block (Fence).
func fence(s string) string { return Fence(s, "text") }

// Fence puts s in a fenced code block with info string lang, whose fence
// is longer than any run of backticks in s (at least three), so nothing
// in s can end it. Trailing newlines of s are dropped; the block ends
// with its closing fence, without a newline.
func Fence(s, lang string) string {
	f := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	s = strings.TrimRight(s, "\n")
	return f + lang + "\n" + s + "\n" + f
}

// code puts s, on one line, in an inline code span delimited by more
// backticks than any run inside it (CommonMark's rule), padded with a
// space when s starts or ends with a backtick.
func code(s string) string {
	s = oneLine(s)
	if s == "" {
		return "``"
	}
	d := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return d + s + d
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	best, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
			best = max(best, n)
		} else {
			n = 0
		}
	}
	return best
}
