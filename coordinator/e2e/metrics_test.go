package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/metrics/metricstest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// metricsWorkflow: six independent nodes, one attempt each but flaky's
// two. ok passes its gate; flaky's gate fails once (a retry), then
// passes (its second attempt writes one more file, so that it is not taken
// for an agent going round in circles); fail's gate fails (an escalation); pend's gate is pending until
// the test writes %[2]s; stray's gate writes outside its allowed_writes
// (an integrity violation, an escalation); broken's gate cannot start (a
// failure of its breaker, an escalation). Only check, always-fail and
// create-file look up the gate cache: flaky and pend are cache: false (so
// the counts do not depend on how many polls pend takes), and missing has
// no cache key (a program that does not exist has no environment id).
const metricsWorkflow = `name: metrics
` + agentDefaults + `  max_attempts: 1
gates:
  - name: check
    command: ["true"]
  - name: flaky
    command: [gatehelper, flaky, %[1]q, "1"]
    cache: false
  - name: always-fail
    command: ["false"]
  - name: pend
    command: [gatehelper, pending-until, %[2]q]
    poll_interval: 1s
    cache: false
  - name: create-file
    command: [gatehelper, write, stray.txt, "left behind"]
  - name: missing
    command: [no-such-gate-command]
tasks:
  - id: ok
    prompt: "@write ok.txt\nok\n@end\n"
    gates: [check]
  - id: flaky
    prompt: "@write flaky.txt\nflaky\n@end\n@if-env SUPERVISOR_ATTEMPT 2\n@write flaky2.txt\nsecond\n@end\n@endif\n"
    gates: [flaky]
    max_attempts: 2
  - id: fail
    prompt: "@write fail.txt\nfail\n@end\n"
    gates: [always-fail]
  - id: pend
    prompt: "@write pend.txt\npend\n@end\n"
    gates: [pend]
  - id: stray
    prompt: "@write stray-node.txt\nstray\n@end\n"
    gates: [create-file]
  - id: broken
    prompt: "@write broken.txt\nbroken\n@end\n"
    gates: [missing]
`

// cacheAgainWorkflow is metricsWorkflow's ok node alone: on the same base,
// its gate's workspace is the same tree, so the gate cache answers.
const cacheAgainWorkflow = `name: metrics-again
` + agentDefaults + `gates:
  - name: check
    command: ["true"]
tasks:
  - id: ok
    prompt: "@write ok.txt\nok\n@end\n"
    gates: [check]
`

// scraper scrapes one process's /metrics.
type scraper struct {
	t    *testing.T
	name string
	url  string
}

func (s scraper) scrape() metricstest.Families {
	s.t.Helper()
	f, err := metricstest.Scrape(context.Background(), s.url)
	if err != nil {
		s.t.Fatalf("%s: %v", s.name, err)
	}
	return f
}

// expect checks name{labels} against want in one scrape.
func expect(t *testing.T, who string, f metricstest.Families, want float64, name string, labels ...string) {
	t.Helper()
	if got := f.Sum(name, labels...); got != want {
		t.Errorf("%s: %s%v = %v, want %v", who, name, labels, got, want)
	}
}

