package metrics

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/metrics/metricstest"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// scrape serves Handler once and parses what it wrote.
func scrape(t *testing.T) metricstest.Families {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", Path, rec.Code, rec.Body)
	}
	fams, err := metricstest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// Every metric recorded shows in the exposition, which the Prometheus
// text parser reads, with the amounts recorded.
func TestExpositionParses(t *testing.T) {
	before := scrape(t)
	GatesExecuted.WithLabelValues("unit-gate", "passed").Add(2)
	GateDuration.WithLabelValues("unit-gate").Observe(1.5)
	GateRetries.WithLabelValues("unit-gate").Inc()
	GatesEscalated.WithLabelValues("unit-gate").Inc()
	AsyncGateWait.WithLabelValues("unit-gate").Observe(30)
	GateCacheHits.WithLabelValues("unit-gate").Inc()
	GateCacheMisses.WithLabelValues("unit-gate").Add(3)
	IntegrityViolations.WithLabelValues("unit-gate").Inc()
	Jobs.WithLabelValues("gate", "unit-pool", OutcomeSucceeded).Inc()
	JobStartLatency.WithLabelValues("gate", "unit-pool").Observe(0.25)
	AgentDuration.WithLabelValues("unit-adapter", "succeeded").Observe(12)
	JobsPublished.WithLabelValues("agent", "unit-pool").Inc()
	EventAppend.Observe(0.002)
	EventsAppended.WithLabelValues("unit.event").Inc()
	after := scrape(t)

	for _, c := range []struct {
		name   string
		labels []string
		delta  float64
	}{
		{"supervisor_gates_executed_total", []string{"gate=unit-gate", "status=passed"}, 2},
		{"supervisor_gate_duration_seconds", []string{"gate=unit-gate"}, 1},
		{"supervisor_gate_retries_total", []string{"gate=unit-gate"}, 1},
		{"supervisor_gates_escalated_total", []string{"gate=unit-gate"}, 1},
		{"supervisor_async_gate_wait_seconds", []string{"gate=unit-gate"}, 1},
		{"supervisor_gate_cache_hits_total", []string{"gate=unit-gate"}, 1},
		{"supervisor_gate_cache_misses_total", []string{"gate=unit-gate"}, 3},
		{"supervisor_integrity_violations_total", []string{"gate=unit-gate"}, 1},
		{"supervisor_jobs_total", []string{"kind=gate", "pool=unit-pool", "outcome=succeeded"}, 1},
		{"supervisor_job_start_latency_seconds", []string{"kind=gate", "pool=unit-pool"}, 1},
		{"supervisor_agent_duration_seconds", []string{"adapter=unit-adapter", "status=succeeded"}, 1},
		{"supervisor_jobs_published_total", []string{"kind=agent", "pool=unit-pool"}, 1},
		{"supervisor_eventlog_append_seconds", nil, 1},
		{"supervisor_events_appended_total", []string{"type=unit.event"}, 1},
	} {
		if got := after.Sum(c.name, c.labels...) - before.Sum(c.name, c.labels...); got != c.delta {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.delta)
		}
	}
	if got := after.HistogramSum("supervisor_gate_duration_seconds", "gate=unit-gate") -
		before.HistogramSum("supervisor_gate_duration_seconds", "gate=unit-gate"); got != 1.5 {
		t.Errorf("gate duration sum moved by %v, want 1.5", got)
	}
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !after.Has(name) {
			t.Errorf("%s missing: the runtime collectors are not registered", name)
		}
	}
}

// Past MaxLabelValues distinct values, a label's further values are
// "other"; known values keep their own.
func TestBoundedLabels(t *testing.T) {
	label := "unit-" + t.Name()
	for i := range MaxLabelValues {
		if got := Bounded(label, "v"+strconv.Itoa(i)); got != "v"+strconv.Itoa(i) {
			t.Fatalf("value %d under the cap became %q", i, got)
		}
	}
	if got := Bounded(label, "one-too-many"); got != OtherLabel {
		t.Errorf("a value past the cap is %q, want %q", got, OtherLabel)
	}
	if got := Bounded(label, "v7"); got != "v7" {
		t.Errorf("a known value past the cap is %q", got)
	}
	if got := Bounded(label, ""); got != "none" {
		t.Errorf("empty value is %q, want none", got)
	}
}

