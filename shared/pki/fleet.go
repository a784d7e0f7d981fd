package pki

import (
	"fmt"
	"path/filepath"
)

// CAFile is the name of the CA certificate in every directory Generate
// writes; the authority's own key stays in DIR/ca/ca.key.
const CAFile = "ca.crt"

// Fleet describes the certificates of a fleet: servers by name with the
// host names each is reached by, and client roles.
type Fleet struct {
	// Servers maps a server's name (nats, redis) to its host names and
	// IP addresses. Server certificates may also be used as client
	// certificates (NATS cluster routes connect as clients).
	Servers map[string][]string
	// Clients are the roles given a client certificate (coordinator,
	// worker, gaterunner, cli).
	Clients []string
}

// Generate creates an authority and the fleet's certificates under dir:
//
//	dir/ca/ca.crt, ca.key         the authority (its key is never mounted)
//	dir/NAME/ca.crt, NAME.crt, NAME.key   one directory per server and role
//
// so that each service can be given its own directory and nothing else.
// Files are 0600 and directories 0700; existing files are refused.
func Generate(dir string, f Fleet) (*Authority, error) {
	ca, err := NewAuthority("Supervisor fleet CA")
	if err != nil {
		return nil, err
	}
	if err := (Pair{CertPEM: ca.CertPEM, KeyPEM: ca.KeyPEM}).Write(filepath.Join(dir, "ca"), "ca"); err != nil {
		return nil, err
	}
	seen := map[string]bool{"ca": true}
	issue := func(name string, hosts []string, usage Usage) error {
		if name == "" || filepath.Base(name) != name || name == "." || name == ".." {
			return fmt.Errorf("pki: %q is not a usable name for a certificate", name)
		}
		if seen[name] {
			return fmt.Errorf("pki: %s is named twice", name)
		}
		seen[name] = true
		p, err := ca.Issue(name, hosts, usage)
		if err != nil {
			return err
		}
		sub := filepath.Join(dir, name)
		if err := WriteSecret(filepath.Join(sub, CAFile), ca.CertPEM); err != nil {
			return err
		}
		return p.Write(sub, name)
	}
	for name, hosts := range f.Servers {
		if err := issue(name, hosts, Server|Client); err != nil {
			return nil, err
		}
	}
	for _, role := range f.Clients {
		if err := issue(role, nil, Client); err != nil {
			return nil, err
		}
	}
	return ca, nil
}
