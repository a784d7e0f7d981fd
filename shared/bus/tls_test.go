package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/supervisorhq/supervisor/shared/embedded"
	"github.com/supervisorhq/supervisor/shared/pki"
	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// TestConnectTLS (TLS-01, TLS-02) connects to a real nats-server that
// serves TLS and requires client certificates: only a client trusting its
// CA and presenting a certificate the CA signed gets in; every other one
// fails at once (no retries until the context ends) with an error that
// names what was wrong.
func TestConnectTLS(t *testing.T) {
	t.Parallel()
	certs := testkit.Certs(t)
	srv := testkit.NATSTLS(t, certs)
	other := testkit.Certs(t) // another authority
	worker := testkit.CertFiles(certs, "worker")
	missing := filepath.Join(t.TempDir(), "nope.crt")
	for _, tc := range []struct {
		name  string
		files tlsconfig.Files
		want  []string // in the error; none: the connection works
	}{
		{"trusted with a client certificate", worker, nil},
		{"no TLS settings", tlsconfig.Files{}, []string{"certificate not trusted", "system's roots", "127.0.0.1"}},
		{"another CA", tlsconfig.Files{CA: testkit.CertFiles(other, "worker").CA, Cert: worker.Cert, Key: worker.Key},
			[]string{"certificate not trusted", "not signed by CA " + testkit.CertFiles(other, "worker").CA}},
		{"no client certificate", tlsconfig.Files{CA: worker.CA}, []string{"refused the TLS handshake", "--nats-cert"}},
		{"client certificate of another CA", tlsconfig.Files{CA: worker.CA, Cert: testkit.CertFiles(other, "worker").Cert, Key: testkit.CertFiles(other, "worker").Key},
			[]string{"refused the TLS handshake"}},
		{"unreadable CA", tlsconfig.Files{CA: missing}, []string{"CA file " + missing + " unreadable"}},
		{"certificate and key of different pairs", tlsconfig.Files{CA: worker.CA, Cert: worker.Cert, Key: testkit.CertFiles(certs, "cli").Key},
			[]string{"certificate " + worker.Cert + " and key " + testkit.CertFiles(certs, "cli").Key + " do not belong together"}},
		{"certificate without key", tlsconfig.Files{CA: worker.CA, Cert: worker.Cert}, []string{"certificate " + worker.Cert + " given without its key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nc, err := Connect(ctx, srv.URL(), "tls-test", quiet, WithTLS(tc.files))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Connect: %v", err)
				}
				defer nc.Close()
				if !nc.TLSRequired() {
					t.Error("the connection does not use TLS")
				}
				if _, err := nc.Request("$JS.API.INFO", nil, 5*time.Second); err != nil {
					t.Errorf("request over TLS: %v", err)
				}
				return
			}
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, ErrTLS) {
				t.Errorf("err %v does not wrap ErrTLS (it was retried as if the server were unreachable?)", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestConnectTLSHostMismatch (TLS-02): a server certificate that is not
// valid for the host the client dialled is refused, naming the host.
func TestConnectTLSHostMismatch(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := pki.Generate(dir, pki.Fleet{Servers: map[string][]string{"nats": {"nats-1"}}, Clients: []string{"cli"}}); err != nil {
		t.Fatal(err)
	}
	cfg, err := testkit.CertFiles(dir, "nats").Server()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(t.TempDir(), "js"), TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, err = Connect(testkit.Context(t, 30*time.Second), srv.URL(), "tls-test", quiet, WithTLS(testkit.CertFiles(dir, "cli")))
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "not valid for host") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("err = %v, want ErrTLS saying the certificate is not valid for 127.0.0.1", err)
	}
}

// TestConnectTLSWanted (TLS-01): a client given a CA insists on TLS; a
// server without it is refused at once.
func TestConnectTLSWanted(t *testing.T) {
	t.Parallel()
	certs := testkit.Certs(t)
	url := testkit.NATS(t)
	_, err := Connect(testkit.Context(t, 30*time.Second), url, "tls-test", quiet, WithTLS(tlsconfig.Files{CA: testkit.CertFiles(certs, "cli").CA}))
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "does not offer TLS") {
		t.Fatalf("err = %v, want ErrTLS saying the server does not offer TLS", err)
	}
}

// TestClusterRoutesTLS (TLS-03): three nodes whose routes use TLS with
// the fleet's certificates form a JetStream cluster; a client of one node
// gets a message published on another.
func TestClusterRoutesTLS(t *testing.T) {
	t.Parallel()
	certs := testkit.Certs(t)
	files := testkit.CertFiles(certs, "nats")
	routeTLS := func() *tls.Config {
		server, err := files.Server()
		if err != nil {
			t.Fatal(err)
		}
		client, err := files.Client("")
		if err != nil {
			t.Fatal(err)
		}
		server.RootCAs = client.RootCAs
		return server
	}
	ports := make([]int, 3)
	for i := range ports {
		p, err := testkit.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, "nats-route://localhost:"+strconv.Itoa(p))
	}
	servers := make([]*embedded.Server, 3)
	errs := make(chan error, 3)
	for i := range servers {
		go func() {
			clientTLS, err := files.Server()
			if err != nil {
				errs <- err
				return
			}
			srv, err := embedded.Start(embedded.Options{
				StoreDir: filepath.Join(t.TempDir(), "js"), ServerName: "n" + strconv.Itoa(i), TLS: clientTLS,
				Cluster: &embedded.Cluster{Name: "tls", Port: ports[i], Routes: routes, TLS: routeTLS()},
			})
			servers[i] = srv
			errs <- err
		}()
	}
	for range servers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range servers {
		t.Cleanup(s.Shutdown)
	}
	cli := testkit.CertFiles(certs, "cli")
	ctx := testkit.Context(t, 60*time.Second)
	sub, err := Connect(ctx, servers[0].URL(), "sub", quiet, WithTLS(cli))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := Connect(ctx, servers[2].URL(), "pub", quiet, WithTLS(cli))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	s, err := sub.SubscribeSync("routed")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	// Routes come up in the background: publish until the message crosses.
	testkit.WaitFor(t, 30*time.Second, 200*time.Millisecond, "a message to cross a TLS route", func() bool {
		_ = pub.Publish("routed", []byte("over tls"))
		m, err := s.NextMsg(200 * time.Millisecond)
		return err == nil && string(m.Data) == "over tls"
	})
}
