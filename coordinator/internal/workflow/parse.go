package workflow

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/graph"
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
	DefaultGateTimeout = int(gates.DefaultTimeout / time.Second)
	// MaxGateTimeout is the longest gate timeout, in seconds (1 hour).
	MaxGateTimeout = int(gates.MaxTimeout / time.Second)
)

// Problem is one validation problem, positioned in the workflow file. It
// is the gate schema's problem type: workflows and gate files report alike.
type Problem = gates.Problem

// ValidationError is every problem Parse found in a workflow file, sorted
// by position.
type ValidationError = gates.ValidationError

// Options are the gate sources below a workflow's own, lowest first:
// built-in < user < project (the caller loads the project's gates only
// when it is trusted). Each may be nil. A workflow-level gate replaces the
// whole gate of the same name; a task's front-matter gates replace both,
// for that task.
type Options struct {
	BuiltinGates, UserGates, ProjectGates *gates.Set
	// RetryPolicies are named retry policies of the operator's, besides
	// the built-in ones (a name of both is the operator's).
	RetryPolicies map[string]protocol.RetryPolicy
	// AnyRetryPolicy accepts a retry_policy name this side does not know:
	// the CLI validates before submitting, and the coordinator, which knows
	// its operator's policies, decides.
	AnyRetryPolicy bool
	// Strategies are the context strategies a task's context field may
	// name (package shared/contextpack).
	Strategies *contextpack.Catalogue
	// Roles are the roles a task's role field may name (nil: none).
	Roles *roles.Catalogue
}

// Parse parses and validates a workflow file with no gate sources besides
// the workflow itself; see ParseWithOptions.
func Parse(filename string, data []byte) (*protocol.WorkflowSpec, error) {
	return ParseWithOptions(filename, data, Options{})
}

// ParseWithOptions parses and validates a workflow file and returns its
// wire form. The filename is only used in messages. On failure the error
// is a *ValidationError listing every problem found, each with its
// position.
//
// In the result, each agent task has its Agent (defaults.agent merged
// under the task's agent, see mergeAgent, and checked by building the
// adapter's invocation), defaults are applied
// (defaults.pool to tasks and the workflow's gates alike), timeouts are in
// seconds (fractions rounded up), and every task lists its gates
// explicitly: a task that omits gates gets all workflow-level gates in
// declaration order (but those integration_gates names, which the
// integration queue runs), and an empty list means none, so consumers never
// re-expand it. A task's gates are a list of names (all required) or
// {required, optional, on_fail} (RC-01). Gate dependencies are
// not added to the task's list: GateLayers closes over them.
//
// Gates are defined in the workflow's gates section — a list of
// definitions (an entry may also be the bare name of a gate from opts'
// sources) or a mapping from name to definition — and in YAML front matter
// at the top of a task's prompt (task-level gates): those go to
// the task's GateDefs, replace workflow gates of the same name for that
// task, are run by the task (as required, unless its gates list them as
// optional), and are cut from the prompt. Spec.Gates holds the workflow
// gates, then the gates of opts' sources that some task or the
// integration gates need, by name.
//
// An optional field written with no value (env:) counts as absent, except
// a task's gates, where it is ambiguous and rejected. YAML aliases are
// rejected so every position is exact and no alias can expand the input.
func ParseWithOptions(filename string, data []byte, opts Options) (*protocol.WorkflowSpec, error) {
	p := &parser{
		Checker: gates.NewChecker(filename),
		lines:   strings.Split(string(data), "\n"),
		lower:   gates.Merge(opts.BuiltinGates, opts.UserGates, opts.ProjectGates),

		policies: opts.RetryPolicies, anyPolicy: opts.AnyRetryPolicy, agentSeen: map[*yaml.Node]bool{},
		strategies: opts.Strategies,
		roles:      opts.Roles,
	}
	if len(data) > MaxFileSize {
		p.Addf(nil, "file is %d bytes; a workflow may be at most %d bytes (1 MiB)", len(data), MaxFileSize)
		return nil, p.Err()
	}
	root := p.Decode(data)
	if len(p.Problems) > 0 {
		return nil, p.Err()
	}
	if root == nil {
		p.Addf(nil, "file is empty; a workflow needs at least name and tasks")
		return nil, p.Err()
	}
	spec := p.workflow(root)
	if err := p.Err(); err != nil {
		return nil, err
	}
	return spec, nil
}

