package worker

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/shared/agentcli"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// liveLines subscribes to a node's live log lines and returns what has
// arrived so far, on each call.
func (h *harness) liveLines(j *protocol.AgentJob) func() []protocol.LogLine {
	h.t.Helper()
	var mu sync.Mutex
	var got []protocol.LogLine
	sub, err := h.Bus.NC.Subscribe(protocol.LogSubject(j.WorkflowID, j.NodeID), func(m *nats.Msg) {
		var l protocol.LogLine
		if err := json.Unmarshal(m.Data, &l); err != nil {
			h.t.Errorf("live line %q: %v", m.Data, err)
			return
		}
		mu.Lock()
		got = append(got, l)
		mu.Unlock()
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.Bus.NC.Flush(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []protocol.LogLine {
		// Lines published before the result are delivered before a flush
		// round trip completes.
		_ = h.Bus.NC.Flush()
		mu.Lock()
		defer mu.Unlock()
		return append([]protocol.LogLine(nil), got...)
	}
}

const editPrompt = "Fix the greeting.\n@print password=hunter2\n@write greet.py\nprint(\"hello\")\n@end\n"

// TestAdapterAgents runs each adapter's stand-in CLI (worker/internal/
// testcli) as the worker runs a real one: the invocation the adapter
// builds, the output parsed as it streams into live lines and log events,
// and the result's verdict and class read from what the CLI reported, not
// its exit code (WORK-03, WORK-07, WORK-08, ARCH-07).
func TestAdapterAgents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	h.startWorker(Config{Concurrency: 3})

	tests := []struct {
		name    string
		spec    protocol.AgentSpec
		prompt  string
		status  protocol.AgentStatus
		class   string
		session bool // a session id is reported
		usage   bool // token usage is reported
		cost    bool // the CLI reports a cost
		errText string
	}{
		{name: "claude", spec: protocol.AgentSpec{Adapter: "claude-code", Model: "claude-sonnet-4-5", MaxTurns: 5},
			prompt: editPrompt, status: protocol.AgentSucceeded, session: true, usage: true, cost: true},
		{name: "claude-json", spec: protocol.AgentSpec{Adapter: "claude-code", OutputFormat: "json"},
			prompt: editPrompt, status: protocol.AgentSucceeded, session: true, usage: true, cost: true},
		{name: "codex", spec: protocol.AgentSpec{Adapter: "codex", Model: "gpt-5-codex"},
			prompt: editPrompt, status: protocol.AgentSucceeded, session: true, usage: true},
		{name: "gemini", spec: protocol.AgentSpec{Adapter: "gemini", Model: "gemini-2.5-pro"},
			prompt: editPrompt, status: protocol.AgentSucceeded, session: true, usage: true},
		{name: "command", spec: protocol.AgentSpec{Adapter: "command", Command: []string{agentName, "-p"}},
			prompt: editPrompt, status: protocol.AgentSucceeded},
		{name: "claude-rate-limit", spec: protocol.AgentSpec{Adapter: "claude-code"},
			prompt: "@api-error API Error: 429 rate limit exceeded; retry-after: 4\n", status: protocol.AgentFailed,
			class: "transient", errText: "429"},
		{name: "codex-rate-limit", spec: protocol.AgentSpec{Adapter: "codex"},
			prompt: "@api-error 429 Too Many Requests: rate limit exceeded\n", status: protocol.AgentFailed, class: "transient"},
		{name: "gemini-rate-limit", spec: protocol.AgentSpec{Adapter: "gemini"},
			prompt: "@api-error 429 Resource exhausted: rate limit\n", status: protocol.AgentFailed, class: "transient"},
		{name: "claude-auth", spec: protocol.AgentSpec{Adapter: "claude-code"},
			prompt: "@api-error API Error: 401 invalid x-api-key\n", status: protocol.AgentFailed, class: "fatal"},
		{name: "codex-fails", spec: protocol.AgentSpec{Adapter: "codex"},
			prompt: "@api-error the model stopped: something went wrong\n", status: protocol.AgentFailed, class: "agent"},
		{name: "claude-max-turns", spec: protocol.AgentSpec{Adapter: "claude-code", MaxTurns: 1},
			prompt: editPrompt + "@write b.txt\nb\n@end\n@write c.txt\nc\n@end\n", status: protocol.AgentFailed, class: "agent",
			errText: "max_turns"},
		{name: "command-fails", spec: protocol.AgentSpec{Adapter: "command", Command: []string{agentName}},
			prompt: "@exit 3\n", status: protocol.AgentFailed, class: "agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := h.agentJob(tt.name, 1, tt.prompt)
			job.Command, job.Agent = nil, &tt.spec
			live := h.liveLines(job)
			res := h.run(job)
			if res.Status != tt.status {
				t.Fatalf("status %s (exit %d, error %q), want %s\nstdout: %s\nstderr: %s", res.Status, res.ExitCode, res.Error,
					tt.status, res.Stdout, res.Stderr)
			}
			r := res.Run
			if r == nil {
				t.Fatal("result has no run")
			}
			if r.Adapter != tt.spec.Adapter || r.Success != (tt.status == protocol.AgentSucceeded) || r.Class != tt.class {
				t.Errorf("run adapter %q success %v class %q, want %q %v %q", r.Adapter, r.Success, r.Class,
					tt.spec.Adapter, tt.status == protocol.AgentSucceeded, tt.class)
			}
			if tt.status == protocol.AgentSucceeded && ((r.SessionID != "") != tt.session || (r.Usage != protocol.TokenUsage{}) != tt.usage || r.CostKnown != tt.cost) {
				t.Errorf("run session %q usage %+v cost known %v, want session %v usage %v cost %v",
					r.SessionID, r.Usage, r.CostKnown, tt.session, tt.usage, tt.cost)
			}
			if r.CostEstimated {
				t.Error("the worker marked a cost estimated: only the coordinator estimates")
			}
			if tt.errText != "" && (!strings.Contains(r.Error, tt.errText) || !strings.Contains(res.Error, tt.errText)) {
				t.Errorf("run error %q, result error %q: want them to hold %q", r.Error, res.Error, tt.errText)
			}
			if tt.status == protocol.AgentSucceeded {
				if res.Patch == nil || patchedFiles(h.patchBytes(res.Patch))["greet.py"] != "new" {
					t.Errorf("patch %+v does not add greet.py", res.Patch)
				}
				if tt.spec.Adapter != "command" && r.Text == "" {
					t.Error("run has no final text")
				}
			} else if res.Patch != nil {
				t.Errorf("a failed run reported a patch")
			}
			log := string(h.logBytes(res.Log))
			if strings.Contains(log, "hunter2") {
				t.Errorf("the log leaks a secret:\n%s", log)
			}
			if tt.spec.Adapter != "command" && tt.spec.OutputFormat != "json" && !strings.Contains(log, "[event] ") {
				t.Errorf("the log has no event lines:\n%s", log)
			}
			lines := live()
			if len(lines) == 0 {
				t.Fatal("no live log lines")
			}
			if last := lines[len(lines)-1]; last.Kind != "summary" || !strings.Contains(last.Text, tt.spec.Adapter+": success=") {
				t.Errorf("last live line %+v, want the run's summary", last)
			}
			for _, l := range lines {
				if l.Attempt != 1 || l.Kind == "" || l.Time.IsZero() {
					t.Errorf("live line %+v", l)
				}
				if strings.Contains(l.Text, "hunter2") {
					t.Errorf("live line leaks a secret: %+v", l)
				}
			}
		})
	}
}

// TestAdapterSettingsRejected: a spec the adapter cannot build an
// invocation from fails the round at once, a fatal fault of the task's
// definition (the coordinator validates at submission; this is a worker
// of another version).
func TestAdapterSettingsRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t, bus.Config{})
	h.startWorker(Config{})
	for _, spec := range []protocol.AgentSpec{{Adapter: "claude-code", Permission: "yolo"}, {Adapter: "no-such-cli"}} {
		job := h.agentJob(strings.ReplaceAll(spec.Adapter, "-", ""), 1, "hello")
		job.Command, job.Agent = nil, &spec
		res := h.run(job)
		if res.Status != protocol.AgentFailed || res.Run == nil || res.Run.Class != "fatal" || res.Error == "" {
			t.Errorf("%+v: status %s run %+v error %q, want failed, fatal", spec, res.Status, res.Run, res.Error)
		}
	}
}

