package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"gopkg.in/yaml.v3"
)

// Limits and defaults of the workflow schema.
const (
	// MaxFileSize is the largest workflow file Parse accepts (1 MiB).
	MaxFileSize = 1 << 20
	// MaxPromptSize is the largest task prompt, in bytes (256 KiB).
	MaxPromptSize = 256 << 10
	// MaxTasks is the most tasks a workflow may declare.
	MaxTasks = 500
	// MaxGates is the most gates a workflow may declare.
	MaxGates = 100

	// DefaultAgentTimeout is a task's agent timeout, in seconds, when neither
	// the task nor defaults.timeout sets one (30 minutes).
	DefaultAgentTimeout = 30 * 60
	// MaxAgentTimeout is the longest agent timeout, in seconds (24 hours).
	MaxAgentTimeout = 24 * 60 * 60
	// DefaultGateTimeout is a gate's timeout, in seconds, when it sets none.
	DefaultGateTimeout = 300
	// MaxGateTimeout is the longest gate timeout, in seconds (1 hour).
	MaxGateTimeout = 3600
)

// adapters is the one table of agent adapters: each name expands to the argv
// of the real CLI, run non-interactively with the prompt on standard input.
//
//	claude-code  claude -p --output-format json
//	codex        codex exec --json -
//	gemini       gemini --output-format json
var adapters = map[string][]string{
	"claude-code": {"claude", "-p", "--output-format", "json"},
	"codex":       {"codex", "exec", "--json", "-"},
	"gemini":      {"gemini", "--output-format", "json"},
}

// AdapterCommand returns the argv an agent adapter expands to (a fresh copy)
// and whether the adapter is known. Every adapter reads the prompt on stdin.
func AdapterCommand(name string) ([]string, bool) {
	argv, ok := adapters[name]
	if !ok {
		return nil, false
	}
	return append([]string(nil), argv...), true
}

