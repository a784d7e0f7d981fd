package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/tlscreds"
	"github.com/supervisorhq/supervisor/shared/testkit"
)

// newSecureFleet is newFleet with TLS and Redis ACL users: `coordinator
// tls init`'s files (tlscreds) for localhost and 127.0.0.1, a nats-server
// process serving TLS only and requiring client certificates, and a
// redis-server serving TLS only with the generated users.acl. Every
// process the harness starts then connects with its own role's
// certificate, and to Redis as its own ACL user.
func newSecureFleet(t *testing.T, ackWait time.Duration) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir(), ackWait: ackWait.String()}
	f.tlsDir = filepath.Join(f.dir, "creds")
	for _, d := range []string{"logs", "data"} {
		if err := os.MkdirAll(filepath.Join(f.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tlscreds.Generate(f.tlsDir, tlscreds.Options{Hosts: []string{"localhost", "127.0.0.1"}, RedisACL: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killStrays(f.dir)
		if t.Failed() {
			f.dumpLogs()
		}
	})
	f.redisAddr = testkit.RedisTLS(t, filepath.Join(f.tlsDir, "tls"), filepath.Join(f.tlsDir, "redis", tlscreds.ACLFile))
	nats := filepath.Join(f.tlsDir, "tls", tlscreds.NATSServer)
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := f.start("nats-server", "nats-server", "-js", "-sd", filepath.Join(f.dir, "data", "nats"),
		"-p", strconv.Itoa(port), "-a", "127.0.0.1", "--tls", "--tlsverify",
		"--tlscert", filepath.Join(nats, "nats.crt"), "--tlskey", filepath.Join(nats, "nats.key"),
		"--tlscacert", filepath.Join(nats, "ca.crt"))
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := testkit.WaitTCP(testkit.Context(t, 20*time.Second), addr, 15*time.Second); err != nil || p.exited() {
		t.Fatalf("nats-server with TLS on %s: %v\n%s", addr, err, p.logText())
	}
	f.natsURL = "tls://" + addr
	return f
}

// redisURLOf is the Redis URL role's process gets: the fleet's, or with
// newSecureFleet a rediss:// URL naming role's ACL user.
func (f *fleet) redisURLOf(role string) string {
	if f.tlsDir == "" {
		return f.redisURL
	}
	return "rediss://" + role + "@" + f.redisAddr + "/0"
}

// securityArgs are the TLS and Redis password flags of role's process
// with newSecureFleet (none otherwise); the CLI gets no Redis flags.
func (f *fleet) securityArgs(role string) []string {
	if f.tlsDir == "" {
		return nil
	}
	dir := tlscreds.TLSDir(f.tlsDir, role)
	args := []string{"--nats-ca", filepath.Join(dir, "ca.crt"),
		"--nats-cert", filepath.Join(dir, role+".crt"), "--nats-key", filepath.Join(dir, role+".key")}
	if role == "cli" {
		return args
	}
	return append(args, "--redis-ca", filepath.Join(dir, "ca.crt"),
		"--redis-cert", filepath.Join(dir, role+".crt"), "--redis-key", filepath.Join(dir, role+".key"),
		"--redis-password-file", tlscreds.PasswordFile(f.tlsDir, role))
}

const tlsWorkflow = `name: tls
` + agentDefaults + `gates:
  - name: written
    command: [grep, -q, "over tls", secure.txt]
tasks:
  - id: write
    gates: [written]
    prompt: |
      @write secure.txt
      over tls
      @end
`

// TestFleetOverTLS (TLS-01, TLS-04, ACL-01, ACL-03) runs a
// workflow on a fleet of separate processes where NATS and Redis accept
// TLS only, with client certificates, and each service is its own Redis
// ACL user: the coordinator, a worker and a gate runner do everything a
// workflow needs (leader lease, job leases, gate cache, breakers,
// finished markers) within their ACLs. A CLI that does not trust the CA,
// and a runner with another service's Redis password, are refused with
// errors that say why.
func TestFleetOverTLS(t *testing.T) {
	t.Parallel()
	f := newSecureFleet(t, 10*time.Second)
	f.coordinator("coordinator", "coordinator")
	f.worker("worker-1")
	f.gaterunner("gate-1")
	repo, _ := testkit.Repo(t, map[string]string{"README.md": "base\n"})
	wf := submitWait(t, f, 3*time.Minute, writeFile(t, t.TempDir(), "tls.yaml", tlsWorkflow), repo)
	if got := fileAt(t, repo, "supervisor/"+wf, "secure.txt"); got != "over tls\n" {
		t.Errorf("secure.txt on the branch = %q", got)
	}
	for _, name := range []string{"coordinator", "worker-1", "gate-1"} {
		for _, p := range f.procs {
			if p.name == name && (strings.Contains(p.logText(), "NOPERM") || strings.Contains(p.logText(), "permission")) {
				t.Errorf("%s hit a Redis permission it lacks:\n%s", name, p.logText())
			}
		}
	}

	// The CLI without the CA: refused at once, naming what was not trusted.
	r := f.cli(30*time.Second, "status", "--nats-ca", "", "--nats-cert", "", "--nats-key", "")
	if r.code != 69 || !strings.Contains(r.stderr, "certificate not trusted") {
		t.Errorf("status without the CA: want exit 69 saying the certificate is not trusted; got %s", r)
	}
	// With the CA but no client certificate.
	r = f.cli(30*time.Second, "status", "--nats-ca", filepath.Join(tlscreds.TLSDir(f.tlsDir, "cli"), "ca.crt"))
	if r.code != 69 || !strings.Contains(r.stderr, "refused the TLS handshake") {
		t.Errorf("status without a client certificate: want exit 69 saying the handshake was refused; got %s", r)
	}

	// A worker given the gate runner's Redis password: refused at start.
	args := append([]string{"--nats", f.natsURL, "--redis-url", f.redisURLOf("worker"),
		"--data-dir", filepath.Join(f.dir, "data", "bad"), "--sandbox", "process"}, f.securityArgs("worker")...)
	args = append(args, "--redis-password-file", tlscreds.PasswordFile(f.tlsDir, "gaterunner"))
	bad := f.start("worker-bad", "worker", args...)
	select {
	case <-bad.done:
	case <-time.After(time.Minute):
		t.Fatalf("a worker with the wrong Redis password still runs:\n%s", bad.logText())
	}
	if log := bad.logText(); !strings.Contains(log, `refused user "worker"`) || !strings.Contains(log, "rediss://worker@"+f.redisAddr) {
		t.Errorf("the worker with the wrong Redis password did not say so, naming the URL:\n%s", log)
	}
}
