package workflow

import (
	"gopkg.in/yaml.v3"

	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// fileFields are the task keys fileDef reads: the files a task works on
// (DAG-07) and the interfaces it defines or may change (HIER-03).
var fileFields = []string{"files", "interface", "may_change_interfaces"}

// maxFileGlobs bounds each of a task's glob lists.
const maxFileGlobs = 64

// files parses a task's files, interface and may_change_interfaces into
// t: lists of repository-relative globs (pathglob), and for
// may_change_interfaces also true (any locked file) or false.
func (p *parser) files(f map[string]gates.Field, t *protocol.TaskSpec, what string) {
	list := func(key string) []string {
		x, ok := f[key]
		if !ok || gates.IsNull(x.Val) {
			return nil
		}
		if t.Type == protocol.TaskHuman {
			p.Addf(x.Key, "%s is a human task: it changes no files, so %s does not apply", what, key)
			return nil
		}
		if x.Val.Kind == yaml.SequenceNode && len(x.Val.Content) > maxFileGlobs {
			p.Addf(x.Val, "%s %s has %d entries; at most %d", what, key, len(x.Val.Content), maxFileGlobs)
			return nil
		}
		globs, _ := p.Paths(x.Val, what+" "+key, false)
		return globs
	}
	t.Files = list("files")
	iface := list("interface")
	var may []string
	if x, ok := f["may_change_interfaces"]; ok && x.Val.Kind == yaml.ScalarNode && x.Val.Tag == "!!bool" {
		if b, good := p.Bool(x.Val, what+" may_change_interfaces"); good && b {
			may = []string{"**"}
		}
	} else {
		may = list("may_change_interfaces")
	}
	t.SetRare(func(r *protocol.TaskRare) { r.Interface, r.MayChangeInterfaces = iface, may })
}
