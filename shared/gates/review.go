package gates

import (
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"gopkg.in/yaml.v3"
)

// Review gates (EXE-009, OUT-05): type: review, with agent (one spec,
// run quorum.reviewers times) or reviewers (a list of specs), a prompt,
// and quorum {reviewers, approvals}.

// Limits of a review gate.
const (
	// MaxReviewers bounds how many reviewers one gate runs.
	MaxReviewers = 9
	// MaxReviewPrompt bounds a review gate's prompt, in bytes.
	MaxReviewPrompt = 16 << 10
)

// reviewFields are the keys only a review gate takes.
var reviewFields = []string{"agent", "reviewers", "quorum", "prompt", "context", "role"}

// ReviewRole is what a review gate's reviewers take from a role
// (configs/roles, resolved where a workflow is parsed): its agent, unless
// the gate gives agent or reviewers; its prompt additions as the review's
// instructions, unless the gate gives a prompt; its context strategy,
// unless the gate gives a context. Its output schema must be review.
type ReviewRole struct {
	Name    string
	Agent   *protocol.AgentSpec
	Prompt  string
	Context *protocol.ContextSpec
	Output  string
}

// agentFields are the keys of a reviewer's agent settings (the shape of
// a task's agent: protocol.AgentSpec).
var agentFields = []string{"adapter", "command", "model", "args", "max_turns", "permission", "output_format"}

// DefaultApprovals is how many approvals a quorum of n reviewers needs
// when it says none: the one reviewer's, else two (seed 002's "at least
// two of N approve").
func DefaultApprovals(n int) int {
	if n <= 1 {
		return 1
	}
	return 2
}

// gateType parses the type field: "command" (the default) or "review".
func (c *Checker) gateType(f map[string]Field, what string) string {
	x, ok := f["type"]
	if !ok {
		return ""
	}
	s, good := c.Str(x.Val, what+" type")
	switch {
	case !good:
		return ""
	case s == "command":
		return ""
	case s == protocol.GateTypeReview:
		return s
	}
	c.Addf(x.Val, "invalid %s type %q: must be command (the default) or review", what, s)
	return ""
}

// reviewOnly reports the review fields a command gate sets.
func (c *Checker) reviewOnly(f map[string]Field, what string) {
	for _, k := range reviewFields {
		if x, ok := f[k]; ok {
			c.Addf(x.Key, "%s sets %s, which only a review gate takes (type: review)", what, k)
		}
	}
}