// TestAgentRunText: the final text is redacted and capped at its tail,
// whole characters kept.
func TestAgentRunText(t *testing.T) {
	long := "password=hunter2 " + strings.Repeat("é", protocol.MaxAgentText) + "END"
	scrub := (&agentcli.Keys{}).Scrub
	run := agentRunOf(agentcli.Result{Adapter: "claude-code", Text: long, Error: "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789"}, scrub)
	if len(run.Text) > protocol.MaxAgentText || !strings.HasSuffix(run.Text, "END") || !utf8.ValidString(run.Text) {
		t.Errorf("text of %d bytes, valid %v, ends %q", len(run.Text), utf8.ValidString(run.Text), run.Text[len(run.Text)-3:])
	}
	if strings.Contains(run.Error, "ghp_") {
		t.Errorf("error not redacted: %q", run.Error)
	}
	if short := agentRunOf(agentcli.Result{Text: "password=hunter2"}, scrub); strings.Contains(short.Text, "hunter2") {
		t.Errorf("text not redacted: %q", short.Text)
	}
}

// TestAgentScope: an agent job's breaker scope is that of the argv its
// adapter builds (the CLI and its model), or of an old job's command.
func TestAgentScope(t *testing.T) {
	tests := []struct {
		job  protocol.AgentJob
		want string
	}{
		{protocol.AgentJob{Agent: &protocol.AgentSpec{Adapter: "claude-code", Model: "opus"}}, "agent:claude:opus"},
		{protocol.AgentJob{Agent: &protocol.AgentSpec{Adapter: "codex"}}, "agent:codex"},
		{protocol.AgentJob{Agent: &protocol.AgentSpec{Adapter: "gemini"}, Prompt: "--model"}, "agent:gemini"},
		{protocol.AgentJob{Agent: &protocol.AgentSpec{Adapter: "gemini", Model: "gemini-2.5-pro"}, Prompt: "--model x"}, "agent:gemini:gemini-2.5-pro"},
		{protocol.AgentJob{Agent: &protocol.AgentSpec{Adapter: "command", Command: []string{"/opt/bin/my-agent", "--model", "m"}}}, "agent:my-agent:m"},
		{protocol.AgentJob{Command: []string{"supervisor-test-agent", "-p"}}, "agent:supervisor-test-agent"},
	}
	for _, tt := range tests {
		if got := agentScope(&tt.job); got != tt.want {
			t.Errorf("agentScope(%+v) = %q, want %q", tt.job.Agent, got, tt.want)
		}
	}
}
