package workflow

import (
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// Limits of an approval step's timeout.
const (
	MinApprovalTimeout = time.Minute
	MaxApprovalTimeout = 30 * 24 * time.Hour
)

// approval parses a task's approval: "required", or a mapping of timeout,
// on_timeout and approvers (HITL-02).
func (p *parser) approval(n *yaml.Node, what string) *protocol.Approval {
	what += " approval"
	if n.Kind == yaml.ScalarNode {
		s, ok := p.Str(n, what)
		if !ok {
			return nil
		}
		if s != "required" {
			p.Addf(n, "%s must be \"required\" or a mapping of timeout, on_timeout and approvers, got %q", what, s)
			return nil
		}
		return &protocol.Approval{}
	}
	f, ok := p.Fields(n, what, "timeout", "on_timeout", "approvers")
	if !ok {
		return nil
	}
	a := &protocol.Approval{}
	if x, ok := f["timeout"]; ok {
		if d, good := p.Seconds(x.Val, what+" timeout", MinApprovalTimeout, MaxApprovalTimeout); good {
			a.TimeoutSeconds = int(d / time.Second)
		}
	}
	if x, ok := f["on_timeout"]; ok {
		if s, good := p.Str(x.Val, what+" on_timeout"); good {
			switch s {
			case protocol.OnTimeoutApprove, protocol.OnTimeoutReject, protocol.OnTimeoutEscalate:
				a.OnTimeout = s
			default:
				p.Addf(x.Val, "%s on_timeout must be approve, reject or escalate, got %q", what, s)
			}
		}
		if _, has := f["timeout"]; !has {
			p.Addf(x.Val, "%s on_timeout needs a timeout", what)
		}
	}
	if x, ok := f["approvers"]; ok && !gates.IsNull(x.Val) {
		if x.Val.Kind != yaml.SequenceNode {
			p.Addf(x.Val, "%s approvers must be a list of names, got %s", what, gates.Describe(x.Val))
		} else {
			for _, item := range x.Val.Content {
				if s, good := p.Str(item, what+" approver"); good {
					if strings.TrimSpace(s) == "" {
						p.Addf(item, "%s approver is empty", what)
						continue
					}
					a.Approvers = append(a.Approvers, s)
				}
			}
		}
	}
	return a
}
