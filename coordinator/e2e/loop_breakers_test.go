package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The fleet-wide safeguards end to end, on fleets of separate processes:
// circuit breakers in the state store that every runner shares, and the
// coordinator's pause of new agent rounds after too many failed ones.

// breakerCoolDown is the breaker fleet's --breaker-cool-down: short, so
// that the probe comes soon, and long enough that the test sees the held
// job wait.
const breakerCoolDown = 8 * time.Second

// breakerFlags are the breaker fleet's policy, given to the coordinator
// (which shows it) and to the workers (which apply it): two failures
// within a minute open a breaker.
var breakerFlags = []string{"--breaker-failures", "2", "--breaker-window", "1m", "--breaker-cool-down", breakerCoolDown.String()}

// TestLoopBreakers runs the circuit breakers' scenarios on one fleet:
// nats-server, Redis, `coordinator serve` and two workers, all with
// breakerFlags. Each scenario runs its agent with a model of its own, so
// each has an agent breaker of its own (agent:supervisor-test-agent:MODEL).
func TestLoopBreakers(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordArgs = breakerFlags
	f.coordinator("coordinator", "coordinator")
	workers := []*proc{
		f.worker("worker-a", append([]string{"--concurrency", "2"}, breakerFlags...)...),
		f.worker("worker-b", append([]string{"--concurrency", "2"}, breakerFlags...)...),
	}

	t.Run("ProbeCloses", func(t *testing.T) { t.Parallel(); testBreakerProbe(f.sub(t), workers) })
	t.Run("Reset", func(t *testing.T) { t.Parallel(); testBreakerReset(f.sub(t), workers) })
}

// breakerAgent is the defaults section of the breaker scenarios'
// workflows: the test agent with model as its --model, and attempts
// rounds a task.
func breakerAgent(model string, attempts int) string {
	return fmt.Sprintf(`defaults:
  agent:
    command: [supervisor-test-agent, -p, --output-format, json, --model, %s]
  timeout: 2m
  max_attempts: %d
`, model, attempts)
}

// tripWorkflow: two tasks whose agent fails, each with one attempt: two
// failures of the model's breaker.
func tripWorkflow(model string) string {
	return "name: trip-" + model + "\n" + breakerAgent(model, 1) + `tasks:
  - id: trip-1
    gates: []
    prompt: "@exit 1\n"
  - id: trip-2
    gates: []
    prompt: "@exit 1\n"
`
}

// heldWorkflow: one task whose agent works.
func heldWorkflow(model string) string {
	return "name: held-" + model + "\n" + breakerAgent(model, 3) + `tasks:
  - id: held
    gates: []
    prompt: "@write held.txt\nheld\n@end\n"
`
}

// breakerRow is a breaker as `coordinator breakers -o json` prints it.
type breakerRow struct {
	Scope    string     `json:"scope"`
	State    string     `json:"state"`
	Failures int        `json:"failures"`
	OpenedAt *time.Time `json:"opened_at"`
	Until    *time.Time `json:"until"`
	ProbeDue bool       `json:"probe_due"`
}

