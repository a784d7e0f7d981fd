package service

import (
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
)

// redactSpec masks the secrets the shared redactor finds in the text of a
// submitted workflow that reaches agents: task prompts, the prompt of the
// nodes a plan adds, and review gates' instructions (CTX-07). It runs
// before the workflow.submitted event is appended, so neither the event
// log nor any job, status or inbox item holds a secret a user pasted into
// a prompt; the agent reads the masked text. Commands and environments are
// left as written: a gate or agent needs them as they are. It returns the
// places it changed ("task deploy: prompt"), for the submitter to hear.
func redactSpec(spec *protocol.WorkflowSpec) []string {
	var changed []string
	mask := func(where string, text *string) {
		if r := redact.String(*text); r != *text {
			*text = r
			changed = append(changed, where)
		}
	}
	for i := range spec.Tasks {
		t := &spec.Tasks[i]
		mask("task "+t.ID+": prompt", &t.Prompt)
		if e := t.Expand(); e != nil {
			x := *e // copied: the parsed spec may share it
			mask("task "+t.ID+": expand prompt", &x.Prompt)
			t.SetRare(func(r *protocol.TaskRare) { r.Expand = &x })
		}
		changed = append(changed, redactGates("task "+t.ID+": gate ", t.GateDefs)...)
	}
	return append(changed, redactGates("gate ", spec.Gates)...)
}

func redactGates(prefix string, gs []protocol.GateSpec) []string {
	var changed []string
	for i := range gs {
		r := gs[i].Review
		if r == nil {
			continue
		}
		if p := redact.String(r.Prompt); p != r.Prompt {
			c := *r // copied: a gate source's definition may share it
			c.Prompt = p
			gs[i].Review = &c
			changed = append(changed, prefix+gs[i].Name+": review prompt")
		}
	}
	return changed
}