type parser struct {
	*gates.Checker
	lines []string   // the file, for the indentation of block prompts
	lower *gates.Set // built-in, user and project gates, merged
	// policies are the operator's retry policies; anyPolicy accepts unknown
	// names (Options.AnyRetryPolicy).
	policies  map[string]protocol.RetryPolicy
	anyPolicy bool
	// strategies are the context strategies (Options.Strategies).
	strategies *contextpack.Catalogue
	// agentSeen holds the defaults.agent nodes a problem was reported at.
	agentSeen map[*yaml.Node]bool
	roles     *roles.Catalogue
}

// name returns a field that must satisfy protocol.ValidName.
func (p *parser) name(n *yaml.Node, what string) (string, bool) {
	s, ok := p.Str(n, what)
	if !ok {
		return "", false
	}
	if !protocol.ValidName(s) {
		p.Addf(n, "invalid %s %q: use %s", what, s, protocol.NameRule)
		return s, false
	}
	return s, true
}

// command returns an agent's argv, rejecting strings, empty lists, shells
// (agents have no allow_shell) and denylisted variables set through env.
func (p *parser) command(n *yaml.Node, what string) ([]string, bool) {
	argv, ok := p.Command(n, what)
	if !ok {
		return nil, false
	}
	if !p.CheckCommand(n, argv, what, false, " (agent commands cannot allow a shell)") {
		return nil, false
	}
	return argv, true
}

// timeout parses a duration in [1s, max seconds] and returns seconds.
func (p *parser) timeout(n *yaml.Node, what string, max int) (int, bool) {
	d, ok := p.Seconds(n, what, time.Second, time.Duration(max)*time.Second)
	return int(d / time.Second), ok
}

// defaultsDef holds the parsed defaults section.
type defaultsDef struct {
	pool    string
	timeout int
	retry   retryDef
	// agent is nil when defaults.agent is absent; agentBad when it was
	// present but invalid (already reported, so tasks do not repeat it).
	agent    *agentDef
	agentBad bool
	// role is defaults.role (nil when absent or unknown).
	role *roleRef
	// written holds the keys the defaults section sets: what a workflow
	// writes wins over a role's settings.
	written map[string]bool
}

func (p *parser) defaults(n *yaml.Node) defaultsDef {
	d := defaultsDef{pool: protocol.DefaultPool, timeout: DefaultAgentTimeout}
	if n == nil || gates.IsNull(n) {
		return d
	}
	f, ok := p.Fields(n, "defaults", append([]string{"pool", "timeout", "agent", "role"}, retryFields...)...)
	if !ok {
		return d
	}
	d.retry = p.retry(f, "defaults", d.retry)
	d.written = map[string]bool{}
	for k := range f {
		d.written[k] = true
	}
	if x, ok := f["pool"]; ok {
		if s, good := p.name(x.Val, "defaults pool"); good {
			d.pool = s
		}
	}
	if x, ok := f["timeout"]; ok {
		if s, good := p.timeout(x.Val, "defaults timeout", MaxAgentTimeout); good {
			d.timeout = s
		}
	}
	if x, ok := f["role"]; ok {
		d.role = p.role(x.Val, "defaults role")
	}
	if x, ok := f["agent"]; ok && !gates.IsNull(x.Val) {
		if a, good := p.agent(x.Val, "defaults agent"); good {
			d.agent = &a
		} else {
			d.agentBad = true
		}
	}
	return d
}

// items checks that n is a list of at most limit entries.
func (p *parser) items(n *yaml.Node, what string, limit int) ([]*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		p.Addf(n, "%s must be a list, got %s", what, gates.Describe(n))
		return nil, false
	}
	if len(n.Content) > limit {
		p.Addf(n, "too many %s: %d (at most %d)", what, len(n.Content), limit)
		return nil, false
	}
	return n.Content, true
}

