// Package bus sets up and uses Supervisor's JetStream resources: it dials
// NATS with back-off, creates or updates the streams, consumers and object
// stores the fleet needs, publishes jobs, reports and events with
// de-duplication ids, and runs the pull loop with heartbeats that workers
// and gate runners share.
package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/supervisorhq/supervisor/shared/natsauth"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// ErrUnreachable means NATS could not be reached before the context ended.
var ErrUnreachable = errors.New("bus: NATS unreachable")

// ErrRefused means NATS refused the client's credentials, or its lack of
// them. It is not retried: the same credentials would be refused again,
// and a runner that waited forever would look alive while doing nothing.
var ErrRefused = errors.New("NATS refused the credentials")

// ErrBadNkey means the --nats-nkey file cannot be used: unreadable, no
// seed in it, or another role's.
var ErrBadNkey = errors.New("bad --nats-nkey")

// ErrDenied means NATS denied the client a publish or subscription its
// role's permissions do not include.
var ErrDenied = errors.New("NATS denied a permission")

// ConnectOption configures Connect and Open.
type ConnectOption func(*connectOptions)

type connectOptions struct {
	nkeyFile  string
	role      natsauth.Role
	onDenied  func(error)
	tls       tlsconfig.Files
	inProcess nats.InProcessConnProvider
}

// InProcess connects to a NATS server running in this process through an
// in-memory pipe instead of its listener (nats.InProcessServer): no
// socket, no system call per message. The server still authenticates the
// client (WithNkey) and applies its role's permissions; TLS is not used on
// the pipe, there being no network to protect. The pipe is buffered in
// both directions as a socket is (a bare net.Pipe makes every write wait
// for the other side's read).
func InProcess(srv nats.InProcessConnProvider) ConnectOption {
	return func(o *connectOptions) { o.inProcess = srv }
}

// OnDenied has f called (on the connection's callback goroutine) with the
// ErrDenied error of each publish or subscription NATS denies: a denied
// request is otherwise only noticed when it times out.
func OnDenied(f func(error)) ConnectOption {
	return func(o *connectOptions) { o.onDenied = f }
}

// WithNkey authenticates the connection as the nkey user whose seed is in
// file (--nats-nkey; `coordinator creds init` writes one per role). role
// is the role the binary needs ("" when more than one will do, as for the
// CLI's cli and operator): a file that names another role is refused
// before connecting, and messages about refusals name the role. Replies
// come on the user's own inbox prefix (natsauth.InboxPrefix). An empty
// file means no credentials.
func WithNkey(file string, role natsauth.Role) ConnectOption {
	return func(o *connectOptions) { o.nkeyFile, o.role = file, role }
}

// identity names the client in messages: "the worker role", or the key
// file's role.
type identity struct {
	role natsauth.Role
	file string
}

func (id identity) String() string {
	if id.role != "" {
		return "the " + string(id.role) + " role"
	}
	return "the credentials in " + id.file
}

// authOptions reads the key file and returns the nats options that
// authenticate with it, and who the client is for messages.
func (o connectOptions) authOptions() ([]nats.Option, identity, error) {
	id := identity{role: o.role}
	if o.nkeyFile == "" {
		return nil, id, nil
	}
	key, err := natsauth.ReadKeyFile(o.nkeyFile)
	if err != nil {
		return nil, id, fmt.Errorf("%w: %w", ErrBadNkey, err)
	}
	if o.role != "" && key.Role != "" && key.Role != o.role {
		return nil, id, fmt.Errorf("%w: %s holds the %s role's key; this program needs the %s role's (%s%s of the same set)",
			ErrBadNkey, o.nkeyFile, key.Role, o.role, o.role, natsauth.KeyFileExt)
	}
	if id.role == "" {
		id.role = key.Role
	}
	id.file = o.nkeyFile
	auth, err := nats.NkeyOptionFromSeed(o.nkeyFile)
	if err != nil {
		return nil, id, fmt.Errorf("%w: %s: %w", ErrBadNkey, o.nkeyFile, err)
	}
	return []nats.Option{auth, nats.CustomInboxPrefix(natsauth.InboxPrefix(key.Public))}, id, nil
}

// refused explains an authentication failure at connect.
func refused(err error, id identity, shown string) error {
	if id.file == "" {
		return fmt.Errorf("%w: NATS at %s requires credentials (%v): give this program its role's nkey file "+
			"with --nats-nkey (SUPERVISOR_NATS_NKEY), from the set `coordinator creds init DIR` writes", ErrRefused, shown, err)
	}
	return fmt.Errorf("%w: NATS refused %s (%v) at %s: the server does not accept the nkey in %s; "+
		"give it the set `coordinator creds init` wrote for this server", ErrRefused, id, err, shown, id.file)
}

// authError reports whether err is NATS refusing the client's credentials.
func authError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

// Denied returns an ErrDenied error naming the subject and the role when
// the last error nc saw is a permission violation, and nil otherwise.
// NATS reports a denied publish or subscription asynchronously: a denied
// request simply gets no answer, so callers check this when one times out.
func Denied(nc *nats.Conn) error {
	if nc == nil {
		return nil
	}
	err := nc.LastError()
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	return deniedError(err, roleOf(nc))
}

func deniedError(err error, id string) error {
	return fmt.Errorf("%w: %v: %s lacks it (docs/security.md lists each role's permissions)", ErrDenied, err, id)
}

// roleOf is who nc's client is, as Connect recorded it in the
// connection's name ("supervisor-worker (the worker role)").
func roleOf(nc *nats.Conn) string {
	name := nc.Opts.Name
	if i := strings.Index(name, " ("); i >= 0 && strings.HasSuffix(name, ")") {
		return name[i+2 : len(name)-1]
	}
	return "this client"
}

