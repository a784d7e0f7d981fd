// Package tlsconfig builds the tls.Configs Supervisor's connections use
// from PEM files: a CA to trust, and a certificate and key to present. NATS
// (bus) and Redis (redisstate) clients, and the embedded NATS server, load
// their TLS settings through it, so a bad file is reported the same way
// everywhere: by its path and what is wrong with it.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Files names the PEM files of one TLS connection. All are optional: CA
// replaces the system's roots with the certificates in it; Cert and Key
// (given together) are the certificate and key this side presents.
type Files struct {
	// CA is a PEM file of the certificates that may sign the peer's.
	CA string
	// Cert is this side's certificate chain (PEM), Key its private key.
	Cert string
	Key  string
}

// IsZero reports whether no file is named.
func (f Files) IsZero() bool { return f.CA == "" && f.Cert == "" && f.Key == "" }

// Client returns the configuration of a client connection to serverName
// ("" lets the library fill it in from the address it dials): the peer is
// verified against the CA (or the system's roots without one), and the
// certificate is presented when named.
func (f Files) Client(serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if f.CA != "" {
		pool, err := LoadCA(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	cert, ok, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	if ok {
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Server returns the configuration of a server presenting Cert and Key.
// With a CA, clients must present a certificate the CA signed.
func (f Files) Server() (*tls.Config, error) {
	cert, ok, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("tls: a server needs a certificate and a key")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.CA != "" {
		pool, err := LoadCA(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// keyPair loads Cert and Key; ok is false when neither is named.
func (f Files) keyPair() (tls.Certificate, bool, error) {
	switch {
	case f.Cert == "" && f.Key == "":
		return tls.Certificate{}, false, nil
	case f.Cert == "":
		return tls.Certificate{}, false, fmt.Errorf("tls: key %s given without its certificate", f.Key)
	case f.Key == "":
		return tls.Certificate{}, false, fmt.Errorf("tls: certificate %s given without its key", f.Cert)
	}
	certPEM, err := readFile("certificate", f.Cert)
	if err != nil {
		return tls.Certificate{}, false, err
	}
	keyPEM, err := readFile("key", f.Key)
	if err != nil {
		return tls.Certificate{}, false, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, false, fmt.Errorf("tls: certificate %s and key %s do not belong together: %w", f.Cert, f.Key, err)
		}
		return tls.Certificate{}, false, fmt.Errorf("tls: certificate %s or key %s is not valid PEM: %w", f.Cert, f.Key, err)
	}
	return cert, true, nil
}

// LoadCA reads a PEM file of CA certificates into a pool. A file without a
// certificate in it is an error naming the file.
func LoadCA(path string) (*x509.CertPool, error) {
	data, err := readFile("CA", path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file %s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

func readFile(what, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: %s file %s unreadable: %w", what, path, err)
	}
	return data, nil
}

// ErrUntrusted marks a handshake that failed because the peer's
// certificate could not be verified.
var ErrUntrusted = errors.New("certificate not trusted")

// Explain rewrites a certificate verification failure from a handshake
// with host into an error that says what was not trusted and why (wrapping
// ErrUntrusted and err); ca is the CA file the client used ("" for the
// system's roots). Other errors come back unchanged.
func Explain(err error, host, ca string) error {
	if err == nil {
		return nil
	}
	trust := "the system's roots"
	if ca != "" {
		trust = "CA " + ca
	}
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &hostErr):
		return fmt.Errorf("%w: the server's certificate is not valid for host %q (%s): %w", ErrUntrusted, host, hostErr.Error(), err)
	case errors.As(err, &unknown):
		return fmt.Errorf("%w: the server's certificate for host %q is not signed by %s: %w", ErrUntrusted, host, trust, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%w: the server's certificate for host %q is invalid (%s): %w", ErrUntrusted, host, invalid.Error(), err)
	case errors.As(err, &verify):
		return fmt.Errorf("%w: the server's certificate for host %q failed verification against %s: %w", ErrUntrusted, host, trust, err)
	}
	return err
}
