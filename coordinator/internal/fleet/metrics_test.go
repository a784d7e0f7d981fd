package fleet

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/metrics"
	"github.com/supervisorhq/supervisor/shared/metrics/metricstest"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// The embedded default runs the coordinator, a worker and a gate runner in
// one process: its one registry reports all three, told apart by kind —
// the coordinator's gauges and job queue once, each runner's slots — and
// stops reporting the coordinator's once the fleet is closed.
func TestOneRegistryForTheEmbeddedDefault(t *testing.T) {
	ctx := testkit.Context(t, 90*time.Second)
	f, err := Start(ctx, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", WorkerConcurrency: 3, GateConcurrency: 2,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() metricstest.Families {
		rec := httptest.NewRecorder()
		metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.Path, nil))
		fams, err := metricstest.Parse(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		return fams
	}
	var fams metricstest.Families
	// The runners announce their slots before their consumers exist; the
	// queue is reported per consumer, so wait for both too.
	testkit.WaitFor(t, 30*time.Second, 50*time.Millisecond, "both runners' slots and consumers", func() bool {
		fams = scrape()
		return fams.Sum("supervisor_runner_slots", "kind=agent") == 3 && fams.Sum("supervisor_runner_slots", "kind=gate") == 2 &&
			fams.Series("supervisor_job_queue_depth", "pool=default") == 2
	})
	if got := fams.Sum("supervisor_coordinator_leader"); got != 1 {
		t.Errorf("coordinator_leader = %v, want 1", got)
	}
	if n := fams.Series("supervisor_workflows"); n != 5 {
		t.Errorf("supervisor_workflows has %d series, want one per status (5)", n)
	}
	if n := fams.Series("supervisor_job_queue_depth", "pool=default"); n != 2 {
		t.Errorf("job queue depth of the default pool: %d series, want agent and gate", n)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fams = scrape()
	if fams.Has("supervisor_coordinator_leader") || fams.Has("supervisor_job_queue_depth") || fams.Series("supervisor_runner_slots") != 0 {
		t.Errorf("a closed fleet is still reported")
	}
}