// breakers runs `coordinator breakers -o json` and returns the breakers by
// scope.
func (f *fleet) breakers() map[string]breakerRow {
	f.t.Helper()
	r := f.cli(30*time.Second, "breakers", "-o", "json")
	if r.code != 0 {
		f.t.Fatalf("breakers: %s", r)
	}
	var resp struct {
		Breakers []breakerRow `json:"breakers"`
		Policy   struct {
			Failures        int     `json:"failures"`
			WindowSeconds   float64 `json:"window_seconds"`
			CoolDownSeconds float64 `json:"cool_down_seconds"`
		} `json:"policy"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil {
		f.t.Fatalf("breakers JSON: %v\n%s", err, r)
	}
	if p := resp.Policy; p.Failures != 2 || p.WindowSeconds != 60 || p.CoolDownSeconds != breakerCoolDown.Seconds() {
		f.t.Errorf("breakers policy = %+v, want the fleet's flags", p)
	}
	out := map[string]breakerRow{}
	for _, b := range resp.Breakers {
		out[b.Scope] = b
	}
	return out
}

// trip fails two agent rounds of model and waits for its breaker to open;
// it returns the breaker's scope and the breaker.
func trip(f *fleet, model string) (string, breakerRow) {
	t := f.t
	scope := "agent:supervisor-test-agent:" + model
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "trip\n"})
	r := f.cli(3*time.Minute, "submit", writeFile(t, t.TempDir(), "trip.yaml", tripWorkflow(model)), "--repo", repo, "--wait")
	if r.code != 5 {
		t.Fatalf("submit --wait of the failing workflow: want exit 5 (needs attention)\n%s", r)
	}
	var b breakerRow
	waitFor(t, 30*time.Second, "breaker "+scope+" to open", func() bool {
		b = f.breakers()[scope]
		return b.State == "open"
	})
	if b.OpenedAt == nil || b.Until == nil || !b.Until.Equal(b.OpenedAt.Add(breakerCoolDown)) {
		t.Fatalf("breaker %+v, want it open until its cool-down's end", b)
	}
	return scope, b
}

// An open breaker holds jobs back fleet-wide without burning attempts, and
// its half-open probe closes it (CB-01, CB-02, CB-03, CB-05, CB-06, CB-07,
// CB-13, RETRY-11, RETRY-16, HITL-09): two failed agent rounds open the
// model's breaker in the state store the runners share; a job of another
// workflow, run by the same model, then waits on whichever worker pulled
// it, shown in status and `coordinator breakers`, at its first attempt;
// after the cool-down it runs as the probe, succeeds, and the breaker
// closes.
func testBreakerProbe(f *fleet, workers []*proc) {
	t := f.t
	scope, b := trip(f, "cb-probe")
	r := f.cli(30*time.Second, "breakers")
	if r.code != 0 || !regexp.MustCompile(regexp.QuoteMeta(scope)+`\s+open(\s|\n)`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "2 failures within 1m0s open a breaker; "+breakerCoolDown.String()+" later one job probes") {
		t.Errorf("breakers table:\n%s", r)
	}

	repo, base := testkit.Repo(t, map[string]string{"README.md": "held\n"})
	wf := submit(t, f, writeFile(t, t.TempDir(), "held.yaml", heldWorkflow("cb-probe")), repo)
	var n nodeWaiting
	waitFor(t, 30*time.Second, "held to wait on "+scope, func() bool {
		n = f.nodeWaiting(wf, "held")
		if n.Status == "succeeded" {
			t.Fatalf("held succeeded without waiting on the open breaker")
		}
		return n.Waiting != nil
	})
	if w := n.Waiting; w.Scope != scope || !w.Until.Equal(*b.Until) || (w.Host != "worker-a" && w.Host != "worker-b") || n.Attempt != 1 {
		t.Errorf("held = %+v waiting %+v; want attempt 1 held by a worker on %s until %s", n, w, scope, b.Until)
	}
	if r := f.cli(30*time.Second, "status", wf); r.code != 4 ||
		!strings.Contains(r.stdout, "waiting on breaker "+scope+" until "+b.Until.Local().Format(time.TimeOnly)) {
		t.Errorf("status while held: want exit 4 and the wait\n%s", r)
	}

	// After the cool-down, the held job is the probe; it succeeds and the
	// breaker closes (a closed breaker with nothing on record is not
	// listed).
	w := f.cli(2*time.Minute, "watch", wf)
	if w.code != 0 || !regexp.MustCompile(`node held\s+waiting on breaker `+regexp.QuoteMeta(scope)+` until `).MatchString(w.stdout) {
		t.Fatalf("watch: want exit 0 and the wait\n%s", w)
	}
	s := f.detail(wf)
	if h := s.node(t, "held"); h.Status != "succeeded" || h.Attempt != 1 || h.MaxAttempts != 3 {
		t.Errorf("held = %+v, want succeeded at attempt 1 of 3: waiting burnt no attempt", h)
	}
	var starts []time.Time
	probes := 0
	probe := regexp.MustCompile(`(?m)^time=\S+ .*msg="circuit breaker half-open: this job is its probe" .*\bjob=` +
		regexp.QuoteMeta(wf+".held.a1") + ` .*\bscope=` + regexp.QuoteMeta(scope) + `$`)
	for _, p := range workers {
		starts = append(starts, jobStarts(t, p, wf+".held.a1")...)
		probes += len(probe.FindAllString(p.logText(), -1))
	}
	if len(starts) != 1 || starts[0].Before(*b.Until) {
		t.Errorf("held started at %v, want once, after the cool-down's end %s", starts, b.Until)
	}
	if probes != 1 {
		t.Errorf("the workers logged held as the probe %d times, want once", probes)
	}
	if got, ok := f.breakers()[scope]; ok {
		t.Errorf("after the probe succeeded, breaker %s = %+v, want it closed", scope, got)
	}
	if got, want := branchChanges(t, repo, base, "supervisor/"+wf), []string{"A\theld.txt"}; !equalStrings(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
}

// `coordinator breakers reset` closes an open breaker at once (HITL-09,
// CB-13): once it is reset, a job of its scope runs neither held back nor
// as a half-open breaker's probe.
func testBreakerReset(f *fleet, workers []*proc) {
	t := f.t
	scope, b := trip(f, "cb-reset")
	r := f.cli(30*time.Second, "breakers", "reset", scope, "--as", "e2e-operator")
	if want := scope + ": closed (was open since " + b.OpenedAt.Local().Format(time.TimeOnly) + ")"; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Fatalf("breakers reset: want exit 0 and %q\n%s", want, r)
	}
	if got, ok := f.breakers()[scope]; ok {
		t.Fatalf("after the reset, breaker %s = %+v, want it closed", scope, got)
	}
	if r := f.cli(30*time.Second, "breakers", "reset", scope); r.code == 0 || !strings.Contains(r.stderr, "has anything on record") {
		t.Errorf("resetting a closed breaker: want it refused\n%s", r)
	}

	repo, _ := testkit.Repo(t, map[string]string{"README.md": "reset\n"})
	r = f.cli(2*time.Minute, "submit", writeFile(t, t.TempDir(), "held.yaml", heldWorkflow("cb-reset")), "--repo", repo, "--wait")
	if r.code != 0 {
		t.Fatalf("submit --wait after the reset: want exit 0\n%s", r)
	}
	if strings.Contains(r.stdout, "waiting on breaker") {
		t.Errorf("a job waited on the breaker after its reset:\n%s", r.stdout)
	}
	wf := wfID(t, r)
	if h := f.detail(wf).node(t, "held"); h.Status != "succeeded" || h.Attempt != 1 {
		t.Errorf("held = %+v, want succeeded at attempt 1", h)
	}
	for _, p := range workers {
		for _, l := range strings.Split(p.logText(), "\n") {
			if strings.Contains(l, "job="+wf+".") && strings.Contains(l, "circuit breaker") {
				t.Errorf("%s asked an open breaker about held after the reset: %s", p.name, l)
			}
		}
	}
}

// nodeWaiting is a node as `status -o json` prints it, with the breaker
// it waits on.
type nodeWaiting struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Attempt int    `json:"attempt"`
	Waiting *struct {
		Scope string    `json:"scope"`
		Until time.Time `json:"until"`
		Host  string    `json:"host"`
	} `json:"waiting"`
}

// nodeWaiting returns node of workflow wf as `status -o json` prints it.
func (f *fleet) nodeWaiting(wf, node string) nodeWaiting {
	f.t.Helper()
	r := f.cli(30*time.Second, "status", wf, "-o", "json")
	var s struct {
		Nodes []nodeWaiting `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		f.t.Fatalf("status JSON: %v\n%s", err, r)
	}
	for _, n := range s.Nodes {
		if n.ID == node {
			return n
		}
	}
	f.t.Fatalf("workflow %s has no node %s", wf, node)
	return nodeWaiting{}
}

