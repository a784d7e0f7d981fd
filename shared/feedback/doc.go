// Package feedback builds and renders what an agent is told when its work
// failed its gates and it runs again (S-8, Q-10, FB-01…FB-09, RETRY-09).
//
// Build turns a round's gate results into a Feedback: a versioned JSON
// document with the failed gates (status, exit code, attempt, retries,
// escalation, output tails, failing tests parsed from known runners'
// output, integrity violations), priority fixes, fixed constraints, an
// optional operator note, and a notice that everything taken from gate
// output is untrusted. Every text is sanitized (Sanitize: terminal
// escapes, control and bidi characters removed, secrets redacted) and the
// encoded document is fitted to a byte budget, keeping the end of logs
// and the parsed tests before the raw tails.
//
// Render turns a Feedback into Markdown for the agent's prompt with the
// templates embedded from templates/: one per role (default.tmpl unless
// templates/<role>.tmpl exists) and one per kind of gate failure. Gate
// output only appears after the untrusted banner, inside fences it cannot
// break.
//
// ParseTests, used by Build, recognises failing tests in the output of
// go test, pytest, node --test, jest and cargo test.
//
// The package does no I/O and reads no clock: the same input always gives
// the same bytes, so the coordinator's state machine can call it.
//
//	f := feedback.Build(feedback.Input{WorkflowID: wf, NodeID: node, Attempt: 2, MaxAttempts: 5, Gates: gates})
//	doc, _ := json.Marshal(f)            // at most 16 KiB by default
//	md, err := feedback.Render(f, role) // appended to the next prompt
package feedback
