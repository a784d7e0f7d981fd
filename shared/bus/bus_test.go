package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/protocol/eventlog"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// These tests run against a real embedded nats-server with JetStream
// (testkit.NATS); nothing about JetStream is mocked.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openBus starts a NATS server for the test and opens a Bus on it.
func openBus(t *testing.T, cfg Config) (*Bus, string) {
	t.Helper()
	url := testkit.NATS(t)
	b, err := Open(testkit.Context(t, 20*time.Second), url, t.Name(), cfg, quiet)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(b.Close)
	return b, url
}

// openMore opens another Bus (another connection: another runner) on url.
func openMore(t *testing.T, url string, cfg Config) *Bus {
	t.Helper()
	b, err := Open(testkit.Context(t, 20*time.Second), url, t.Name()+"-2", cfg, quiet)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

func streamInfo(t *testing.T, b *Bus, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx := testkit.Context(t, 5*time.Second)
	s, err := b.JS.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info
}

// agentJob encodes an agent job for pool "default" with the given id.
func agentJob(t *testing.T, id string) []byte {
	t.Helper()
	data, err := protocol.Encode(&protocol.AgentJob{JobID: id, WorkflowID: "wf-test", NodeID: "n1", Attempt: 1,
		Pool: protocol.DefaultPool, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func publish(t *testing.T, b *Bus, pool, id string) {
	t.Helper()
	if err := b.PublishJob(testkit.Context(t, 5*time.Second), protocol.KindAgent, pool, id, agentJob(t, id)); err != nil {
		t.Fatalf("PublishJob %s: %v", id, err)
	}
}

func jobID(t *testing.T, d *Delivery) string {
	t.Helper()
	var j protocol.AgentJob
	if err := protocol.Decode(d.Msg.Data(), &j); err != nil {
		t.Errorf("decode delivered job: %v", err)
	}
	return j.JobID
}

// runner is one Pull loop running in the background.
type runner struct {
	stop context.CancelFunc
	done chan error
}

func startPull(t *testing.T, b *Bus, opts PullOptions, h Handler) *runner {
	t.Helper()
	if opts.Kind == "" {
		opts.Kind = protocol.KindAgent
	}
	if opts.FetchWait == 0 {
		opts.FetchWait = 250 * time.Millisecond
	}
	opts.Log = quiet
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Pull(ctx, opts, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			_ = err // halt checks Pull's error; here Pull only has to return
		case <-time.After(15 * time.Second):
			t.Errorf("Pull did not return after stop")
		}
	})
	return r
}

// halt stops the runner and waits for Pull to return, up to max.
func (r *runner) halt(t *testing.T, max time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Pull returned %v", err)
		}
		r.done <- err // for the cleanup
	case <-time.After(max):
		t.Fatalf("Pull did not return within %s of stop", max)
	}
	return time.Since(start)
}