// Slots: capacity per kind while a runner pulls, busy while a job runs,
// free the rest; closing twice takes nothing twice.
func TestRunnerSlots(t *testing.T) {
	closeA := OpenSlots("unitkind", 3)
	free1 := BusySlot("unitkind")
	free2 := BusySlot("unitkind")
	f := scrape(t)
	if b, fr := f.Sum("supervisor_runner_slots", "kind=unitkind", "state=busy"), f.Sum("supervisor_runner_slots", "kind=unitkind", "state=free"); b != 2 || fr != 1 {
		t.Errorf("busy %v free %v, want 2 and 1", b, fr)
	}
	free1()
	free1()
	f = scrape(t)
	if b, fr := f.Sum("supervisor_runner_slots", "kind=unitkind", "state=busy"), f.Sum("supervisor_runner_slots", "kind=unitkind", "state=free"); b != 1 || fr != 2 {
		t.Errorf("after one freed (twice): busy %v free %v, want 1 and 2", b, fr)
	}
	free2()
	closeA()
	closeA()
	if n := scrape(t).Series("supervisor_runner_slots", "kind=unitkind"); n != 0 {
		t.Errorf("a closed runner's slots are still reported (%d series)", n)
	}
}

// The job queue is read from JetStream at scrape time: a pool no runner
// pulls yet (no consumer) from the stream's subjects, one with a consumer
// from its info; jobs delivered and unacknowledged are in progress, and
// the oldest waiting job's age is its stream time's.
func TestJobQueueFromJetStream(t *testing.T) {
	ctx := testkit.Context(t, 60*time.Second)
	b, err := bus.Open(ctx, testkit.NATS(t), t.Name(), bus.Config{AckWait: 30 * time.Second, MaxDeliver: 3}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	defer SetJobQueue(b.JS)()
	clock := time.Now().Add(time.Hour)
	queues.mu.Lock()
	queues.now = func() time.Time { return clock }
	queues.mu.Unlock()
	defer func() { queues.mu.Lock(); queues.now = time.Now; queues.mu.Unlock() }()

	for i := range 3 {
		if err := b.PublishJob(ctx, protocol.KindAgent, "qpool", "job-"+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PublishJob(ctx, protocol.KindGate, "qgates", "gate-job", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	f := scrape(t)
	if got := f.Sum("supervisor_job_queue_depth", "kind=agent", "pool=qpool"); got != 3 {
		t.Errorf("agent queue depth without a consumer = %v, want 3", got)
	}
	if got := f.Sum("supervisor_job_queue_depth", "kind=gate", "pool=qgates"); got != 1 {
		t.Errorf("gate queue depth = %v, want 1", got)
	}
	if age := f.Sum("supervisor_job_queue_oldest_age_seconds", "kind=agent", "pool=qpool"); age < 3600-60 || age > 3600+60 {
		t.Errorf("oldest age = %v s, want about an hour (the test clock)", age)
	}

	cons, err := b.JobConsumer(ctx, protocol.KindAgent, "qpool")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Messages() {
		got++ // left unacknowledged: in progress
	}
	if got != 1 {
		t.Fatalf("fetched %d jobs, want 1", got)
	}
	f = scrape(t)
	if d, p := f.Sum("supervisor_job_queue_depth", "kind=agent", "pool=qpool"), f.Sum("supervisor_job_queue_in_progress", "kind=agent", "pool=qpool"); d != 2 || p != 1 {
		t.Errorf("with a consumer: depth %v in progress %v, want 2 and 1", d, p)
	}
	if age := f.Sum("supervisor_job_queue_oldest_age_seconds", "kind=agent", "pool=qpool"); age < 3600-60 {
		t.Errorf("oldest waiting age with a consumer = %v s, want about an hour", age)
	}
}

type snapshotSource struct {
	snap CoordinatorSnapshot
	err  error
}

func (s snapshotSource) MetricsSnapshot(context.Context) (CoordinatorSnapshot, error) {
	return s.snap, s.err
}

// The coordinator's snapshot becomes gauges: leadership, workflows and
// inbox by status, and one series per breaker state per scope (1 for the
// current one) with its failures.
func TestCoordinatorSnapshot(t *testing.T) {
	now := time.Now()
	unset := SetCoordinator(snapshotSource{snap: CoordinatorSnapshot{
		Leader:    true,
		Workflows: map[string]int{"running": 2, "succeeded": 5},
		Inbox:     map[string]int{"escalated": 1, "awaiting_approval": 0},
		Breakers: []state.ScopedBreaker{
			{Scope: "gate:lint:abcd1234", Breaker: state.Breaker{State: state.BreakerOpen, FailureTimes: []time.Time{now, now, now}}},
			{Scope: "repo:r1", Breaker: state.Breaker{State: state.BreakerClosed, FailureTimes: []time.Time{now}}},
		},
	}})
	f := scrape(t)
	unset()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"supervisor_coordinator_leader", nil, 1},
		{"supervisor_workflows", []string{"status=running"}, 2},
		{"supervisor_workflows", []string{"status=succeeded"}, 5},
		{"supervisor_inbox_size", []string{"status=escalated"}, 1},
		{"supervisor_inbox_size", []string{"status=awaiting_approval"}, 0},
		{"supervisor_breaker_state", []string{"scope=gate:lint:abcd1234", "state=open"}, 1},
		{"supervisor_breaker_state", []string{"scope=gate:lint:abcd1234", "state=closed"}, 0},
		{"supervisor_breaker_state", []string{"scope=gate:lint:abcd1234", "state=half_open"}, 0},
		{"supervisor_breaker_state", []string{"scope=repo:r1", "state=closed"}, 1},
		{"supervisor_breaker_failures", []string{"scope=gate:lint:abcd1234"}, 3},
		{"supervisor_breaker_failures", []string{"scope=repo:r1"}, 1},
	} {
		if got := f.Sum(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if f.Series("supervisor_breaker_state") != 6 {
		t.Errorf("breaker_state has %d series, want 3 states × 2 scopes", f.Series("supervisor_breaker_state"))
	}
	if scrape(t).Has("supervisor_coordinator_leader") {
		t.Errorf("an unset coordinator is still reported")
	}

	// A source that fails still serves the rest, with the error reported.
	defer SetCoordinator(snapshotSource{err: errors.New("store unreachable")})()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	if !strings.Contains(rec.Body.String(), "supervisor_coordinator_leader") {
		t.Errorf("a failing source hid the rest of the exposition:\n%s", rec.Body)
	}
}

// --metrics-listen: off serves nothing; a busy default port is a warning
// and no server; a busy explicit one is an error; a free one serves the
// exposition over HTTP.
func TestStart(t *testing.T) {
	if s, err := Start(Off, true, nil); s != nil || err != nil {
		t.Errorf("Start(off) = %v, %v; want nothing", s, err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	if s, err := Start(busy.Addr().String(), false, log); s != nil || err != nil {
		t.Errorf("busy default port: %v, %v; want no server and no error", s, err)
	}
	if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), busy.Addr().String()) {
		t.Errorf("busy default port logged no warning naming it:\n%s", logBuf.String())
	}
	if _, err := Start(busy.Addr().String(), true, log); !errors.Is(err, ErrListen) {
		t.Errorf("busy explicit port: err = %v, want ErrListen", err)
	}

	s, err := Start("127.0.0.1:0", true, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() //nolint:errcheck // test cleanup
	resp, err := http.Get("http://" + s.Addr() + Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if _, err := metricstest.Parse(bytes.NewReader(body)); err != nil || !strings.Contains(string(body), "supervisor_") {
		t.Errorf("served exposition: %v\n%s", err, body)
	}
}

// TestPprof checks that --pprof adds Go's profiles to the metrics listener,
// never the command line, and that without it there are none.
func TestPprof(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, c := range []struct {
		name  string
		pprof bool
	}{{"off", false}, {"on", true}} {
		t.Run(c.name, func(t *testing.T) {
			v := viper.New()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			AddFlag(fs, Off)
			args := []string{"--" + FlagName, "127.0.0.1:0"}
			if c.pprof {
				args = append(args, "--"+PprofFlagName)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := v.BindPFlags(fs); err != nil {
				t.Fatal(err)
			}
			s, err := StartFrom(v, log)
			if err != nil || s == nil {
				t.Fatalf("StartFrom: %v, %v", s, err)
			}
			defer s.Close() //nolint:errcheck // test cleanup
			base := "http://" + s.Addr()
			code, body := get(base + PprofPath + "goroutine?debug=1")
			if c.pprof && (code != http.StatusOK || !strings.Contains(body, "goroutine profile")) {
				t.Errorf("goroutine profile: %d %.200q; want 200 and a profile", code, body)
			}
			if !c.pprof && code != http.StatusNotFound {
				t.Errorf("goroutine profile without --pprof: %d, want 404", code)
			}
			if code, _ := get(base + PprofPath + "cmdline"); code == http.StatusOK {
				t.Errorf("the command line is served (%d): it may hold a secret", code)
			}
			if code, _ := get(base + Path); code != http.StatusOK {
				t.Errorf("metrics: %d, want 200", code)
			}
		})
	}
}