// AdapterNames returns the known agent adapter names, sorted.
func AdapterNames() []string {
	names := make([]string, 0, len(adapters))
	for name := range adapters {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Problem is one validation problem, positioned in the workflow file.
// Line and Column are 1-based; Column is 0 when unknown (YAML syntax
// errors), and both are 0 for problems about the whole file.
type Problem struct {
	File    string
	Line    int
	Column  int
	Message string
}

// String formats the problem as file:line:col: message, leaving out what
// is unknown.
func (p Problem) String() string {
	switch {
	case p.Line == 0:
		return fmt.Sprintf("%s: %s", p.File, p.Message)
	case p.Column == 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	}
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

// ValidationError is every problem Parse found in a workflow file, sorted
// by position.
type ValidationError struct {
	Problems []Problem
}

// Error prints one problem per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Parse parses and validates a workflow file and returns its wire form. The
// filename is only used in messages. On failure the error is a
// *ValidationError listing every problem found, each with its position.
//
// In the result, adapters are expanded into Command, defaults are applied
// (defaults.pool to tasks and gates alike), timeouts are in seconds
// (fractions rounded up), and every task lists its gates explicitly: a task
// that omits gates gets all workflow gates in declaration order, and an
// empty list means none, so consumers never re-expand it. Gate
// dependencies are not added to that list: GateLayers closes over them.
//
// An optional field written with no value (env:) counts as absent, except
// a task's gates, where it is ambiguous and rejected. YAML aliases are
// rejected so every position is exact and no alias can expand the input.
func Parse(filename string, data []byte) (*protocol.WorkflowSpec, error) {
	p := &parser{file: filename}
	if len(data) > MaxFileSize {
		p.addf(nil, "file is %d bytes; a workflow may be at most %d bytes (1 MiB)", len(data), MaxFileSize)
		return nil, p.err()
	}
	root := p.decode(data)
	if root == nil || len(p.problems) > 0 {
		return nil, p.err()
	}
	spec := p.workflow(root)
	if err := p.err(); err != nil {
		return nil, err
	}
	return spec, nil
}

type parser struct {
	file     string
	problems []Problem
}

func (p *parser) addf(n *yaml.Node, format string, args ...any) {
	pr := Problem{File: p.file, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		pr.Line, pr.Column = n.Line, n.Column
	}
	p.problems = append(p.problems, pr)
}

func (p *parser) err() error {
	if len(p.problems) == 0 {
		return nil
	}
	sort.SliceStable(p.problems, func(i, j int) bool {
		a, b := p.problems[i], p.problems[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return &ValidationError{Problems: p.problems}
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlParserProblems are yaml.v3's parser (as opposed to scanner) error
// messages. For these yaml.v3 prints a 0-based line (go-yaml issue #205):
// that of the block the error occurred in, or of the problem itself when
// the block starts on the first line. Scanner errors are already 1-based.
var yamlParserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
}

// decode reads the single YAML document and returns its root node, or nil
// after recording why it could not.
func (p *parser) decode(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.addf(nil, "file is empty; a workflow needs at least name and tasks")
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		p.addf(&extra, "file holds more than one YAML document; a workflow is exactly one")
	case !errors.Is(err, io.EOF):
		p.yamlError(err)
	}
	if len(doc.Content) != 1 {
		p.addf(&doc, "file is empty; a workflow needs at least name and tasks")
		return nil
	}
	p.rejectAliases(doc.Content[0])
	return doc.Content[0]
}

// yamlError records a syntax error at the line yaml.v3 reports, made
// 1-based. yaml.v3 does not report a column.
func (p *parser) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			line, msg = n, m[2]
		}
	}
	if yamlParserProblems[msg] {
		line++
	}
	p.problems = append(p.problems, Problem{File: p.file, Line: line, Message: "invalid YAML: " + msg})
}

// rejectAliases reports every alias (*name): the schema walk never follows
// them, so positions stay exact and no alias can expand the document.
func (p *parser) rejectAliases(n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		p.addf(n, "YAML aliases (*%s) are not supported; write the value out", n.Value)
		return
	}
	for _, c := range n.Content {
		p.rejectAliases(c)
	}
}

// describe names a node's YAML type for "got ..." messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!bool":
			return "a boolean"
		case "!!int", "!!float":
			return "a number"
		}
		return "a string"
	}
	return "an unexpected value"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// field is one key/value pair of a mapping.
type field struct {
	key, val *yaml.Node
}

// fields checks that n is a mapping whose keys are all in known, reporting
// unknown and repeated keys, and returns its fields by key.
func (p *parser) fields(n *yaml.Node, what string, known ...string) (map[string]field, bool) {
	if n.Kind != yaml.MappingNode {
		p.addf(n, "%s must be a mapping, got %s", what, describe(n))
		return nil, false
	}
	out := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.addf(k, "%s keys must be strings, got %s", what, describe(k))
			continue
		}
		if !contains(known, k.Value) {
			msg := fmt.Sprintf("unknown field %q in %s", k.Value, what)
			if s := suggest(k.Value, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			p.addf(k, "%s", msg)
			continue
		}
		if prev, dup := out[k.Value]; dup {
			p.addf(k, "field %q appears twice in %s (first at line %d)", k.Value, what, prev.key.Line)
			continue
		}
		out[k.Value] = field{key: k, val: v}
	}
	return out, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the known word closest to s, if it is close enough to be
// a likely typo.
func suggest(s string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestDist && d < len(k) {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// str returns the value of a scalar field. Numbers and booleans are taken
// as written; null, lists and mappings are reported.
func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) || n.ShortTag() == "!!binary" {
		p.addf(n, "%s must be a string, got %s", what, describe(n))
		return "", false
	}
	if strings.IndexByte(n.Value, 0) >= 0 {
		p.addf(n, "%s must not contain NUL bytes", what)
		return "", false
	}
	return n.Value, true
}