func TestOpenCreatesStreamsAndBuckets(t *testing.T) {
	t.Parallel()
	cfg := Config{AckWait: 2 * time.Second, MaxDeliver: 3, DuplicateWindow: time.Minute, MaxJobBytes: 4096,
		ArtifactTTL: time.Hour}
	b, url := openBus(t, cfg)

	want := map[string]struct {
		subject   string
		retention jetstream.RetentionPolicy
		dupes     time.Duration
		maxMsg    int32
	}{
		protocol.StreamJobs:       {protocol.SubjectJobs, jetstream.WorkQueuePolicy, time.Minute, 4096},
		protocol.StreamResults:    {protocol.SubjectResults, jetstream.WorkQueuePolicy, time.Minute, 4096},
		protocol.StreamEvents:     {protocol.SubjectEvents, jetstream.LimitsPolicy, time.Minute, 4096}, // an event is capped like a job
		protocol.StreamAdvisories: {protocol.SubjectMaxDeliveries, jetstream.WorkQueuePolicy, 0, -1},
	}
	check := func() {
		t.Helper()
		for name, w := range want {
			c := streamInfo(t, b, name).Config
			if len(c.Subjects) != 1 || c.Subjects[0] != w.subject {
				t.Errorf("%s subjects = %v, want [%s]", name, c.Subjects, w.subject)
			}
			if c.Retention != w.retention {
				t.Errorf("%s retention = %v, want %v", name, c.Retention, w.retention)
			}
			if c.Storage != jetstream.FileStorage {
				t.Errorf("%s storage = %v, want file", name, c.Storage)
			}
			if c.Replicas != 1 {
				t.Errorf("%s replicas = %d, want 1", name, c.Replicas)
			}
			if w.dupes != 0 && c.Duplicates != w.dupes {
				t.Errorf("%s duplicate window = %s, want %s", name, c.Duplicates, w.dupes)
			}
			if c.MaxMsgSize != w.maxMsg {
				t.Errorf("%s max msg size = %d, want %d", name, c.MaxMsgSize, w.maxMsg)
			}
		}
		ctx := testkit.Context(t, 5*time.Second)
		for _, name := range []string{protocol.BucketBundles, protocol.BucketPatches, protocol.BucketLogs} {
			os, err := b.JS.ObjectStore(ctx, name)
			if err != nil {
				t.Errorf("object store %s: %v", name, err)
				continue
			}
			st, err := os.Status(ctx)
			if err != nil {
				t.Errorf("object store %s status: %v", name, err)
				continue
			}
			if st.TTL() != time.Hour {
				t.Errorf("object store %s TTL = %s, want 1h", name, st.TTL())
			}
		}
		if b.Bundles == nil || b.Patches == nil || b.Logs == nil {
			t.Errorf("Bus object stores not set: %v %v %v", b.Bundles, b.Patches, b.Logs)
		}
	}
	check()

	// Defaults fill in the zero values.
	if d := (Config{}).withDefaults(); d.AckWait != 30*time.Second || d.MaxDeliver != 5 || d.Replicas != 1 ||
		d.DuplicateWindow != 20*time.Minute || d.MaxJobBytes != 1<<20 || d.ArtifactTTL != 7*24*time.Hour {
		t.Errorf("defaults = %+v", d)
	}

	// The job consumer carries the configured AckWait and MaxDeliver.
	ctx := testkit.Context(t, 10*time.Second)
	cons, err := b.JobConsumer(ctx, protocol.KindGate, "lint")
	if err != nil {
		t.Fatalf("JobConsumer: %v", err)
	}
	ci := cons.CachedInfo()
	if ci.Name != "gate-lint" || ci.Config.FilterSubject != protocol.GateJobSubject("lint") ||
		ci.Config.AckWait != 2*time.Second || ci.Config.MaxDeliver != 3 || ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("consumer = %s %+v", ci.Name, ci.Config)
	}
	if _, err := b.JobConsumer(ctx, "bogus", "x"); err == nil {
		t.Errorf("JobConsumer of an unknown kind succeeded")
	}

	// Opening again (another process starting) is idempotent: same
	// configuration, and the data already there is kept.
	publish(t, b, "default", "keep-me")
	if _, err := b.Patches.PutBytes(ctx, "p", []byte("patch")); err != nil {
		t.Fatal(err)
	}
	b2 := openMore(t, url, cfg)
	b3 := openMore(t, url, cfg)
	_ = b3
	check()
	if n := streamInfo(t, b2, protocol.StreamJobs).State.Msgs; n != 1 {
		t.Errorf("jobs after reopening = %d, want 1", n)
	}
	if got, err := b2.Patches.GetBytes(ctx, "p"); err != nil || string(got) != "patch" {
		t.Errorf("patch after reopening = %q, %v", got, err)
	}

	// Attach uses the resources without creating any.
	a, err := Attach(ctx, b.NC, quiet)
	if err != nil || a.Bundles == nil {
		t.Fatalf("Attach: %v", err)
	}
}

