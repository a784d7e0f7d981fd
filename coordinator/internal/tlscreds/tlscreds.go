// Package tlscreds generates the TLS certificates and Redis ACL users of a
// fleet (`coordinator tls init DIR`): a CA, a NATS and a Redis server
// certificate for the host names the servers are reached by, a client
// certificate per role, and a Redis users.acl with a random password per
// service, each service's files in a directory of its own so that it can
// be given those and nothing else.
package tlscreds

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/supervisorhq/supervisor/shared/pki"
	"github.com/supervisorhq/supervisor/shared/state/redisstate"
)

// Server certificates' names: DIR/tls/nats and DIR/tls/redis.
const (
	NATSServer  = "nats"
	RedisServer = "redis"
)

// Roles are the client roles given a certificate: the services, and the
// command line of users and of operators.
var Roles = []string{"coordinator", "worker", "gaterunner", "cli", "operator"}

// ACLFile is the Redis ACL file's name in DIR/redis.
const ACLFile = "users.acl"

// ErrExists is returned when DIR already holds TLS files or Redis users:
// they are never replaced silently.
var ErrExists = errors.New("already there")

// Options says what to generate.
type Options struct {
	// Hosts are the host names and IP addresses the NATS and Redis
	// servers are reached by (their certificates' subject alternative
	// names). None: no certificates.
	Hosts []string
	// RedisACL adds Redis ACL users, one per service that uses Redis.
	RedisACL bool
}

// File is one file Generate wrote.
type File struct {
	Path string
	// What it is, for the command's report.
	What string
}

// TLSDir is the directory of name's certificate (a server or a role).
func TLSDir(dir, name string) string { return filepath.Join(dir, "tls", name) }

// PasswordFile is the Redis password file of a role.
func PasswordFile(dir, role string) string {
	return filepath.Join(dir, "redis", role+".password")
}

// Generate writes the TLS and Redis files o asks for under dir:
//
//	tls/ca/ca.crt, ca.key              the CA (its key is for issuing more; never mount it)
//	tls/NAME/ca.crt, NAME.crt, NAME.key  nats, redis and each of Roles
//	redis/users.acl                    Redis's ACL file (passwords hashed)
//	redis/ROLE.password                the password of ROLE's Redis user
//
// Files are 0600, directories 0700. It refuses to write into a dir that
// already has tls/ or redis/ (ErrExists).
func Generate(dir string, o Options) ([]File, error) {
	var out []File
	if len(o.Hosts) > 0 {
		if err := absent(filepath.Join(dir, "tls")); err != nil {
			return nil, err
		}
		if _, err := pki.Generate(filepath.Join(dir, "tls"), pki.Fleet{
			Servers: map[string][]string{NATSServer: o.Hosts, RedisServer: o.Hosts},
			Clients: Roles,
		}); err != nil {
			return nil, err
		}
		out = append(out, File{filepath.Join(dir, "tls", "ca"), "the CA: ca.crt, and ca.key to issue more (keep it off the servers)"})
		names := append([]string{NATSServer, RedisServer}, Roles...)
		for _, n := range names {
			what := "the " + n + " role's client certificate, its key and the CA"
			if n == NATSServer || n == RedisServer {
				what = "the " + n + " server's certificate, its key and the CA"
			}
			out = append(out, File{TLSDir(dir, n), what})
		}
	}
	if o.RedisACL {
		if err := absent(filepath.Join(dir, "redis")); err != nil {
			return nil, err
		}
		var users []redisstate.ACLUser
		for _, role := range redisstate.ACLRoles {
			pw, err := redisstate.NewPassword()
			if err != nil {
				return nil, err
			}
			users = append(users, redisstate.ACLUser{Name: role, Role: role, Password: pw})
			if err := pki.WriteSecret(PasswordFile(dir, role), []byte(pw+"\n")); err != nil {
				return nil, err
			}
			out = append(out, File{PasswordFile(dir, role), "the password of Redis user " + role})
		}
		acl, err := redisstate.ACLFile(users, redisstate.DefaultPrefix)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "redis", ACLFile)
		if err := pki.WriteSecret(path, []byte(acl)); err != nil {
			return nil, err
		}
		out = append(out, File{path, "Redis's ACL file (aclfile): a user per service, passwords hashed"})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func absent(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w (remove it to generate a new set: every server and service then needs the new files)", path, ErrExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