// name returns a field that must satisfy protocol.ValidName.
func (p *parser) name(n *yaml.Node, what string) (string, bool) {
	s, ok := p.str(n, what)
	if !ok {
		return "", false
	}
	if !protocol.ValidName(s) {
		p.addf(n, "invalid %s %q: use %s", what, s, protocol.NameRule)
		return s, false
	}
	return s, true
}

// nameList returns a list of names (depends_on, gates), reporting repeats.
// The nodes are returned so later checks can point at each entry.
func (p *parser) nameList(n *yaml.Node, what string) ([]string, []*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		hint := ""
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			hint = fmt.Sprintf(", e.g. [%s]", n.Value)
		}
		p.addf(n, "%s must be a list of names%s, got %s", what, hint, describe(n))
		return nil, nil, false
	}
	names := make([]string, 0, len(n.Content))
	nodes := make([]*yaml.Node, 0, len(n.Content))
	first := map[string]int{}
	ok := true
	for _, item := range n.Content {
		s, good := p.str(item, what+" entry")
		if !good {
			ok = false
			continue
		}
		if line, dup := first[s]; dup {
			p.addf(item, "%s lists %q twice (first at line %d)", what, s, line)
			ok = false
			continue
		}
		first[s] = item.Line
		names = append(names, s)
		nodes = append(nodes, item)
	}
	return names, nodes, ok
}

// command returns an argv list, rejecting strings, empty lists and shells.
func (p *parser) command(n *yaml.Node, what string) ([]string, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		p.addf(n, "%s must be an argv list, e.g. %s, not a string: commands are not run by a shell", what, argvExample(n.Value))
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		p.addf(n, "%s must be an argv list, e.g. [go, test, ./...], got %s", what, describe(n))
		return nil, false
	}
	if len(n.Content) == 0 {
		p.addf(n, "%s is empty; give the program and its arguments, e.g. [go, test, ./...]", what)
		return nil, false
	}
	argv := make([]string, 0, len(n.Content))
	ok := true
	for i, item := range n.Content {
		s, good := p.str(item, fmt.Sprintf("%s[%d]", what, i))
		if !good {
			ok = false
			continue
		}
		if i == 0 && strings.TrimSpace(s) == "" {
			p.addf(item, "%s: the program name is empty", what)
			ok = false
			continue
		}
		argv = append(argv, s)
	}
	if !ok {
		return nil, false
	}
	if shell, found := ShellCommand(argv); found {
		p.addf(n, "%s runs a shell (%s -c); commands are argv lists run without a shell, so give the program and its arguments directly, e.g. [go, test, ./...] (allow_shell is not supported in workflows)", what, shell)
		return nil, false
	}
	return argv, true
}

// argvExample renders a string command as the flow list it should have
// been, or a generic example when it uses shell syntax.
func argvExample(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 || strings.ContainsAny(s, "|&;<>()$`\\\"'*?~{}") {
		return "[go, test, ./...]"
	}
	return "[" + strings.Join(f, ", ") + "]"
}

// timeout parses a Go duration string or an integer number of seconds,
// rounding fractions of a second up, and checks it lies in [1s, max].
func (p *parser) timeout(n *yaml.Node, what string, max int) (int, bool) {
	var secs int64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		if err := n.Decode(&secs); err != nil {
			p.addf(n, "%s %q is not a valid number of seconds", what, n.Value)
			return 0, false
		}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		d, err := time.ParseDuration(n.Value)
		if err != nil {
			p.addf(n, "invalid %s %q: use a Go duration such as 90s or 10m, or an integer number of seconds", what, n.Value)
			return 0, false
		}
		secs = int64(d / time.Second)
		if d%time.Second > 0 {
			secs++
		}
	default:
		p.addf(n, "%s must be a duration such as 10m or an integer number of seconds, got %s", what, describe(n))
		return 0, false
	}
	if secs < 1 || secs > int64(max) {
		p.addf(n, "%s %s is out of range: must be between 1s and %s", what, n.Value, formatSeconds(max))
		return 0, false
	}
	return int(secs), true
}