func TestAttachWithoutResourcesFails(t *testing.T) {
	t.Parallel()
	url := testkit.NATS(t)
	nc, err := Connect(testkit.Context(t, 5*time.Second), url, "attach", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := Attach(testkit.Context(t, 5*time.Second), nc, quiet); err == nil || !strings.Contains(err.Error(), protocol.BucketBundles) {
		t.Fatalf("Attach on an empty server = %v, want an error naming %s", err, protocol.BucketBundles)
	}
}

func TestPublishJobDedupesAndCapsSize(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{MaxJobBytes: 2048})
	publish(t, b, "default", "wf.n.a1")
	publish(t, b, "default", "wf.n.a1") // e.g. a restarted coordinator
	if n := streamInfo(t, b, protocol.StreamJobs).State.Msgs; n != 1 {
		t.Fatalf("same job id twice: %d messages in %s, want 1", n, protocol.StreamJobs)
	}
	publish(t, b, "default", "wf.n.a2")
	if n := streamInfo(t, b, protocol.StreamJobs).State.Msgs; n != 2 {
		t.Fatalf("two job ids: %d messages, want 2", n)
	}

	// The kind header and subject tell agent from gate jobs.
	ctx := testkit.Context(t, 5*time.Second)
	if err := b.PublishJob(ctx, protocol.KindGate, "lint", "wf.n.a1.g.vet.r1", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	s, _ := b.JS.Stream(ctx, protocol.StreamJobs)
	raw, err := s.GetLastMsgForSubject(ctx, protocol.GateJobSubject("lint"))
	if err != nil {
		t.Fatal(err)
	}
	if k := raw.Header.Get(protocol.HeaderKind); k != string(protocol.KindGate) {
		t.Errorf("kind header = %q", k)
	}
	if id := raw.Header.Get(protocol.HeaderMsgID); id != "wf.n.a1.g.vet.r1" {
		t.Errorf("msg id header = %q", id)
	}

	big := make([]byte, 2049)
	err = b.PublishJob(ctx, protocol.KindAgent, "default", "too-big", big)
	if err == nil || !strings.Contains(err.Error(), "2048") || !strings.Contains(err.Error(), "too-big") {
		t.Fatalf("oversize job: err = %v, want one naming the 2048-byte limit and the job", err)
	}
	if n := streamInfo(t, b, protocol.StreamJobs).State.Msgs; n != 3 {
		t.Fatalf("after the oversize job: %d messages, want 3", n)
	}
}

func TestPublishReportAndEvent(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{})
	ctx := testkit.Context(t, 5*time.Second)
	r := &protocol.Report{Type: protocol.ReportStarted, Started: &protocol.Started{WorkflowID: "wf1", JobID: "j"}}
	for i := 0; i < 2; i++ {
		if err := b.PublishReport(ctx, r, "j.started.1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamInfo(t, b, protocol.StreamResults).State.Msgs; n != 1 {
		t.Errorf("same report twice: %d messages, want 1", n)
	}
	if err := b.PublishReport(ctx, &protocol.Report{Type: protocol.ReportAgentResult}, "x"); err == nil {
		t.Errorf("invalid report was published")
	}
	ready := eventlog.Event{WorkflowID: "wf1", NodeID: "n", Body: eventlog.NodeReady{Attempt: 1}}
	s1, dup, err := b.AppendEvent(ctx, ready, WithMsgID("e1"))
	if err != nil || dup {
		t.Fatal(err, dup)
	}
	s2, dup, err := b.AppendEvent(ctx, ready, WithMsgID("e1"))
	if err != nil || s2 != s1 || !dup {
		t.Errorf("re-appending event e1: seq %d (first %d), duplicate %v, %v", s2, s1, dup, err)
	}
	s3, _, err := b.AppendEvent(ctx, ready)
	if err != nil || s3 <= s1 {
		t.Errorf("event without id: seq %d, %v", s3, err)
	}
	// Fenced appends succeed only on the log's last event of the workflow.
	s4, _, err := b.AppendEvent(ctx, ready, ExpectLast(s3))
	if err != nil || s4 <= s3 {
		t.Errorf("fenced append on the last event: seq %d, %v", s4, err)
	}
	if _, _, err := b.AppendEvent(ctx, ready, ExpectLast(s3)); !errors.Is(err, ErrEventLogMoved) {
		t.Errorf("fenced append on an older event: %v, want ErrEventLogMoved", err)
	}
	other := eventlog.Event{WorkflowID: "wf2", Body: eventlog.WorkflowCancelRequested{}}
	if _, _, err := b.AppendEvent(ctx, other, ExpectLast(0)); err != nil {
		t.Errorf("fenced first append of a workflow: %v", err)
	}
	if _, _, err := b.AppendEvent(ctx, other, ExpectLast(0)); !errors.Is(err, ErrEventLogMoved) {
		t.Errorf("second 'first' append of a workflow: %v, want ErrEventLogMoved", err)
	}
}

// A job whose handler runs three times AckWait is kept by heartbeats: it is
// delivered exactly once even though the runner has a free slot that a
// redelivery could land in.
func TestPullHeartbeatsKeepLongJob(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{AckWait: time.Second})
	var calls atomic.Int32
	finished := make(chan uint64, 4)
	startPull(t, b, PullOptions{Concurrency: 2}, func(ctx context.Context, d *Delivery) Disposition {
		calls.Add(1)
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			return Nak(0)
		}
		finished <- d.Number
		return Ack()
	})
	publish(t, b, "default", "long")
	select {
	case n := <-finished:
		if n != 1 {
			t.Errorf("delivery number = %d, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long job did not finish")
	}
	time.Sleep(300 * time.Millisecond)
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1 (heartbeats should prevent redelivery)", c)
	}
	testkit.WaitFor(t, 3*time.Second, 20*time.Millisecond, "the acked job to leave the work queue", func() bool {
		return streamInfo(t, b, protocol.StreamJobs).State.Msgs == 0
	})
}

