package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/pki"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// TestGenerateFleet (TLS-05): the authority, one directory per server and
// role holding the CA and its own pair only, 0600 files in 0700
// directories, server certificates valid for exactly the host names given
// and verifiable against the CA, client certificates for client auth.
func TestGenerateFleet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	_, err := pki.Generate(dir, pki.Fleet{
		Servers: map[string][]string{"nats": {"nats-1", "nats-2", "localhost", "127.0.0.1"}},
		Clients: []string{"worker"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"ca":     {"ca.crt", "ca.key"},
		"nats":   {"ca.crt", "nats.crt", "nats.key"},
		"worker": {"ca.crt", "worker.crt", "worker.key"},
	}
	for sub, files := range want {
		fi, err := os.Stat(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", sub, fi.Mode().Perm())
		}
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != 0o600 {
				t.Errorf("%s/%s: mode %v, want 0600", sub, e.Name(), info.Mode().Perm())
			}
		}
		if strings.Join(got, ",") != strings.Join(files, ",") {
			t.Errorf("%s holds %v, want %v", sub, got, files)
		}
	}
	roots, err := tlsconfig.LoadCA(filepath.Join(dir, "nats", pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := leaf(t, filepath.Join(dir, "nats", "nats.crt"))
	for _, tc := range []struct {
		host string
		ok   bool
	}{{"nats-1", true}, {"nats-2", true}, {"localhost", true}, {"127.0.0.1", true}, {"nats-3", false}, {"redis", false}} {
		_, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if (err == nil) != tc.ok {
			t.Errorf("server certificate for %s: verify err %v, want ok=%v", tc.host, err, tc.ok)
		}
	}
	cli := leaf(t, filepath.Join(dir, "worker", "worker.crt"))
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate verified as a server's")
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "worker", "worker.crt"), filepath.Join(dir, "worker", "worker.key")); err != nil {
		t.Errorf("worker pair: %v", err)
	}
	// Never overwritten.
	if _, err := pki.Generate(dir, pki.Fleet{Clients: []string{"worker"}}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "ca", "ca.crt")) {
		t.Errorf("second Generate into %s: err %v, want a refusal naming the existing file", dir, err)
	}
}

// TestGenerateRefusesBadNames: a role named like a path or twice is refused.
func TestGenerateRefusesBadNames(t *testing.T) {
	for _, f := range []pki.Fleet{
		{Clients: []string{"../x"}},
		{Clients: []string{"worker", "worker"}},
		{Clients: []string{"ca"}},
		{Servers: map[string][]string{"nats": nil}},
	} {
		if _, err := pki.Generate(t.TempDir(), f); err == nil {
			t.Errorf("Generate(%+v) succeeded", f)
		}
	}
}

func leaf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