func formatSeconds(s int) string {
	switch {
	case s%3600 == 0:
		return fmt.Sprintf("%dh", s/3600)
	case s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	}
	return fmt.Sprintf("%ds", s)
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv reports why an environment variable may not be set by a
// workflow, or "" if it may. The check ignores case.
func reservedEnv(key string) string {
	k := strings.ToUpper(key)
	switch {
	case k == "PATH" || k == "HOME" || k == "USER" || k == "PYTHONPATH":
		return "it is controlled by the runner"
	case strings.HasPrefix(k, "LD_"):
		return "LD_* variables change how programs are loaded"
	case strings.HasPrefix(k, "SUPERVISOR_"):
		return "SUPERVISOR_* variables are reserved for Supervisor"
	}
	return ""
}

// env parses an environment mapping of names to scalar values.
func (p *parser) env(n *yaml.Node, what string) (map[string]string, bool) {
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		p.addf(n, "%s must be a mapping of variable names to values, got %s", what, describe(n))
		return nil, false
	}
	out := make(map[string]string, len(n.Content)/2)
	line := map[string]int{}
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, good := p.str(k, what+" name")
		if !good {
			ok = false
			continue
		}
		if !envNameRE.MatchString(key) {
			p.addf(k, "invalid %s name %q: use letters, digits and '_', not starting with a digit", what, key)
			ok = false
			continue
		}
		if why := reservedEnv(key); why != "" {
			p.addf(k, "%s may not set %s: %s", what, key, why)
			ok = false
			continue
		}
		if first, dup := line[key]; dup {
			p.addf(k, "%s sets %s twice (first at line %d)", what, key, first)
			ok = false
			continue
		}
		line[key] = k.Line
		val, good := p.str(v, fmt.Sprintf("%s value of %s", what, key))
		if !good {
			ok = false
			continue
		}
		out[key] = val
	}
	return out, ok
}