// Concurrency N runs at most N jobs at once, and the runner never holds
// more jobs than it runs (it fetches only into a free slot).
func TestPullConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{AckWait: 5 * time.Second})
	const n, jobs = 3, 10
	for i := 0; i < jobs; i++ {
		publish(t, b, "default", fmt.Sprintf("job-%d", i))
	}
	var cur, peak atomic.Int32
	var done sync.WaitGroup
	done.Add(jobs)
	startPull(t, b, PullOptions{Concurrency: n}, func(ctx context.Context, d *Delivery) Disposition {
		c := cur.Add(1)
		for {
			p := peak.Load()
			if c <= p || peak.CompareAndSwap(p, c) {
				break
			}
		}
		time.Sleep(150 * time.Millisecond)
		cur.Add(-1)
		done.Done()
		return Ack()
	})

	ctx := testkit.Context(t, 15*time.Second)
	cons, err := b.JS.Consumer(ctx, protocol.StreamJobs, protocol.ConsumerName(protocol.KindAgent, protocol.DefaultPool))
	for err != nil { // the runner creates the consumer
		time.Sleep(20 * time.Millisecond)
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		cons, err = b.JS.Consumer(ctx, protocol.StreamJobs, protocol.ConsumerName(protocol.KindAgent, protocol.DefaultPool))
	}
	allDone := make(chan struct{})
	go func() { done.Wait(); close(allDone) }()
	maxPending := 0
loop:
	for {
		select {
		case <-allDone:
			break loop
		case <-ctx.Done():
			t.Fatal("jobs did not finish")
		case <-time.After(25 * time.Millisecond):
			if info, err := cons.Info(ctx); err == nil {
				maxPending = max(maxPending, info.NumAckPending)
			}
		}
	}
	if p := peak.Load(); p != n {
		t.Errorf("peak concurrency = %d, want %d", p, n)
	}
	if maxPending > n {
		t.Errorf("runner held %d unacked jobs at once; it should fetch only into free slots (max %d)", maxPending, n)
	}
}

