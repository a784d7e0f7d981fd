package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
)

// The feedback scenario's workflow: every task's agent is the scripted
// test agent, which writes nothing on its first attempt, so the one gate
// fails; the failure's feedback names the gate, and the second attempt,
// like an agent reading it, writes the file the gate looks for.
const (
	// TestAgentBinary is the feedback scenario's agent, looked for in
	// Config.BinDir (make build puts it in bin/).
	TestAgentBinary = "supervisor-test-agent"
	// FeedbackRetryPolicy is the built-in retry policy of the feedback
	// workflow: aggressive waits 1 s, without jitter, before attempt 2,
	// which keeps the scenario short.
	FeedbackRetryPolicy = "aggressive"
	// FeedbackGate is the name of the gate that fails until fixed.
	FeedbackGate = "has-fix"
	// FeedbackFile is what the second attempt writes, under a directory
	// named after its task.
	FeedbackFile = "fixed.txt"
)

// DefaultFeedbackTasks is --feedback-tasks' default.
const DefaultFeedbackTasks = 20

// FeedbackAgentCommand is the feedback scenario's agent command.
var FeedbackAgentCommand = []string{TestAgentBinary, "-p"}

// FeedbackGateCommand is the has-fix gate, argv only: it passes when a
// file named fixed.txt holding "fixed" exists anywhere in the workspace.
// Each task writes its own (tNNNN/fixed.txt) rather than one fixed.txt at
// the top, because the tasks are independent and all of their patches
// land on the workflow's branch: the same new file twice would not apply.
var FeedbackGateCommand = []string{"grep", "-rqs", "--exclude-dir=.git", "--include=" + FeedbackFile, "-e", "fixed", "."}

// FeedbackFigures is the feedback scenario's detail, all from the event
// log's timestamps (the coordinator's clock). The round trip, Result's
// latency, runs from the failed gate.finished of attempt 1 to the
// node.started of attempt 2; the retry policy's delay is most of it.
type FeedbackFigures struct {
	// RetryPolicy is the workflow's retry policy; DelayMillis its delay
	// before attempt 2 (before any jitter), and Jitter its spread (a
	// fraction).
	RetryPolicy string  `json:"retry_policy"`
	DelayMillis float64 `json:"delay_ms"`
	Jitter      float64 `json:"jitter,omitempty"`
	// Retries is how many nodes went round: failed, then started attempt 2.
	Retries int `json:"retries"`
	// BeyondDelay is node.started (attempt 2) minus the retry's
	// not_before: the round trip without the delay. BeyondDelayRatio is
	// its p50 over the latency reference's p50.
	BeyondDelayP50Micros float64 `json:"beyond_delay_p50_us"`
	BeyondDelayP99Micros float64 `json:"beyond_delay_p99_us"`
	BeyondDelayRatio     float64 `json:"beyond_delay_ratio,omitempty"`
	// The round trip in parts, which add up to it: Decide, the failed
	// gate.finished → node.retry_scheduled (the coordinator folding the
	// report and building the feedback); ScheduledDelay, retry_scheduled →
	// not_before (the policy's delay as scheduled); Wake, not_before →
	// node.ready of attempt 2 (the coordinator's timer); Dispatch,
	// node.ready → node.started of attempt 2 (the job's publish, a free
	// agent slot and the worker's fetch).
	DecideP50Micros         float64 `json:"decide_p50_us"`
	DecideP99Micros         float64 `json:"decide_p99_us"`
	ScheduledDelayP50Micros float64 `json:"scheduled_delay_p50_us"`
	ScheduledDelayP99Micros float64 `json:"scheduled_delay_p99_us"`
	WakeP50Micros           float64 `json:"wake_p50_us"`
	WakeP99Micros           float64 `json:"wake_p99_us"`
	DispatchP50Micros       float64 `json:"dispatch_p50_us"`
	DispatchP99Micros       float64 `json:"dispatch_p99_us"`
	// GateResults is how many gate results the workflow had (one per
	// attempt per task), CachedGates how many of them came from the gate
	// cache, and DistinctKeys for how many nodes attempt 2's cache key
	// differed from attempt 1's (the code differs, so the keys must).
	GateResults  int `json:"gate_results"`
	CachedGates  int `json:"cached_gates"`
	DistinctKeys int `json:"distinct_keys"`
}

