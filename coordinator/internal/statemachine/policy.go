package statemachine

import (
	"fmt"
	"strings"

	"github.com/supervisorhq/supervisor/shared/pathglob"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// The names decisions no person made are recorded under: an approval
// policy's (PolicyApprover) and an approval step's timeout's
// (TimeoutApprover). No human may decide under either.
const (
	PolicyApprover  = "policy"
	TimeoutApprover = "timeout"
)

// approvalStep is what a node whose gates passed does at its approval
// step: its approval policy approves it, or it waits for a human, told
// why the policy did not approve.
func (d *decider) approvalStep(n *Node) {
	ok, why := autoApproval(n.Task.Approval(), n.Patch)
	if ok {
		d.append(n, eventlog.NodeApproved{Attempt: n.Attempt, By: PolicyApprover, Note: why},
			fmt.Sprintf("%s.%s.a%d.auto-approved", d.w.ID, n.ID, n.Attempt))
		return
	}
	reason := "an approval step: its gates passed"
	if why != "" {
		reason += "; " + why
	}
	d.awaitApproval(n, n.Attempt, reason)
}

// autoApproval applies an approval step's policy (HITL-05) to the patch
// of a node whose gates passed. It says whether the patch needs no human
// and why, or why a human must decide; a policy that is not set always
// leaves it to a human.
func autoApproval(a *protocol.Approval, patch *protocol.PatchRef) (bool, string) {
	if a == nil || a.AutoApprove == nil {
		return false, ""
	}
	p := a.AutoApprove
	if patch == nil {
		return true, "auto-approved by the approval policy: the round changed nothing"
	}
	st := patch.Stat
	lines := 0
	if st != nil {
		lines = st.Insertions + st.Deletions
	}
	switch {
	case st == nil:
		return false, "the approval policy cannot judge a patch that has no summary"
	case st.PathsTruncated:
		return false, fmt.Sprintf("the approval policy declined: the patch touches more than the %d names it can check", len(st.Paths))
	case st.Binary:
		return false, "the approval policy declined: the patch changes a binary file"
	case st.Files > p.MaxFiles:
		return false, fmt.Sprintf("the approval policy declined: %d files changed, more than max_files %d", st.Files, p.MaxFiles)
	case lines > p.MaxLines:
		return false, fmt.Sprintf("the approval policy declined: %d lines changed, more than max_lines %d", lines, p.MaxLines)
	}
	own := compileAll(p.SensitivePaths)
	for _, path := range st.Paths {
		if pat, ok := sensitive(path, own, p.SensitivePaths); ok {
			return false, fmt.Sprintf("the approval policy declined: %s is a sensitive path (%s)", path, pat)
		}
	}
	return true, fmt.Sprintf("auto-approved by the approval policy: %s, %s changed (max_files %d, max_lines %d), no sensitive path",
		plural(st.Files, "file"), plural(lines, "line"), p.MaxFiles, p.MaxLines)
}

// sensitive reports the first pattern that path, or a directory it is
// in, matches: a built-in one, against the lower-cased path, or one of
// the task's (own, compiled from ownText), as written. So "**/*auth*"
// holds internal/oauth/client.go.
func sensitive(path string, own []*pathglob.Pattern, ownText []string) (string, bool) {
	for _, p := range withParents(path) {
		lower := strings.ToLower(p)
		for i, pat := range defaultSensitive {
			if pat.Match(lower) {
				return protocol.DefaultSensitivePaths[i], true
			}
		}
		for i, pat := range own {
			if pat.Match(p) {
				return ownText[i], true
			}
		}
	}
	return "", false
}

// withParents is path's directories, outermost first, then path.
func withParents(path string) []string {
	var out []string
	for i := 0; i < len(path); i++ {
		if path[i] == '/' && i > 0 {
			out = append(out, path[:i])
		}
	}
	return append(out, path)
}

// defaultSensitive are protocol.DefaultSensitivePaths, compiled.
var defaultSensitive = compileAll(protocol.DefaultSensitivePaths)

// compileAll compiles globs, in order.
func compileAll(globs []string) []*pathglob.Pattern {
	out := make([]*pathglob.Pattern, len(globs))
	for i, g := range globs {
		out[i] = pathglob.Compile(g)
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