// A busy runner (concurrency 1) does not sit on a queued job: the idle
// second runner takes it while the first is still working.
func TestPullIdleRunnerTakesQueuedJob(t *testing.T) {
	t.Parallel()
	b1, url := openBus(t, Config{AckWait: 5 * time.Second})
	b2 := openMore(t, url, Config{AckWait: 5 * time.Second})
	release := make(chan struct{})
	type took struct{ runner, job string }
	got := make(chan took, 4)
	handler := func(name string) Handler {
		return func(ctx context.Context, d *Delivery) Disposition {
			got <- took{name, jobID(t, d)}
			select {
			case <-release:
			case <-ctx.Done():
				return Nak(0)
			}
			return Ack()
		}
	}
	startPull(t, b1, PullOptions{Concurrency: 1}, handler("r1"))
	startPull(t, b2, PullOptions{Concurrency: 1}, handler("r2"))
	defer close(release)

	publish(t, b1, "default", "first")
	first := testkit.Receive(t, got, 5*time.Second, "first job not taken")
	publish(t, b1, "default", "second")
	select {
	case second := <-got:
		if second.job != "second" || second.runner == first.runner {
			t.Fatalf("second job went to %+v while %+v is busy, want the idle runner", second, first)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("second job was not taken by the idle runner while %s was busy", first.runner)
	}
}

// Stopping a runner lets its in-flight job finish (within DrainTimeout),
// acks it, and only then returns.
func TestPullDrainLetsJobFinish(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{AckWait: time.Second})
	started := make(chan struct{})
	var ctxErr atomic.Value
	var calls atomic.Int32
	r := startPull(t, b, PullOptions{Concurrency: 2, DrainTimeout: 5 * time.Second}, func(ctx context.Context, d *Delivery) Disposition {
		calls.Add(1)
		close(started)
		time.Sleep(time.Second)
		ctxErr.Store(fmt.Sprint(ctx.Err()))
		return Ack()
	})
	publish(t, b, "default", "drain-me")
	testkit.Receive(t, started, 5*time.Second, "job not started")
	took := r.halt(t, 5*time.Second)
	if took < 500*time.Millisecond {
		t.Errorf("Pull returned %s after stop, before its job finished", took)
	}
	if e := ctxErr.Load(); e != "<nil>" {
		t.Errorf("job ctx during drain = %v, want not cancelled", e)
	}
	if n := streamInfo(t, b, protocol.StreamJobs).State.Msgs; n != 0 {
		t.Errorf("drained job not acked: %d messages left", n)
	}
	publish(t, b, "default", "after-stop")
	time.Sleep(300 * time.Millisecond)
	if c := calls.Load(); c != 1 {
		t.Errorf("stopped runner ran %d jobs, want 1", c)
	}
}

// A job still running at DrainTimeout has its ctx cancelled; the handler's
// Nak hands it to another runner.
func TestPullDrainTimeoutHandsJobBack(t *testing.T) {
	t.Parallel()
	b1, url := openBus(t, Config{AckWait: 5 * time.Second})
	b2 := openMore(t, url, Config{AckWait: 5 * time.Second})
	started := make(chan struct{})
	r1 := startPull(t, b1, PullOptions{DrainTimeout: 400 * time.Millisecond}, func(ctx context.Context, d *Delivery) Disposition {
		close(started)
		<-ctx.Done() // never finishes by itself
		return Nak(0)
	})
	publish(t, b1, "default", "stuck")
	testkit.Receive(t, started, 5*time.Second, "job not started")
	took := r1.halt(t, 5*time.Second)
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("Pull returned %s after stop, want about the 400ms drain timeout", took)
	}
	redelivered := make(chan *Delivery, 1)
	startPull(t, b2, PullOptions{}, func(ctx context.Context, d *Delivery) Disposition {
		redelivered <- d
		return Ack()
	})
	select {
	case d := <-redelivered:
		if jobID(t, d) != "stuck" || d.Number != 2 {
			t.Errorf("redelivered %s as delivery %d, want stuck as delivery 2", jobID(t, d), d.Number)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("interrupted job was not redelivered to the other runner")
	}
}

// Term drops a job for good: it is not redelivered, even after AckWait.
func TestPullTermIsNotRedelivered(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{AckWait: 500 * time.Millisecond})
	var calls atomic.Int32
	startPull(t, b, PullOptions{Concurrency: 2}, func(ctx context.Context, d *Delivery) Disposition {
		calls.Add(1)
		return Term("malformed")
	})
	publish(t, b, "default", "bad")
	testkit.WaitFor(t, 5*time.Second, 20*time.Millisecond, "the job to be handled", func() bool { return calls.Load() > 0 })
	time.Sleep(1500 * time.Millisecond) // three AckWaits
	if c := calls.Load(); c != 1 {
		t.Fatalf("terminated job handled %d times, want 1", c)
	}
}