// Backoff is the reconnect schedule used while NATS cannot be reached: it
// starts at Initial, doubles, and is capped at Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// DefaultBackoff is 250 ms doubling to 10 s.
var DefaultBackoff = Backoff{Initial: 250 * time.Millisecond, Max: 10 * time.Second}

// Next returns the delay after d.
func (b Backoff) Next(d time.Duration) time.Duration {
	if d <= 0 {
		return b.Initial
	}
	d *= 2
	if d > b.Max {
		d = b.Max
	}
	return d
}

// ErrTLS means the TLS settings of a connection to NATS are wrong, or the
// server's do not match them: retrying will not help.
var ErrTLS = errors.New("bus: NATS TLS")

// WithTLS makes the connection use TLS with files: the server's
// certificate must be signed by files.CA (the system's roots without one),
// and files.Cert and files.Key, when given, are presented to the server.
// Any file given requires TLS, whatever the URL's scheme; with no file,
// a tls:// URL still asks for TLS against the system's roots.
func WithTLS(files tlsconfig.Files) ConnectOption {
	return func(o *connectOptions) { o.tls = files }
}

// Connect dials the NATS server at url, retrying with back-off and logging
// each failure with the URL, until it connects or ctx ends. Once connected
// the client reconnects by itself forever; disconnections are logged.
//
// With WithNkey it authenticates; NATS refusing the credentials (or their
// absence) ends it at once with ErrRefused rather than retrying, and a
// publish or subscription the role may not make is logged as an error
// naming the subject and the role (Denied returns it). With WithTLS it
// uses TLS; a failure that retrying cannot mend (a TLS file that cannot be
// loaded, a server certificate not trusted, a server requiring TLS the
// client does not use or the reverse) is returned at once, wrapping ErrTLS.
func Connect(ctx context.Context, serverURL, name string, log *slog.Logger, options ...ConnectOption) (*nats.Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	var co connectOptions
	for _, o := range options {
		if o != nil {
			o(&co)
		}
	}
	auth, id, err := co.authOptions()
	if err != nil {
		return nil, err
	}
	if co.nkeyFile != "" {
		name += " (" + id.String() + ")"
	}
	shown := RedactURL(serverURL)
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "url", shown, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("reconnected to NATS", "url", RedactURL(c.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				d := deniedError(err, id.String())
				log.Error("NATS denied a permission", "url", shown, "subject", subj, "err", d)
				if co.onDenied != nil {
					co.onDenied(d)
				}
				return
			}
			log.Warn("NATS async error", "url", shown, "subject", subj, "err", err)
		}),
	}
	opts = append(opts, auth...)
	connectURL := serverURL
	if co.inProcess != nil {
		// No TLS on the pipe: there is no network to protect (and a
		// tls:// URL would have the client ask for it).
		opts = append(opts, nats.InProcessServer(bufferedProvider{co.inProcess}))
		connectURL = strings.ReplaceAll(serverURL, "tls://", "nats://")
	} else if !co.tls.IsZero() {
		cfg, err := co.tls.Client("")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTLS, err)
		}
		opts = append(opts, nats.Secure(cfg))
	}
	delay := time.Duration(0)
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(connectURL, opts...)
		if err == nil {
			if attempt > 1 {
				log.Info("connected to NATS", "url", shown, "attempts", attempt)
			}
			return nc, nil
		}
		if terr := tlsFailure(err, shown, co.tls); terr != nil {
			return nil, terr
		}
		if authError(err) {
			return nil, refused(err, id, shown)
		}
		delay = DefaultBackoff.Next(delay)
		log.Warn("cannot reach NATS; retrying", "url", shown, "attempt", attempt, "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w at %s after %d attempts: %v", ErrUnreachable, shown, attempt, err)
		case <-time.After(delay):
		}
	}
}

// tlsFailure returns the error to give up with when err is a TLS failure
// retrying cannot mend, and nil otherwise.
func tlsFailure(err error, shown string, files tlsconfig.Files) error {
	if explained := tlsconfig.Explain(err, shown, files.CA); errors.Is(explained, tlsconfig.ErrUntrusted) {
		return fmt.Errorf("%w: %s: %w", ErrTLS, shown, explained)
	}
	var alert tls.AlertError
	switch {
	case errors.Is(err, nats.ErrSecureConnRequired):
		return fmt.Errorf("%w: %s requires TLS: give its CA (--nats-ca) or a tls:// URL: %w", ErrTLS, shown, err)
	case errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Errorf("%w: %s does not offer TLS, but TLS was asked for (a tls:// URL or --nats-ca/--nats-cert): %w", ErrTLS, shown, err)
	case errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls:"):
		return fmt.Errorf("%w: %s refused the TLS handshake (does it require a client certificate, --nats-cert and --nats-key, signed by its CA?): %w", ErrTLS, shown, err)
	}
	return nil
}

// RedactURL hides any password or token in a server URL for logs and errors.
// raw may be a comma-separated list of URLs, as nats.Connect accepts; each
// is redacted. A URL that does not parse has its user information cut out by
// hand rather than being shown as is.
func RedactURL(raw string) string {
	if !strings.Contains(raw, ",") {
		return redactOne(raw)
	}
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// e.g. a password with '#', '/' or '%' in it: cut the userinfo
		// (everything before the last '@' of the authority) by hand.
		prefix, rest := "", raw
		if i := strings.Index(raw, "://"); i >= 0 {
			prefix, rest = raw[:i+3], raw[i+3:]
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			return raw
		}
		if user, _, has := strings.Cut(rest[:at], ":"); has {
			return prefix + user + ":xxxxx" + rest[at:]
		}
		return prefix + "xxxxx" + rest[at:]
	}
	if u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		u.User = url.User("xxxxx")
	}
	return u.String()
}
