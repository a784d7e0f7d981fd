package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The chaos suite (CHAOS-01…05, docs/reliability.md) harms the Compose
// fleet of compose_test.go while workflows run on it — a NATS node
// stopped, Redis's data lost, a worker and a gate runner cut off the
// network, the leading coordinator killed, a runner's disk full — and
// checks on each workflow's event log and result branch that every node's
// patch landed exactly once and every job attempt has one accepted result.
// Each scenario logs what it measured (go test -v, `make chaos`).

// chaosFiles are the Compose files the chaos fleet adds to compose.yaml: a
// standby coordinator with a data volume of its own, and a gate runner
// whose data directory is a small tmpfs, alone in pool "small".
var chaosFiles = []string{"compose.standby.yaml", "coordinator/e2e/testdata/compose.chaos.yaml"}

// chaosWorkflow is a workflow of parts tasks in parallel, each writing its
// own file after its agent sleeps agentSleep and gated by a gate sleeping
// gateSleep, then task combine appending one line to README.md once every
// part is in: a patch applied twice would show as that line twice or as a
// second commit of one node.
func chaosWorkflow(name string, parts int, agentSleep, gateSleep time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n%sgates:\n", name, agentDefaults)
	fmt.Fprintf(&b, "  - name: hold\n    command: [sleep, %q]\n", fmt.Sprint(gateSleep.Seconds()))
	b.WriteString("  - name: readme\n    command: [grep, -q, \"^base readme$\", README.md]\n")
	b.WriteString("  - name: combined\n    command: [grep, -qx, \"all parts are in\", README.md]\n")
	b.WriteString("tasks:\n")
	var deps []string
	for i := 1; i <= parts; i++ {
		fmt.Fprintf(&b, "  - id: part-%d\n    gates: [hold, readme]\n    prompt: |\n      Write part %d.\n      @sleep %s\n      @write part-%d.txt\n      part %d\n      @end\n",
			i, i, agentSleep, i, i)
		deps = append(deps, fmt.Sprintf("part-%d", i))
	}
	fmt.Fprintf(&b, "  - id: combine\n    depends_on: [%s]\n    gates: [combined]\n    prompt: |\n      Combine the parts.\n      @append README.md\n      all parts are in\n      @end\n",
		strings.Join(deps, ", "))
	return b.String()
}

// chaosRun is one chaosWorkflow submitted to the fleet.
type chaosRun struct {
	c              *composeFleet
	parts          int
	repo, base, wf string
}

// submitChaos submits a chaosWorkflow on a new repository, without waiting.
func submitChaos(t *testing.T, c *composeFleet, name string, parts int, agentSleep, gateSleep time.Duration) *chaosRun {
	t.Helper()
	repo, base := testkit.Repo(t, map[string]string{"README.md": "base readme\n"})
	wfFile := writeFile(t, t.TempDir(), name+".yaml", chaosWorkflow(name, parts, agentSleep, gateSleep))
	return &chaosRun{c: c, parts: parts, repo: repo, base: base, wf: submit(t, c, wfFile, repo)}
}

// nodes lists the run's node ids.
func (r *chaosRun) nodes() []string {
	var ids []string
	for i := 1; i <= r.parts; i++ {
		ids = append(ids, fmt.Sprintf("part-%d", i))
	}
	return append(ids, "combine")
}

// watch follows the workflow to its end with `coordinator watch --repo`
// (which fetches its branch) and fails the test unless it succeeded. While
// no coordinator answers (exit 69: one stepped down and the other has not
// taken over yet) it tries again.
func (r *chaosRun) watch(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		res := r.c.cli(time.Until(deadline), "watch", r.wf, "--repo", r.repo, "--timeout", "1m")
		switch {
		case res.code == 0:
			return
		case res.code == 69 && time.Now().Add(10*time.Second).Before(deadline):
			t.Logf("watch %s: no coordinator answered; trying again", r.wf)
			time.Sleep(3 * time.Second)
		default:
			t.Fatalf("watch %s did not end in success:\n%s", r.wf, res)
		}
	}
}

