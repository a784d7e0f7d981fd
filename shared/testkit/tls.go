package testkit

import (
	"path/filepath"
	"testing"

	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/pki"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// CertRoles are the client roles Certs issues certificates for.
var CertRoles = []string{"coordinator", "worker", "gaterunner", "cli"}

// Certs generates a fleet's certificates for the test (pki.Generate):
// server certificates "nats" and "redis" valid for localhost and
// 127.0.0.1, and a client certificate for each of CertRoles. It returns
// the directory; CertFiles names the files in it.
func Certs(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	hosts := []string{"localhost", "127.0.0.1"}
	if _, err := pki.Generate(dir, pki.Fleet{
		Servers: map[string][]string{"nats": hosts, "redis": hosts},
		Clients: CertRoles,
	}); err != nil {
		t.Fatalf("generate certificates: %v", err)
	}
	return dir
}

// CertFiles returns the CA, certificate and key of name (a server or a
// role) in a directory Certs or pki.Generate wrote.
func CertFiles(dir, name string) tlsconfig.Files {
	sub := filepath.Join(dir, name)
	return tlsconfig.Files{CA: filepath.Join(sub, pki.CAFile), Cert: filepath.Join(sub, name+".crt"), Key: filepath.Join(sub, name+".key")}
}

// NATSTLS starts an embedded JetStream nats-server for the test that
// serves TLS with the "nats" certificate of certs (a Certs directory) and
// requires clients to present a certificate its CA signed. It is shut
// down when the test ends.
func NATSTLS(t testing.TB, certs string) *embedded.Server {
	t.Helper()
	cfg, err := CertFiles(certs, "nats").Server()
	if err != nil {
		t.Fatalf("nats TLS: %v", err)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), "jetstream"), TLS: cfg})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// RedisTLS starts a redis-server process of the test's own that serves
// TLS only, on a free port of 127.0.0.1, with the "redis" certificate of
// certs (a Certs directory), requiring clients to present a certificate
// its CA signed, and with the users of aclFile (a users.acl file; ""
// keeps Redis's default user). It returns the host:port; the server is
// stopped when the test ends.
func RedisTLS(t testing.TB, certs, aclFile string) string {
	t.Helper()
	f := CertFiles(certs, "redis")
	args := []string{"--port", "0", "--tls-cert-file", f.Cert, "--tls-key-file", f.Key,
		"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "yes"}
	if aclFile != "" {
		args = append(args, "--aclfile", aclFile)
	}
	return startRedis(t, "--tls-port", args...)
}