// feedbackYAML writes the feedback scenario's workflow of tasks tasks.
func feedbackYAML(name string, tasks int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ndefaults:\n  agent:\n    command: %s\n  timeout: 1m\n  retry_policy: %s\n  max_attempts: 2\n",
		name, flowList(FeedbackAgentCommand), FeedbackRetryPolicy)
	fmt.Fprintf(&b, "gates:\n  - name: %s\n    command: %s\n    timeout: 1m\n", FeedbackGate, flowList(FeedbackGateCommand))
	b.WriteString("tasks:\n")
	for i := 0; i < tasks; i++ {
		id := fmt.Sprintf("t%04d", i)
		fmt.Fprintf(&b, "  - id: %s\n    prompt: |\n", id)
		// The first attempt makes a change (a round that changes nothing
		// would fail before any gate ran), but not the one the gate wants.
		for _, line := range []string{
			"Make the " + FeedbackGate + " gate pass.",
			"@write " + id + "/draft.txt",
			"a first try by " + id,
			"@end",
			"@if-feedback " + FeedbackGate,
			"@write " + id + "/" + FeedbackFile,
			"fixed by " + id,
			"@end",
			"@endif",
		} {
			fmt.Fprintf(&b, "      %s\n", line)
		}
	}
	return []byte(b.String())
}

// flowList writes argv as a YAML flow sequence of quoted strings.
func flowList(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// runFeedback submits the feedback workflow and measures each task's
// round trip from its failed gate to its second agent round.
func (r *runner) runFeedback(ctx context.Context, fs *fleetSession) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait)
	defer cancel()
	count := r.cfg.FeedbackTasks
	name := "bench-feedback"
	yaml := feedbackYAML(name, count)
	if _, err := workflow.Parse(name+".yaml", yaml); err != nil {
		return Result{}, fmt.Errorf("generated workflow: %w", err)
	}
	policy, ok := protocol.BuiltinRetryPolicy(FeedbackRetryPolicy)
	if !ok {
		return Result{}, fmt.Errorf("no built-in retry policy %q", FeedbackRetryPolicy)
	}

	r.progress("%s: %d tasks, gate %s failing until the agent acts on the feedback; retry policy %s", ScenarioFeedback,
		count, FeedbackGate, FeedbackRetryPolicy)
	mem := startMem()
	start := time.Now()
	id, err := submit(ctx, fs.client, fs.repo, name+".yaml", yaml)
	if err != nil {
		return Result{}, err
	}
	end, err := fs.watcher.wait(ctx, []string{id})
	if err != nil {
		return Result{}, err
	}
	wall := end.Sub(start)
	memory := mem.stop(count, fs.watcher.settle)
	st, err := fs.watcher.collect([]string{id})
	if err != nil {
		return Result{}, err
	}
	if st.succeeded != count {
		return Result{}, fmt.Errorf("%d of %d nodes succeeded", st.succeeded, count)
	}
	loop, err := fs.watcher.feedbackRounds(id)
	if err != nil {
		return Result{}, err
	}
	if len(loop.roundTrip) != count {
		return Result{}, fmt.Errorf("%d of %d nodes went round once", len(loop.roundTrip), count)
	}
	r.progress("%s: %d nodes in %.2fs", ScenarioFeedback, count, wall.Seconds())

	fb := &FeedbackFigures{RetryPolicy: policy.Name, DelayMillis: float64(policy.InitialDelay) / float64(time.Millisecond),
		Jitter: policy.Jitter, Retries: len(loop.roundTrip), GateResults: loop.gateResults, CachedGates: loop.cached,
		DistinctKeys: loop.distinctKeys}
	fb.BeyondDelayP50Micros, fb.BeyondDelayP99Micros = quantiles(loop.beyond)
	fb.DecideP50Micros, fb.DecideP99Micros = quantiles(loop.decide)
	fb.ScheduledDelayP50Micros, fb.ScheduledDelayP99Micros = quantiles(loop.delay)
	fb.WakeP50Micros, fb.WakeP99Micros = quantiles(loop.wake)
	fb.DispatchP50Micros, fb.DispatchP99Micros = quantiles(loop.dispatch)
	res := Result{
		Scenario: ScenarioFeedback, Unit: "node", Count: count, Workflows: 1,
		WallSeconds: wall.Seconds(), Throughput: float64(count) / wall.Seconds(),
		Latency:  "gate failed→attempt 2 started (round trip, retry delay included)",
		Feedback: fb, Memory: memory,
		Description: fmt.Sprintf("tasks whose gate `%s` fails until agent `%s` acts on the feedback; retry policy %s (%s before attempt 2); "+
			"%d agent and %d gate slots", FeedbackGate, strings.Join(FeedbackAgentCommand, " "), policy.Name,
			time.Duration(fb.DelayMillis*float64(time.Millisecond)), r.cfg.Concurrency, r.cfg.Concurrency),
	}
	res.LatencyP50Micros, res.LatencyP99Micros = quantiles(loop.roundTrip)
	res.GateLatencyP50Micros, res.GateLatencyP99Micros = quantiles(st.gateLatency)
	return res, nil
}

// nodeRounds is what the event log said about one node's attempts, by
// attempt number.
type nodeRounds map[int]*attemptEvents

// attemptEvents is one attempt of a node.
type attemptEvents struct {
	// gateFailed is the attempt's last gate.finished without a pass.
	gateFailed time.Time
	// retryScheduled is its node.retry_scheduled, and notBefore when that
	// lets the next attempt start.
	retryScheduled, notBefore time.Time
	// ready and started are the attempt's node.ready and node.started,
	// kept for attempts after the first.
	ready, started time.Time
	gates          []gateOutcome
}

