package tlsconfig_test

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/testkit"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// TestFilesErrors (TLS-02): every unusable file is named with what is
// wrong with it.
func TestFilesErrors(t *testing.T) {
	certs := testkit.Certs(t)
	w := testkit.CertFiles(certs, "worker")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	testkit.WriteFile(t, notPEM, "not a certificate\n")
	missing := filepath.Join(dir, "missing.crt")
	for _, tc := range []struct {
		name   string
		files  tlsconfig.Files
		server bool
		want   string
	}{
		{"CA missing", tlsconfig.Files{CA: missing}, false, "CA file " + missing + " unreadable"},
		{"CA without certificates", tlsconfig.Files{CA: notPEM}, false, "CA file " + notPEM + " holds no PEM certificate"},
		{"key without certificate", tlsconfig.Files{Key: w.Key}, false, "key " + w.Key + " given without its certificate"},
		{"certificate not PEM", tlsconfig.Files{Cert: notPEM, Key: w.Key}, false, "certificate " + notPEM + " or key " + w.Key + " is not valid PEM"},
		{"key missing", tlsconfig.Files{Cert: w.Cert, Key: missing}, false, "key file " + missing + " unreadable"},
		{"server without a certificate", tlsconfig.Files{CA: w.CA}, true, "a server needs a certificate and a key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.server {
				_, err = tc.files.Server()
			} else {
				_, err = tc.files.Client("")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
	srv, err := testkit.CertFiles(certs, "nats").Server()
	if err != nil {
		t.Fatal(err)
	}
	if srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.ClientCAs == nil {
		t.Error("a server given a CA does not require client certificates of it")
	}
	cli, err := w.Client("nats-1")
	if err != nil {
		t.Fatal(err)
	}
	if cli.ServerName != "nats-1" || cli.RootCAs == nil || len(cli.Certificates) != 1 || cli.MinVersion < tls.VersionTLS12 {
		t.Errorf("client config %+v", cli)
	}
	other := errors.New("connection refused")
	if got := tlsconfig.Explain(other, "h", ""); got != other {
		t.Errorf("Explain changed an unrelated error: %v", got)
	}
}
