package redisstate

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// WithTLS makes the connection use TLS with files: the server's
// certificate must be signed by files.CA (the system's roots without
// one), and files.Cert and files.Key, when given, are presented to the
// server. Any file given requires TLS, whatever the URL's scheme; with no
// file, a rediss:// URL still uses TLS against the system's roots.
func WithTLS(files tlsconfig.Files) Option {
	return func(c *config) { c.tls = files }
}

// WithPasswordFile reads the password of the URL's user from path (its
// first line), so the password need not be in the URL, the environment
// or a command line. A URL with a password of its own is refused.
func WithPasswordFile(path string) Option {
	return func(c *config) { c.passwordFile = path }
}

// ClientOptions builds the go-redis options of a connection to url with
// the settings opts give (WithTLS, WithPasswordFile): the one place every
// Redis connection of Supervisor is configured. Errors name url with any
// password redacted, and the file that could not be used.
func ClientOptions(url string, opts ...Option) (*redis.Options, error) {
	c := newConfig(opts)
	return c.clientOptions(url)
}

func (c config) clientOptions(url string) (*redis.Options, error) {
	shown := RedactURL(url)
	ropts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstate: invalid Redis URL %s: %w", shown, stripURL(err))
	}
	if !c.tls.IsZero() {
		if ropts.Network == "unix" {
			return nil, fmt.Errorf("redisstate: Redis URL %s is a unix socket: TLS settings do not apply", shown)
		}
		host := ropts.Addr
		if i := strings.LastIndex(host, ":"); i >= 0 {
			host = host[:i]
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		cfg, err := c.tls.Client(host)
		if err != nil {
			return nil, fmt.Errorf("redisstate: Redis %s: %w", shown, err)
		}
		ropts.TLSConfig = cfg
	}
	if c.passwordFile != "" {
		if ropts.Password != "" {
			return nil, fmt.Errorf("redisstate: Redis URL %s has a password and a password file %s is given too: use one", shown, c.passwordFile)
		}
		pw, err := readPassword(c.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("redisstate: Redis %s: %w", shown, err)
		}
		ropts.Password = pw
	}
	return ropts, nil
}

// readPassword returns the first line of path.
func readPassword(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("password file %s unreadable: %w", path, err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return "", fmt.Errorf("password file %s: empty first line", path)
	}
	return line, nil
}

// explain makes a failure to open a connection that retrying cannot mend
// say what was refused (a TLS certificate not trusted, a handshake the
// server refused, the user and password, a permission) and returns nil for
// any other failure.
func (c config) explain(err error, ropts *redis.Options) error {
	if e := tlsconfig.Explain(err, ropts.Addr, c.tls.CA); errors.Is(e, tlsconfig.ErrUntrusted) {
		return e
	}
	var alert tls.AlertError
	msg := err.Error()
	switch {
	case errors.As(err, &alert) || strings.Contains(msg, "remote error: tls:"):
		return fmt.Errorf("the server refused the TLS handshake (does it require a client certificate, --redis-cert and --redis-key, signed by its CA?): %w", err)
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "invalid password"):
		user := ropts.Username
		if user == "" {
			user = "default"
		}
		return fmt.Errorf("the server refused user %q (wrong password, unknown or disabled user, or none given: the user is in the URL, the password in the URL or --redis-password-file): %w", user, err)
	case strings.Contains(msg, "NOPERM"):
		return fmt.Errorf("user %q lacks a permission it needs (see its ACL in docs/security.md): %w", ropts.Username, err)
	}
	return nil
}
