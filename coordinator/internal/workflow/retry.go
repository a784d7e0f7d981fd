package workflow

import (
	"slices"
	"sort"
	"strings"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// retryDef is a task's retry settings, from defaults or the task itself:
// max_attempts (agent rounds in all, the first included), retry_policy (a
// named policy: the delay between rounds, and the budget of rounds when
// max_attempts is not set) and retry_from (what a retry starts from).
type retryDef struct {
	maxAttempts int
	policy      *protocol.RetryPolicy
	from        string
	// allowEmpty accepts a round that changes nothing (allow_empty).
	allowEmpty bool
}

// retryFields are the keys retryDef reads, in defaults and tasks alike.
var retryFields = []string{"max_attempts", "retry_policy", "retry_from", "allow_empty"}

// retry reads the retry keys of f over base (the defaults' settings).
func (p *parser) retry(f map[string]gates.Field, what string, base retryDef) retryDef {
	d := base
	if x, ok := f["max_attempts"]; ok {
		if v, good := p.Int(x.Val, what+" max_attempts", 1, protocol.MaxMaxAttempts); good {
			d.maxAttempts = int(v)
		}
	}
	if x, ok := f["retry_policy"]; ok {
		if name, good := p.Str(x.Val, what+" retry_policy"); good {
			if pol, known := p.policy(name); known {
				d.policy = &pol
			} else if !p.anyPolicy {
				p.Addf(x.Val, "unknown %s retry_policy %q (known: %s)", what, name, strings.Join(p.policyNames(), ", "))
			}
		}
	}
	if x, ok := f["allow_empty"]; ok {
		if v, good := p.Bool(x.Val, what+" allow_empty"); good {
			d.allowEmpty = v
		}
	}
	if x, ok := f["retry_from"]; ok {
		if s, good := p.Str(x.Val, what+" retry_from"); good {
			switch s {
			case protocol.RetryFromPrevious, protocol.RetryFromBase:
				d.from = s
			default:
				p.Addf(x.Val, "%s retry_from must be %q or %q, got %q", what, protocol.RetryFromPrevious, protocol.RetryFromBase, s)
			}
		}
	}
	return d
}

// apply sets the retry settings on a task.
func (d retryDef) apply(t *protocol.TaskSpec) {
	t.MaxAttempts, t.AllowEmpty = d.maxAttempts, d.allowEmpty
	t.SetRare(func(r *protocol.TaskRare) { r.RetryFrom = d.from })
	if d.policy != nil {
		pol := *d.policy
		t.Retry = &pol
	}
}

// policy returns the retry policy of that name: the operator's, else a
// built-in one.
func (p *parser) policy(name string) (protocol.RetryPolicy, bool) {
	if pol, ok := p.policies[name]; ok {
		pol.Name = name
		return pol, true
	}
	return protocol.BuiltinRetryPolicy(name)
}

// policyNames lists every retry policy's name, sorted.
func (p *parser) policyNames() []string {
	names := protocol.BuiltinRetryPolicyNames()
	for n := range p.policies {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
