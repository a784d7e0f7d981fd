package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// traceWorkflow: one task whose agent writes built.txt and prints the
// TRACEPARENT it got, with a gate that checks the file and prints the
// TRACEPARENT the gate's command got; and one task for Claude Code (its
// stand-in), which prints TRACEPARENT, OTEL_TRACEPARENT and whether it was
// told to export (not with the file exporter). The workflow merges itself into the
// branch it was submitted from.
const traceWorkflow = `name: traced
auto_merge: true
` + agentDefaults + `gates:
  - name: built
    command: [gatehelper, env, TRACEPARENT, expect, built.txt, "yes"]
tasks:
  - id: build
    gates: [built]
    prompt: |
      Build it.
      @env TRACEPARENT
      @write built.txt
      yes
      @end
  - id: claude
    agent: {adapter: claude-code, model: claude-sonnet-4-5}
    gates: []
    prompt: |
      Note it.
      @env TRACEPARENT
      @env OTEL_TRACEPARENT
      @env CLAUDE_CODE_ENABLE_TELEMETRY
      @write note.txt
      noted
      @end
`

// TestTraceAcrossProcesses runs a workflow on separate processes — the
// CLI, `coordinator serve`, a worker and a gate runner — each exporting
// its spans to a file of its own, and checks that they form one trace
// with the right parent links: the CLI's submit span is the root; the
// coordinator's submit is its child; every job span of the worker and
// the gate runner is the child of the coordinator's dispatch span for
// that job; the runners' phases are children of their job's span; the
// coordinator's report spans are children of the runner's job span; and
// no span names a parent the trace lacks. The agents and the gate command
// get TRACEPARENT naming their sandbox run's span (Claude Code also
// OTEL_TRACEPARENT), the runners' log lines about a job carry its ids, so
// do the coordinator's lines about the workflow's submission and merge,
// the workflow's merge has its span, and `status` shows the trace id, in
// text and JSON.
func TestTraceAcrossProcesses(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	file := func(name string) string { return filepath.Join(f.dir, name+".spans.jsonl") }
	traceArgs := func(name string) []string {
		return []string{"--trace-exporter", "file", "--trace-file", file(name)}
	}
	f.coordArgs = traceArgs("coordinator")
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1", traceArgs("worker")...)
	f.gaterunner("gate-1", traceArgs("gaterunner")...)

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "trace\n"})
	wfFile := writeFile(t, t.TempDir(), "traced.yaml", traceWorkflow)
	r := f.cli(3*time.Minute, append([]string{"submit", wfFile, "--repo", repo, "--wait"}, traceArgs("cli")...)...)
	if r.code != 0 {
		t.Fatalf("submit --wait: want exit 0\n%s", r)
	}
	wf := wfID(t, r)

	// The runners end their job's span after acking it, which may be
	// after the workflow finished: wait for every process's spans.
	read := func(name string) []telemetry.FileSpan {
		spans, err := telemetry.ReadSpanFile(file(name))
		if err != nil {
			return nil
		}
		return spans
	}
	has := func(spans []telemetry.FileSpan, name string) bool {
		for _, s := range spans {
			if s.Name == name {
				return true
			}
		}
		return false
	}
	// A span is written when it ends, after its children: the merge's
	// span may be in the file before the scheduling pass that holds it.
	// So the reading waits, too, until every recorded span's parent is.
	readAll := func() []telemetry.FileSpan {
		var all []telemetry.FileSpan
		for _, name := range []string{"cli", "coordinator", "worker", "gaterunner"} {
			all = append(all, read(name)...)
		}
		return all
	}
	parentsRecorded := func(spans []telemetry.FileSpan) bool {
		ids := map[string]bool{}
		for _, s := range spans {
			ids[s.SpanContext.SpanID] = true
		}
		for _, s := range spans {
			if s.HasParent() && !ids[s.Parent.SpanID] {
				return false
			}
		}
		return true
	}
	waitFor(t, 30*time.Second, "every process's spans", func() bool {
		return has(read("cli"), "cli submit") && has(read("coordinator"), "merge") &&
			has(read("worker"), "agent job") && has(read("gaterunner"), "gate job")
	})
	// Not fatal: a parent never written is reported below, by name.
	deadline := time.Now().Add(10 * time.Second)
	for !parentsRecorded(readAll()) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	procs := map[string][]telemetry.FileSpan{}
	for _, name := range []string{"cli", "coordinator", "worker", "gaterunner"} {
		procs[name] = read(name)
	}

	// One trace, every span's parent in it, one root: the CLI's submit.
	byID := map[string]telemetry.FileSpan{}
	proc := map[string]string{} // span id → process
	pids := map[string]string{}
	var traceID string
	for name, spans := range procs {
		for _, s := range spans {
			if traceID == "" {
				traceID = s.SpanContext.TraceID
			}
			if s.SpanContext.TraceID != traceID {
				t.Errorf("%s's span %q is in trace %s, another trace than %s", name, s.Name, s.SpanContext.TraceID, traceID)
			}
			byID[s.SpanContext.SpanID] = s
			proc[s.SpanContext.SpanID] = name
			pids[name] = s.ResourceAttr("process.pid")
		}
	}
	if len(map[string]bool{pids["cli"]: true, pids["coordinator"]: true, pids["worker"]: true, pids["gaterunner"]: true}) != 4 {
		t.Errorf("process ids of the spans: %v; want four processes", pids)
	}
	var roots []string
	for id, s := range byID {
		if !s.HasParent() {
			roots = append(roots, proc[id]+":"+s.Name)
			continue
		}
		if _, ok := byID[s.Parent.SpanID]; !ok {
			t.Errorf("%s's span %q names parent %s, which no process recorded", proc[id], s.Name, s.Parent.SpanID)
		}
	}
	if len(roots) != 1 || roots[0] != "cli:cli submit" {
		t.Errorf("roots of the trace: %v; want only the CLI's submit", roots)
	}

	parentOf := func(s telemetry.FileSpan) (telemetry.FileSpan, string) {
		return byID[s.Parent.SpanID], proc[s.Parent.SpanID]
	}
	count := map[string]int{}
	for name, spans := range procs {
		for _, s := range spans {
			count[name+":"+s.Name]++
			p, pproc := parentOf(s)
			switch {
			case name == "coordinator" && s.Name == "submit":
				if pproc != "cli" || p.Name != "cli submit" {
					t.Errorf("coordinator's submit: parent %s:%q, want the CLI's submit", pproc, p.Name)
				}
			case s.Name == "agent job" || s.Name == "gate job":
				kind := map[string]string{"agent job": "agent", "gate job": "gate"}[s.Name]
				if pproc != "coordinator" || p.Name != "dispatch" || p.Attr("supervisor.job_id") != s.Attr("supervisor.job_id") ||
					p.Attr("supervisor.job_kind") != kind {
					t.Errorf("%s's %s %s: parent %s:%q for job %s (%s); want the coordinator's dispatch of that job", name, s.Name,
						s.Attr("supervisor.job_id"), pproc, p.Name, p.Attr("supervisor.job_id"), p.Attr("supervisor.job_kind"))
				}
			case name == "worker" || name == "gaterunner":
				if pproc != name || (p.Name != "agent job" && p.Name != "gate job") {
					t.Errorf("%s's %q: parent %s:%q, want its job's span", name, s.Name, pproc, p.Name)
				}
			case name == "coordinator" && s.Name == "report":
				if (pproc != "worker" && pproc != "gaterunner") || (p.Name != "agent job" && p.Name != "gate job") {
					t.Errorf("coordinator's report: parent %s:%q, want a runner's job span", pproc, p.Name)
				}
			case name == "coordinator":
				if pproc != "coordinator" {
					t.Errorf("coordinator's %q: parent %s:%q, want one of the coordinator's spans", s.Name, pproc, p.Name)
				}
			}
		}
	}
	for _, want := range []string{
		"cli:cli submit", "coordinator:submit", "coordinator:scheduling", "coordinator:dispatch", "coordinator:report",
		"coordinator:integration", "coordinator:merge", "worker:agent job", "worker:workspace preparation", "worker:sandbox run", "worker:upload",
		"gaterunner:gate job", "gaterunner:workspace preparation", "gaterunner:cache lookup", "gaterunner:integrity check",
		"gaterunner:sandbox run", "gaterunner:upload",
	} {
		if count[want] == 0 {
			t.Errorf("no span %s; recorded: %v", want, count)
		}
	}
	t.Logf("spans: %v; trace %s", count, traceID)
	if count["gaterunner:integrity check"] != 2 {
		t.Errorf("gate runner's integrity check spans: %d, want 2 (capture and check)", count["gaterunner:integrity check"])
	}

	// The runners' log lines about the job carry its trace and span.
	for _, name := range []string{"worker", "gaterunner"} {
		var job string
		for _, s := range procs[name] {
			if s.Name == "agent job" || s.Name == "gate job" {
				job = s.SpanContext.SpanID
			}
		}
		logName := map[string]string{"worker": "worker-1", "gaterunner": "gate-1"}[name]
		if want := "trace_id=" + traceID + " span_id=" + job; !strings.Contains(f.procNamed(logName).logText(), want) {
			t.Errorf("%s's log has no line with %s", name, want)
		}
	}

	// So do the coordinator's lines about the workflow: its submission
	// and its merge (the merge span's).
	var merge string
	for _, s := range procs["coordinator"] {
		if s.Name == "merge" {
			merge = s.SpanContext.SpanID
		}
	}
	for msg, span := range map[string]string{"workflow submitted": "", "workflow merged": merge} {
		want := regexp.MustCompile(`(?m)^.*msg="` + msg + `" .*\bworkflow=` + regexp.QuoteMeta(wf) + `\b.* trace_id=` + traceID +
			` span_id=` + map[bool]string{true: `[0-9a-f]{16}`, false: span}[span == ""] + `$`)
		if !want.MatchString(f.procNamed("coordinator").logText()) {
			t.Errorf("the coordinator's log has no line %q of %s in trace %s (span %q)", msg, wf, traceID, span)
		}
	}

	// The agents and the gate's command were handed the span context of
	// their sandbox run: the one whose job is the node's.
	sandboxSpan := func(process, node string) string {
		for _, s := range procs[process] {
			if p, _ := parentOf(s); s.Name == "sandbox run" && p.Attr("supervisor.node_id") == node {
				return fmt.Sprintf("00-%s-%s-01", traceID, s.SpanContext.SpanID)
			}
		}
		return "no sandbox run span of " + node
	}
	logs := f.cli(30*time.Second, "logs", wf, "build")
	if want := "TRACEPARENT=" + sandboxSpan("worker", "build"); !strings.Contains(logs.stdout, want) {
		t.Errorf("the agent's log lacks %s:\n%s", want, logs)
	}
	logs = f.cli(30*time.Second, "logs", wf, "claude")
	tp := sandboxSpan("worker", "claude")
	// The stand-in reports what it printed as its JSON text: lines joined
	// by an escaped newline. With the file exporter Claude Code is not told
	// to export (CLAUDE_CODE_ENABLE_TELEMETRY empty).
	for _, want := range []string{`"text":"TRACEPARENT=` + tp + `\n`, `\nOTEL_TRACEPARENT=` + tp + `\n`,
		`\nCLAUDE_CODE_ENABLE_TELEMETRY="`} {
		if !strings.Contains(logs.stdout, want) {
			t.Errorf("Claude Code's log lacks %q:\n%s", want, logs)
		}
	}
	s := f.detail(wf)
	if want := "TRACEPARENT=" + sandboxSpan("gaterunner", "build"); !strings.Contains(s.node(t, "build").gate(t, "built").Output, want) {
		t.Errorf("the gate's output lacks %s:\n%s", want, s.node(t, "build").gate(t, "built").Output)
	}

	// status shows the trace id, in JSON and in text.
	var js struct {
		TraceID string `json:"trace_id"`
	}
	r = f.cli(30*time.Second, "status", wf, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js.TraceID != traceID {
		t.Errorf("status -o json: trace_id %q (%v), want %s", js.TraceID, err, traceID)
	}
	r = f.cli(30*time.Second, "status", wf)
	if !regexp.MustCompile(`(?m)^trace\s+` + traceID + `$`).MatchString(r.stdout) {
		t.Errorf("status does not show trace %s:\n%s", traceID, r)
	}
}