// workflowGates parses the workflow's gates section: a list whose entries
// are definitions or names of gates from the lower sources, or a mapping
// from name to definition. Names must be unique. refs holds the names that
// were bare references; those gates keep the Source of their definition.
func (p *parser) workflowGates(n *yaml.Node, o gates.ParseOptions) (out []gates.Gate, refs map[string]bool) {
	refs = map[string]bool{}
	gs := p.Collector()
	switch n.Kind {
	case yaml.SequenceNode:
		items, ok := p.items(n, "gates", MaxGates)
		if !ok {
			return nil, refs
		}
		for _, item := range items {
			if item.Kind != yaml.ScalarNode || gates.IsNull(item) {
				g, _ := p.Gate(item, nil, o)
				gs.Add(g)
				continue
			}
			// A bare name: a gate of the built-in, user or project sources.
			name, ok := p.Str(item, "gates entry")
			if !ok {
				continue
			}
			g, known := p.lower.Get(name)
			if !known {
				msg := fmt.Sprintf("gates lists %q, which no built-in, user or project gate defines; give its definition", name)
				if p.lower.Len() == 0 {
					msg += " (no such gate sources were loaded)"
				}
				p.Addf(item, "%s", msg)
				continue
			}
			if !gs.Has(name) {
				refs[name] = true
			}
			gs.Add(g)
		}
	case yaml.MappingNode:
		if len(n.Content)/2 > MaxGates {
			p.Addf(n, "too many gates: %d (at most %d)", len(n.Content)/2, MaxGates)
			return nil, refs
		}
		return p.GateList(n, "gates", o), refs
	default:
		p.Addf(n, "gates must be a list of gate definitions or a mapping from gate name to definition, got %s", gates.Describe(n))
	}
	return gs.Gates, refs
}

// taskDef is a parsed task with the nodes cross-checks point at.
type taskDef struct {
	spec      protocol.TaskSpec
	node      *yaml.Node
	idNode    *yaml.Node
	depNodes  []*yaml.Node
	gatesNode *yaml.Node
	// refs are the gate names the task's gates section lists, with their
	// nodes; gatesSet says whether it has one.
	refs     []string
	refNodes []*yaml.Node
	gatesSet bool
	// own are the gates of the prompt's front matter.
	own []gates.Gate
	// expand is a planner task's expand template (nil: none).
	expand *expandDef
	// gatesRole names the role the gates came from, if they did.
	gatesRole string
}

// taskFields are the fields a task may have.
var taskFields = append([]string{"id", "type", "agent", "prompt", "depends_on", "gates", "pool", "timeout", "env",
	"approval", "context", "output", "expand", "max_cost_usd", "role"}, append(retryFields, fileFields...)...)

