// Package embedded runs a NATS server with JetStream inside the current
// process: the message bus of the embedded default (`coordinator dev`) and
// of tests. It is the real nats-server, not a stand-in.
package embedded

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/supervisorhq/supervisor/shared/natsauth"
)

// Options configures an embedded server.
type Options struct {
	// Host and Port to listen on; Port 0 picks a free port.
	Host string
	Port int
	// StoreDir is where JetStream keeps its files; it is created if missing.
	StoreDir string
	// ServerName names the server (default "supervisor-embedded").
	ServerName string
	// MaxPayload overrides the server's maximum message size (0 = default).
	MaxPayload int32
	// TLS, if set, makes client connections use TLS with this
	// configuration (tlsconfig.Files.Server builds one): clients without
	// TLS are refused, and with ClientAuth set to
	// tls.RequireAndVerifyClientCert so are clients without a
	// certificate the configuration's ClientCAs signed.
	TLS *tls.Config
	// Cluster, if set, makes the server a node of a cluster.
	Cluster *Cluster
	// Users, when set, turns authorization on: one nkey user per role with
	// the role's permissions (natsauth), exactly as the configuration
	// `coordinator creds init` writes gives a nats-server; anonymous
	// connections are refused.
	Users natsauth.Users
}

// Cluster configures the cluster routes of an embedded server.
type Cluster struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Host and Port the routes listen on; Port 0 picks a free port.
	Host string
	Port int
	// Routes are the nats-route:// URLs of the other nodes (a node skips
	// the route to itself).
	Routes []string
	// TLS, if set, makes routes use TLS with this configuration, which is
	// used both to accept routes and to dial them: it must hold a
	// certificate valid for both uses, ClientCAs (to verify the nodes
	// dialling in) and RootCAs (to verify the nodes dialled).
	TLS *tls.Config
}

// Server is a running embedded NATS server.
type Server struct {
	srv *server.Server
}

// Start starts a server and waits until it accepts connections.
func Start(opts Options) (*Server, error) {
	if opts.StoreDir == "" {
		return nil, fmt.Errorf("embedded nats: StoreDir is required")
	}
	if err := os.MkdirAll(opts.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded nats: create store dir: %w", err)
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.ServerName == "" {
		opts.ServerName = "supervisor-embedded"
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	sopts := &server.Options{
		ServerName: opts.ServerName,
		Host:       opts.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: opts.MaxPayload,
	}
	if opts.TLS != nil {
		sopts.TLSConfig = opts.TLS
		sopts.TLS = true
		sopts.TLSVerify = opts.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		sopts.TLSTimeout = 5
	}
	if c := opts.Cluster; c != nil {
		sopts.Cluster.Name = c.Name
		sopts.Cluster.Host = c.Host
		if sopts.Cluster.Host == "" {
			sopts.Cluster.Host = opts.Host
		}
		sopts.Cluster.Port = c.Port
		if c.Port == 0 {
			sopts.Cluster.Port = server.RANDOM_PORT
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded nats: route %q: %w", r, err)
			}
			sopts.Routes = append(sopts.Routes, u)
		}
		if c.TLS != nil {
			sopts.Cluster.TLSConfig = c.TLS
			sopts.Cluster.TLSTimeout = 5
		}
	}
	if opts.Users != nil {
		users, err := NkeyUsers(opts.Users)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
		sopts.Nkeys = users
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 15s (store %s)", opts.StoreDir)
	}
	return &Server{srv: srv}, nil
}

// ClusterAddr is the host:port the server's routes listen on ("" outside
// a cluster).
func (s *Server) ClusterAddr() string {
	if a := s.srv.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

// URL is the client URL of the server: tls://… when it serves TLS.
func (s *Server) URL() string { return s.srv.ClientURL() }

// InProcessConn opens a client connection to the server through an
// in-memory pipe (bus.InProcess), for clients running in the same process.
func (s *Server) InProcessConn() (net.Conn, error) { return s.srv.InProcessConn() }

// Shutdown stops the server and waits for it to finish.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// NkeyUsers builds nats-server's nkey users for users: each role's public
// key with the role's permissions (natsauth.Config renders the same for a
// configuration file).
func NkeyUsers(users natsauth.Users) ([]*server.NkeyUser, error) {
	if err := users.Validate(); err != nil {
		return nil, err
	}
	var out []*server.NkeyUser
	for _, r := range natsauth.Roles() {
		spec, err := natsauth.SpecOf(r)
		if err != nil {
			return nil, err
		}
		perms := &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: spec.Publish()},
			Subscribe: &server.SubjectPermission{Allow: spec.Subscribe(users[r])},
		}
		if spec.AllowResponses {
			perms.Response = &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS,
				Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}
		}
		out = append(out, &server.NkeyUser{Nkey: users[r], Permissions: perms})
	}
	return out, nil
}
