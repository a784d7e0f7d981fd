package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// TestOpenWaitsForJetStream: a coordinator started while its NATS cluster
// has no quorum yet (one node of three up, so JetStream cannot answer)
// waits for it, with back-off and a log line, instead of failing; once
// the other nodes are up the state bucket is made and works.
func TestOpenWaitsForJetStream(t *testing.T) {
	ports := make([]int, 3)
	var routes []string
	for i := range ports {
		p, err := testkit.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	start := func(i int) *embedded.Server {
		srv, err := embedded.Start(embedded.Options{
			Host: "127.0.0.1", StoreDir: filepath.Join(t.TempDir(), "js"), ServerName: "n" + strconv.Itoa(i),
			Cluster: &embedded.Cluster{Name: "backends", Host: "127.0.0.1", Port: ports[i], Routes: routes},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		return srv
	}
	first := start(0)
	nc, err := nats.Connect(first.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	var logs testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	type opened struct {
		store state.Store
		err   error
	}
	done := make(chan opened, 1)
	ctx := testkit.Context(t, 2*time.Minute)
	go func() {
		s, err := Open(ctx, "", js, 3, log)
		done <- opened{s, err}
	}()
	testkit.WaitFor(t, time.Minute, 100*time.Millisecond, "Open to say it retries", func() bool {
		return strings.Contains(logs.String(), "JetStream cannot create the state bucket yet")
	})
	select {
	case o := <-done:
		t.Fatalf("Open returned without a quorum: %v", o.err)
	default:
	}
	start(1)
	start(2)
	o := testkit.Receive(t, done, time.Minute, "Open, once the cluster has a quorum")
	if o.err != nil {
		t.Fatalf("Open: %v", o.err)
	}
	defer o.store.Close()
	if got := o.store.Backend(); got != "jetstream-kv" {
		t.Errorf("backend %q, want jetstream-kv", got)
	}
	if _, err := js.KeyValue(ctx, protocol.BucketState); err != nil {
		t.Errorf("the state bucket after Open: %v", err)
	}
}

// TestOpenFailsAtOnceOnAPermanentError: a refusal that names its reason
// (three replicas asked of a server that is not clustered) ends Open at
// once: waiting would not change it.
func TestOpenFailsAtOnceOnAPermanentError(t *testing.T) {
	js := testkit.JetStream(t, testkit.NATS(t))
	var logs testkit.Buffer
	start := time.Now()
	_, err := Open(testkit.Context(t, time.Minute), "", js, 3, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err == nil || !errors.Is(err, ErrBucket) || Waitable(err) {
		t.Fatalf("Open with 3 replicas on a single server: %v; want a permanent ErrBucket error", err)
	}
	if took := time.Since(start); took > 5*time.Second || strings.Contains(logs.String(), "retrying") {
		t.Errorf("Open retried a permanent error (%s):\n%s", took, logs.String())
	}
}

// TestWaitable: which errors a runner binding the state bucket waits out.
func TestWaitable(t *testing.T) {
	api := func(code jetstream.ErrorCode, status int) error {
		return &jetstream.APIError{Code: status, ErrorCode: code, Description: "test"}
	}
	bucket := func(err error) error { return fmt.Errorf("state: %w: %w", ErrBucket, err) }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"not created yet", bucket(jetstream.ErrBucketNotFound), true},
		{"no answer in time", bucket(context.DeadlineExceeded), true},
		{"no responders", bucket(nats.ErrNoResponders), true},
		{"no meta leader yet", bucket(api(bus.ErrCodeClusterNotAvailable, 503)), true},
		{"insufficient resources", bucket(api(10023, 503)), false},
		{"JetStream not enabled", bucket(jetstream.ErrJetStreamNotEnabled), false},
		{"connection closed", bucket(nats.ErrConnectionClosed), false},
		{"Redis not answering", fmt.Errorf("redis: %w", context.DeadlineExceeded), false},
	} {
		if got := Waitable(c.err); got != c.want {
			t.Errorf("%s: Waitable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