// review parses a review gate's own fields into g, and checks what a
// review gate may not have: a command, allowed writes (a reviewer changes
// nothing: any write is an integrity violation) and cache: true (an
// agent's verdict is not a function of its inputs).
func (c *Checker) review(n *yaml.Node, f map[string]Field, g *Gate, what string, o ParseOptions) {
	if x, ok := f["command"]; ok {
		c.Addf(x.Key, "%s is a review gate: its reviewers are agents (agent or reviewers), it has no command", what)
	}
	if x, ok := f["allowed_writes"]; ok {
		c.Addf(x.Key, "%s is a review gate: its reviewers may write nothing, so it has no allowed_writes", what)
	}
	if x, ok := f["cache"]; ok {
		if v, good := c.Bool(x.Val, what+" cache"); good && v {
			c.Addf(x.Val, "%s is a review gate, which is never cached: an agent's verdict is not a function of the code it reviews", what)
		}
	}
	g.Cache = false
	spec := &protocol.ReviewSpec{}
	var role *ReviewRole
	if x, ok := f["role"]; ok {
		if o.Role == nil {
			c.Addf(x.Key, "%s role: roles are resolved where a workflow is parsed; "+
				"define this review gate in the workflow's gates to give it a role", what)
		} else if r, ok := o.Role(x.Val, what+" role"); ok {
			switch {
			case r.Output != "" && r.Output != "review":
				c.Addf(x.Val, "%s role %q answers with the %s schema; a review gate's reviewers answer with review", what, r.Name, r.Output)
			default:
				role = &r
			}
		}
	}
	agent, hasAgent := f["agent"]
	list, hasList := f["reviewers"]
	switch {
	case hasAgent && hasList:
		c.Addf(list.Key, "%s sets both agent and reviewers; give one agent (run quorum.reviewers times) or a list of reviewers", what)
	case !hasAgent && !hasList && role != nil && role.Agent != nil:
		spec.Reviewers = []protocol.AgentSpec{cloneAgent(*role.Agent)}
		hasAgent = true
	case !hasAgent && !hasList && role != nil:
		c.Addf(f["role"].Val, "%s role %q names no agent: give the gate agent: {adapter: …}", what, role.Name)
	case !hasAgent && !hasList:
		if _, ok := f["role"]; !ok {
			c.Addf(n, "%s is a review gate without reviewers: give agent: {adapter: …}, reviewers: [{adapter: …}, …] or a role", what)
		}
	case hasAgent:
		if a, ok := c.AgentSpec(agent.Val, what+" agent"); ok {
			spec.Reviewers = []protocol.AgentSpec{a}
		}
	default:
		if list.Val.Kind != yaml.SequenceNode || len(list.Val.Content) == 0 {
			c.Addf(list.Val, "%s reviewers must be a non-empty list of agents, e.g. [{adapter: claude-code}, {adapter: codex}], got %s", what, Describe(list.Val))
			break
		}
		if len(list.Val.Content) > MaxReviewers {
			c.Addf(list.Val, "%s has %d reviewers; at most %d", what, len(list.Val.Content), MaxReviewers)
			break
		}
		for i, item := range list.Val.Content {
			if a, ok := c.AgentSpec(item, fmt.Sprintf("%s reviewers[%d]", what, i)); ok {
				spec.Reviewers = append(spec.Reviewers, a)
			}
		}
	}
	reviewers, approvals := 0, 0
	if x, ok := f["quorum"]; ok {
		reviewers, approvals = c.quorum(x.Val, what)
	}
	switch {
	case hasList && reviewers != 0 && reviewers != len(list.Val.Content):
		c.Addf(f["quorum"].Val, "%s quorum says %d reviewers but reviewers lists %d", what, reviewers, len(list.Val.Content))
	case hasAgent && len(spec.Reviewers) == 1 && reviewers > 1:
		for i := 1; i < reviewers; i++ {
			spec.Reviewers = append(spec.Reviewers, cloneAgent(spec.Reviewers[0]))
		}
	}
	if approvals == 0 {
		approvals = DefaultApprovals(len(spec.Reviewers))
	}
	if len(spec.Reviewers) > 0 && approvals > len(spec.Reviewers) {
		c.Addf(f["quorum"].Val, "%s quorum needs %d approvals of %d reviewers", what, approvals, len(spec.Reviewers))
	}
	spec.Approvals = approvals
	if x, ok := f["prompt"]; ok {
		if s, good := c.Str(x.Val, what+" prompt"); good {
			if len(s) > MaxReviewPrompt {
				c.Addf(x.Val, "%s prompt is %d bytes; at most %d", what, len(s), MaxReviewPrompt)
			}
			spec.Prompt = s
		}
	}
	if _, ok := f["prompt"]; !ok && role != nil {
		spec.Prompt = role.Prompt
	}
	if _, ok := f["context"]; !ok && role != nil {
		spec.Context = role.Context
	}
	if x, ok := f["context"]; ok {
		if o.Context == nil {
			c.Addf(x.Key, "%s context: context strategies are resolved where a workflow is parsed; "+
				"define this review gate in the workflow's gates to give it a context", what)
		} else {
			spec.Context = o.Context(x.Val, what)
		}
	}
	g.Review = spec
}

// quorum parses quorum: {reviewers: N, approvals: M}; 0 for what it
// does not say.
func (c *Checker) quorum(n *yaml.Node, what string) (reviewers, approvals int) {
	f, ok := c.Fields(n, what+" quorum", "reviewers", "approvals")
	if !ok {
		return 0, 0
	}
	if x, ok := f["reviewers"]; ok {
		if v, good := c.Int(x.Val, what+" quorum reviewers", 1, MaxReviewers); good {
			reviewers = int(v)
		}
	}
	if x, ok := f["approvals"]; ok {
		if v, good := c.Int(x.Val, what+" quorum approvals", 1, MaxReviewers); good {
			approvals = int(v)
		}
	}
	if reviewers != 0 && approvals > reviewers {
		c.Addf(n, "%s quorum needs %d approvals of %d reviewers", what, approvals, reviewers)
		approvals = 0
	}
	return reviewers, approvals
}

