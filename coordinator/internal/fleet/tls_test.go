package fleet

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// TestEmbeddedFleetOverTLS (TLS-07): with ServerTLS the embedded default
// (coordinator dev --tls-dir) serves TLS only, its own services connect
// through the in-memory pipe (PERF-60), a client with the CA and a
// certificate reaches the API, and one without the CA is refused.
func TestEmbeddedFleetOverTLS(t *testing.T) {
	certs := testkit.Certs(t)
	ctx := testkit.Context(t, 90*time.Second)
	f, err := Start(ctx, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NoRunners: true,
		ServerTLS: testkit.CertFiles(certs, "nats"), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() //nolint:errcheck // the test is over
	if !strings.HasPrefix(f.URL(), "tls://") {
		t.Errorf("URL %s, want tls://", f.URL())
	}
	quiet := slog.New(slog.DiscardHandler)
	nc, err := bus.Connect(ctx, f.URL(), "cli", quiet, bus.WithTLS(testkit.CertFiles(certs, "cli")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var lastErr error
	defer func() {
		if t.Failed() && lastErr != nil {
			t.Logf("last error: %v", lastErr)
		}
	}()
	testkit.WaitFor(t, 30*time.Second, 100*time.Millisecond, "the API to answer over TLS", func() bool {
		_, lastErr = (&api.Client{NC: nc}).List(ctx)
		return lastErr == nil
	})
	if _, err := bus.Connect(ctx, f.URL(), "cli", quiet, bus.WithTLS(tlsconfig.Files{})); !errors.Is(err, bus.ErrTLS) {
		t.Errorf("a client without the CA: err %v, want ErrTLS", err)
	}
}