// A job that every delivery Naks exhausts MaxDeliver: the server's
// max-deliveries advisory lands in SUP_DEADLETTERS, and the job is read back
// from SUP_JOBS by the advisory's stream_seq and decoded by
// DeadLetterFromJob.
func TestMaxDeliverLandsInDeadLetters(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{AckWait: time.Second, MaxDeliver: 3})
	var calls atomic.Int32
	var last atomic.Bool
	startPull(t, b, PullOptions{}, func(ctx context.Context, d *Delivery) Disposition {
		calls.Add(1)
		if d.Last() {
			last.Store(true)
		}
		return Nak(0)
	})
	publish(t, b, "default", "doomed")
	testkit.WaitFor(t, 10*time.Second, 20*time.Millisecond, "a max-deliveries advisory", func() bool {
		return streamInfo(t, b, protocol.StreamAdvisories).State.Msgs > 0
	})
	if c := calls.Load(); c != 3 {
		t.Errorf("handler ran %d times, want MaxDeliver=3", c)
	}
	if !last.Load() {
		t.Errorf("the last delivery did not report Last()")
	}

	ctx := testkit.Context(t, 5*time.Second)
	adv, err := b.JS.Stream(ctx, protocol.StreamAdvisories)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := adv.GetMsg(ctx, adv.CachedInfo().State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Stream     string `json:"stream"`
		Consumer   string `json:"consumer"`
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	if err := json.Unmarshal(raw.Data, &a); err != nil {
		t.Fatal(err)
	}
	if a.Stream != protocol.StreamJobs || a.Consumer != "agent-default" || a.StreamSeq == 0 || a.Deliveries != 3 {
		t.Fatalf("advisory = %+v", a)
	}
	jobs, err := b.JS.Stream(ctx, protocol.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	job, err := jobs.GetMsg(ctx, a.StreamSeq)
	if err != nil {
		t.Fatalf("dead-lettered job %d is gone from %s: %v", a.StreamSeq, protocol.StreamJobs, err)
	}
	dl, err := DeadLetterFromJob(job.Header.Get(protocol.HeaderKind), job.Data, a.Deliveries)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Kind != protocol.KindAgent || dl.JobID != "doomed" || dl.WorkflowID != "wf-test" || dl.NodeID != "n1" ||
		dl.Attempt != 1 || dl.Deliveries != 3 || dl.Reason == "" {
		t.Errorf("dead letter = %+v", dl)
	}
	time.Sleep(1200 * time.Millisecond)
	if c := calls.Load(); c != 3 {
		t.Errorf("dead-lettered job delivered again: %d deliveries", c)
	}
}

func TestDeadLetterFromJob(t *testing.T) {
	gate, _ := protocol.Encode(&protocol.GateJob{JobID: "g1", WorkflowID: "wf", NodeID: "n", Attempt: 2, Gate: "vet"})
	dl, err := DeadLetterFromJob(string(protocol.KindGate), gate, 5)
	if err != nil || dl.Gate != "vet" || dl.Attempt != 2 || dl.Kind != protocol.KindGate || dl.Deliveries != 5 {
		t.Errorf("gate dead letter = %+v, %v", dl, err)
	}
	if _, err := DeadLetterFromJob("mystery", gate, 1); err == nil {
		t.Errorf("unknown kind decoded")
	}
	if _, err := DeadLetterFromJob(string(protocol.KindAgent), []byte("{"), 1); err == nil {
		t.Errorf("garbage decoded")
	}
	if _, err := DeadLetterFromJob(string(protocol.KindAgent), []byte(`{"v":99}`), 1); !errors.Is(err, protocol.ErrUnsupportedVersion) {
		t.Errorf("future version: %v", err)
	}
}

func TestConnectUnreachable(t *testing.T) {
	t.Parallel()
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("nats://alice:s3cret@127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	nc, err := Connect(ctx, url, "unreachable", quiet)
	if err == nil {
		nc.Close()
		t.Fatal("connected to a closed port")
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("err = %v, want ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("err %q does not name the URL", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("err %q leaks the password", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Connect took %s with a 700ms ctx", d)
	}
	if _, err := Open(ctx, url, "unreachable", Config{}, quiet); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Open: %v, want ErrUnreachable", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                     "nats://127.0.0.1:4222",
		"nats://alice:s3cret@host:4222":             "nats://alice:xxxxx@host:4222",
		"nats://tok3n@host:4222":                    "nats://xxxxx@host:4222",
		"tls://alice:s3cret@host":                   "tls://alice:xxxxx@host",
		"nats://a:pw1@h1:4222,nats://b:pw2@h2:4222": "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:4222",
		"nats://h1:4222, nats://tok3n@h2:4222":      "nats://h1:4222,nats://xxxxx@h2:4222",
		"nats://alice:s3c#ret%@host:4222":           "nats://alice:xxxxx@host:4222",
		"":                                          "",
	} {
		got := RedactURL(in)
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		for _, secret := range []string{"s3cret", "tok3n", "pw1", "pw2", "s3c#"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURL(%q) = %q leaks %q", in, got, secret)
			}
		}
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 350 * time.Millisecond}
	d := time.Duration(0)
	var got []time.Duration
	for i := 0; i < 4; i++ {
		d = b.Next(d)
		got = append(got, d)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond, 350 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff = %v, want %v", got, want)
		}
	}
}

