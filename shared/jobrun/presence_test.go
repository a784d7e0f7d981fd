package jobrun

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/jobrun/jobruntest"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestPresenceAnnounces checks a runner's entry in the runners bucket of a
// real NATS server: what it says of the runner, its renewal (which keeps
// it past the bucket's TTL), the current jobs and stats that job starts
// and ends change at once, and its removal when the runner stops.
func TestPresenceAnnounces(t *testing.T) {
	f := jobruntest.OpenFleet(t, "presence", bus.Config{RunnerTTL: 2 * time.Second})
	labels := map[string]string{"gpus": "2", "gpu": "a100"}
	p := NewPresence(f.Bus.Runners, "build-7", labels, "process", f.Log)
	p.SetInterval(200 * time.Millisecond)
	stop := p.Announce(protocol.KindAgent, []string{"default", "gpu"}, 3)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	first := f.WaitRunner(protocol.KindAgent, "build-7", 10*time.Second, "the runner's entry", func(protocol.RunnerInfo) bool { return true })
	if first.Kind != protocol.KindAgent || first.Host != "build-7" || len(first.Pools) != 2 || first.Pools[1] != "gpu" ||
		first.Labels["gpus"] != "2" || first.Labels["gpu"] != "a100" || first.Sandbox != "process" || first.Version == "" ||
		first.Slots != 3 || first.Busy != 0 || len(first.Jobs) != 0 || first.StartedAt.IsZero() || first.SeenAt.IsZero() {
		t.Fatalf("first entry = %+v", first)
	}
	// Renewed: seen again later, and still there well past the TTL.
	f.WaitRunner(protocol.KindAgent, "build-7", 10*time.Second, "a renewal", func(i protocol.RunnerInfo) bool {
		return i.SeenAt.After(first.SeenAt)
	})
	time.Sleep(3 * time.Second)
	if info, ok := f.Runner(protocol.KindAgent, "build-7"); !ok || !info.StartedAt.Equal(first.StartedAt) {
		t.Fatalf("after 3 s (TTL 2 s) the renewed entry is %+v, present %v", info, ok)
	}

	m := Meta{Kind: protocol.KindAgent, JobID: "wf.n.a1", WorkflowID: "wf", NodeID: "n", Attempt: 1}
	began := time.Now().UTC().Truncate(time.Millisecond)
	p.jobStarted(m, began)
	busy := f.WaitRunner(protocol.KindAgent, "build-7", 10*time.Second, "the job in the entry", func(i protocol.RunnerInfo) bool {
		return i.Busy == 1
	})
	if len(busy.Jobs) != 1 || busy.Jobs[0].JobID != m.JobID || busy.Jobs[0].WorkflowID != "wf" || busy.Jobs[0].NodeID != "n" ||
		busy.Jobs[0].Attempt != 1 || !busy.Jobs[0].StartedAt.Equal(began) {
		t.Fatalf("busy entry's jobs = %+v", busy.Jobs)
	}
	p.jobEnded(m, &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{Status: protocol.AgentSucceeded}})
	m2 := m
	m2.JobID, m2.Attempt = "wf.n.a2", 2
	p.jobStarted(m2, time.Now())
	p.jobEnded(m2, &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{Status: protocol.AgentTimeout}})
	m3 := m
	m3.JobID = "wf.n.a3"
	p.jobStarted(m3, time.Now())
	p.jobEnded(m3, nil) // handed back: no result, counted nowhere
	done := f.WaitRunner(protocol.KindAgent, "build-7", 10*time.Second, "the jobs' outcomes", func(i protocol.RunnerInfo) bool {
		return i.Stats.Succeeded == 1 && i.Stats.Failed == 1
	})
	if done.Busy != 0 || len(done.Jobs) != 0 || done.Stats.CacheHits != 0 || done.Stats.CacheMisses != 0 {
		t.Fatalf("entry after the jobs = %+v", done)
	}

	stop()
	stopped = true
	if info, ok := f.Runner(protocol.KindAgent, "build-7"); ok {
		t.Fatalf("entry still there after a clean stop: %+v", info)
	}
}

