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

	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// ErrUnreachable means NATS could not be reached before the context ended.
var ErrUnreachable = errors.New("bus: NATS unreachable")

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

// Option adds a setting to Connect and Open.
type Option func(*dialSettings)

type dialSettings struct {
	tls tlsconfig.Files
}

// WithTLS makes the connection use TLS with files: the server's
// certificate must be signed by files.CA (the system's roots without one),
// and files.Cert and files.Key, when given, are presented to the server.
// Any file given requires TLS, whatever the URL's scheme; with no file,
// a tls:// URL still asks for TLS against the system's roots.
func WithTLS(files tlsconfig.Files) Option {
	return func(d *dialSettings) { d.tls = files }
}

// Connect dials the NATS server at url, retrying with back-off and logging
// each failure with the URL, until it connects or ctx ends. Once connected
// the client reconnects by itself forever; disconnections are logged. A
// failure that retrying cannot mend (a TLS file that cannot be loaded, a
// server certificate not trusted, a server requiring TLS the client does
// not use or the reverse) is returned at once, wrapping ErrTLS.
func Connect(ctx context.Context, serverURL, name string, log *slog.Logger, options ...Option) (*nats.Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	var ds dialSettings
	for _, o := range options {
		if o != nil {
			o(&ds)
		}
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
			log.Warn("NATS async error", "url", shown, "subject", subj, "err", err)
		}),
	}
	if !ds.tls.IsZero() {
		cfg, err := ds.tls.Client("")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTLS, err)
		}
		opts = append(opts, nats.Secure(cfg))
	}
	delay := time.Duration(0)
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(serverURL, opts...)
		if err == nil {
			if attempt > 1 {
				log.Info("connected to NATS", "url", shown, "attempts", attempt)
			}
			return nc, nil
		}
		if terr := tlsFailure(err, shown, ds.tls); terr != nil {
			return nil, terr
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