// AgentSpec parses an agent's settings (adapter, command, model, args,
// max_turns, permission, output_format) and checks them by building the
// adapter's invocation, so a setting the CLI cannot take is reported
// here, at the mapping.
func (c *Checker) AgentSpec(n *yaml.Node, what string) (protocol.AgentSpec, bool) {
	var a protocol.AgentSpec
	before := len(c.Problems)
	f, ok := c.Fields(n, what, agentFields...)
	if !ok {
		return a, false
	}
	if x, ok := f["adapter"]; ok {
		if s, good := c.Str(x.Val, what+" adapter"); good {
			if _, known := agentcli.Lookup(s); known {
				a.Adapter = s
			} else {
				c.Addf(x.Val, "unknown %s adapter %q: must be one of %s", what, s, strings.Join(agentcli.Names(), ", "))
			}
		}
	} else {
		c.Addf(n, "%s is missing required field \"adapter\" (%s)", what, strings.Join(agentcli.Names(), ", "))
	}
	if x, ok := f["command"]; ok {
		if argv, good := c.Command(x.Val, what+" command"); good {
			if c.CheckCommand(x.Val, argv, what+" command", false, " (agent commands cannot allow a shell)") {
				a.Command = argv
			}
		}
	}
	for _, s := range []struct {
		key string
		dst *string
	}{{"model", &a.Model}, {"permission", &a.Permission}, {"output_format", &a.OutputFormat}} {
		if x, ok := f[s.key]; ok {
			*s.dst, _ = c.Str(x.Val, what+" "+s.key)
		}
	}
	if x, ok := f["args"]; ok {
		if x.Val.Kind != yaml.SequenceNode {
			c.Addf(x.Val, "%s args must be a list of strings, got %s", what, Describe(x.Val))
		} else {
			for i, item := range x.Val.Content {
				if s, good := c.Str(item, fmt.Sprintf("%s args[%d]", what, i)); good {
					a.Args = append(a.Args, s)
				}
			}
		}
	}
	if x, ok := f["max_turns"]; ok {
		if v, good := c.Int(x.Val, what+" max_turns", 1, 1000); good {
			a.MaxTurns = int(v)
		}
	}
	if len(c.Problems) != before {
		return a, false
	}
	ad, _ := agentcli.Lookup(a.Adapter)
	if _, err := ad.Invocation("review", agentcli.SpecSettings(a)); err != nil {
		c.Addf(n, "%s: %v", what, err)
		return a, false
	}
	return a, true
}

func cloneAgent(a protocol.AgentSpec) protocol.AgentSpec {
	a.Command, a.Args = cloneStrings(a.Command), cloneStrings(a.Args)
	return a
}

func cloneReview(r *protocol.ReviewSpec) *protocol.ReviewSpec {
	if r == nil {
		return nil
	}
	c := *r
	if r.Context != nil {
		cc := *r.Context
		c.Context = &cc
	}
	c.Reviewers = make([]protocol.AgentSpec, len(r.Reviewers))
	for i, a := range r.Reviewers {
		c.Reviewers[i] = cloneAgent(a)
	}
	return &c
}

// rejectCredentials reports a provider credential (agentcli.IsCredential)
// in a review gate's env: its reviewers get their keys from the gate
// runner only, and a key written in a gate file or workflow would be
// stored with it (and in the event log).
func (c *Checker) rejectCredentials(n *yaml.Node, what string) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; agentcli.IsCredential(k.Value) {
			c.Addf(k, "%s may not set %s: a reviewer's provider credentials come from the gate runner (its environment allow-list or secrets file), never from a gate definition", what, k.Value)
		}
	}
}