func (p *parser) task(n *yaml.Node, d defaultsDef) taskDef {
	t := taskDef{node: n, spec: protocol.TaskSpec{Pool: d.pool, TimeoutSeconds: d.timeout}}
	f, ok := p.Fields(n, "task", taskFields...)
	if !ok {
		d.retry.apply(&t.spec)
		return t
	}
	what := "task"
	if x, ok := f["id"]; ok {
		if s, good := p.name(x.Val, "task id"); good {
			t.idNode = x.Val
			t.spec.ID = s
			what = fmt.Sprintf("task %q", s)
		}
	} else {
		p.Addf(n, "task is missing required field \"id\"")
	}
	if x, ok := f["type"]; ok {
		if s, good := p.Str(x.Val, what+" type"); good {
			switch s {
			case "agent":
			case protocol.TaskHuman:
				t.spec.Type = protocol.TaskHuman
			default:
				p.Addf(x.Val, "%s type must be agent or human, got %q", what, s)
			}
		}
	}
	if x, ok := f["approval"]; ok {
		a := p.approval(x.Val, what)
		t.spec.SetRare(func(r *protocol.TaskRare) { r.Approval = a })
	}
	human := t.spec.Type == protocol.TaskHuman
	role := p.taskRole(f, d, human, what)
	if x, ok := f["approval"]; ok && human && t.spec.Approval() != nil && t.spec.Approval().AutoApprove != nil {
		p.Addf(x.Val, "%s is a human task: a human decides it, so auto_approve does not apply", what)
	}
	switch x, ok := f["agent"]; {
	case human && ok:
		p.Addf(x.Key, "%s is a human task: it runs no agent", what)
	case human:
	case ok:
		if a, good := p.agent(x.Val, what+" agent"); good && !d.agentBad {
			t.spec.Agent, _ = p.checkAgent(layerAgent(role, d.agent, &a), d.agent, what+" agent")
		}
	case d.agentBad:
	case d.agent != nil || roleAgentDef(role) != nil:
		t.spec.Agent, _ = p.checkAgent(layerAgent(role, d.agent, nil), d.agent, what+" agent")
	case role != nil && role.bad:
	default:
		p.Addf(n, "%s has no agent: set agent on the task, its role or in defaults", what)
	}
	if x, ok := f["prompt"]; ok {
		if s, good := p.Str(x.Val, what+" prompt"); good {
			s = p.frontMatter(&t, x.Val, s, d)
			switch {
			case len(s) > MaxPromptSize:
				p.Addf(x.Val, "%s prompt is %d bytes; at most %d (256 KiB)", what, len(s), MaxPromptSize)
			case strings.TrimSpace(s) == "":
				p.Addf(x.Val, "%s prompt is empty", what)
			default:
				t.spec.Prompt = s
			}
		}
	} else {
		p.Addf(n, "%s is missing required field \"prompt\"", what)
	}
	if x, ok := f["depends_on"]; ok && !gates.IsNull(x.Val) {
		t.spec.DependsOn, t.depNodes, _ = p.NameList(x.Val, what+" depends_on")
	}
	if x, ok := f["gates"]; ok && human {
		p.Addf(x.Key, "%s is a human task: it makes no change for gates to check", what)
	} else if ok {
		t.gatesSet = true
		t.gatesNode = x.Val
		p.taskGates(&t, x.Val, what)
	}
	if x, ok := f["pool"]; ok {
		if s, good := p.name(x.Val, what+" pool"); good {
			t.spec.Pool = s
		}
	}
	if x, ok := f["timeout"]; ok {
		if s, good := p.timeout(x.Val, what+" timeout", MaxAgentTimeout); good {
			t.spec.TimeoutSeconds = s
		}
	}
	if x, ok := f["max_cost_usd"]; ok {
		c, _ := p.cost(x.Val, what+" max_cost_usd")
		t.spec.SetRare(func(r *protocol.TaskRare) { r.MaxCostUSD = c })
	}
	if x, ok := f["env"]; ok {
		t.spec.Env, _ = p.Env(x.Val, what+" env")
		p.checkEnvCredentials(x.Val, what+" env")
	}
	if x, ok := f["context"]; ok && human {
		p.Addf(x.Key, "%s", humanContext(what))
	} else if ok {
		t.spec.Context = p.context(x.Val, what)
	}
	p.retry(f, what, d.retry).apply(&t.spec)
	p.files(f, &t.spec, what)
	if role != nil && role.role != nil {
		p.applyRole(&t, role, f, d.written)
		if x, ok := f["prompt"]; ok && t.spec.Prompt != "" {
			t.spec.Prompt = p.rolePrompt(role, x.Val, t.spec, what)
		}
	}
	p.taskOutput(&t, f, what, human, d)
	return t
}

// taskOutput reads a task's output schema and, for a planner, its expand
// template. A plan or a review changes no file, so such a task accepts an
// empty round unless it says otherwise.
func (p *parser) taskOutput(t *taskDef, f map[string]gates.Field, what string, human bool, d defaultsDef) {
	if x, ok := f["output"]; ok {
		if human {
			p.Addf(x.Key, "%s is a human task: it has no agent output", what)
		} else {
			t.spec.Output = p.output(x.Val, what+" output")
		}
	}
	if _, set := f["allow_empty"]; !set && (t.spec.Output == "plan" || t.spec.Output == "review") {
		t.spec.AllowEmpty = true
	}
	x, ok := f["expand"]
	switch {
	case !ok && t.spec.Output == "plan":
		// A planner without expand: is one with expand: {}.
		e := defaultExpand(t.node, t.spec, d)
		t.expand = &e
		t.spec.SetRare(func(r *protocol.TaskRare) { r.Expand = e.spec })
	case !ok:
	case t.spec.Output != "plan":
		p.Addf(x.Key, "%s has expand but its output is not plan: only a plan's components become nodes", what)
	default:
		e := p.expand(x.Val, what, t.spec, d)
		t.expand = &e
		t.spec.SetRare(func(r *protocol.TaskRare) { r.Expand = e.spec })
	}
}

