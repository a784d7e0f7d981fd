package worker

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/jobrun"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
)

// agentRun is how one job's agent is started and read: the argv and
// standard input the adapter built, and the parser of its output.
type agentRun struct {
	adapter agentcli.Adapter
	// argv is the command; stdin its standard input (nil: the null device).
	argv  []string
	stdin io.Reader
	// stream parses the agent's standard output as it is written; nil for
	// a job without an AgentSpec (events written before it existed), whose
	// Command runs as is and whose output is not parsed.
	stream *agentcli.Stream
}

// settings turns a job's agent spec into the adapter's settings.
func settings(a *protocol.AgentSpec) agentcli.Settings { return agentcli.SpecSettings(*a) }

// invocation builds the agent's command for job: from its AgentSpec with
// the adapter it names (the prompt on standard input or in the argv, as
// the CLI takes it), or, for an old job without one, its Command with the
// prompt on standard input.
func invocation(job *protocol.AgentJob) (agentRun, error) {
	if job.Agent == nil {
		if len(job.Command) == 0 {
			return agentRun{}, fmt.Errorf("agent job %s has neither an agent spec nor a command", job.JobID)
		}
		return agentRun{argv: job.Command, stdin: strings.NewReader(job.Prompt)}, nil
	}
	a, ok := agentcli.Lookup(job.Agent.Adapter)
	if !ok {
		return agentRun{}, fmt.Errorf("unknown agent adapter %q (known: %s)", job.Agent.Adapter, strings.Join(agentcli.Names(), ", "))
	}
	inv, err := a.Invocation(job.Prompt, settings(job.Agent))
	if err != nil {
		return agentRun{}, fmt.Errorf("agent settings: %w", err)
	}
	r := agentRun{adapter: a, argv: inv.Argv}
	if inv.PromptOnStdin {
		r.stdin = strings.NewReader(inv.Stdin)
	}
	return r, nil
}

// agentScope is the breaker scope of job's agent (protocol.AgentScope):
// its CLI and the model its spec names, or, for the command adapter and
// old jobs, that of the command itself. Agents of one CLI and model share
// a breaker whatever their other settings and prompt.
func agentScope(job *protocol.AgentJob) string {
	r, err := invocation(job)
	switch {
	case err != nil:
		return protocol.AgentScope(job.Command)
	case job.Agent == nil || job.Agent.Adapter == "command":
		return protocol.AgentScope(r.argv)
	case job.Agent.Model == "":
		return protocol.AgentScope(r.argv[:1])
	}
	return protocol.AgentScope([]string{r.argv[0], "--model", job.Agent.Model})
}

// eventLog is where an agent's parsed events go while it runs: a line of
// the job's log each (after the raw output line that carried it), and a
// live line on the job's log subject.
type eventLog struct {
	logw    *jobrun.LogWriter
	publish func(ev agentcli.Event)
	// scrub removes secrets from what is logged and published.
	scrub func(string) string
	// events says whether events are logged: not for the command
	// adapter, whose events are its raw output lines, logged already.
	events bool
}

// emit is the Stream's callback: the raw line goes to the log, each event
// after it, secrets redacted in what is published.
func (e *eventLog) emit(line []byte, evs []agentcli.Event) {
	_, _ = e.logw.Write(append(append([]byte(nil), line...), '\n'))
	for _, ev := range evs {
		ev.Text = e.scrub(ev.Text)
		if e.events {
			_, _ = fmt.Fprintf(e.logw, "[event] %s\n", ev)
		}
		if e.publish != nil {
			e.publish(ev)
		}
	}
}

// agentRunOf is what a job's AgentResult reports of the CLI's Result: the
// final text redacted and capped at protocol.MaxAgentText (its tail kept).
func agentRunOf(r agentcli.Result, scrub func(string) string) *protocol.AgentRun {
	run := r.AgentRun()
	run.Text = scrub(run.Text)
	if cut := len(run.Text) - protocol.MaxAgentText; cut > 0 {
		for cut < len(run.Text) && !utf8.RuneStart(run.Text[cut]) {
			cut++ // keep whole characters
		}
		run.Text = run.Text[cut:]
	}
	run.Error = scrub(run.Error)
	if run.Warnings != nil {
		ws := make([]string, len(run.Warnings))
		for i, s := range run.Warnings {
			ws[i] = scrub(s)
		}
		run.Warnings = ws
	}
	return &run
}

// failedRun is the Run of an agent that could not be started as its spec
// says: a fatal fault of the task's definition, not of the agent.
func failedRun(adapter string, err error, scrub func(string) string) *protocol.AgentRun {
	return &protocol.AgentRun{Adapter: adapter, Class: string(agentcli.Fatal), Error: scrub(err.Error())}
}

// liveLog returns the function that publishes job's events as live log
// lines (protocol.LogSubject). A line that cannot be published is lost:
// the stored log has it.
func (w *Worker) liveLog(job *protocol.AgentJob) func(agentcli.Event) {
	if w.deps.Bus == nil || w.deps.Bus.NC == nil {
		return nil
	}
	subject := protocol.LogSubject(job.WorkflowID, job.NodeID)
	return func(ev agentcli.Event) {
		data, err := json.Marshal(protocol.LogLine{Attempt: job.Attempt, Time: time.Now().UTC(), Kind: ev.Kind, Text: ev.Text})
		if err == nil {
			_ = w.deps.Bus.NC.Publish(subject, data)
		}
	}
}

// shownArgv is argv for the log, a prompt passed as an argument shown by
// its size only.
func shownArgv(argv []string, prompt string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == prompt && prompt != "" {
			a = fmt.Sprintf("<prompt: %d bytes>", len(prompt))
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// runSummary is one log line of what the CLI reported.
func runSummary(r agentcli.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: success=%v", r.Adapter, r.Success)
	if r.Class != "" {
		fmt.Fprintf(&b, " class=%s", r.Class)
	}
	if r.Model != "" {
		fmt.Fprintf(&b, " model=%s", r.Model)
	}
	if r.SessionID != "" {
		fmt.Fprintf(&b, " session=%s", r.SessionID)
	}
	if r.Turns > 0 {
		fmt.Fprintf(&b, " turns=%d", r.Turns)
	}
	u := r.Usage
	if u != (agentcli.Usage{}) {
		fmt.Fprintf(&b, " tokens in=%d (cached %d) out=%d", u.InputTokens, u.CachedInputTokens, u.OutputTokens)
	}
	if r.CostReported {
		fmt.Fprintf(&b, " cost=$%.4f", r.CostUSD)
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, " missing=%s", strings.Join(r.Missing, ","))
	}
	if r.Error != "" {
		fmt.Fprintf(&b, " error=%s", redact.String(r.Error))
	}
	return b.String()
}
