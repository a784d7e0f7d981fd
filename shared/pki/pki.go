// Package pki generates the certificates of a Supervisor fleet with Go's
// crypto/x509 alone: a certificate authority, server certificates for the
// host names NATS and Redis are reached by, and client certificates for
// each role. `coordinator creds init` and the tests use it; no openssl is
// needed.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultValidity is how long generated certificates are valid.
const DefaultValidity = 2 * 365 * 24 * time.Hour

// Usage says what a certificate may be used for.
type Usage int

const (
	// Server certificates authenticate a server to its clients.
	Server Usage = 1 << iota
	// Client certificates authenticate a client to a server.
	Client
)

// Authority is a certificate authority that signs the fleet's certificates.
type Authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM and KeyPEM are the authority's certificate and private key.
	CertPEM []byte
	KeyPEM  []byte
	// Validity is how long the certificates it issues are valid
	// (DefaultValidity when zero).
	Validity time.Duration
}

// Pair is an issued certificate and its private key, PEM-encoded.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewAuthority creates a self-signed authority named name.
func NewAuthority(name string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Supervisor"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(2 * DefaultValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Authority{cert: cert, key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// Issue signs a certificate for name with the usages asked for. A server
// certificate is valid for hosts: DNS names and IP addresses, each a
// subject alternative name.
func (a *Authority) Issue(name string, hosts []string, usage Usage) (Pair, error) {
	if usage&(Server|Client) == 0 {
		return Pair{}, errors.New("pki: a certificate needs a server or client usage")
	}
	if usage&Server != 0 && len(hosts) == 0 {
		return Pair{}, fmt.Errorf("pki: server certificate %s: no host names", name)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: key of %s: %w", name, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return Pair{}, err
	}
	validity := a.Validity
	if validity <= 0 {
		validity = DefaultValidity
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Supervisor"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if usage&Server != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if usage&Client != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
		case net.ParseIP(h) != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(h))
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: certificate of %s: %w", name, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// Write writes the pair to dir as NAME.crt and NAME.key, with the
// permissions of WriteSecret.
func (p Pair) Write(dir, name string) error {
	if err := WriteSecret(filepath.Join(dir, name+".crt"), p.CertPEM); err != nil {
		return err
	}
	return WriteSecret(filepath.Join(dir, name+".key"), p.KeyPEM)
}

// WriteSecret writes data to path readable by its owner only (0600),
// creating missing directories readable by their owner only (0700). An
// existing file is refused: credentials are never overwritten silently.
func WriteSecret(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pki: create directory %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return n, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