// metricsAddr picks a free loopback address for a process's metrics.
func metricsAddr(t *testing.T) string {
	t.Helper()
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// Prometheus metrics of separate coordinator, worker and gate runner
// processes, scraped during and after workflows: the job queue while no
// worker pulls (from JetStream), slots and workflows while a gate is
// pending, then every counter moved by exactly what the workflows did —
// jobs by kind, pool and outcome on each side, gate executions by status,
// retries, escalations, integrity violations, cache misses and a hit,
// pending time, the inbox and workflows by status, breakers — and every
// exposition parses with the Prometheus text parser.
func TestMetrics(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	coordAddr, workerAddr, gateAddr := metricsAddr(t), metricsAddr(t), metricsAddr(t)
	f.coordArgs = []string{"--metrics-listen", coordAddr}
	f.coordinator("coordinator", "coordinator")
	f.gaterunner("gate-1", "--concurrency", "2", "--metrics-listen", gateAddr)
	coord := scraper{t, "coordinator", "http://" + coordAddr + "/metrics"}
	gates := scraper{t, "gaterunner", "http://" + gateAddr + "/metrics"}
	workers := scraper{t, "worker", "http://" + workerAddr + "/metrics"}

	c := coord.scrape()
	expect(t, "coordinator", c, 1, "supervisor_coordinator_leader")
	expect(t, "coordinator", c, 0, "supervisor_workflows", "status=running")
	g := gates.scrape()
	expect(t, "gaterunner", g, 0, "supervisor_runner_slots", "kind=gate", "state=busy")
	expect(t, "gaterunner", g, 2, "supervisor_runner_slots", "kind=gate", "state=free")
	if g.Has("supervisor_coordinator_leader") || g.Has("supervisor_job_queue_depth") {
		t.Errorf("the gate runner reports the coordinator's metrics")
	}

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "metrics\n"})
	dir := t.TempDir()
	flakyState, done := filepath.Join(dir, "flaky-state"), filepath.Join(dir, "external-check-done")
	wf := submit(t, f, writeFile(t, dir, "metrics.yaml", fmt.Sprintf(metricsWorkflow, flakyState, done)), repo)

	// During: no worker pulls yet, so the five agent jobs wait in the
	// queue, as JetStream counts them.
	waitFor(t, 30*time.Second, "the six agent jobs in the queue", func() bool {
		return coord.scrape().Sum("supervisor_job_queue_depth", "kind=agent", "pool=default") == 6
	})
	c = coord.scrape()
	expect(t, "coordinator", c, 1, "supervisor_workflows", "status=running")
	expect(t, "coordinator", c, 6, "supervisor_jobs_published_total", "kind=agent", "pool=default")
	if age := c.Sum("supervisor_job_queue_oldest_age_seconds", "kind=agent", "pool=default"); age <= 0 {
		t.Errorf("oldest waiting agent job's age = %v, want > 0", age)
	}

	f.worker("worker-1", "--concurrency", "2", "--metrics-listen", workerAddr)
	// During: pend's gate is pending; the worker and gate runner each
	// report their two slots.
	waitFor(t, 2*time.Minute, "pend's gate to report pending", func() bool {
		return gates.scrape().Sum("supervisor_gates_executed_total", "gate=pend", "status=pending") >= 1
	})
	w := workers.scrape()
	expect(t, "worker", w, 2, "supervisor_runner_slots", "kind=agent")
	g = gates.scrape()
	expect(t, "gaterunner", g, 2, "supervisor_runner_slots", "kind=gate")
	// Running, or needing attention once fail or stray escalated.
	expect(t, "coordinator", coord.scrape(), 1, "supervisor_workflows")

	if err := os.WriteFile(done, []byte("done\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"ok", "flaky", "pend"} {
		f.waitNode(wf, node, "succeeded", time.Minute)
	}
	for _, node := range []string{"fail", "stray", "broken"} {
		f.waitNode(wf, node, "escalated", time.Minute)
	}
	f.waitStatus(wf, "needs_attention", time.Minute)

	// After: the counts of what the workflow did.
	c, w, g = coord.scrape(), workers.scrape(), gates.scrape()
	pendPolls := g.Sum("supervisor_gates_executed_total", "gate=pend", "status=pending")
	// Seven agent rounds (flaky's two), each a published job the worker ran.
	expect(t, "coordinator", c, 7, "supervisor_jobs_published_total", "kind=agent", "pool=default")
	expect(t, "worker", w, 7, "supervisor_jobs_total", "kind=agent", "pool=default", "outcome=succeeded")
	expect(t, "worker", w, 7, "supervisor_jobs_total", "kind=agent")
	expect(t, "worker", w, 7, "supervisor_agent_duration_seconds", "status=succeeded")
	expect(t, "worker", w, 7, "supervisor_job_start_latency_seconds", "kind=agent", "pool=default")
	expect(t, "worker", w, 0, "supervisor_runner_slots", "kind=agent", "state=busy")
	// Gate executions by status: check 1 pass; flaky 1 fail + 1 pass;
	// always-fail 1 fail; pend its polls + 1 pass; create-file 1 fail;
	// missing 1 fail.
	for _, e := range []struct {
		gate, status string
		n            float64
	}{
		{"check", "passed", 1}, {"flaky", "failed", 1}, {"flaky", "passed", 1}, {"always-fail", "failed", 1},
		{"pend", "passed", 1}, {"create-file", "failed", 1}, {"missing", "failed", 1},
	} {
		expect(t, "gaterunner", g, e.n, "supervisor_gates_executed_total", "gate="+e.gate, "status="+e.status)
	}
	expect(t, "gaterunner", g, 7+pendPolls, "supervisor_gates_executed_total")
	expect(t, "gaterunner", g, 1, "supervisor_gate_duration_seconds", "gate=check")
	expect(t, "gaterunner", g, 1, "supervisor_integrity_violations_total", "gate=create-file")
	expect(t, "gaterunner", g, 1, "supervisor_integrity_violations_total")
	expect(t, "gaterunner", g, 3, "supervisor_gate_cache_misses_total")
	expect(t, "gaterunner", g, 0, "supervisor_gate_cache_hits_total")
	expect(t, "gaterunner", g, 3, "supervisor_jobs_total", "kind=gate", "outcome=succeeded")
	expect(t, "gaterunner", g, 4, "supervisor_jobs_total", "kind=gate", "outcome=failed")
	expect(t, "gaterunner", g, pendPolls, "supervisor_jobs_total", "kind=gate", "outcome=pending")
	gateJobs := g.Sum("supervisor_jobs_total", "kind=gate", "outcome=succeeded") + g.Sum("supervisor_jobs_total", "kind=gate", "outcome=failed") +
		g.Sum("supervisor_jobs_total", "kind=gate", "outcome=pending")
	expect(t, "gaterunner", g, 7+pendPolls, "supervisor_job_start_latency_seconds", "kind=gate", "pool=default")
	expect(t, "coordinator", c, gateJobs, "supervisor_jobs_published_total", "kind=gate", "pool=default")
	if gateJobs != 7+pendPolls {
		t.Errorf("gate runner: %v gate jobs reported, want %v", gateJobs, 7+pendPolls)
	}
	expect(t, "gaterunner", g, 0, "supervisor_runner_slots", "kind=gate", "state=busy")
	// The coordinator's view: flaky's retry, three escalations, pend's wait.
	expect(t, "coordinator", c, 1, "supervisor_gate_retries_total", "gate=flaky")
	expect(t, "coordinator", c, 1, "supervisor_gate_retries_total")
	expect(t, "coordinator", c, 1, "supervisor_gates_escalated_total", "gate=always-fail")
	expect(t, "coordinator", c, 1, "supervisor_gates_escalated_total", "gate=create-file")
	expect(t, "coordinator", c, 1, "supervisor_gates_escalated_total", "gate=missing")
	expect(t, "coordinator", c, 3, "supervisor_gates_escalated_total")
	expect(t, "coordinator", c, 1, "supervisor_async_gate_wait_seconds", "gate=pend")
	if pendPolls >= 2 && c.HistogramSum("supervisor_async_gate_wait_seconds", "gate=pend") <= 0 {
		t.Errorf("pend was polled %v times but waited no time", pendPolls)
	}
	expect(t, "coordinator", c, 1, "supervisor_workflows", "status=needs_attention")
	expect(t, "coordinator", c, 0, "supervisor_workflows", "status=running")
	expect(t, "coordinator", c, 3, "supervisor_inbox_size", "status=escalated")
	expect(t, "coordinator", c, 1, "supervisor_events_appended_total", "type=workflow.submitted")
	// The latency is observed once per log message; the workflow's
	// independent tasks became ready in one decision, whose events went
	// out as one message (PERF-57), so events outnumber messages.
	if n, appended := c.Sum("supervisor_eventlog_append_seconds"), c.Sum("supervisor_events_appended_total"); n == 0 || n >= appended {
		t.Errorf("append latency observed %v times for %v events appended: want fewer messages than events, and some", n, appended)
	}
	// A gate that cannot start is a failure of its breaker (one, below the
	// threshold: closed); a gate that fails on the code is not.
	expect(t, "coordinator", c, 1, "supervisor_breaker_state", "scope=gate:missing:*", "state=closed")
	expect(t, "coordinator", c, 0, "supervisor_breaker_state", "scope=gate:missing:*", "state=open")
	expect(t, "coordinator", c, 1, "supervisor_breaker_failures", "scope=gate:missing:*")
	expect(t, "coordinator", c, 0, "supervisor_breaker_failures", "scope=gate:always-fail:*")
	expect(t, "coordinator", c, 0, "supervisor_job_queue_depth", "kind=agent", "pool=default")
	expect(t, "coordinator", c, 0, "supervisor_job_queue_in_progress", "kind=agent", "pool=default")
	expect(t, "coordinator", c, 0, "supervisor_job_queue_depth", "kind=gate", "pool=default")

	// The humans reject both: the workflow fails, the inbox empties.
	f.decide("reject", wf, "fail", "e2e-reviewer", "--reason", "no")
	f.decide("reject", wf, "stray", "e2e-reviewer", "--reason", "no")
	f.decide("reject", wf, "broken", "e2e-reviewer", "--reason", "no")
	f.waitStatus(wf, "failed", time.Minute)
	c = coord.scrape()
	expect(t, "coordinator", c, 1, "supervisor_workflows", "status=failed")
	expect(t, "coordinator", c, 0, "supervisor_workflows", "status=needs_attention")
	expect(t, "coordinator", c, 0, "supervisor_inbox_size")

	// The same ok node again: its gate is answered from the cache, and
	// executes nothing.
	submitWait(t, f, 2*time.Minute, writeFile(t, dir, "again.yaml", cacheAgainWorkflow), repo)
	c, w, g = coord.scrape(), workers.scrape(), gates.scrape()
	expect(t, "gaterunner", g, 1, "supervisor_gate_cache_hits_total", "gate=check")
	expect(t, "gaterunner", g, 1, "supervisor_gates_executed_total", "gate=check")
	expect(t, "gaterunner", g, 3, "supervisor_gate_cache_misses_total")
	expect(t, "worker", w, 8, "supervisor_jobs_total", "kind=agent", "outcome=succeeded")
	expect(t, "coordinator", c, 8, "supervisor_jobs_published_total", "kind=agent")
	expect(t, "coordinator", c, 2, "supervisor_events_appended_total", "type=workflow.submitted")
	expect(t, "coordinator", c, 1, "supervisor_workflows", "status=succeeded")
}