// An event log bounded more tightly than the duplicate window still opens:
// JetStream refuses a duplicate window longer than MaxAge.
func TestOpenEventsMaxAgeBelowDuplicateWindow(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{EventsMaxAge: time.Minute})
	c := streamInfo(t, b, protocol.StreamEvents).Config
	if c.MaxAge != time.Minute || c.Duplicates > c.MaxAge {
		t.Errorf("events stream: max age %s, duplicate window %s", c.MaxAge, c.Duplicates)
	}
	if c := streamInfo(t, b, protocol.StreamJobs).Config; c.Duplicates != 20*time.Minute {
		t.Errorf("jobs duplicate window = %s, want the 20m default", c.Duplicates)
	}
}

// A parked job gives its slot back and spends no delivery: with one slot
// and AckWait 1 s, a job parked for 2.5 s lets another job run meanwhile,
// is never redelivered (the heartbeats go on) and carries on as delivery
// 1; MaxDeliver 2 is not touched.
func TestPullParkFreesSlotWithoutDelivery(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{AckWait: time.Second, MaxDeliver: 2})
	var calls atomic.Int32
	events := make(chan string, 8)
	startPull(t, b, PullOptions{Concurrency: 1}, func(ctx context.Context, d *Delivery) Disposition {
		calls.Add(1)
		id := jobID(t, d)
		if id != "parked" {
			events <- "ran " + id
			return Ack()
		}
		events <- "parking"
		if err := d.Park(ctx, 2500*time.Millisecond, 0); err != nil {
			events <- "park: " + err.Error()
			return Nak(0)
		}
		events <- fmt.Sprintf("resumed as delivery %d", d.Number)
		return Ack()
	})
	publish(t, b, "default", "parked")
	if e := testkit.Receive(t, events, 5*time.Second, "job not taken"); e != "parking" {
		t.Fatalf("first event %q", e)
	}
	publish(t, b, "default", "other")
	if e := testkit.Receive(t, events, 2*time.Second, "the other job did not run while the first was parked"); e != "ran other" {
		t.Fatalf("second event %q, want the other job run in the freed slot", e)
	}
	if e := testkit.Receive(t, events, 5*time.Second, "parked job did not resume"); e != "resumed as delivery 1" {
		t.Fatalf("third event %q", e)
	}
	testkit.WaitFor(t, 3*time.Second, 20*time.Millisecond, "both jobs to leave the work queue", func() bool {
		return streamInfo(t, b, protocol.StreamJobs).State.Msgs == 0
	})
	time.Sleep(1200 * time.Millisecond)
	if c := calls.Load(); c != 2 {
		t.Errorf("handler ran %d times, want 2 (the parked job was redelivered)", c)
	}
	if n := streamInfo(t, b, protocol.StreamAdvisories).State.Msgs; n != 0 {
		t.Errorf("%d max-deliveries advisories; parking spent deliveries", n)
	}
}

// Park gives up when no slot comes free within its grace, and at once
// when the runner stops; neither waits for the drain.
func TestPullParkNoSlotAndStop(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{AckWait: 2 * time.Second})
	release := make(chan struct{})
	events := make(chan string, 8)
	r := startPull(t, b, PullOptions{Concurrency: 1, DrainTimeout: 10 * time.Second}, func(ctx context.Context, d *Delivery) Disposition {
		switch jobID(t, d) {
		case "busy":
			events <- "busy"
			<-release
			return Ack()
		case "short":
			events <- "parking short"
			events <- fmt.Sprint(d.Park(ctx, 100*time.Millisecond, 300*time.Millisecond))
			return Nak(10 * time.Second)
		default:
			events <- "parking long"
			events <- fmt.Sprint(d.Park(ctx, time.Minute, 0))
			return Nak(10 * time.Second)
		}
	})
	publish(t, b, "default", "short")
	testkit.Receive(t, events, 5*time.Second, "short not taken")
	publish(t, b, "default", "busy")
	if e := testkit.Receive(t, events, 5*time.Second, "busy not taken"); e != "busy" {
		t.Fatalf("event %q, want the busy job in the parked job's slot", e)
	}
	if e := testkit.Receive(t, events, 5*time.Second, "Park did not return"); e != ErrNoSlot.Error() {
		t.Fatalf("Park with the only slot busy = %q, want %v", e, ErrNoSlot)
	}
	close(release)
	publish(t, b, "default", "long")
	testkit.Receive(t, events, 5*time.Second, "long not taken")
	took := r.halt(t, 5*time.Second)
	if e := testkit.Receive(t, events, time.Second, "Park did not return on stop"); e != ErrStopping.Error() {
		t.Fatalf("Park on stop = %q, want %v", e, ErrStopping)
	}
	if took > 2*time.Second {
		t.Errorf("Pull took %s to stop with a parked job, want no drain wait", took)
	}
}

