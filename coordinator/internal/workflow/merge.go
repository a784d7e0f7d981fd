package workflow

import (
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// merge reads the workflow's auto_merge and merge_into fields: whether the
// coordinator merges the branch once the workflow succeeds, and into
// which branch (a valid git branch name; empty: the branch the workflow
// was submitted from).
func (p *parser) merge(f map[string]gates.Field, spec *protocol.WorkflowSpec) {
	if x, ok := f["auto_merge"]; ok && !gates.IsNull(x.Val) {
		spec.AutoMerge, _ = p.Bool(x.Val, "auto_merge")
	}
	if x, ok := f["merge_into"]; ok && !gates.IsNull(x.Val) {
		s, good := p.Str(x.Val, "merge_into")
		if !good {
			return
		}
		if err := protocol.CheckBranchName(s); err != nil {
			p.Addf(x.Val, "merge_into: %v", err)
			return
		}
		spec.MergeInto = s
	}
}