// gateOutcome is one gate.finished.
type gateOutcome struct {
	gate   string
	status protocol.GateStatus
	cached bool
	key    string
	reason string
}

// round returns node's record of attempt, made on first use.
func (wf *wfEvents) round(node string, attempt int) *attemptEvents {
	if wf.rounds == nil {
		wf.rounds = map[string]nodeRounds{}
	}
	nr := wf.rounds[node]
	if nr == nil {
		nr = nodeRounds{}
		wf.rounds[node] = nr
	}
	a := nr[attempt]
	if a == nil {
		a = &attemptEvents{}
		nr[attempt] = a
	}
	return a
}

// gateRound records a gate.finished of a failed gate or of a retry.
func (wf *wfEvents) gateRound(ev eventlog.Event, b eventlog.GateFinished, passed bool) {
	a := wf.round(ev.NodeID, b.Attempt)
	g := gateOutcome{gate: b.Gate, reason: b.Reason}
	if res := b.Result; res != nil {
		g.status, g.cached, g.key = res.Status, res.Cached, res.CacheKey
	}
	a.gates = append(a.gates, g)
	if !passed && ev.Time.After(a.gateFailed) {
		a.gateFailed = ev.Time
	}
}

// loopStats is the feedback round trips of one workflow, one sample per
// node.
type loopStats struct {
	roundTrip, beyond, decide, delay, wake, dispatch []time.Duration
	gateResults, cached, distinctKeys                int
}

// feedbackRounds measures, for every node of workflow id, the round trip
// from its first attempt's failed gate to its second attempt's start, and
// checks that the loop went as the scenario means it to: each node failed
// its gate once, for real (not from the cache), was retried once, and
// passed on attempt 2 with a different cache key.
func (w *watcher) feedbackRounds(id string) (loopStats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var st loopStats
	wf := w.wfs[id]
	if wf == nil {
		return st, fmt.Errorf("no events of workflow %s", id)
	}
	nodes := make([]string, 0, len(wf.rounds))
	for n := range wf.rounds {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		rounds := wf.rounds[n]
		first, second := rounds[1], rounds[2]
		if first == nil || second == nil || first.gateFailed.IsZero() || first.retryScheduled.IsZero() || second.started.IsZero() {
			return st, fmt.Errorf("node %s did not go round: want a failed gate, a retry and a second attempt", n)
		}
		if third := rounds[3]; third != nil && !third.started.IsZero() {
			return st, fmt.Errorf("node %s started a third attempt", n)
		}
		if err := checkGates(n, first.gates, second.gates); err != nil {
			return st, err
		}
		for _, a := range []*attemptEvents{first, second} {
			st.gateResults += len(a.gates)
			for _, g := range a.gates {
				if g.cached {
					st.cached++
				}
			}
		}
		if k1, k2 := first.gates[len(first.gates)-1].key, second.gates[len(second.gates)-1].key; k1 != "" && k2 != "" {
			st.distinctKeys++
		}
		st.roundTrip = append(st.roundTrip, second.started.Sub(first.gateFailed))
		st.beyond = append(st.beyond, second.started.Sub(first.notBefore))
		st.decide = append(st.decide, first.retryScheduled.Sub(first.gateFailed))
		st.delay = append(st.delay, first.notBefore.Sub(first.retryScheduled))
		st.wake = append(st.wake, second.ready.Sub(first.notBefore))
		st.dispatch = append(st.dispatch, second.started.Sub(second.ready))
	}
	return st, nil
}

// checkGates checks a node's gate results: attempt 1's gate failed and
// was not served from the cache (only passes are cached), attempt 2's
// passed, ran (no cache hit: its tree is new) and had another cache key
// than attempt 1's, since the code under test differs.
func checkGates(node string, first, second []gateOutcome) error {
	if len(first) == 0 || len(second) == 0 {
		return fmt.Errorf("node %s: %d gate results in attempt 1, %d in attempt 2; want one each", node, len(first), len(second))
	}
	for _, g := range first {
		if g.status != protocol.GateFailed || g.cached {
			return fmt.Errorf("node %s attempt 1: gate %s %s (cached %v, %s); want failed, run", node, g.gate, g.status, g.cached, g.reason)
		}
	}
	last := second[len(second)-1]
	if last.status != protocol.GatePassed || last.cached {
		return fmt.Errorf("node %s attempt 2: gate %s %s (cached %v, %s); want passed, run", node, last.gate, last.status, last.cached, last.reason)
	}
	if k := first[len(first)-1].key; k != "" && k == last.key {
		return fmt.Errorf("node %s: attempt 2's gate has attempt 1's cache key %s, though the code differs", node, k)
	}
	return nil
}