// check asserts on the result branch and the event log that every node's
// patch landed exactly once (CHAOS-06) and returns the log.
func (r *chaosRun) check(t *testing.T) *eventTally {
	t.Helper()
	branch := "supervisor/" + r.wf
	var want []string
	for i := 1; i <= r.parts; i++ {
		want = append(want, fmt.Sprintf("A\tpart-%d.txt", i))
	}
	want = append(want, "M\tREADME.md")
	sort.Strings(want)
	if got := branchChanges(t, r.repo, r.base, branch); !equalStrings(got, want) {
		t.Errorf("changes on %s = %q, want %q", branch, got, want)
	}
	if got := fileAt(t, r.repo, branch, "README.md"); got != "base readme\nall parts are in\n" {
		t.Errorf("README.md on %s = %q, want combine's line appended once", branch, got)
	}
	for i := 1; i <= r.parts; i++ {
		if got := fileAt(t, r.repo, branch, fmt.Sprintf("part-%d.txt", i)); got != fmt.Sprintf("part %d\n", i) {
			t.Errorf("part-%d.txt on %s = %q", i, branch, got)
		}
	}
	commits := map[string]int{}
	for _, c := range branchCommits(t, r.repo, r.base, branch) {
		commits[c.node]++
	}
	for _, n := range r.nodes() {
		if commits[n] != 1 {
			t.Errorf("node %s has %d commits on %s, want 1 (commits per node: %v)", n, commits[n], branch, commits)
		}
	}

	s, code := r.c.status(r.wf)
	if code != 0 || s.Status != "succeeded" {
		t.Errorf("status %s: exit %d, %s (%s)", r.wf, code, s.Status, s.Reason)
	}
	tally := tallyEvents(t, r.c.events(t, r.wf))
	tally.checkOnce(t, r.nodes())
	if s.Head != "" && tally.finalCommit != s.Head {
		t.Errorf("workflow.finished records commit %s, status shows head %s", tally.finalCommit, s.Head)
	}
	if got := testkit.Git(t, r.repo, "rev-parse", branch); got != tally.finalCommit {
		t.Errorf("branch %s is at %s, the log's workflow.finished at %s", branch, got, tally.finalCommit)
	}
	return tally
}

// events reads workflow wf's whole event log from the fleet's JetStream.
// A read that fails (the cluster moving a leader or a consumer while the
// scenario harms it) is started again, for up to a minute.
func (c *composeFleet) events(t *testing.T, wf string) []eventlog.Event {
	t.Helper()
	var evs []eventlog.Event
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		if evs, err = c.readEvents(wf); err == nil {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("event log of %s: %v", wf, err)
		}
		t.Logf("event log of %s: %v; reading it again", wf, err)
	}
}

// connectNATS connects this host to the fleet's NATS (nats-1's published
// port), as the CLI the tests run does: the one place the chaos suite's
// own NATS clients are configured. They read the event log and streams'
// cluster state and ask stream leaders to step down, which only the
// coordinator role may: they use its key, replies on its inbox prefix.
func (c *composeFleet) connectNATS() (*nats.Conn, error) {
	key, err := natsauth.ReadKeyFile(c.observerKey())
	if err != nil {
		return nil, err
	}
	auth, err := nats.NkeyOptionFromSeed(key.File)
	if err != nil {
		return nil, err
	}
	cfg, err := c.cliTLS().Client("")
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.natsURL, auth, nats.CustomInboxPrefix(natsauth.InboxPrefix(key.Public)), nats.Secure(cfg))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.natsURL, err)
	}
	return nc, nil
}

// readEvents reads workflow wf's event log once.
func (c *composeFleet) readEvents(wf string) ([]eventlog.Event, error) {
	nc, err := c.connectNATS()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, protocol.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{protocol.EventSubject(wf)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	// The iterator rides out the ordered consumer's resets, where Next
	// fails with "no responders" (as the engine's replay reads the log).
	it, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	stop := time.AfterFunc(30*time.Second, it.Stop)
	defer stop.Stop()
	var evs []eventlog.Event
	for read, pending := uint64(0), info.NumPending; read < pending; read++ {
		msg, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("after %d of %d log messages: %w", read, pending, err)
		}
		batch, err := eventlog.DecodeAll(msg.Data())
		if err != nil {
			return nil, err
		}
		for i, ev := range batch {
			if md, err := msg.Metadata(); err == nil {
				ev.Seq, ev.Index = md.Sequence.Stream, i
			}
			evs = append(evs, ev)
		}
	}
	return evs, nil
}

// eventTally counts what a workflow's event log records.
type eventTally struct {
	// started: node.started per node (each a delivery a runner took under
	// a lease); gateStarted: gate.started per node/gate.
	started, gateStarted map[string][]eventlog.NodeStarted
	// agentDone: accepted agent results per node/attempt; gateDone:
	// accepted gate results per node/gate/attempt/round; integrated:
	// node.integrated per node; succeeded: node.finished succeeded per node.
	agentDone  map[string][]eventlog.NodeAgentDone
	gateDone   map[string][]eventlog.GateFinished
	integrated map[string]int
	succeeded  map[string]int
	// finished counts workflow.finished; finalCommit is its commit.
	finished    int
	finalCommit string
	total       int
}