// workingDir checks a gate's working directory: relative, inside the
// repository. It returns the cleaned path, "" for the repository root.
func (p *parser) workingDir(n *yaml.Node, what string) (string, bool) {
	s, ok := p.str(n, what)
	if !ok {
		return "", false
	}
	switch {
	case s == "":
		p.addf(n, "%s is empty; omit it to run in the repository root", what)
		return "", false
	case strings.Contains(s, `\`):
		p.addf(n, "%s %q must use '/' as separator", what, s)
		return "", false
	case path.IsAbs(s) || (len(s) >= 2 && s[1] == ':'):
		p.addf(n, "%s %q must be relative to the repository root, not absolute", what, s)
		return "", false
	}
	for _, elem := range strings.Split(s, "/") {
		if elem == ".." {
			p.addf(n, "%s %q must stay inside the repository: '..' is not allowed", what, s)
			return "", false
		}
	}
	if c := path.Clean(s); c != "." {
		return c, true
	}
	return "", true
}

// agentDef is a parsed agent: argv plus the adapter it came from, if any.
type agentDef struct {
	command []string
	adapter string
}

func (p *parser) agent(n *yaml.Node, what string) (agentDef, bool) {
	f, ok := p.fields(n, what, "command", "adapter")
	if !ok {
		return agentDef{}, false
	}
	cmd, hasCmd := f["command"]
	ad, hasAd := f["adapter"]
	switch {
	case hasCmd && hasAd:
		p.addf(n, "%s sets both command and adapter; give one", what)
		return agentDef{}, false
	case hasAd:
		name, ok := p.str(ad.val, what+" adapter")
		if !ok {
			return agentDef{}, false
		}
		argv, known := AdapterCommand(name)
		if !known {
			p.addf(ad.val, "unknown %s adapter %q (known: %s)", what, name, strings.Join(AdapterNames(), ", "))
			return agentDef{}, false
		}
		return agentDef{command: argv, adapter: name}, true
	case hasCmd:
		argv, ok := p.command(cmd.val, what+" command")
		return agentDef{command: argv}, ok
	}
	p.addf(n, "%s needs a command or an adapter (%s)", what, strings.Join(AdapterNames(), ", "))
	return agentDef{}, false
}

// defaultsDef holds the parsed defaults section.
type defaultsDef struct {
	pool    string
	timeout int
	// agent is nil when defaults.agent is absent; agentBad when it was
	// present but invalid (already reported, so tasks do not repeat it).
	agent    *agentDef
	agentBad bool
}

func (p *parser) defaults(n *yaml.Node) defaultsDef {
	d := defaultsDef{pool: protocol.DefaultPool, timeout: DefaultAgentTimeout}
	if n == nil || isNull(n) {
		return d
	}
	f, ok := p.fields(n, "defaults", "pool", "timeout", "agent")
	if !ok {
		return d
	}
	if x, ok := f["pool"]; ok {
		if s, good := p.name(x.val, "defaults pool"); good {
			d.pool = s
		}
	}
	if x, ok := f["timeout"]; ok {
		if s, good := p.timeout(x.val, "defaults timeout", MaxAgentTimeout); good {
			d.timeout = s
		}
	}
	if x, ok := f["agent"]; ok {
		if a, good := p.agent(x.val, "defaults agent"); good {
			d.agent = &a
		} else {
			d.agentBad = true
		}
	}
	return d
}

// gateDef is a parsed gate with the nodes cross-checks point at.
type gateDef struct {
	spec     protocol.GateSpec
	node     *yaml.Node // the gate's mapping
	nameNode *yaml.Node
	depNodes []*yaml.Node
}

// taskDef is a parsed task with the nodes cross-checks point at.
type taskDef struct {
	spec      protocol.TaskSpec
	node      *yaml.Node
	idNode    *yaml.Node
	depNodes  []*yaml.Node
	gateNodes []*yaml.Node
	gatesSet  bool
}

// items checks that n is a list of at most limit entries.
func (p *parser) items(n *yaml.Node, what string, limit int) ([]*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		p.addf(n, "%s must be a list, got %s", what, describe(n))
		return nil, false
	}
	if len(n.Content) > limit {
		p.addf(n, "too many %s: %d (at most %d)", what, len(n.Content), limit)
		return nil, false
	}
	return n.Content, true
}

func (p *parser) gate(n *yaml.Node, d defaultsDef) gateDef {
	g := gateDef{node: n, spec: protocol.GateSpec{TimeoutSeconds: DefaultGateTimeout, Pool: d.pool}}
	f, ok := p.fields(n, "gate", "name", "command", "timeout", "depends_on", "pool", "env", "working_dir")
	if !ok {
		return g
	}
	what := "gate"
	if x, ok := f["name"]; ok {
		g.nameNode = x.val
		if s, good := p.name(x.val, "gate name"); good {
			g.spec.Name = s
			what = fmt.Sprintf("gate %q", s)
		}
	} else {
		p.addf(n, "gate is missing required field \"name\"")
	}
	if x, ok := f["command"]; ok {
		g.spec.Command, _ = p.command(x.val, what+" command")
	} else {
		p.addf(n, "%s is missing required field \"command\"", what)
	}
	if x, ok := f["timeout"]; ok {
		if s, good := p.timeout(x.val, what+" timeout", MaxGateTimeout); good {
			g.spec.TimeoutSeconds = s
		}
	}
	if x, ok := f["depends_on"]; ok && !isNull(x.val) {
		g.spec.DependsOn, g.depNodes, _ = p.nameList(x.val, what+" depends_on")
	}
	if x, ok := f["pool"]; ok {
		if s, good := p.name(x.val, what+" pool"); good {
			g.spec.Pool = s
		}
	}
	if x, ok := f["env"]; ok {
		g.spec.Env, _ = p.env(x.val, what+" env")
	}
	if x, ok := f["working_dir"]; ok {
		g.spec.WorkingDir, _ = p.workingDir(x.val, what+" working_dir")
	}
	return g
}

func (p *parser) task(n *yaml.Node, d defaultsDef) taskDef {
	t := taskDef{node: n, spec: protocol.TaskSpec{Pool: d.pool, TimeoutSeconds: d.timeout}}
	f, ok := p.fields(n, "task", "id", "agent", "prompt", "depends_on", "gates", "pool", "timeout", "env")
	if !ok {
		return t
	}
	what := "task"
	if x, ok := f["id"]; ok {
		if s, good := p.name(x.val, "task id"); good {
			t.idNode = x.val
			t.spec.ID = s
			what = fmt.Sprintf("task %q", s)
		}
	} else {
		p.addf(n, "task is missing required field \"id\"")
	}
	switch x, ok := f["agent"]; {
	case ok:
		if a, good := p.agent(x.val, what+" agent"); good {
			t.spec.Command, t.spec.Adapter = a.command, a.adapter
		}
	case d.agent != nil:
		t.spec.Command = append([]string(nil), d.agent.command...)
		t.spec.Adapter = d.agent.adapter
	case !d.agentBad:
		p.addf(n, "%s has no agent: set agent on the task or in defaults", what)
	}
	if x, ok := f["prompt"]; ok {
		if s, good := p.str(x.val, what+" prompt"); good {
			switch {
			case strings.TrimSpace(s) == "":
				p.addf(x.val, "%s prompt is empty", what)
			case len(s) > MaxPromptSize:
				p.addf(x.val, "%s prompt is %d bytes; at most %d (256 KiB)", what, len(s), MaxPromptSize)
			default:
				t.spec.Prompt = s
			}
		}
	} else {
		p.addf(n, "%s is missing required field \"prompt\"", what)
	}
	if x, ok := f["depends_on"]; ok && !isNull(x.val) {
		t.spec.DependsOn, t.depNodes, _ = p.nameList(x.val, what+" depends_on")
	}
	if x, ok := f["gates"]; ok {
		if isNull(x.val) {
			p.addf(x.val, "%s gates has no value: write [] for no gates, or omit it to run every workflow gate", what)
		} else {
			t.spec.Gates, t.gateNodes, _ = p.nameList(x.val, what+" gates")
			if t.spec.Gates == nil {
				t.spec.Gates = []string{}
			}
		}
		t.gatesSet = true
	}
	if x, ok := f["pool"]; ok {
		if s, good := p.name(x.val, what+" pool"); good {
			t.spec.Pool = s
		}
	}
	if x, ok := f["timeout"]; ok {
		if s, good := p.timeout(x.val, what+" timeout", MaxAgentTimeout); good {
			t.spec.TimeoutSeconds = s
		}
	}
	if x, ok := f["env"]; ok {
		t.spec.Env, _ = p.env(x.val, what+" env")
	}
	return t
}

func (p *parser) workflow(root *yaml.Node) *protocol.WorkflowSpec {
	f, ok := p.fields(root, "workflow", "name", "defaults", "gates", "tasks")
	if !ok {
		return nil
	}
	spec := &protocol.WorkflowSpec{}
	if x, ok := f["name"]; ok {
		spec.Name, _ = p.name(x.val, "workflow name")
	} else {
		p.addf(root, "workflow is missing required field \"name\"")
	}
	var d defaultsDef
	if x, ok := f["defaults"]; ok {
		d = p.defaults(x.val)
	} else {
		d = p.defaults(nil)
	}

	var gates []gateDef
	if x, ok := f["gates"]; ok && !isNull(x.val) {
		if items, ok := p.items(x.val, "gates", MaxGates); ok {
			for _, n := range items {
				gates = append(gates, p.gate(n, d))
			}
		}
	}
	var tasks []taskDef
	if x, ok := f["tasks"]; ok && !isNull(x.val) {
		if items, ok := p.items(x.val, "tasks", MaxTasks); ok {
			if len(items) == 0 {
				p.addf(x.val, "workflow has no tasks")
			}
			for _, n := range items {
				tasks = append(tasks, p.task(n, d))
			}
		}
	} else {
		p.addf(root, "workflow is missing required field \"tasks\"")
	}

	gateIdx := p.checkGates(gates)
	p.checkTasks(tasks, gates, gateIdx)

	for _, g := range gates {
		spec.Gates = append(spec.Gates, g.spec)
	}
	for _, t := range tasks {
		if !t.gatesSet {
			t.spec.Gates = make([]string, 0, len(gates))
			for _, g := range gates {
				t.spec.Gates = append(t.spec.Gates, g.spec.Name)
			}
		}
		spec.Tasks = append(spec.Tasks, t.spec)
	}
	return spec
}

// checkGates reports duplicate names, unknown and self dependencies, and
// cycles among gates. It returns each gate's index by name (first wins).
func (p *parser) checkGates(gates []gateDef) map[string]int {
	idx := map[string]int{}
	for i, g := range gates {
		if g.spec.Name == "" {
			continue
		}
		if j, dup := idx[g.spec.Name]; dup {
			p.addf(g.nameNode, "duplicate gate name %q (first defined at line %d)", g.spec.Name, gates[j].nameNode.Line)
			continue
		}
		idx[g.spec.Name] = i
	}
	var names []string
	deps := map[string][]string{}
	for i, g := range gates {
		if g.spec.Name == "" || idx[g.spec.Name] != i {
			continue
		}
		names = append(names, g.spec.Name)
		for k, dep := range g.spec.DependsOn {
			switch _, known := idx[dep]; {
			case dep == g.spec.Name:
				p.addf(g.depNodes[k], "gate %q depends on itself", dep)
			case !known:
				p.addf(g.depNodes[k], "gate %q depends on unknown gate %q", g.spec.Name, dep)
			default:
				deps[g.spec.Name] = append(deps[g.spec.Name], dep)
			}
		}
	}
	for _, c := range findCycles(names, func(n string) []string { return deps[n] }) {
		p.addf(gates[idx[c[0]]].nameNode, "%s", (&CycleError{Kind: "gate", Cycle: c}).Error())
	}
	return idx
}

// checkTasks reports duplicate ids, unknown and self dependencies, cycles
// among tasks, and references to unknown gates.
func (p *parser) checkTasks(tasks []taskDef, gates []gateDef, gateIdx map[string]int) {
	idx := map[string]int{}
	for i, t := range tasks {
		if t.spec.ID == "" {
			continue
		}
		if j, dup := idx[t.spec.ID]; dup {
			p.addf(t.idNode, "duplicate task id %q (first defined at line %d)", t.spec.ID, tasks[j].idNode.Line)
			continue
		}
		idx[t.spec.ID] = i
	}
	var ids []string
	deps := map[string][]string{}
	for i, t := range tasks {
		for k, g := range t.spec.Gates {
			if _, known := gateIdx[g]; !known {
				label := "task"
				if t.spec.ID != "" {
					label = fmt.Sprintf("task %q", t.spec.ID)
				}
				msg := fmt.Sprintf("%s uses unknown gate %q", label, g)
				if len(gates) == 0 {
					msg += " (the workflow defines no gates)"
				}
				p.addf(t.gateNodes[k], "%s", msg)
			}
		}
		if t.spec.ID == "" || idx[t.spec.ID] != i {
			continue
		}
		ids = append(ids, t.spec.ID)
		for k, dep := range t.spec.DependsOn {
			switch _, known := idx[dep]; {
			case dep == t.spec.ID:
				p.addf(t.depNodes[k], "task %q depends on itself", dep)
			case !known:
				p.addf(t.depNodes[k], "task %q depends on unknown task %q", t.spec.ID, dep)
			default:
				deps[t.spec.ID] = append(deps[t.spec.ID], dep)
			}
		}
	}
	for _, c := range findCycles(ids, func(n string) []string { return deps[n] }) {
		p.addf(tasks[idx[c[0]]].idNode, "%s", (&CycleError{Kind: "task", Cycle: c}).Error())
	}
}
