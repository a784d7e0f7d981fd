package testkit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/supervisorhq/supervisor/shared/embedded"
)

// NATS starts an embedded JetStream-enabled nats-server for the test and
// returns its URL. It is shut down when the test ends.
func NATS(t testing.TB) string {
	t.Helper()
	return NATSServer(t).URL()
}

// NATSServer is NATS returning the server itself, so a test can stop it.
func NATSServer(t testing.TB) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), "jetstream")})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// JetStream connects to the NATS server at url for the test and returns a
// JetStream context on the connection (Conn gives the connection). The
// connection is closed when the test ends.
func JetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// InCI reports whether the tests run under CI=true, where a missing real
// dependency (redis-server, the Docker engine) is a failure, not a skip.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Missing fails the test under CI and skips it elsewhere.
func Missing(t testing.TB, what string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s is required under CI=true but is missing", what)
	}
	t.Skipf("%s is missing; skipping (under CI=true this fails)", what)
}

// Redis returns the URL of a real redis-server for the test. If
// SUPERVISOR_TEST_REDIS_URL is set (make test starts one), that server is
// used (tests namespace their keys); otherwise a redis-server process is started on a free
// port and stopped when the test ends.
func Redis(t testing.TB) string {
	t.Helper()
	if url := os.Getenv("SUPERVISOR_TEST_REDIS_URL"); url != "" {
		return url
	}
	return PrivateRedis(t)
}

// PrivateRedis starts a redis-server process of the test's own on a free
// port, stopped when the test ends, and returns its URL.
func PrivateRedis(t testing.TB) string {
	t.Helper()
	return "redis://" + startRedis(t, "--port") + "/0"
}

// startRedis starts a redis-server listening on a free port of 127.0.0.1
// given by portFlag (--port or --tls-port) with extra arguments, stopped
// when the test ends, and returns its host:port once it accepts
// connections.
func startRedis(t testing.TB, portFlag string, extra ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Missing(t, "redis-server")
	}
	port, err := FreePort()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	dir := t.TempDir()
	args := append([]string{
		"--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "no"}, extra...)
	args = append(args, portFlag, strconv.Itoa(port))
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("redis-server pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 64)
	go func() { // drain so the server never blocks on a full pipe
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := WaitTCP(context.Background(), addr, 10*time.Second); err != nil {
		var log []string
		for len(lines) > 0 {
			log = append(log, <-lines)
		}
		t.Fatalf("redis-server %s on %s: %v\n%s", strings.Join(args, " "), addr, err, strings.Join(log, "\n"))
	}
	return addr
}

// FreePort asks the kernel for a free TCP port on the loopback interface.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitTCP waits until addr accepts TCP connections or the timeout passes.
func WaitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