// tallyEvents counts evs.
func tallyEvents(t *testing.T, evs []eventlog.Event) *eventTally {
	t.Helper()
	k := &eventTally{started: map[string][]eventlog.NodeStarted{}, gateStarted: map[string][]eventlog.NodeStarted{},
		agentDone: map[string][]eventlog.NodeAgentDone{}, gateDone: map[string][]eventlog.GateFinished{},
		integrated: map[string]int{}, succeeded: map[string]int{}, total: len(evs)}
	for _, ev := range evs {
		switch b := ev.Body.(type) {
		case eventlog.NodeStarted:
			k.started[ev.NodeID] = append(k.started[ev.NodeID], b)
		case eventlog.GateStarted:
			key := ev.NodeID + "/" + b.Gate
			k.gateStarted[key] = append(k.gateStarted[key], eventlog.NodeStarted{Attempt: b.Attempt, LeaseToken: b.LeaseToken, Host: b.Host})
		case eventlog.NodeAgentDone:
			key := fmt.Sprintf("%s@%d", ev.NodeID, b.Attempt)
			k.agentDone[key] = append(k.agentDone[key], b)
		case eventlog.GateFinished:
			key := fmt.Sprintf("%s/%s@%d.%d", ev.NodeID, b.Gate, b.Attempt, b.Round)
			k.gateDone[key] = append(k.gateDone[key], b)
		case eventlog.NodeIntegrated:
			k.integrated[ev.NodeID]++
		case eventlog.NodeFinished:
			if b.Status == protocol.NodeSucceeded {
				k.succeeded[ev.NodeID]++
			}
		case eventlog.WorkflowFinished:
			k.finished++
			k.finalCommit = b.Commit
		}
	}
	return k
}

// checkOnce asserts that each node was integrated and succeeded exactly
// once, each agent attempt and each gate round has one accepted result,
// and the workflow finished once.
func (k *eventTally) checkOnce(t *testing.T, nodes []string) {
	t.Helper()
	for _, n := range nodes {
		if k.integrated[n] != 1 || k.succeeded[n] != 1 {
			t.Errorf("node %s: %d node.integrated and %d node.finished(succeeded) events, want 1 each", n, k.integrated[n], k.succeeded[n])
		}
	}
	for key, done := range k.agentDone {
		if len(done) != 1 {
			t.Errorf("agent job %s: %d accepted results %s, want 1", key, len(done), jsonOf(done))
		}
	}
	for key, done := range k.gateDone {
		if len(done) != 1 {
			t.Errorf("gate job %s: %d accepted results %s, want 1", key, len(done), jsonOf(done))
		}
	}
	if k.finished != 1 {
		t.Errorf("%d workflow.finished events, want 1", k.finished)
	}
}

// redeliveries sums, over nodes and gates, the starts past each job's
// first: how often a job was taken again under a newer lease.
func (k *eventTally) redeliveries() (agents, gates int) {
	for _, s := range k.started {
		agents += len(s) - 1
	}
	for _, s := range k.gateStarted {
		gates += len(s) - 1
	}
	return agents, gates
}

// summary is one line of what the log holds, for the test's output.
func (k *eventTally) summary() string {
	a, g := k.redeliveries()
	return fmt.Sprintf("%d events; agent jobs taken again %d times, gate jobs %d times; one accepted result per job attempt, one commit per node", k.total, a, g)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// logLines returns a container's log lines (JSON, the services'
// log-format) whose msg is msg, decoded.
func (c *composeFleet) logLines(t *testing.T, id, msg string) []map[string]any {
	t.Helper()
	r := c.run(time.Minute, "docker", "logs", id)
	if r.code != 0 {
		t.Fatalf("docker logs %s: exit %d: %s", id, r.code, r.stderr)
	}
	var lines []map[string]any
	for _, l := range strings.Split(r.stdout+"\n"+r.stderr, "\n") {
		if !strings.Contains(l, `"msg":"`+msg+`"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			lines = append(lines, m)
		}
	}
	return lines
}

// firstLogAfter returns the time of a container's first JSON log line
// whose msg is msg logged after after (zero if none is).
func (c *composeFleet) firstLogAfter(t *testing.T, id, msg string, after time.Time) time.Time {
	t.Helper()
	for _, l := range c.logLines(t, id, msg) {
		if at := logTime(t, l); at.After(after) {
			return at
		}
	}
	return time.Time{}
}

// logTime is the time of a decoded JSON log line.
func logTime(t *testing.T, line map[string]any) time.Time {
	t.Helper()
	s, _ := line["time"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("log line without a time: %v", line)
	}
	return at
}

// docker runs a docker command on the fleet, failing the test unless it
// exits 0.
func (c *composeFleet) docker(t *testing.T, args ...string) string {
	t.Helper()
	r := c.run(2*time.Minute, "docker", args...)
	if r.code != 0 {
		t.Fatalf("docker %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// one returns the id of a service's one running container.
func (c *composeFleet) one(t *testing.T, service string) string {
	t.Helper()
	ids := c.containers(service)
	if len(ids) != 1 {
		t.Fatalf("service %s has %d running containers, want 1", service, len(ids))
	}
	return ids[0]
}

// tryStatus is status for polling while the fleet is harmed: ok is false
// when no coordinator answered (the poll goes on).
func (c *composeFleet) tryStatus(t *testing.T, wf string) (s wfStatus, ok bool) {
	t.Helper()
	r := c.cli(time.Minute, "status", wf, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Logf("status %s: exit %d: %s", wf, r.code, strings.TrimSpace(r.stderr))
		return s, false
	}
	return s, true
}
