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
// on_timeout, approvers (HITL-02) and auto_approve (HITL-05).
func (p *parser) approval(n *yaml.Node, what string) *protocol.Approval {
	what += " approval"
	if n.Kind == yaml.ScalarNode {
		s, ok := p.Str(n, what)
		if !ok {
			return nil
		}
		if s != "required" {
			p.Addf(n, "%s must be \"required\" or a mapping of timeout, on_timeout, approvers and auto_approve, got %q", what, s)
			return nil
		}
		return &protocol.Approval{}
	}
	f, ok := p.Fields(n, what, "timeout", "on_timeout", "approvers", "auto_approve")
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
	if x, ok := f["auto_approve"]; ok {
		a.AutoApprove = p.autoApprove(x.Val, what+" auto_approve")
	}
	return a
}

// Limits of an approval policy's settings.
const (
	MaxAutoApproveFiles = 1000
	MaxAutoApproveLines = 100000
)

// autoApprove parses an approval policy (HITL-05): true for the default
// limits, or a mapping of max_files, max_lines and sensitive_paths.
func (p *parser) autoApprove(n *yaml.Node, what string) *protocol.AutoApprove {
	a := &protocol.AutoApprove{MaxFiles: protocol.DefaultAutoApproveMaxFiles, MaxLines: protocol.DefaultAutoApproveMaxLines}
	if n.Kind == yaml.ScalarNode {
		if n.Tag != "!!bool" {
			p.Addf(n, "%s must be true, false or a mapping of max_files, max_lines and sensitive_paths, got %s", what, gates.Describe(n))
			return nil
		}
		if n.Value == "false" {
			return nil
		}
		return a
	}
	f, ok := p.Fields(n, what, "max_files", "max_lines", "sensitive_paths")
	if !ok {
		return nil
	}
	if x, ok := f["max_files"]; ok {
		if v, good := p.Int(x.Val, what+" max_files", 0, MaxAutoApproveFiles); good {
			a.MaxFiles = int(v)
		}
	}
	if x, ok := f["max_lines"]; ok {
		if v, good := p.Int(x.Val, what+" max_lines", 0, MaxAutoApproveLines); good {
			a.MaxLines = int(v)
		}
	}
	if x, ok := f["sensitive_paths"]; ok && !gates.IsNull(x.Val) {
		if x.Val.Kind != yaml.SequenceNode {
			p.Addf(x.Val, "%s sensitive_paths must be a list of globs, got %s", what, gates.Describe(x.Val))
			return a
		}
		for _, item := range x.Val.Content {
			if s, good := p.Str(item, what+" sensitive path"); good {
				if strings.TrimSpace(s) == "" {
					p.Addf(item, "%s sensitive path is empty", what)
					continue
				}
				a.SensitivePaths = append(a.SensitivePaths, s)
			}
		}
	}
	return a
}