// PERF-57: AppendEvents puts one workflow's events in one log message, in
// order, fenced and de-duplicated like a single event (the message's id
// made of its events' ids), and stops a message where the next event
// would take it past MaxBatchBytes; events of another workflow are
// refused.
func TestAppendEventsOneMessage(t *testing.T) {
	t.Parallel()
	b, _ := openBus(t, Config{})
	ctx := testkit.Context(t, 5*time.Second)
	evs := []eventlog.Event{
		{WorkflowID: "wf-b", NodeID: "a", Body: eventlog.NodeReady{Attempt: 1}},
		{WorkflowID: "wf-b", NodeID: "b", Body: eventlog.NodeReady{Attempt: 1}},
		{WorkflowID: "wf-b", NodeID: "a", Body: eventlog.NodeFinished{Attempt: 1, Status: protocol.NodeSkipped}},
	}
	ids := []string{"wf-b.a.ready", "wf-b.b.ready", "wf-b.a.skipped"}
	seq, n, dup, err := b.AppendEvents(ctx, evs, WithMsgIDs(ids), ExpectLast(0))
	if err != nil || n != 3 || dup {
		t.Fatalf("AppendEvents: seq %d, %d events, duplicate %v, %v", seq, n, dup, err)
	}
	stream, err := b.JS.Stream(ctx, protocol.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	back, err := eventlog.DecodeAll(msg.Data)
	if err != nil || len(back) != 3 || back[0].NodeID != "a" || back[1].NodeID != "b" || back[2].Type() != eventlog.TypeNodeFinished {
		t.Fatalf("the message holds %+v (%v), want the three events in order", back, err)
	}
	again, n, dup, err := b.AppendEvents(ctx, evs, WithMsgIDs(ids))
	if err != nil || !dup || again != seq || n != 3 {
		t.Fatalf("the same three again: seq %d (first %d), %d events, duplicate %v, %v", again, seq, n, dup, err)
	}
	if _, _, _, err := b.AppendEvents(ctx, evs[:2], WithMsgIDs(ids[:2]), ExpectLast(seq-1)); !errors.Is(err, ErrEventLogMoved) {
		t.Fatalf("fenced on an older sequence: %v, want ErrEventLogMoved", err)
	}
	if _, _, _, err := b.AppendEvents(ctx, append(evs[:1:1], eventlog.Event{WorkflowID: "wf-c", Body: eventlog.WorkflowCancelRequested{}})); err == nil {
		t.Fatal("events of two workflows went into one message")
	}
	// Three events of 100 KiB each: the first two fit in MaxBatchBytes,
	// the third starts the next message.
	big := strings.Repeat("x", 100<<10)
	large := make([]eventlog.Event, 3)
	for i := range large {
		large[i] = eventlog.Event{WorkflowID: "wf-big", NodeID: "n", Body: eventlog.NodeEscalated{Attempt: 1, Reason: big}}
	}
	s1, n, _, err := b.AppendEvents(ctx, large, ExpectLast(0))
	if err != nil || n != 2 {
		t.Fatalf("large events: %d in the first message, %v; want 2", n, err)
	}
	if _, n, _, err := b.AppendEvents(ctx, large[n:], ExpectLast(s1)); err != nil || n != 1 {
		t.Fatalf("the rest: %d events, %v; want 1", n, err)
	}
}