// TestPresenceExpires checks that the entry of a runner that vanishes
// without a word (its connection gone: no renewal, no deletion) leaves
// the bucket once the TTL has passed.
func TestPresenceExpires(t *testing.T) {
	f := jobruntest.OpenFleet(t, "presence-expiry", bus.Config{RunnerTTL: 2 * time.Second})
	rb, err := bus.Open(testkit.Context(t, time.Minute), f.URL, "doomed-runner", f.Config, f.Log)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPresence(rb.Runners, "doomed", nil, "process", f.Log)
	p.SetInterval(200 * time.Millisecond)
	stop := p.Announce(protocol.KindGate, []string{"default"}, 1)
	f.WaitRunner(protocol.KindGate, "doomed", 10*time.Second, "the runner's entry", func(protocol.RunnerInfo) bool { return true })
	rb.Close() // the runner's connection is gone
	testkit.WaitFor(t, 20*time.Second, 100*time.Millisecond, "the entry to expire", func() bool {
		_, ok := f.Runner(protocol.KindGate, "doomed")
		return !ok
	})
	stop() // cannot delete any more; it says so and returns
}

// TestPresenceNil checks that a runner without a bucket (a nil Presence,
// or one on a bus whose coordinator predates the bucket) announces
// nothing and fails nothing.
func TestPresenceNil(t *testing.T) {
	var p *Presence
	p.Announce(protocol.KindAgent, nil, 1)()
	p.jobStarted(Meta{Kind: protocol.KindAgent, JobID: "j"}, time.Now())
	p.jobEnded(Meta{Kind: protocol.KindAgent, JobID: "j"}, nil)
	p.CacheLookup(true)
	if _, ok := p.Info(protocol.KindAgent); ok {
		t.Fatal("a nil Presence has an entry")
	}
	q := NewPresence(nil, "h", nil, "process", nil)
	q.Announce(protocol.KindGate, []string{"default"}, 1)()
	if _, ok := q.Info(protocol.KindGate); ok {
		t.Fatal("a Presence without a bucket has an entry")
	}
}

func TestResultTally(t *testing.T) {
	agent := func(s protocol.AgentStatus) *protocol.Report {
		return &protocol.Report{Type: protocol.ReportAgentResult, Agent: &protocol.AgentResult{Status: s}}
	}
	gate := func(s protocol.GateStatus) *protocol.Report {
		return &protocol.Report{Type: protocol.ReportGateResult, Gate: &protocol.GateResult{Status: s}}
	}
	for _, c := range []struct {
		r    *protocol.Report
		want Tally
	}{
		{nil, TallyNone},
		{agent(protocol.AgentSucceeded), TallySucceeded},
		{agent(protocol.AgentFailed), TallyFailed},
		{agent(protocol.AgentError), TallyFailed},
		{gate(protocol.GatePassed), TallySucceeded},
		{gate(protocol.GateFailed), TallyFailed},
		{gate(protocol.GateTimeout), TallyFailed},
		{gate(protocol.GatePending), TallyNone},
		{gate(protocol.GateSkipped), TallyNone},
	} {
		if got := ResultTally(c.r); got != c.want {
			t.Errorf("ResultTally(%+v) = %d, want %d", c.r, got, c.want)
		}
	}
}

// TestRunnerKey checks that a host name a key cannot hold still gives a
// valid key the bucket takes.
func TestRunnerKey(t *testing.T) {
	if got := protocol.RunnerKey(protocol.KindGate, "build 7.example.com:2"); got != "gate.build_7_example_com_2" {
		t.Fatalf("RunnerKey = %q", got)
	}
	f := jobruntest.OpenFleet(t, "presence-key", bus.Config{})
	if _, err := f.Bus.Runners.Put(testkit.Context(t, 10*time.Second), protocol.RunnerKey(protocol.KindAgent, "a b/c*d>"), []byte("{}")); err != nil {
		t.Fatalf("put under a sanitized key: %v", err)
	}
	if _, err := f.Bus.Runners.Get(testkit.Context(t, 10*time.Second), "agent.nobody"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("get of a missing key: %v", err)
	}
}