// pauseTask is a task of pauseWorkflow: its first attempt fails, the next
// succeeds.
const pauseTask = `  - id: %s
    gates: []
    prompt: |
      @if-no-feedback
      @exit 1
      @endif
      @write %[1]s.txt
      fixed
      @end
`

// pauseWorkflow: three tasks whose first attempt fails, retried under the
// conservative policy (5 s later).
var pauseWorkflow = "name: pause\n" + agentDefaults + "  retry_policy: conservative\ntasks:\n" +
	fmt.Sprintf(pauseTask, "f1") + fmt.Sprintf(pauseTask, "f2") + fmt.Sprintf(pauseTask, "f3")

// laterWorkflow: one task that works.
const laterWorkflow = `name: later
` + agentDefaults + `tasks:
  - id: later
    gates: []
    prompt: "@write later.txt\nlater\n@end\n"
`

// TestLoopFleetPause: the fleet-wide pause after too many failed rounds
// (S-7, S-7.4), on a fleet whose coordinator allows two failed agent
// rounds an hour: three fail, and the coordinator records the pause in the
// fleet's log (fleet.paused); no retry starts, though their delay is over,
// and a workflow submitted meanwhile starts nothing; status says so. The
// pause outlives a coordinator restart. `coordinator resume` records the
// resume (fleet.resumed), and everything runs to success.
func TestLoopFleetPause(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second)
	f.coordArgs = []string{"--max-failures-per-hour", "2"}
	coord := f.coordinator("coordinator-1", "coordinator")
	worker := f.worker("worker-1", "--concurrency", "3")

	if r := f.cli(30*time.Second, "resume", "--as", "e2e-operator"); r.code == 0 || !strings.Contains(r.stderr, "the fleet is not paused") {
		t.Errorf("resume of a running fleet: want it refused\n%s", r)
	}
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "pause\n"})
	wf := submit(t, f, writeFile(t, t.TempDir(), "pause.yaml", pauseWorkflow), repo)
	const reason = "3 agent rounds failed within an hour, more than the 2 allowed"
	waitFor(t, time.Minute, "the fleet to pause", func() bool {
		return strings.Contains(f.cli(30*time.Second, "status").stdout, "the fleet is paused")
	})
	if r := f.cli(30*time.Second, "status"); !strings.Contains(r.stdout, reason+"; no new agent round starts until `coordinator resume`") {
		t.Errorf("status list while paused:\n%s", r)
	}
	if r := f.cli(30*time.Second, "status", wf); r.code != 4 || !strings.Contains(r.stdout, "fleet     paused: "+reason+" (coordinator resume)") {
		t.Errorf("status of %s while paused: want exit 4 and the pause\n%s", wf, r)
	}
	later := submit(t, f, writeFile(t, t.TempDir(), "later.yaml", laterWorkflow), repo)

	// Past the retries' delay, nothing has started.
	s := f.detail(wf)
	var due time.Time
	for _, n := range s.Nodes {
		if n.Status != "retrying" || n.Attempt != 1 || n.RetryAt == nil {
			t.Fatalf("while paused: node %s = %+v, want retrying after attempt 1", n.ID, n)
		}
		if n.RetryAt.After(due) {
			due = *n.RetryAt
		}
	}
	time.Sleep(time.Until(due) + 2*time.Second)
	assertHeld := func(when string) {
		t.Helper()
		for _, n := range f.detail(wf).Nodes {
			if n.Status != "retrying" || n.Attempt != 1 {
				t.Errorf("%s: node %s is %s at attempt %d, want retrying after attempt 1", when, n.ID, n.Status, n.Attempt)
			}
		}
		if n := f.detail(later).node(t, "later"); n.Status != "pending" || n.Attempt != 0 {
			t.Errorf("%s: later = %+v, want pending: no new agent round", when, n)
		}
		if strings.Contains(worker.logText(), ".a2") || strings.Contains(worker.logText(), later+".later.") {
			t.Errorf("%s: the worker started a job", when)
		}
	}
	assertHeld("past the retries' delay")
	if !strings.Contains(coord.logText(), "the fleet is paused") {
		t.Errorf("coordinator-1 did not log the pause")
	}

	// The pause is in the fleet's log: a new coordinator keeps it.
	coord.signal(t, syscall.SIGTERM)
	if err := coord.wait(t, 30*time.Second); err != nil {
		t.Errorf("coordinator-1 did not shut down cleanly on SIGTERM: %v", err)
	}
	coord2 := f.startCoordinator("coordinator-2", "coordinator")
	f.waitCoordinator(coord2, time.Minute)
	if r := f.cli(30*time.Second, "status"); !strings.Contains(r.stdout, "the fleet is paused") || !strings.Contains(r.stdout, reason) {
		t.Fatalf("after the restart the fleet is not paused:\n%s", r)
	}
	time.Sleep(time.Second)
	assertHeld("after the restart")

	r := f.cli(30*time.Second, "resume", "--as", "e2e-operator")
	if r.code != 0 || !strings.Contains(r.stdout, "the fleet runs again (resumed by e2e-operator; 3 failed rounds in the last hour before)") {
		t.Fatalf("resume:\n%s", r)
	}
	for _, id := range []string{wf, later} {
		if w := f.cli(2*time.Minute, "watch", id); w.code != 0 {
			t.Fatalf("watch %s after the resume: want exit 0\n%s", id, w)
		}
	}
	for _, n := range f.detail(wf).Nodes {
		if n.Status != "succeeded" || n.Attempt != 2 {
			t.Errorf("node %s = %s at attempt %d, want succeeded at attempt 2", n.ID, n.Status, n.Attempt)
		}
	}
	if n := f.detail(later).node(t, "later"); n.Status != "succeeded" || n.Attempt != 1 {
		t.Errorf("later = %+v, want succeeded at attempt 1", n)
	}
	if r := f.cli(30*time.Second, "status"); strings.Contains(r.stdout, "the fleet is paused") {
		t.Errorf("status still says the fleet is paused:\n%s", r)
	}
}