// frontMatter cuts the task-level gates of a prompt's YAML front matter
// into t.own and returns the rest of the prompt. Positions map into the
// file for a literal block prompt (prompt: |); for other styles they point
// at the prompt.
func (p *parser) frontMatter(t *taskDef, n *yaml.Node, text string, d defaultsDef) string {
	if !strings.HasPrefix(text, "---\n") && !strings.HasPrefix(text, "---\r\n") {
		return text
	}
	var sub *gates.Checker
	if line := n.Line + 1; n.Style&yaml.LiteralStyle != 0 && line <= len(p.lines) {
		src := p.lines[line-1]
		indent := len(src) - len(strings.TrimLeft(src, " "))
		sub = p.Sub(line, indent+1)
	} else {
		sub = p.Pinned(n)
	}
	own, rest, _ := sub.FrontMatter(text, gates.ParseOptions{Origin: gates.OriginTask, DefaultPool: d.pool})
	p.Adopt(sub)
	t.own = own
	return rest
}

// taskGates parses a task's gates: a list of names, all required (RC-03),
// or {required, optional, on_fail} (RC-04…RC-06).
func (p *parser) taskGates(t *taskDef, n *yaml.Node, what string) {
	what += " gates"
	switch {
	case gates.IsNull(n):
		p.Addf(n, "%s has no value: write [] for no gates, or omit it to run every workflow gate", what)
		return
	case n.Kind == yaml.SequenceNode:
		t.refs, t.refNodes, _ = p.NameList(n, what)
		t.spec.Required = append([]string(nil), t.refs...)
		return
	case n.Kind != yaml.MappingNode:
		p.Addf(n, "%s must be a list of gate names, e.g. [vet, test], or a mapping with required, optional and on_fail, got %s", what, gates.Describe(n))
		return
	}
	f, ok := p.Fields(n, what, "required", "optional", "on_fail")
	if !ok {
		return
	}
	inRequired := map[string]bool{}
	if x, ok := f["required"]; ok && !gates.IsNull(x.Val) {
		names, nodes, _ := p.NameList(x.Val, what+" required")
		for i, name := range names {
			inRequired[name] = true
			t.spec.Required = append(t.spec.Required, name)
			t.refs, t.refNodes = append(t.refs, name), append(t.refNodes, nodes[i])
		}
	}
	inOptional := map[string]bool{}
	if x, ok := f["optional"]; ok && !gates.IsNull(x.Val) {
		names, nodes, _ := p.NameList(x.Val, what+" optional")
		for i, name := range names {
			if inRequired[name] {
				p.Addf(nodes[i], "%s lists %q as both required and optional; keep one", what, name)
				continue
			}
			inOptional[name] = true
			t.spec.Optional = append(t.spec.Optional, name)
			t.refs, t.refNodes = append(t.refs, name), append(t.refNodes, nodes[i])
		}
	}
	x, ok := f["on_fail"]
	if !ok || gates.IsNull(x.Val) {
		return
	}
	if x.Val.Kind != yaml.MappingNode {
		p.Addf(x.Val, "%s on_fail must be a mapping from gate name to block, retry_with_feedback or warn, got %s", what, gates.Describe(x.Val))
		return
	}
	own := map[string]bool{}
	for _, g := range t.own {
		own[g.Name] = true
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(x.Val.Content); i += 2 {
		k, v := x.Val.Content[i], x.Val.Content[i+1]
		name, good := p.Str(k, what+" on_fail gate name")
		if !good {
			continue
		}
		if line, dup := seen[name]; dup {
			p.Addf(k, "%s on_fail sets %q twice (first at line %d)", what, name, line)
			continue
		}
		seen[name] = p.Position(k).Line
		if !inRequired[name] && !inOptional[name] && !own[name] {
			p.Addf(k, "%s on_fail names %q, which is neither required nor optional; list it under required or optional first", what, name)
			continue
		}
		s, good := p.Str(v, fmt.Sprintf("%s on_fail of %s", what, name))
		if !good {
			continue
		}
		action, valid := gates.ParseFailAction(s)
		switch {
		case !valid:
			p.Addf(v, "invalid %s on_fail %q for %s: must be block, retry_with_feedback or warn", what, s, name)
			continue
		case action == gates.Warn && (inRequired[name] || (own[name] && !inOptional[name])):
			p.Addf(v, "%s on_fail of %s is warn, but %s is required and a required gate never warns; make it optional or use block or retry_with_feedback", what, name, name)
			continue
		}
		if t.spec.OnFail == nil {
			t.spec.OnFail = map[string]string{}
		}
		t.spec.OnFail[name] = string(action)
	}
}

func (p *parser) workflow(root *yaml.Node) *protocol.WorkflowSpec {
	f, ok := p.Fields(root, "workflow", "name", "defaults", "gates", "integration_gates", "tasks", "auto_merge", "merge_into",
		"max_cost_usd")
	if !ok {
		return nil
	}
	spec := &protocol.WorkflowSpec{}
	p.merge(f, spec)
	if x, ok := f["name"]; ok {
		spec.Name, _ = p.name(x.Val, "workflow name")
	} else {
		p.Addf(root, "workflow is missing required field \"name\"")
	}
	if x, ok := f["max_cost_usd"]; ok {
		spec.MaxCostUSD, _ = p.cost(x.Val, "workflow max_cost_usd")
	}
	var d defaultsDef
	if x, ok := f["defaults"]; ok {
		d = p.defaults(x.Val)
	} else {
		d = p.defaults(nil)
	}

	var wfGates []gates.Gate
	var refs map[string]bool
	if x, ok := f["gates"]; ok && !gates.IsNull(x.Val) {
		wfGates, refs = p.workflowGates(x.Val, gates.ParseOptions{Origin: gates.OriginWorkflow, DefaultPool: d.pool,
			Context: p.context, Role: p.reviewRole})
	}
	var tasks []taskDef
	if x, ok := f["tasks"]; ok && !gates.IsNull(x.Val) {
		if items, ok := p.items(x.Val, "tasks", MaxTasks); ok {
			if len(items) == 0 {
				p.Addf(x.Val, "workflow has no tasks")
			}
			tasks = make([]taskDef, 0, len(items))
			for _, n := range items {
				tasks = append(tasks, p.task(n, d))
			}
		}
	} else {
		p.Addf(root, "workflow is missing required field \"tasks\"")
	}

	// Workflow-level gates over the lower sources; their dependencies and
	// cycles are reported where they are written.
	wfSet := gates.Merge(p.lower, gates.NewSet(wfGates...))
	var defined []gates.Gate
	for _, g := range wfGates {
		if !refs[g.Name] {
			defined = append(defined, g)
		}
	}
	p.CheckDeps(defined, wfSet)
	if x, ok := f["integration_gates"]; ok {
		spec.IntegrationGates = p.integrationGates(x.Val, wfSet)
	}
	p.checkTasks(tasks, onlyTaskGates(wfGates, spec.IntegrationGates), wfSet)

	for _, g := range wfGates {
		spec.Gates = append(spec.Gates, g.Spec())
	}
	wfNames := make(map[string]bool, len(wfGates))
	for _, g := range wfGates {
		wfNames[g.Name] = true
	}
	needed := map[string]bool{} // lower-source gates some task runs
	if len(tasks) > 0 {
		spec.Tasks = make([]protocol.TaskSpec, 0, len(tasks))
	}
	for _, t := range tasks {
		taskSet := gates.Merge(wfSet, gates.NewSet(t.own...))
		names := t.spec.Gates
		if len(p.Problems) == 0 {
			order, err := gates.Resolve(taskSet, names)
			if err != nil {
				at := t.gatesNode
				if at == nil {
					at = t.node
				}
				p.Addf(at, "task %q gates: %v", t.spec.ID, err)
			}
			own := map[string]bool{}
			for _, g := range t.own {
				own[g.Name] = true
			}
			if t.expand != nil {
				// The nodes the plan adds run these gates, with the
				// planner's own front-matter gates in reach.
				more, err := gates.Resolve(taskSet, t.expand.spec.Gates)
				if err != nil {
					p.Addf(t.expand.node, "task %q expand gates: %v", t.spec.ID, err)
				}
				order = append(order, more...)
			}
			for _, n := range order {
				if !own[n] && !wfNames[n] {
					needed[n] = true
				}
			}
		}
		for _, g := range t.own {
			t.spec.GateDefs = append(t.spec.GateDefs, g.Spec())
		}
		spec.Tasks = append(spec.Tasks, t.spec)
	}
	if len(p.Problems) == 0 && len(spec.IntegrationGates) > 0 {
		order, _ := gates.Resolve(wfSet, spec.IntegrationGates)
		for _, n := range order {
			if !wfNames[n] {
				needed[n] = true
			}
		}
	}
	extra := make([]string, 0, len(needed))
	for n := range needed {
		extra = append(extra, n)
	}
	sort.Strings(extra)
	for _, n := range extra {
		g, _ := p.lower.Get(n)
		spec.Gates = append(spec.Gates, g.Spec())
	}
	return spec
}

// checkTasks reports duplicate ids, unknown and self dependencies, cycles
// among tasks, references to unknown gates and problems of the tasks' own
// gates, and fills in each task's gate lists.
func (p *parser) checkTasks(tasks []taskDef, wfGates []gates.Gate, wfSet *gates.Set) {
	idx := map[string]int{}
	for i, t := range tasks {
		if t.spec.ID == "" {
			continue
		}
		if j, dup := idx[t.spec.ID]; dup {
			p.Addf(t.idNode, "duplicate task id %q (first defined at line %d)", t.spec.ID, p.Position(tasks[j].idNode).Line)
			continue
		}
		idx[t.spec.ID] = i
	}
	var ids []string
	deps := map[string][]string{}
	for i := range tasks {
		t := &tasks[i]
		label := "task"
		if t.spec.ID != "" {
			label = fmt.Sprintf("task %q", t.spec.ID)
		}
		taskSet := gates.Merge(wfSet, gates.NewSet(t.own...))
		p.CheckDeps(t.own, taskSet)
		for k, g := range t.refs {
			if _, known := taskSet.Get(g); !known {
				msg := fmt.Sprintf("%s uses unknown gate %q", label, g)
				if t.gatesRole != "" {
					msg += fmt.Sprintf(" (a default gate of role %q)", t.gatesRole)
				}
				if len(wfGates) == 0 && wfSet.Len() == 0 && len(t.own) == 0 {
					msg += " (the workflow defines no gates)"
				}
				p.Addf(t.refNodes[k], "%s", msg)
			}
		}
		p.fillGates(t, wfGates)
		if t.expand != nil {
			p.checkExpand(label, t.expand, wfGates, wfSet)
			p.checkExpandAfter(label, t.spec.ID, t.expand, idx)
		}
		if t.spec.ID == "" || idx[t.spec.ID] != i {
			continue
		}
		ids = append(ids, t.spec.ID)
		for k, dep := range t.spec.DependsOn {
			switch _, known := idx[dep]; {
			case dep == t.spec.ID:
				p.Addf(t.depNodes[k], "task %q depends on itself", dep)
			case !known:
				p.Addf(t.depNodes[k], "task %q depends on unknown task %q", t.spec.ID, dep)
			default:
				deps[t.spec.ID] = append(deps[t.spec.ID], dep)
			}
		}
	}
	for _, c := range graph.FindCycles(ids, func(n string) []string { return deps[n] }) {
		p.Addf(tasks[idx[c[0]]].idNode, "%s", (&CycleError{Kind: "task", Cycle: c}).Error())
	}
}

// fillGates sets a task's Gates, Required and Optional: as listed, or
// every workflow gate when the task has no gates section; the front
// matter's gates are added as required unless listed.
func (p *parser) fillGates(t *taskDef, wfGates []gates.Gate) {
	if t.spec.Type == protocol.TaskHuman {
		t.spec.Gates = []string{}
		return
	}
	if !t.gatesSet {
		for _, g := range wfGates {
			t.spec.Required = append(t.spec.Required, g.Name)
		}
	}
	listed := map[string]bool{}
	for _, n := range t.spec.Required {
		listed[n] = true
	}
	for _, n := range t.spec.Optional {
		listed[n] = true
	}
	for _, g := range t.own {
		if !listed[g.Name] {
			t.spec.Required = append(t.spec.Required, g.Name)
			listed[g.Name] = true
		}
	}
	t.spec.Gates = make([]string, 0, len(t.spec.Required)+len(t.spec.Optional))
	t.spec.Gates = append(append(t.spec.Gates, t.spec.Required...), t.spec.Optional...)
}
